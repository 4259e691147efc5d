"""Fused groups on OpenCL: one generated OpenCL kernel per group (elementwise chains and row
reductions), named in explain and profiles, replayed by fuel.jit, against NumPy and torch; a
generated kernel that fails to build raises KernelError naming the node with the build log."""

import numpy as np
import pytest
import torch

import fuel
import fuel.nn.functional as F
from fuel.backends.opencl import fused
from fuel.compiler.render_opencl import OpenClProgram
from fuel.dispatch.completion import in_flight
from fuel.ir.errors import KernelError
from tests.backends.opencl.support import opencl_backend


@pytest.fixture
def device():
    fuel.set_fusion(True)
    found = opencl_backend().devices()[0]
    yield str(found)
    fuel.set_fusion(True)
    assert in_flight(found) == 0


def _chain(x, y):
    return ((x * 2.0 + y).exp() - x).relu()


def _arrays(shape=(6, 5)):
    random = np.random.default_rng(1)
    return (random.standard_normal(shape).astype(np.float32),
            random.standard_normal(shape[-1]).astype(np.float32))


def test_a_chain_is_one_opencl_launch_named_in_profiles_and_explain(device):
    x, y = _arrays()
    result = _chain(fuel.tensor(x, device=device), fuel.tensor(y, device=device))
    with fuel.profile() as profile:
        values = result.numpy()
    assert [row.op for row in profile.launches if row.op != "copy"] == [
        "fused(mul,add,exp,sub,relu)"]
    np.testing.assert_allclose(values, np.maximum(np.exp(x * 2 + y) - x, 0), rtol=1e-5)
    rows = _chain(fuel.tensor(x, device=device), fuel.tensor(y, device=device)).explain().rows
    named = [row for row in rows if row.dispatch.startswith("opencl fused(")]
    assert [row.op for row in named if row.op != "expand"] == ["mul", "add", "exp", "sub",
                                                               "relu"]
    assert len({row.kernel_revision_hash for row in named}) == 1


@pytest.mark.parametrize("shape", [(3, 700), (300, 37)])  # a work-group per row, a row per item
def test_row_reductions_fuse_and_match_torch(device, shape):
    x, w = _arrays(shape)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    fx, fw = fuel.tensor(x, device=device), fuel.tensor(w, device=device)
    cases = {
        "softmax": ((fx - fx.amax(-1, keepdim=True)).exp(), None),
        "layer_norm": (F.layer_norm(fx, (shape[-1],), fw),
                       torch.nn.functional.layer_norm(tx, (shape[-1],), tw)),
        "rms_norm": (fx * ((fx * fx).mean(-1, keepdim=True) + 1e-6).rsqrt() * fw,
                     torch.nn.functional.rms_norm(tx, (shape[-1],), tw, 1e-6)),
    }
    e = cases["softmax"][0]
    cases["softmax"] = (e / e.sum(-1, keepdim=True), torch.softmax(tx, -1))
    for name, (actual, expected) in cases.items():
        with fuel.profile() as profile:
            values = actual.numpy()
        launches = [row.op for row in profile.launches if row.op.startswith("fused(")]
        assert len(launches) == 1, (name, [row.op for row in profile.launches])
        np.testing.assert_allclose(values, expected.numpy(), rtol=2e-5, atol=2e-6,
                                   err_msg=name)


def test_jit_replays_the_fused_opencl_kernel(device):
    x, y = _arrays()
    tx, ty = fuel.tensor(x, device=device), fuel.tensor(y, device=device)
    step = fuel.jit(_chain)
    first = step(tx, ty).numpy()
    with fuel.profile() as profile:
        again = step(tx, ty).numpy()
    assert "fused(mul,add,exp,sub,relu)" in [row.op for row in profile.launches]
    np.testing.assert_array_equal(first, again)


def test_a_build_failure_raises_kernel_error_naming_the_node_with_the_log(device, monkeypatch):
    def broken(kernel, group=False):
        return OpenClProgram("__kernel void fuel_kernel(__global float *out) "
                             "{ out[0] = not_a_function_of_fuel(1.0f); }", False, (1,), (), (1,))

    monkeypatch.setattr(fused, "render_opencl", broken)
    x = fuel.tensor(np.ones((7, 13), np.float32), device=device)
    with pytest.raises(KernelError, match="not_a_function_of_fuel") as info:
        (x.abs() * 3.0 - 1.0).neg().realize()
    message = str(info.value)
    assert "fused(abs,mul,sub,neg)" in message and "test_fused_opencl.py" in message
    monkeypatch.undo()
    np.testing.assert_allclose((x * 2.0 + 1.0).numpy(), np.full((7, 13), 3.0))
