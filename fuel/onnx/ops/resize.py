"""Resize and Upsample. Interpolation is separable, so each resized axis is one host-built
weight matrix: nearest modes pick rows with ``index_select`` (exact), linear and cubic modes
multiply by the matrix (``matmul``); tf_crop_and_resize fills extrapolated rows."""

from __future__ import annotations

import math

import numpy as np

from fuel.frontend.structured import matmul
from fuel.ir import dtype as dt
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.common import OpKind, Tensor, axis_of, cast, unary, where

# ----------------------------------------------------------------------------- coefficients


def _nearest(mode: str):
    def coefficients(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        if mode == "round_prefer_floor":
            return np.array([ratio <= 0.5, ratio > 0.5], dtype=np.float64)
        if mode == "round_prefer_ceil":
            return np.array([ratio < 0.5, ratio >= 0.5], dtype=np.float64)
        if mode == "floor":
            return np.array([1.0, 0.0])
        if mode == "ceil":
            return np.array([0.0, 1.0])
        raise UnsupportedOp(f"nearest_mode {mode!r} is not supported")

    return coefficients


def _linear(antialias: bool):
    def coefficients(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([1 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        footprint = 2 - 2 * start
        args = (np.arange(start, start + footprint) - ratio) * scale
        weights = np.clip(1 - np.abs(args), 0, 1)
        return weights / weights.sum()

    return coefficients


def _cubic_weight(x: float, a: float) -> float:
    x = abs(x)
    if x <= 1:
        return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
    if x < 2:
        return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
    return 0.0


def _cubic(a: float, antialias: bool):
    def coefficients(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([_cubic_weight(ratio + 1, a), _cubic_weight(ratio, a),
                             _cubic_weight(1 - ratio, a), _cubic_weight(2 - ratio, a)])
        scale = min(scale, 1.0)
        start = int(np.floor(-2 / scale) + 1)
        weights = np.array([_cubic_weight(scale * (i - ratio), a)
                            for i in range(start, 2 - start)])
        return weights / weights.sum()

    return coefficients


# ----------------------------------------------------------------------------- weights


def source_coordinates(mode: str, out_size: int, scale: float, in_size: int, roi):
    """(source coordinate of every output position, extrapolated mask or None)."""
    y = np.arange(out_size, dtype=np.float64)
    out_width = scale * in_size
    if mode == "align_corners":
        x = np.zeros(out_size) if out_width == 1 else y * (in_size - 1) / (out_width - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        if roi is None:
            raise OnnxError("tf_crop_and_resize needs roi")
        if out_width == 1:
            x = np.full(out_size, (roi[1] - roi[0]) * (in_size - 1) / 2)
        else:
            x = y * (roi[1] - roi[0]) * (in_size - 1) / (out_width - 1)
        x = x + roi[0] * (in_size - 1)
        return x, (x < 0) | (x > in_size - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_size, -0.5) if out_width == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / out_width)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise UnsupportedOp(f"coordinate_transformation_mode {mode!r} is not supported")
    return x, None


def axis_weights(in_size: int, out_size: int, scale: float, coefficients, transform: str,
                 roi, exclude_outside: bool):
    """(out x in weight matrix, extrapolated rows or None) of resizing one axis."""
    x, extrapolated = source_coordinates(transform, out_size, scale, in_size, roi)
    floor = np.floor(x)
    ratios = np.where(x == floor, 1.0, x - floor)
    weights = np.array([coefficients(float(r), scale) for r in ratios]).reshape(out_size, -1)
    taps = weights.shape[1]
    pad = int(np.ceil(taps / 2))
    padded = x + pad
    base = np.floor(padded).astype(np.int64)
    fraction = padded - base
    if taps % 2 == 0:
        offset = np.where(fraction == 0, -(taps // 2), -(taps // 2) + 1)
    else:
        first = -((taps - 1) // 2)
        offset = np.where(fraction <= 0.5, first, first + 1)
    neighbors = (base + offset)[:, None] + np.arange(taps)[None, :] - pad
    if exclude_outside:
        weights = np.where((neighbors < 0) | (neighbors >= in_size), 0.0, weights)
        totals = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(totals == 0, 1.0, totals)
    matrix = np.zeros((out_size, in_size), dtype=np.float64)
    rows = np.repeat(np.arange(out_size), taps)
    np.add.at(matrix, (rows, np.clip(neighbors, 0, in_size - 1).reshape(-1)),
              weights.reshape(-1))
    return matrix, extrapolated


# A resampling whose every output reads at most MAX_TAPS inputs (linear: 2, cubic: 4; no
# antialiasing) along an axis of at least TAP_INPUTS inputs runs as that many gathers and
# multiply-adds (work per output: the taps) rather than a matmul by the dense matrix (work
# per output: the axis's size).
MAX_TAPS = 4
TAP_INPUTS = 32


def _by_taps(x: Tensor, axis: int, matrix: np.ndarray, ctx: NodeContext) -> Tensor:
    """sum over t of x[..., index_t, ...] * weight_t along ``axis`` (matrix: outputs x
    inputs, at most MAX_TAPS nonzeros per row)."""
    rows = matrix.shape[0]
    indices = np.zeros((MAX_TAPS, rows), np.int64)
    weights = np.zeros((MAX_TAPS, rows), np.float64)
    for row in range(rows):
        (columns,) = np.nonzero(matrix[row])
        indices[:len(columns), row] = columns
        weights[:len(columns), row] = matrix[row, columns]
    shape = [1] * x.ndim
    shape[axis] = rows
    result = None
    for tap in range(MAX_TAPS):
        if not weights[tap].any():
            continue
        term = x.index_select(axis, ctx.constant(indices[tap])) * ctx.constant(
            weights[tap].astype(x.dtype.numpy).reshape(shape))
        result = term if result is None else result + term
    if result is None:
        return x.index_select(axis, ctx.constant(indices[0])) * 0
    return result


def resize_axis(x: Tensor, axis: int, matrix: np.ndarray, extrapolated, fill: float,
                nearest: bool, ctx: NodeContext) -> Tensor:
    """``x`` with ``axis`` resampled by ``matrix`` (rows: outputs, columns: inputs)."""
    if nearest:
        picks = np.argmax(matrix, axis=1).astype(np.int64)
        result = x.index_select(axis, ctx.constant(picks))
    elif x.dtype.is_floating and matrix.shape[1] >= TAP_INPUTS and \
            (matrix != 0).sum(axis=1).max(initial=0) <= MAX_TAPS:
        result = _by_taps(x, axis, matrix, ctx)
    else:
        work = x if x.dtype.is_floating else cast(x, dt.float64)
        moved = work.transpose(axis, -1) if axis != x.ndim - 1 else work
        weights = ctx.constant(matrix.T.astype(work.dtype.numpy))
        result = matmul(moved, weights)
        result = result.transpose(axis, -1) if axis != x.ndim - 1 else result
    if extrapolated is not None and extrapolated.any():
        shape = [1] * x.ndim
        shape[axis] = len(extrapolated)
        mask = ctx.constant(extrapolated.reshape(shape))
        result = where(mask, fill, result, dtype=result.dtype)
    return result


def _saturate(x: Tensor, dtype: dt.DType) -> Tensor:
    if x.dtype is dtype:
        return x
    if dtype.is_integer:
        info = np.iinfo(dtype.numpy)
        x = unary(OpKind.ROUND, x).clamp(float(info.min), float(info.max))
    return cast(x, dtype)


# ----------------------------------------------------------------------------- converters


def _targets(ctx: NodeContext, x: Tensor, axes, scales, sizes):
    """Per resized axis: (axis, scale, output size), with keep_aspect_ratio_policy."""
    if sizes is not None and len(sizes):
        sizes = [int(s) for s in sizes]
        scales = [s / x.shape[a] for s, a in zip(sizes, axes)]
        policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            if policy == "not_larger":
                scale = min(scales)
            elif policy == "not_smaller":
                scale = max(scales)
            else:
                raise UnsupportedOp(f"keep_aspect_ratio_policy {policy!r}")
            scales = [scale] * len(axes)
            sizes = [int(scale * x.shape[a] + 0.5) for a in axes]
    elif scales is not None and len(scales):
        scales = [float(s) for s in scales]
        sizes = [int(s * x.shape[a]) for s, a in zip(scales, axes)]
    else:
        raise OnnxError("Resize needs scales or sizes")
    if len(scales) != len(axes):
        raise OnnxError(f"{len(scales)} scales or sizes for {len(axes)} axes")
    return list(zip(axes, scales, sizes))


def resize(ctx: NodeContext, x: Tensor, scales, sizes, roi, mode: str, transform: str,
           axes=None) -> Tensor:
    axes = [axis_of(a, x.ndim) for a in axes] if axes else list(range(x.ndim))
    if roi is not None and np.asarray(roi).size == 0:
        roi = None
    antialias = bool(ctx.attr("antialias", 0))
    if mode == "nearest":
        if antialias:
            raise UnsupportedOp("antialias is not defined for nearest mode")
        coefficients = _nearest(ctx.attr("nearest_mode", "round_prefer_floor"))
    elif mode == "linear":
        coefficients = _linear(antialias)
    elif mode == "cubic":
        coefficients = _cubic(ctx.attr("cubic_coeff_a", -0.75), antialias)
    else:
        raise UnsupportedOp(f"Resize mode {mode!r} is not supported")
    fill = ctx.attr("extrapolation_value", 0.0)
    exclude = bool(ctx.attr("exclude_outside", 0))
    result = x if mode == "nearest" else (x if x.dtype.is_floating else cast(x, dt.float64))
    count = len(axes)
    for position, (axis, scale, size) in enumerate(_targets(ctx, x, axes, scales, sizes)):
        axis_roi = None if roi is None else [float(roi[position]), float(roi[position + count])]
        identity = math.isclose(scale, 1.0) and size == x.shape[axis] and (
            axis_roi is None or (math.isclose(axis_roi[0], 0) and math.isclose(axis_roi[1], 1)))
        if identity:
            continue
        matrix, extrapolated = axis_weights(x.shape[axis], size, scale, coefficients, transform,
                                            axis_roi, exclude)
        result = resize_axis(result, axis, matrix, extrapolated, fill, mode == "nearest", ctx)
    return _saturate(result, x.dtype)


@onnx_op("Resize")
def resize_(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    mode = ctx.attr("mode", "nearest")
    if ctx.opset < 11:
        return resize(ctx, x, ctx.static(1), None, None, mode, "asymmetric")
    transform = ctx.attr("coordinate_transformation_mode", "half_pixel")
    return resize(ctx, x, ctx.static(2), ctx.static(3), ctx.static(1), mode, transform,
                  ctx.attr("axes"))


@onnx_op("Upsample")
def upsample(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    scales = ctx.static(1) if ctx.has(1) else ctx.attr("scales")
    mode = ctx.attr("mode", "nearest")
    if mode == "nearest":  # Upsample repeats each element: nearest rounds down
        return _upsample_nearest(ctx, x, [float(s) for s in np.asarray(scales).reshape(-1)])
    mode = "linear" if mode in ("linear", "bilinear") else mode
    return resize(ctx, x, scales, None, None, mode, "asymmetric")


def _upsample_nearest(ctx: NodeContext, x: Tensor, scales: list[float]) -> Tensor:
    result = x
    for axis, scale in enumerate(scales):
        if scale == 1:
            continue
        size = int(x.shape[axis] * scale)
        picks = np.minimum(np.floor(np.arange(size) / scale), x.shape[axis] - 1)
        result = result.index_select(axis, ctx.constant(picks.astype(np.int64)))
    return result
