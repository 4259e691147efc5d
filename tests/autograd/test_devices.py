"""The same small training on OpenCL and Vulkan as on the CPU: losses and parameters within
tolerance after a few steps (skipped where the backend is unavailable)."""

import numpy as np
import pytest

import fuel
import fuel.nn as nn
import fuel.nn.functional as F
import fuel.optim as optim
from fuel.backends import find_backend
from fuel.ir.device import BackendId


def _train(device: str, steps: int = 5):
    fuel.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3)).to(device)
    opt = optim.Adam(model.parameters(), lr=0.01)
    rng = np.random.default_rng(1)
    losses = []
    for _ in range(steps):
        x = fuel.tensor(rng.standard_normal((8, 6)).astype(np.float32), device=device)
        y = fuel.tensor(rng.integers(0, 3, 8), device=device)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.numpy() for p in model.parameters()]


@pytest.mark.parametrize("backend_id", [BackendId.OPENCL, BackendId.VULKAN])
def test_training_on_a_device_matches_the_cpu(backend_id):
    backend = find_backend(backend_id)
    if backend is None or not backend.is_available():
        pytest.skip(f"{backend_id.value} unavailable: "
                    f"{backend.unavailable_reason() if backend else 'no module'}")
    device = str(backend.devices()[0])
    losses, params = _train(device)
    cpu_losses, cpu_params = _train("cpu")
    np.testing.assert_allclose(losses, cpu_losses, rtol=1e-4)
    for got, expected in zip(params, cpu_params):
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-5)
