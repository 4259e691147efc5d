"""Window and indexing decompositions on the primitive-only backend against the CPU kernels."""

import numpy as np
import pytest

import fuel
from fuel.nn.conv import avg_pool_nd, conv_nd, max_pool_nd
from tests.backends.primitive_backend import (
    DEVICE,
    primitive_backend,
)


@pytest.fixture(scope="module", autouse=True)
def backend():
    yield primitive_backend()


def _both(function, *arrays):
    cpu = function(*(fuel.from_numpy(a) for a in arrays)).numpy()
    primitive = function(*(fuel.from_numpy(a).to(DEVICE) for a in arrays)).numpy()
    return cpu, primitive


def _random(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("x_shape, w_shape, strides, pads, dilations, groups", [
    ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 4, 9, 8), (6, 2, 3, 2), (2, 1), (0, 1, 2, 0), (1, 2), 2),
    ((1, 4, 6, 6), (4, 1, 3, 3), (1, 2), (1, 1, 1, 1), (2, 1), 4),
    ((2, 3, 10), (5, 3, 4), (3,), (2, 1), (1,), 1),
    ((1, 2, 4, 5, 3), (3, 2, 2, 2, 2), (1, 2, 1), (0, 0, 1, 1, 0, 0), (1, 1, 1), 1),
])
def test_conv_matches_the_cpu_kernel(x_shape, w_shape, strides, pads, dilations, groups):
    rank = len(strides)
    x, w = _random(x_shape), _random(w_shape, 1)

    def run(a, b):
        return conv_nd(a, b, None, strides, pads[:rank], pads[rank:], dilations, groups)

    cpu, primitive = _both(run, x, w)
    np.testing.assert_allclose(primitive, cpu, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
@pytest.mark.parametrize("kernel, strides, pads, dilations, ceil", [
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    ((2, 3), (2, 1), (0, 1, 0, 1), (1, 2), True),
    ((3, 2), (3, 2), (0, 0, 0, 0), (1, 1), True),
])
def test_pooling_matches_the_cpu_kernels(dtype, kernel, strides, pads, dilations, ceil):
    x = (_random((2, 3, 7, 8)) * 10).astype(dtype)
    x[0, 0, 1, 1] = x[0, 0, 1, 2]  # a tie: the first maximum's position wins

    def maximum(a):
        return max_pool_nd(a, kernel, strides, pads[:2], pads[2:], dilations, ceil)

    def positions(a):
        return max_pool_nd(a, kernel, strides, pads[:2], pads[2:], dilations, ceil, True,
                           storage_order=1)[1]

    for function in (maximum, positions):
        cpu, primitive = _both(function, x)
        np.testing.assert_array_equal(primitive, cpu)
    if dtype is np.int32:
        return
    for include in (False, True):
        def average(a, include=include):
            return avg_pool_nd(a, kernel, strides, pads[:2], pads[2:], dilations, ceil,
                               include)

        cpu, primitive = _both(average, x)
        np.testing.assert_allclose(primitive.astype(np.float64), cpu.astype(np.float64),
                                   rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("activation, residual", [
    ("relu", True), ("clip", False), ("hard_swish", True), ("silu", False),
    ("hard_sigmoid", False), ("leaky_relu", True), ("prelu", False), ("tanh", False)])
def test_conv_fused_decomposes_like_the_cpu_kernel(activation, residual):
    """conv_fused on a backend without its kernel: conv, bias, residual and activation nodes."""
    from fuel.ir.params import ConvParams
    from fuel.nn.conv import conv_fused

    params = ConvParams((1, 2), (1, 0), (1, 2), (1, 1), 2)
    arrays = [_random((2, 4, 7, 6)), _random((6, 2, 3, 3), 1), _random((6,), 2)]
    if residual:
        arrays.append(_random((2, 6, 7, 3), 3))
    if activation == "prelu":
        arrays.append(_random((6,), 4))

    def run(x, w, b, *rest):
        extra = list(rest)
        return conv_fused(x, w, b, params, activation, -0.5 if activation == "clip" else 0.2,
                          0.75 if activation == "clip" else 0.5,
                          extra.pop(0) if residual else None, extra.pop(0) if extra else None)

    cpu, primitive = _both(run, *arrays)
    np.testing.assert_allclose(primitive, cpu, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("residual, stem, scaled", [
    (True, False, False), (False, False, False), (True, True, False), (False, True, False),
    (True, False, True), (False, False, True)])
def test_conv_blocked_decomposes_like_the_cpu_kernel(residual, stem, scaled):
    """conv_blocked on a backend without its kernel: the planar conv_fused between
    permutes (a stem's input planar already; ``scaled``: the input times its scale per
    image and channel first)."""
    from fuel.frontend.build import make
    from fuel.ir.ops import OpKind
    from fuel.ir.params import ConvEpilogueParams, ConvParams

    stride = (2, 2) if stem else (2, 1)
    params = ConvEpilogueParams(ConvParams(stride, (1, 0), (1, 2), (1, 1), 1), "relu",
                                residual=residual, constant_weights=True, input_scale=scaled)
    arrays = [_random((2, 3, 7, 12)) if stem else _random((2, 2, 7, 6, 16)),
              _random((32, 3 if stem else 32, 3, 3), 1), _random((32,), 2)]
    if residual:
        arrays.append(_random((2, 2, 4, 6, 16), 3))
    if scaled:
        arrays.append(np.abs(_random((2, 32), 4)))

    def run(*operands):
        return make(OpKind.CONV_BLOCKED, tuple(t._node for t in operands), params)

    cpu, primitive = _both(run, *arrays)
    np.testing.assert_allclose(primitive, cpu, rtol=1e-5, atol=1e-4)  # sums of 288


@pytest.mark.parametrize("activation", ["relu", ""])
def test_a_chains_entry_decomposes_like_the_cpu_kernel(activation):
    """conv_blocked as a chain's entry (depthwise 1x1 on a planar input: each channel
    scaled, shifted, activated) on a backend without its kernel: the planar depthwise
    conv_fused, its output blocked."""
    from fuel.frontend.build import make
    from fuel.ir.ops import OpKind
    from fuel.ir.params import ConvEpilogueParams, ConvParams

    params = ConvEpilogueParams(ConvParams((1, 1), (0, 0), (0, 0), (1, 1), 32), activation)
    arrays = [_random((2, 32, 5, 7)), _random((32, 1, 1, 1), 1), _random((32,), 2)]

    def run(*operands):
        return make(OpKind.CONV_BLOCKED, tuple(t._node for t in operands), params)

    cpu, primitive = _both(run, *arrays)
    np.testing.assert_allclose(primitive, cpu, rtol=1e-6, atol=1e-6)
