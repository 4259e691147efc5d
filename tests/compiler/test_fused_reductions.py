"""Reductions fused with their prologue and epilogue: softmax, log_softmax, layer_norm,
rms_norm, mean and var as written from primitives run as one generated kernel each and agree
with the unfused NumPy kernels, over rows of many lengths, permuted inputs and both float
dtypes."""

import numpy as np
import pytest

import fuel
from fuel.compiler import toolchain

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason=str(toolchain.unavailable_reason()))


def softmax(x, w):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def log_softmax(x, w):
    shifted = x - x.amax(-1, keepdim=True)
    return shifted - shifted.exp().sum(-1, keepdim=True).log()


def layer_norm(x, w):
    centered = x - x.mean(-1, keepdim=True)
    variance = (centered * centered).mean(-1, keepdim=True)
    return centered / (variance + 1e-5).sqrt() * w + 0.25


def rms_norm(x, w):
    return x * ((x * x).mean(-1, keepdim=True) + 1e-6).rsqrt() * w


def variance(x, w):
    centered = x - x.mean(-1, keepdim=True)
    return (centered * centered).mean(-1, keepdim=True)


FUNCTIONS = {"softmax": softmax, "log_softmax": log_softmax, "layer_norm": layer_norm,
             "rms_norm": rms_norm, "variance": variance}


@pytest.fixture(autouse=True)
def fusion_on():
    fuel.set_fusion(True)
    yield
    fuel.set_fusion(True)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("shape", [(1,), (5,), (3, 17), (2, 3, 40), (4, 16)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("permuted", [False, True])
def test_a_row_function_is_one_fused_kernel_matching_unfused(name, shape, dtype, permuted):
    random = np.random.default_rng(len(shape) * 7 + shape[-1])
    stored = shape[::-1] if permuted else shape
    data = (random.standard_normal(stored) * 3).astype(dtype)
    weight = random.standard_normal(shape[-1]).astype(dtype)
    function = FUNCTIONS[name]

    def run():
        x = fuel.tensor(data)
        if permuted:
            x = x.permute(*reversed(range(len(shape))))
        return function(x, fuel.tensor(weight))

    with fuel.profile() as profile:
        fused = run().numpy()
    launches = [row.op for row in profile.launches]
    assert len(launches) == 1 and launches[0].startswith("fused("), launches
    fuel.set_fusion(False)
    unfused = run().numpy()
    tolerance = 2e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(fused, unfused, rtol=tolerance, atol=tolerance)


def test_a_reduction_over_other_dims_or_without_keepdim_keeps_its_numpy_kernel():
    x = fuel.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    with fuel.profile() as profile:
        total = (x.exp().sum(0, keepdim=True) + 1.0).numpy()
    assert "sum" in [row.op for row in profile.launches]
    np.testing.assert_allclose(total, np.exp(np.arange(12, dtype=np.float32).reshape(3, 4))
                               .sum(0, keepdims=True) + 1, rtol=1e-6)
