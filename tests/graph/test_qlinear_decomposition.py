"""The QLINEAR ops' decompositions on the primitive-only backend against the CPU kernels.

QLINEAR_CONV's decomposition (float32 convolution of the integers, then the float32
re-quantization) on the primitive-only backend against the CPU kernel (exact int32 sums):
equal for sums below 2**24."""

import numpy as np
import pytest

import fuel
from fuel.frontend.build import make
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind
from fuel.ir.params import ConvParams, QLinearBinaryParams, QLinearConvParams, QuantizeParams
from tests.backends.primitive_backend import DEVICE, primitive_backend


@pytest.fixture(scope="module", autouse=True)
def backend():
    yield primitive_backend()


@pytest.mark.parametrize("x_type,y_signed", [(np.uint8, False), (np.int8, True)])
@pytest.mark.parametrize("x_shape,w_shape,groups", [((2, 4, 9, 8), (6, 4, 3, 3), 1),
                                                    ((1, 6, 7, 7), (6, 1, 3, 3), 6),
                                                    ((1, 3, 11), (5, 3, 3), 1)])
def test_qlinear_conv_decomposition_matches_the_cpu_kernel(x_type, y_signed, x_shape, w_shape,
                                                           groups):
    rng = np.random.default_rng(3)
    info = np.iinfo(x_type)
    rank = len(x_shape) - 2
    arrays = [rng.integers(info.min, info.max + 1, x_shape).astype(x_type),
              rng.integers(-128, 128, w_shape).astype(np.int8),
              rng.integers(-2000, 2000, w_shape[0]).astype(np.int32),
              rng.uniform(0.001, 0.01, w_shape[0]).astype(np.float32)]
    params = QLinearConvParams(ConvParams((1,) * rank, (1,) * rank, (1,) * rank, (1,) * rank,
                                          groups), 5, -3 if y_signed else 120, y_signed)

    def run(device):
        tensors = [fuel.from_numpy(a).to(device) for a in arrays]
        return make(OpKind.QLINEAR_CONV, tuple(t._node for t in tensors), params).numpy()

    np.testing.assert_array_equal(run(DEVICE), run("cpu"))


@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
def test_qlinear_lookup_decomposition_matches_the_cpu_kernel(x_type):
    rng = np.random.default_rng(4)
    info = np.iinfo(x_type)
    arrays = [rng.integers(info.min, info.max + 1, (2, 3, 70)).astype(x_type),
              rng.integers(0, 256, 256).astype(np.uint8)]

    def run(device):
        tensors = [fuel.from_numpy(a).to(device) for a in arrays]
        return make(OpKind.QLINEAR_LOOKUP, tuple(t._node for t in tensors), None).numpy()

    np.testing.assert_array_equal(run(DEVICE), run("cpu"))


@pytest.mark.parametrize("x_type", [np.uint8, np.int8])
@pytest.mark.parametrize("multiply", [False, True])
def test_qlinear_binary_decomposition_matches_the_cpu_kernel(x_type, multiply):
    """Equal for the product; the sum within one step (the kernel fuses its multiply-adds,
    as onnxruntime does; the decomposition rounds each)."""
    rng = np.random.default_rng(5)
    info = np.iinfo(x_type)
    arrays = [rng.integers(info.min, info.max + 1, (2, 3, 4, 5)).astype(x_type),
              rng.integers(info.min, info.max + 1, (2, 3, 1, 1)).astype(x_type)]
    params = QLinearBinaryParams(multiply, 0.02, 3, 0.03, -4 if x_type is np.int8 else 130,
                                 0.04, 7)

    def run(device):
        tensors = [fuel.from_numpy(a).to(device) for a in arrays]
        return make(OpKind.QLINEAR_BINARY, tuple(t._node for t in tensors), params).numpy()

    ours, cpu = run(DEVICE).astype(np.int32), run("cpu").astype(np.int32)
    assert np.abs(ours - cpu).max() <= (0 if multiply else 1)


@pytest.mark.parametrize("target", [dt.uint8, dt.int8])
def test_qlinear_quantize_and_dequantize_decompositions_match_the_cpu_kernels(target):
    """The same float32 steps: equal, halves of a step included (rounded to even)."""
    rng = np.random.default_rng(6)
    scale = float(np.float32(0.037))
    x = (rng.standard_normal((3, 1000)) * 300 * scale).astype(np.float32)
    x[0, :600] = (np.float32(scale) * (np.arange(600) - 300 + 0.5).astype(np.float32))
    quantize = QuantizeParams(scale, -5 if target is dt.int8 else 131, target)

    def run(device, op, array, params):
        return make(op, (fuel.from_numpy(array).to(device)._node,), params).numpy()

    q = run("cpu", OpKind.QLINEAR_QUANTIZE, x, quantize)
    np.testing.assert_array_equal(run(DEVICE, OpKind.QLINEAR_QUANTIZE, x, quantize), q)
    assert len(np.unique(q)) > 200  # a real spread, both ends saturated too
    dequantize = QuantizeParams(scale, quantize.zero)
    np.testing.assert_array_equal(run(DEVICE, OpKind.QLINEAR_DEQUANTIZE, q, dequantize),
                                  run("cpu", OpKind.QLINEAR_DEQUANTIZE, q, dequantize))
