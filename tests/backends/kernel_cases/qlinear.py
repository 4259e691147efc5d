"""Kernel-suite cases of QLINEAR_CONV (the integer sums from the convolution's definition, in
int64, then the float32 re-quantization step by step), QLINEAR_LOOKUP (the table indexed in
Python) and QLINEAR_BINARY (onnxruntime's QLinearAdd / QLinearMul formulas in float64, rounded
to float32 where onnxruntime's float32 operations round)."""

from __future__ import annotations

import numpy as np

from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind
from fuel.ir.params import (
    ConvParams,
    QLinearBinaryParams,
    QLinearConvParams,
    QuantizeParams,
)
from tests.backends.kernel_cases import references as naive
from tests.backends.kernel_cases.base import Case, operand, rng_for

# input, weight, strides, begin, end, dilations, groups, input kind: one of each C form
# (depthwise narrow and wide, pointwise as stored, im2col with odd channel counts, grouped,
# 1-d, channels last) and 3-d (NumPy), strided inputs (NumPy).
PLANS = [
    ((2, 5, 9, 8), (7, 5, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, "dense"),
    ((1, 6, 8, 9), (6, 1, 3, 3), (2, 1), (1, 0), (1, 2), (1, 2), 6, "dense"),
    ((2, 9, 5, 7), (20, 9, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 1, "dense"),
    ((1, 8, 7, 7), (12, 4, 2, 3), (2, 2), (0, 1), (1, 0), (1, 1), 2, "dense"),
    ((2, 3, 19), (4, 3, 5), (2,), (2,), (1,), (2,), 1, "dense"),
    ((1, 2, 3, 4, 4), (3, 2, 2, 2, 2), (1, 1, 1), (0, 1, 0), (1, 0, 1), (1, 1, 1), 1,
     "dense"),
    ((1, 4, 6, 6), (5, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, "stepped"),
    # depthwise with 16 or more output columns (rows form), stride 1 and 2
    ((1, 3, 4, 21), (3, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 3, "dense"),
    ((2, 2, 5, 40), (2, 1, 3, 5), (2, 2), (1, 2), (0, 2), (1, 1), 2, "dense"),
    # depthwise by byte quads (VBMI + VNNI): wide rows past 16 columns (the last register
    # overlapping), narrow planes of several rows per register, strides, dilations, kernels
    # of 2 quads a row, asymmetric pads, 1-d, and a window past 64 bytes (another form)
    ((2, 4, 9, 37), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 4, "dense"),
    ((1, 5, 14, 14), (5, 1, 3, 3), (2, 2), (0, 1), (1, 1), (1, 1), 5, "dense"),
    ((1, 3, 11, 9), (3, 1, 5, 5), (1, 2), (2, 2), (2, 1), (1, 1), 3, "dense"),
    ((2, 3, 12, 30), (3, 1, 3, 7), (2, 1), (1, 3), (0, 2), (2, 2), 3, "dense"),
    ((1, 6, 3, 2), (6, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 6, "dense"),
    ((2, 4, 50), (4, 1, 5), (2,), (2,), (2,), (1,), 4, "dense"),
    ((1, 2, 5, 40), (2, 1, 3, 3), (4, 4), (1, 1), (1, 1), (1, 1), 2, "dense"),
    # few channels at stride 2, wide: the patch rows' vector gather of even bytes
    ((1, 3, 9, 70), (4, 3, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1, "dense"),
    ((1, 3, 8, 67), (5, 3, 7, 7), (2, 2), (3, 3), (3, 3), (1, 1), 1, "dense"),
    # depthwise over whole planes (a global pooling: one dot product per plane), a plane
    # past the 256 taps of the other depthwise forms
    ((2, 5, 7, 6), (5, 1, 7, 6), (1, 1), (0, 0), (0, 0), (1, 1), 5, "dense"),
    ((1, 3, 20, 17), (3, 1, 20, 17), (1, 1), (0, 0), (0, 0), (1, 1), 3, "dense"),
    # 32 or more input channels per group: the channels-last VNNI form where there is one
    ((2, 32, 6, 7), (18, 32, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, "dense"),
    ((1, 68, 5, 6), (10, 34, 3, 2), (2, 1), (1, 0), (0, 1), (1, 2), 2, "dense"),
    # 1x1 over at most 8 positions (a QGemm's rows: channels last, tiles of 1-5 positions),
    # and a strided 1x1 (the patch matrix of the positions read)
    ((1, 40, 3, 1), (33, 40, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 1, "dense"),
    ((2, 36, 2, 4), (20, 36, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 1, "dense"),
    ((1, 24, 9, 11), (19, 24, 1, 1), (2, 2), (0, 0), (0, 0), (1, 1), 1, "dense"),
]


def expected(arrays, params: QLinearConvParams) -> np.ndarray:
    x, w, bias, multiplier = arrays
    conv = params.conv
    sums = naive.conv(x.astype(np.int64) - params.x_zero, w.astype(np.int64), conv.strides,
                      conv.pads_begin, conv.pads_end, conv.dilations, conv.groups)
    channel = (1, -1) + (1,) * (x.ndim - 2)
    total = (np.asarray(sums, np.int64) + bias.astype(np.int64).reshape(channel))
    scaled = total.astype(np.float32) * multiplier.reshape(channel)
    low, high = (-128, 127) if params.y_signed else (0, 255)
    values = np.clip(np.rint(scaled) + params.y_zero, low, high)
    return values.astype(np.int8 if params.y_signed else np.uint8)


def qlinear_conv_cases(dtypes):
    x_type, y_type = dtypes[0], dtypes[-1]
    rng = rng_for("qlinear_conv", dtypes)
    info = np.iinfo(x_type.numpy)
    cases = []
    for i, (xs, ws, strides, begin, end, dilations, groups, kind) in enumerate(PLANS):
        x = rng.integers(info.min, info.max + 1, xs).astype(x_type.numpy)
        w = rng.integers(-128, 128, ws).astype(np.int8)
        bias = rng.integers(-3000, 3000, ws[0]).astype(np.int32)
        multiplier = rng.uniform(0.0005, 0.004, ws[0]).astype(np.float32)
        x_zero = int(rng.integers(info.min, info.max + 1))
        y_zero = int(rng.integers(-20, 20)) + (0 if y_type is dt.int8 else 128)
        # every other plan with its weights packed once, when prepared
        params = QLinearConvParams(ConvParams(strides, begin, end, dilations, groups), x_zero,
                                   y_zero, y_type is dt.int8, constant_weights=bool(i % 2))
        cases.append(Case(params, [operand(x, kind), operand(w), operand(bias),
                                   operand(multiplier)], expected, f"qlinear_conv#{i}", 0, 0))
    return cases


def _lookup(arrays, params) -> np.ndarray:
    x, table = arrays
    flat = [int(table[int(v) % 256]) for v in x.reshape(-1)]
    return np.asarray(flat, table.dtype).reshape(x.shape)


def qlinear_lookup_cases(dtypes):
    x_type, table_type = dtypes[0], dtypes[1]
    rng = rng_for("qlinear_lookup", dtypes)
    info, out = np.iinfo(x_type.numpy), np.iinfo(table_type.numpy)
    table = rng.integers(out.min, out.max + 1, 256).astype(table_type.numpy)
    cases = []
    # odd sizes around the 64-byte vector step, a strided input (NumPy)
    for i, (shape, kind) in enumerate([((3, 5), "dense"), ((2, 64), "dense"),
                                       ((1, 7, 11, 3), "dense"), ((4, 33), "stepped"),
                                       ((3, 20001), "dense")]):
        x = rng.integers(info.min, info.max + 1, shape).astype(x_type.numpy)
        cases.append(Case(None, [operand(x, kind), operand(table)], _lookup,
                          f"qlinear_lookup#{i}", 0, 0))
    return cases


def _binary(arrays, params: QLinearBinaryParams) -> np.ndarray:
    a, b = (v.astype(np.float64) for v in arrays)
    f32 = np.float32
    if params.multiply:
        ratio = f32(f32(params.a_scale) * f32(params.b_scale)) / f32(params.y_scale)
        value = ((a - params.a_zero) * (b - params.b_zero)).astype(f32) * ratio + f32(
            params.y_zero)
    else:
        ra, rb = f32(params.a_scale) / f32(params.y_scale), f32(params.b_scale) / f32(
            params.y_scale)
        fixed = f32(params.y_zero) - (ra * f32(params.a_zero) + rb * f32(params.b_zero))
        inner = (b * np.float64(rb) + np.float64(fixed)).astype(f32).astype(np.float64)
        value = (a * np.float64(ra) + inner).astype(f32)
    info = np.iinfo(arrays[0].dtype)
    return np.clip(np.rint(value), info.min, info.max).astype(arrays[0].dtype)


def qlinear_binary_cases(dtypes):
    rng = rng_for("qlinear_binary", dtypes)
    info = np.iinfo(dtypes[0].numpy)
    cases = []
    shapes = [((2, 3, 5, 7), (2, 3, 5, 7), "dense"), ((2, 3, 5, 7), (2, 3, 1, 1), "dense"),
              ((2, 3, 1, 1), (2, 3, 4, 4), "dense"), ((3, 70), (), "dense"),
              ((1, 5, 9), (5, 1), "dense"), ((4, 6), (4, 6), "stepped"),
              # rows cut into several threaded runs (16384 elements each)
              ((3, 17000), (3, 1), "dense"), ((2, 3, 7000), (2, 3, 7000), "dense")]
    for multiply in (False, True):
        for i, (a_shape, b_shape, kind) in enumerate(shapes):
            a = rng.integers(info.min, info.max + 1, a_shape).astype(dtypes[0].numpy)
            b = rng.integers(info.min, info.max + 1, b_shape).astype(dtypes[0].numpy)
            zeros = [int(rng.integers(info.min, info.max + 1)) for _ in range(3)]
            scales = [float(np.float32(v)) for v in rng.uniform(0.005, 0.05, 3)]
            params = QLinearBinaryParams(multiply, scales[0], zeros[0], scales[1], zeros[1],
                                         scales[2], zeros[2])
            # a sum on a rounding edge may land one step away where a backend does not fuse
            # the multiply-adds (the decomposition)
            cases.append(Case(params, [operand(a, kind), operand(b)], _binary,
                              f"qlinear_{'mul' if multiply else 'add'}#{i}", 0,
                              0 if multiply else 1))
    return cases


def _quantize(arrays, params: QuantizeParams) -> np.ndarray:
    """ONNX QuantizeLinear's float32 steps: x / scale, rounded half to even, + zero, clipped."""
    info = np.iinfo(params.target.numpy)
    value = np.rint(arrays[0] / np.float32(params.scale)) + np.float32(params.zero)
    return np.clip(value, info.min, info.max).astype(params.target.numpy)


def _dequantize(arrays, params: QuantizeParams) -> np.ndarray:
    return (arrays[0].astype(np.int64) - params.zero).astype(np.float32) * np.float32(
        params.scale)


# sizes around the 16-value vector step and past one threaded run (16384), a strided input
SIZES = [((3, 5), "dense"), ((2, 64), "dense"), ((4, 33), "stepped"), ((3, 20001), "dense")]


def qlinear_quantize_cases(dtypes):
    target = dtypes[-1]
    rng = rng_for("qlinear_quantize", dtypes)
    info = np.iinfo(target.numpy)
    cases = []
    for i, (shape, kind) in enumerate(SIZES):
        scale = float(np.float32(rng.uniform(0.01, 0.1)))
        zero = int(rng.integers(info.min, info.max + 1))
        # values past both ends, and exact halves of a step (rounded to even)
        x = (rng.standard_normal(shape) * 200 * scale).astype(np.float32)
        flat = x.reshape(-1)
        halves = rng.integers(-300, 300, flat[::7].size) + 0.5
        flat[::7] = (np.float32(scale) * halves.astype(np.float32)).astype(np.float32)
        params = QuantizeParams(scale, zero, target)
        cases.append(Case(params, [operand(x, kind)], _quantize, f"qlinear_quantize#{i}", 0, 0))
    return cases


def qlinear_dequantize_cases(dtypes):
    rng = rng_for("qlinear_dequantize", dtypes)
    info = np.iinfo(dtypes[0].numpy)
    cases = []
    for i, (shape, kind) in enumerate(SIZES):
        x = rng.integers(info.min, info.max + 1, shape).astype(dtypes[0].numpy)
        params = QuantizeParams(float(np.float32(rng.uniform(0.001, 0.1))),
                                int(rng.integers(info.min, info.max + 1)))
        cases.append(Case(params, [operand(x, kind)], _dequantize, f"qlinear_dequantize#{i}",
                          0, 0))
    return cases


CASES = {OpKind.QLINEAR_CONV: qlinear_conv_cases, OpKind.QLINEAR_LOOKUP: qlinear_lookup_cases,
         OpKind.QLINEAR_BINARY: qlinear_binary_cases,
         OpKind.QLINEAR_QUANTIZE: qlinear_quantize_cases,
         OpKind.QLINEAR_DEQUANTIZE: qlinear_dequantize_cases}
