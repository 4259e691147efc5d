"""The AVX-512 convolution layouts of fuel/backends/cpu/convolution_c.py against the NumPy
reference (tests/backends/cpu/test_convolution_c.py has the siblings' suite): depthwise.c's
flat and phase layouts, conv_direct.c's direct form, pool.c's whole-plane reduction, and the
builds without AVX-512."""

from __future__ import annotations

import numpy as np
import pytest

from fuel.backends.cpu import convolution_c
from fuel.ir.ops import OpKind
from fuel.ir.params import CONV_ACTIVATIONS, ConvEpilogueParams, ConvParams
from tests.backends.cpu.test_convolution_c import _run, _siblings, reference
from tests.backends.kernel_cases.convolution import epilogue_reference

FLAT_CASES = [  # (N, C, H, W, kernel, dilation, pads (top, left, bottom, right))
    (2, 5, 7, 7, (3, 3), (1, 1), (1, 1, 1, 1)), (1, 6, 14, 14, (5, 5), (1, 1), (2, 2, 2, 2)),
    (2, 3, 9, 13, (3, 5), (2, 1), (2, 1, 2, 3)), (1, 4, 1, 16, (3, 3), (1, 1), (1, 1, 1, 1)),
    (1, 3, 20, 20, (5, 5), (1, 1), (2, 2, 2, 2)), (3, 2, 56, 56, (3, 3), (1, 1), (1, 1, 1, 1)),
    (1, 7, 5, 3, (1, 1), (1, 1), (0, 0, 0, 0)), (2, 9, 4, 4, (3, 3), (1, 1), (1, 1, 1, 1))]
PHASE_CASES = [  # stride 2: the four phases
    (2, 3, 40, 41, (3, 3), (1, 1), (1, 1, 1, 1)), (1, 4, 17, 36, (5, 5), (1, 1), (2, 2, 2, 2)),
    (1, 3, 20, 37, (3, 5), (2, 1), (0, 3, 2, 0)), (3, 2, 9, 18, (2, 2), (1, 1), (0, 0, 0, 0)),
    (2, 5, 14, 14, (5, 5), (1, 1), (2, 2, 2, 2)), (1, 3, 3, 2, (3, 3), (1, 1), (1, 1, 1, 1))]


@pytest.mark.parametrize("threads", ["1", "2"])
def test_flat_depthwise_matches_the_reference(monkeypatch, threads):
    """Stride 1 with "same" padding runs the flat layout (16 consecutive positions of a plane,
    across row ends, one masked load a tap; planes of at most four vectors two at a time, an
    odd count of planes and pairs across images), and stride 2 through the four phases: every
    activation, a residual every other case, asymmetric pads, dilation, a one-row plane, 1x1,
    2x2 and 5x5 filters."""
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(7)
    cases = [(1, case) for case in FLAT_CASES * 2] + [(2, case) for case in PHASE_CASES * 3]
    for index, (stride, (n, c, h, w, kernel, dilation, pads)) in enumerate(cases):
        activation = CONV_ACTIVATIONS[index % len(CONV_ACTIVATIONS)]
        conv = ConvParams((stride, stride), pads[:2], pads[2:], dilation, c)
        residual = index % 2 == 0
        params = ConvEpilogueParams(conv, activation, -0.5 if activation == "clip" else 0.2,
                                    1.5 if activation == "clip" else 0.5, residual)
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        weight = rng.standard_normal((c, 1) + kernel).astype(np.float32)
        y = reference(x, weight, conv)
        assert stride == 2 or y.shape == x.shape
        bias = rng.standard_normal(c).astype(np.float32)
        extra = rng.standard_normal(y.shape).astype(np.float32)
        slope = rng.standard_normal(c).astype(np.float32)
        arrays = [x, weight, bias] + ([extra] if residual else []) + (
            [slope] if activation == "prelu" else [])
        expected = epilogue_reference(y, params, bias.astype(np.float64),
                                      extra.astype(np.float64) if residual else None,
                                      slope.astype(np.float64))
        entry = next(e for e in _siblings(OpKind.CONV_FUSED, len(arrays))
                     if e.kernel.form == "depthwise")
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(_run(entry, arrays, y.shape, params), expected, rtol=1e-4,
                                   atol=1e-4 * scale, err_msg=f"{activation} {x.shape}")


DIRECT_CASES = [  # (N, C, H, W, M, kernel, strides, dilations, pads (top, left, bottom, right))
    (2, 3, 17, 21, 16, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (1, 3, 23, 40, 20, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),
    (1, 1, 9, 35, 31, (3, 5), (1, 1), (2, 1), (0, 2, 1, 3)),
    (2, 4, 12, 12, 32, (3, 3), (3, 3), (1, 1), (1, 0, 2, 2)),
    (1, 4, 1, 50, 17, (1, 3), (1, 2), (1, 2), (0, 1, 0, 0)),
    (1, 2, 5, 5, 16, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    (2, 40, 15, 20, 20, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    (1, 6, 20, 30, 29, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    (1, 3, 9, 122, 24, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (2, 3, 6, 180, 16, (5, 5), (2, 2), (2, 1), (2, 2, 2, 2)),
    (1, 3, 8, 70, 30, (4, 4), (4, 4), (1, 1), (0, 0, 0, 0)),
    (1, 3, 10, 20, 16, (3, 3), (2, 2), (1, 1), (2, 40, 2, 3))]  # a pad past a tile's reach


@pytest.mark.parametrize("threads", ["1", "2"])
def test_direct_matches_the_reference(monkeypatch, threads):
    """conv_direct.c (few input channels, 16 output channels' accumulators a block): strides
    1, 2, 3 and 4, dilation, asymmetric pads, output channels off the block, rows of one,
    two and three 48-column tiles whose last is one, two or three vectors (cut short), a
    one-row input, pointwise planes
    (one position span, two and three, the last partial; 48-position tiles of one, two and
    three vectors; 4 and 13 channels in a last block: a half block of 8 cut short), every
    activation, a residual every other case; the rule picks it for a stem."""
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(16)
    for index, (n, c, h, w, m, kernel, strides, dilations, pads) in enumerate(DIRECT_CASES * 2):
        activation = CONV_ACTIVATIONS[index % len(CONV_ACTIVATIONS)]
        conv = ConvParams(strides, pads[:2], pads[2:], dilations, 1)
        residual = index % 2 == 1
        params = ConvEpilogueParams(conv, activation, -0.5 if activation == "clip" else 0.2,
                                    1.5 if activation == "clip" else 0.5, residual)
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        weight = rng.standard_normal((m, c) + kernel).astype(np.float32)
        y = reference(x, weight, conv)
        geometry = convolution_c.Geometry.of(x.shape, weight.shape, y.shape, conv)
        assert convolution_c.accepts("direct", geometry)
        bias = rng.standard_normal(m).astype(np.float32)
        extra = rng.standard_normal(y.shape).astype(np.float32)
        slope = rng.standard_normal(m).astype(np.float32)
        arrays = [x, weight, bias] + ([extra] if residual else []) + (
            [slope] if activation == "prelu" else [])
        expected = epilogue_reference(y, params, bias.astype(np.float64),
                                      extra.astype(np.float64) if residual else None,
                                      slope.astype(np.float64))
        entry = next(e for e in _siblings(OpKind.CONV_FUSED, len(arrays))
                     if e.kernel.form == "direct")
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(_run(entry, arrays, y.shape, params), expected, rtol=1e-4,
                                   atol=1e-4 * scale, err_msg=f"{activation} {x.shape}")
    stem = convolution_c.Geometry(1, 3, 224, 224, 32, 3, 3, 112, 112, 2, 2, 1, 1, 1, 1, 1)
    wide = convolution_c.Geometry(1, 3, 224, 224, 64, 7, 7, 112, 112, 2, 2, 1, 1, 3, 3, 1)
    head = convolution_c.Geometry(1, 16, 64, 64, 1, 1, 1, 64, 64, 1, 1, 1, 1, 0, 0, 1)
    assert convolution_c.choose_form(stem) == ("direct" if convolution_c.avx512() else "gemm")
    assert convolution_c.choose_form(wide) == "gemm"
    assert convolution_c.choose_form(head) == "gemm"


@pytest.mark.parametrize("threads", ["1", "2"])
def test_whole_plane_pooling_matches_numpy(monkeypatch, threads):
    """A window over the whole unpadded plane (ONNX's GlobalAveragePool and GlobalMaxPool)
    is pool.c's per-plane reduction: planes of fewer and more than 32 values, a 1-d plane,
    a NaN (propagated by the max), the ONNX converters against NumPy."""
    from onnx import TensorProto, helper

    import fuel.onnx

    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(5)
    for shape in ((2, 3, 7, 7), (1, 40, 13, 29), (3, 5, 50), (1, 2, 1, 1)):
        x = rng.standard_normal(shape).astype(np.float32)
        x.flat[7 % x.size] = np.nan
        axes = tuple(range(2, x.ndim))
        for op, reference_op in (("GlobalAveragePool", np.mean), ("GlobalMaxPool", np.max)):
            graph = helper.make_graph(
                [helper.make_node(op, ["x"], ["y"])], "g",
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
            model = fuel.onnx.load(helper.make_model(
                graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
            got = model.run({"x": x})["y"]
            expected = reference_op(x.astype(np.float64), axis=axes, keepdims=True)
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{op} {shape}")


@pytest.mark.parametrize("path", ["direct", "depthwise"])
def test_builds_without_avx512_match_the_reference(path):
    """conv_direct.c's scalar loops and depthwise.c's AVX2 rows, as built on a machine without
    AVX-512 (__AVX512F__ undefined after conv_common.h), against the reference."""
    import ctypes

    from fuel.compiler import toolchain

    if toolchain.unavailable_reason() is not None:
        pytest.skip("no C compiler")
    source = convolution_c.DIRECT_SOURCE if path == "direct" else convolution_c.DEPTHWISE_SOURCE
    common = convolution_c.COMMON.read_text()  # includes immintrin.h, which defines it again
    text = convolution_c._source(source)
    assert text.startswith(common)
    function = toolchain.build(common + "#undef __AVX512F__\n" + text[len(common):],
                               f"conv_{path}_no_avx512_test").function
    if path == "direct":  # its probe says the loops are scalar, so the rule leaves it
        answer = np.ones(1, np.int64)
        function((ctypes.c_void_p * 8)(answer.ctypes.data, *([None] * 7)),
                 (ctypes.c_int64 * 19)(-1, *([0] * 18)), None)
        assert answer[0] == 0
    rng = np.random.default_rng(3)
    for strides, pads, activation in (((2, 2), (1, 1, 1, 1), "silu"),
                                      ((1, 1), (0, 2, 1, 0), "clip")):
        n, c, h, w = 2, 3 if path == "direct" else 5, 11, 19
        m = 18 if path == "direct" else c
        conv = ConvParams(strides, pads[:2], pads[2:], (1, 1), 1 if path == "direct" else c)
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        weight = rng.standard_normal((m, c // conv.groups, 3, 3)).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        y = reference(x, weight, conv)
        extra = rng.standard_normal(y.shape).astype(np.float32)
        params = ConvEpilogueParams(conv, activation, -0.5, 1.5, True)
        expected = epilogue_reference(y, params, bias.astype(np.float64),
                                      extra.astype(np.float64), None)
        out = np.empty(y.shape, np.float32)
        scalars = np.array([-0.5, 1.5], np.float32)
        geometry = convolution_c.Geometry.of(x.shape, weight.shape, y.shape, conv)
        form = convolution_c.DIRECT if path == "direct" else convolution_c.DEPTHWISE
        sizes = geometry.sizes(form, 2, convolution_c.ACTIVATIONS[activation])
        data = (ctypes.c_void_p * 8)(x.ctypes.data, weight.ctypes.data, bias.ctypes.data,
                                     extra.ctypes.data, out.ctypes.data, None,
                                     scalars.ctypes.data, None)
        function(data, sizes, None)
        np.testing.assert_allclose(out, expected, rtol=1e-4,
                                   atol=1e-4 * float(np.abs(expected).max()))
