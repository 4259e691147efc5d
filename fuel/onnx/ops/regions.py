"""RoiAlign and DeformConv: bilinear sampling at positions computed from boxes (RoiAlign:
read on the host, like NonMaxSuppression's) or from an offset tensor (DeformConv: lazily,
through GridSample), then pooling (RoiAlign) or a grouped convolution as a matmul
(DeformConv)."""

from __future__ import annotations

import math

import numpy as np

import fuel
from fuel.frontend.structured import matmul
from fuel.nn import sampling
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.common import Tensor


def _bilinear_corners(y: np.ndarray, x: np.ndarray, height: int, width: int):
    """(positions (..., 4), weights (..., 4)) of RoiAlign's bilinear samples: corners
    (low, low), (low, high), (high, low), (high, high); samples more than one pixel outside
    the map weigh nothing, the rest clamp to its edge."""
    outside = (y < -1.0) | (y > height) | (x < -1.0) | (x > width)
    y, x = np.maximum(y, 0.0), np.maximum(x, 0.0)
    y_low, x_low = y.astype(np.int64), x.astype(np.int64)
    y_edge, x_edge = y_low >= height - 1, x_low >= width - 1
    y_low = np.where(y_edge, height - 1, y_low)
    x_low = np.where(x_edge, width - 1, x_low)
    y = np.where(y_edge, y_low, y)
    x = np.where(x_edge, x_low, x)
    y_high = np.where(y_edge, y_low, y_low + 1)
    x_high = np.where(x_edge, x_low, x_low + 1)
    ly, lx = y - y_low, x - x_low
    hy, hx = 1.0 - ly, 1.0 - lx
    positions = np.stack([y_low * width + x_low, y_low * width + x_high,
                          y_high * width + x_low, y_high * width + x_high], -1)
    weights = np.stack([hy * hx, hy * lx, ly * hx, ly * lx], -1)
    return np.where(outside[..., None], 0, positions), np.where(outside[..., None], 0.0, weights)


@onnx_op("RoiAlign")
def roi_align(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    rois = np.asarray(ctx.static(1), np.float64)
    batch = np.asarray(ctx.static(2), np.int64).reshape(-1)
    mode = ctx.attr("mode", "avg")
    if mode not in ("avg", "max"):
        raise UnsupportedOp(f"RoiAlign mode {mode!r} (avg or max)")
    half_pixel = ctx.attr("coordinate_transformation_mode",
                          "half_pixel" if ctx.opset >= 16 else "output_half_pixel") == "half_pixel"
    out_h, out_w = ctx.attr("output_height", 1), ctx.attr("output_width", 1)
    ratio, scale = ctx.attr("sampling_ratio", 0), ctx.attr("spatial_scale", 1.0)
    n, channels, height, width = x.shape
    if rois.ndim != 2 or rois.shape[1] != 4 or rois.shape[0] != batch.size:
        raise OnnxError(f"rois {rois.shape} and batch_indices {batch.shape} do not match")
    if batch.size and (batch.min() < 0 or batch.max() >= n):
        raise OnnxError(f"batch_indices {batch.tolist()} out of range for batch {n}")
    if not batch.size:
        return ctx.constant(np.zeros((0, channels, out_h, out_w), x.dtype.numpy))
    offset = 0.5 if half_pixel else 0.0
    per_roi_positions, per_roi_weights, counts = [], [], []
    for box, image in zip(rois * scale - offset, batch):
        start_w, start_h, end_w, end_h = box
        roi_w, roi_h = end_w - start_w, end_h - start_h
        if not half_pixel:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / out_h, roi_w / out_w
        grid_h = ratio if ratio > 0 else math.ceil(roi_h / out_h)
        grid_w = ratio if ratio > 0 else math.ceil(roi_w / out_w)
        ys = (start_h + np.arange(out_h)[:, None] * bin_h
              + (np.arange(grid_h) + 0.5) * bin_h / grid_h)  # (out_h, grid_h)
        xs = (start_w + np.arange(out_w)[:, None] * bin_w
              + (np.arange(grid_w) + 0.5) * bin_w / grid_w)  # (out_w, grid_w)
        y = np.broadcast_to(ys[:, None, :, None], (out_h, out_w, grid_h, grid_w))
        xx = np.broadcast_to(xs[None, :, None, :], (out_h, out_w, grid_h, grid_w))
        positions, weights = _bilinear_corners(y, xx, height, width)
        per_roi_positions.append(positions.reshape(out_h, out_w, -1, 4) + image * height * width)
        per_roi_weights.append(weights.reshape(out_h, out_w, -1, 4))
        counts.append(max(grid_h * grid_w, 1))
    if len(set(counts)) > 1:  # boxes with different sample counts: pad to the most samples,
        # with weightless samples (avg) or repeats of the last one (max: repeats change no max)
        most = max(p.shape[2] for p in per_roi_positions)
        fill = "constant" if mode == "avg" else "edge"
        per_roi_positions = [np.pad(p, ((0, 0), (0, 0), (0, most - p.shape[2]), (0, 0)),
                                    mode=fill) for p in per_roi_positions]
        per_roi_weights = [np.pad(w, ((0, 0), (0, 0), (0, most - w.shape[2]), (0, 0)),
                                  mode=fill) for w in per_roi_weights]
    positions = np.stack(per_roi_positions)  # (R, out_h, out_w, samples, 4 corners)
    weights = np.stack(per_roi_weights)
    pixels = x.permute(0, 2, 3, 1).reshape(n * height * width, channels)
    samples = pixels.index_select(0, ctx.constant(positions.reshape(-1)))
    samples = samples.reshape(positions.shape + (channels,))
    if mode == "avg":
        divisors = np.asarray(counts, np.float64).reshape(-1, 1, 1, 1, 1)
        scaled = ctx.constant((weights / divisors)[..., None].astype(x.dtype.numpy))
        pooled = (samples * scaled).sum((3, 4))
    else:  # ONNX's max mode: the largest weighted corner of any sample
        scaled = ctx.constant(weights[..., None].astype(x.dtype.numpy))
        pooled = (samples * scaled).amax(4).amax(3)
    return pooled.permute(0, 3, 1, 2)


@onnx_op("DeformConv")
def deform_conv(ctx: NodeContext) -> Tensor:
    x, weight, offset = ctx.input(0), ctx.input(1), ctx.input(2)
    bias, mask = ctx.optional(3), ctx.optional(4)
    if x.ndim != 4:
        raise UnsupportedOp(f"DeformConv over {x.ndim - 2} spatial dims (2 are supported)")
    n, in_channels, height, width = x.shape
    out_channels, group_channels, kernel_h, kernel_w = weight.shape
    group, offset_group = ctx.attr("group", 1), ctx.attr("offset_group", 1)
    dil_h, dil_w = ctx.attr("dilations") or (1, 1)
    stride_h, stride_w = ctx.attr("strides") or (1, 1)
    pad_top, pad_left = (ctx.attr("pads") or (0, 0, 0, 0))[:2]
    out_h, out_w = offset.shape[2:]
    taps = kernel_h * kernel_w
    if offset.shape[1] != offset_group * taps * 2 or in_channels != group_channels * group:
        raise OnnxError(f"offset {offset.shape} / weight {weight.shape} do not fit input "
                        f"{x.shape} with group {group} and offset_group {offset_group}")
    base_h = (np.arange(kernel_h)[:, None, None, None] * dil_h
              + np.arange(out_h)[None, None, :, None] * stride_h - pad_top)
    base_w = (np.arange(kernel_w)[None, :, None, None] * dil_w
              + np.arange(out_w)[None, None, None, :] * stride_w - pad_left)
    moves = offset.reshape(n, offset_group, kernel_h, kernel_w, 2, out_h, out_w)
    rows = moves.narrow(4, 0, 1).squeeze(4) + ctx.constant(base_h.astype(x.dtype.numpy))
    cols = moves.narrow(4, 1, 1).squeeze(4) + ctx.constant(base_w.astype(x.dtype.numpy))
    # GridSample with align_corners: -1 and 1 are the first and last pixels' centres.
    grid_y = rows * (2.0 / max(height - 1, 1)) - 1.0
    grid_x = cols * (2.0 / max(width - 1, 1)) - 1.0
    grid = fuel.stack([grid_x, grid_y], dim=-1)  # (x, y): the last dim first
    grid = grid.reshape(n * offset_group, taps * out_h, out_w, 2)
    per_offset_group = in_channels // offset_group
    images = x.reshape(n * offset_group, per_offset_group, height, width)
    sampled = sampling.grid_sample(images, grid, "bilinear", "zeros", True)
    sampled = sampled.reshape(n, offset_group, per_offset_group, taps, out_h * out_w)
    if mask is not None:
        sampled = sampled * mask.reshape(n, offset_group, 1, taps, out_h * out_w)
    columns = sampled.reshape(n, group, group_channels * taps, out_h * out_w)
    kernels = weight.reshape(1, group, out_channels // group, group_channels * taps)
    result = matmul(kernels, columns).reshape(n, out_channels, out_h, out_w)
    if bias is not None:
        result = result + bias.reshape(1, out_channels, 1, 1)
    return result
