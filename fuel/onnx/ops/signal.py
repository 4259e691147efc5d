"""Signal processing: DFT and STFT as matrix products with host-built DFT matrices; the
window functions and MelWeightMatrix, whose outputs depend only on their (host) inputs."""

from __future__ import annotations

import numpy as np

import fuel
from fuel.frontend.structured import matmul
from fuel.ir import dtype as dt
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError
from fuel.onnx.ops.common import Tensor, axis_of, cast


def _parts(x: Tensor, axis: int) -> tuple[Tensor, Tensor | None]:
    """Real and imaginary parts (None for a real signal) with ``axis`` moved last."""
    channels = x.shape[-1]
    if channels not in (1, 2):
        raise OnnxError(f"the last dim must be 1 (real) or 2 (complex), got {channels}")
    real = x.narrow(-1, 0, 1).squeeze(-1)
    imaginary = x.narrow(-1, 1, 1).squeeze(-1) if channels == 2 else None
    last = real.ndim - 1
    if axis != last:
        real = real.transpose(axis, last)
        imaginary = imaginary.transpose(axis, last) if imaginary is not None else None
    return real, imaginary


def _combine(ctx: NodeContext, parts, matrices, dtype) -> Tensor:
    """sum_i parts[i] @ matrices[i] (host float64 matrices cast to ``dtype``)."""
    total = None
    for part, matrix in zip(parts, matrices):
        if part is None:
            continue
        term = matmul(part, ctx.constant(matrix.astype(dtype.numpy)))
        total = term if total is None else total + term
    return total


def dft(ctx: NodeContext, x: Tensor, length: int | None, axis: int, inverse: bool,
        onesided: bool) -> Tensor:
    """ONNX DFT along ``axis`` of a (..., 1|2) real or complex signal."""
    work = x if x.dtype in (dt.float32, dt.float64) else cast(x, dt.float32)
    real, imaginary = _parts(work, axis)
    size = real.shape[-1]
    if length is None:
        length = 2 * (size - 1) if inverse and onesided else size
    j = np.arange(size)[:, None]
    if inverse and onesided:  # a one-sided spectrum to a real signal (irfft)
        k = np.arange(length)[None, :]
        half = length // 2
        factor = np.where((j == 0) | ((length % 2 == 0) & (j == half)), 1.0, 2.0)
        factor = np.where(j <= half, factor, 0.0)
        angle = 2 * np.pi * j * k / length
        cos, sin = factor * np.cos(angle) / length, factor * np.sin(angle) / length
        out_real = _combine(ctx, [real, imaginary], [cos, -sin], work.dtype)
        result = out_real.unsqueeze(-1)
    else:
        bins = length // 2 + 1 if onesided and not inverse else length
        k = np.arange(bins)[None, :]
        angle = 2 * np.pi * j * k / length
        used = (j < length).astype(np.float64)
        cos, sin = used * np.cos(angle), used * np.sin(angle)
        if inverse:
            cos, sin = cos / length, -sin / length
        out_real = _combine(ctx, [real, imaginary], [cos, sin], work.dtype)
        out_imaginary = _combine(ctx, [imaginary, real], [cos, -sin], work.dtype)
        result = fuel.stack([out_real, out_imaginary], -1)
    last = result.ndim - 2
    if axis != last:
        result = result.transpose(axis, last)
    return cast(result, x.dtype)


@onnx_op("DFT")
def dft_(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    length = ctx.static_scalar(1)
    if ctx.opset >= 20:
        axis = ctx.static_scalar(2, -2)
    else:
        axis = ctx.attr("axis", 1)
    axis = axis_of(axis, x.ndim)
    if axis == x.ndim - 1:
        raise OnnxError("the DFT axis cannot be the last (real/imaginary) dim")
    return dft(ctx, x, None if length is None else int(length), axis,
               bool(ctx.attr("inverse", 0)), bool(ctx.attr("onesided", 0)))


@onnx_op("STFT")
def stft(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    step = int(ctx.static_scalar(1))
    window = ctx.optional(2)
    frame = ctx.static_scalar(3)
    if frame is None:
        frame = window.shape[0] if window is not None else x.shape[-2]
    frame = int(frame)
    frames = 1 + (x.shape[1] - frame) // step
    positions = (np.arange(frames)[:, None] * step + np.arange(frame)[None, :]).reshape(-1)
    pieces = x.index_select(1, ctx.constant(positions.astype(np.int64)))
    pieces = pieces.reshape((x.shape[0], frames, frame, x.shape[-1]))
    if window is not None:
        pieces = pieces * cast(window, x.dtype).reshape((frame, 1))
    return dft(ctx, pieces, frame, 2, False, bool(ctx.attr("onesided", 1)))


def _window(function):
    def convert(ctx: NodeContext) -> Tensor:
        size = int(ctx.static_scalar(0))
        dtype = ctx.elem_dtype("output_datatype", dt.float32)
        span = size if ctx.attr("periodic", 1) else size - 1
        angle = 2 * np.pi * np.arange(size) / span if span else np.zeros(size)
        return ctx.constant(function(angle).astype(dtype.numpy))

    return convert


onnx_op("HannWindow")(_window(lambda a: 0.5 - 0.5 * np.cos(a)))
onnx_op("HammingWindow")(_window(lambda a: 25 / 46 - 21 / 46 * np.cos(a)))
onnx_op("BlackmanWindow")(_window(lambda a: 0.42 - 0.5 * np.cos(a) + 0.08 * np.cos(2 * a)))


@onnx_op("MelWeightMatrix")
def mel_weight_matrix(ctx: NodeContext) -> Tensor:
    bins = int(ctx.static_scalar(0))
    length = int(ctx.static_scalar(1))
    rate = ctx.static_scalar(2)
    low, high = ctx.static_scalar(3), ctx.static_scalar(4)
    spectrogram = length // 2 + 1

    def to_mel(hertz):
        return 2595 * np.log1p(hertz / 700) / np.log(10)

    low_mel, high_mel = to_mel(low), to_mel(high)
    points = np.arange(bins + 2) * ((high_mel - low_mel) / (bins + 2)) + low_mel
    hertz = 700 * np.expm1(points / 2595 * np.log(10))
    edges = (((length + 1) * hertz) // rate).astype(int)
    matrix = np.zeros((spectrogram, bins))
    for i in range(bins):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            matrix[center, i] = 1
        else:
            for j in range(left, center + 1):
                matrix[j, i] = (j - left) / (center - left)
        for j in range(center, right):
            matrix[j, i] = (right - j) / (right - center)
    dtype = ctx.elem_dtype("output_datatype", dt.float32)
    return ctx.constant(matrix.astype(dtype.numpy))
