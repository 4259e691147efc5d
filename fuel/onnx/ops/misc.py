"""GridSample, AffineGrid, Col2Im, Det, BitCast, NonMaxSuppression (read on the host: its
output size depends on values) and the training optimizers (Adagrad, Adam, Momentum)."""

from __future__ import annotations

import numpy as np

from fuel.frontend.structured import matmul
from fuel.nn import sampling, tensor_ops
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.common import OpKind, Tensor, cast, full, unary

TRAINING = "ai.onnx.preview.training"
_GRID_MODES = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest",
               "linear": "linear", "cubic": "cubic"}


@onnx_op("GridSample")
def grid_sample(ctx: NodeContext) -> Tensor:
    mode = _GRID_MODES.get(ctx.attr("mode", "linear" if ctx.opset >= 20 else "bilinear"))
    if mode is None:
        raise UnsupportedOp(f"GridSample mode {ctx.attr('mode')!r} is not supported")
    return sampling.grid_sample(ctx.input(0), ctx.input(1), mode,
                                ctx.attr("padding_mode", "zeros"),
                                bool(ctx.attr("align_corners", 0)))


def _base_coordinates(size: int, align_corners: bool) -> np.ndarray:
    if align_corners:
        return np.linspace(-1, 1, size) if size > 1 else np.zeros(1)
    return (np.arange(size) * 2 + 1) / size - 1


@onnx_op("AffineGrid")
def affine_grid(ctx: NodeContext) -> Tensor:
    theta = ctx.input(0)
    size = ctx.static_ints(1)
    align = bool(ctx.attr("align_corners", 0))
    spatial = size[2:]
    axes = [_base_coordinates(s, align) for s in reversed(spatial)]  # x first
    mesh = np.meshgrid(*reversed(axes), indexing="ij")  # spatial order
    points = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(int(np.prod(spatial)))]
    base = ctx.constant(np.stack(points, 1).astype(theta.dtype.numpy))  # (P, r + 1)
    grid = matmul(base, theta.transpose(1, 2))  # (N, P, r)
    return grid.reshape((size[0],) + tuple(spatial) + (len(spatial),))


@onnx_op("Col2Im")
def col2im(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    image = ctx.static_ints(1)
    block = ctx.static_ints(2)
    rank = len(image)
    dilations = ctx.attr("dilations") or [1] * rank
    pads = ctx.attr("pads") or [0] * (2 * rank)
    strides = ctx.attr("strides") or [1] * rank
    counts = [(image[i] + pads[i] + pads[rank + i] - (block[i] - 1) * dilations[i] - 1)
              // strides[i] + 1 for i in range(rank)]
    kernel_size, locations = int(np.prod(block)), int(np.prod(counts))
    n, width, length = x.shape
    if width % kernel_size or length != locations:
        raise OnnxError(f"input {x.shape} does not fit blocks {block} at {counts} positions")
    channels = width // kernel_size
    kernel_positions = np.indices(block).reshape(rank, -1)  # (rank, K)
    sliding = np.indices(counts).reshape(rank, -1)  # (rank, L)
    pixel = np.zeros((kernel_size, locations), dtype=np.int64)
    inside = np.ones((kernel_size, locations), dtype=bool)
    for i in range(rank):
        where_i = (sliding[i][None, :] * strides[i] - pads[i]
                   + kernel_positions[i][:, None] * dilations[i])
        inside &= (where_i >= 0) & (where_i < image[i])
        pixel = pixel * image[i] + where_i
    total = int(np.prod(image))
    index = np.where(inside, pixel, total).reshape(-1)  # the extra slot collects padding
    target = full((n, channels, total + 1), 0, x.dtype, x.device)
    updates = x.reshape((n, channels, kernel_size * locations))
    positions = ctx.constant(index).reshape((1, 1, -1)).expand(*updates.shape)
    summed = tensor_ops._scatter_elements(target, 2, positions, updates, "add")
    return summed.narrow(2, 0, total).reshape((n, channels) + tuple(image))


@onnx_op("Det")
def det(ctx: NodeContext) -> Tensor:
    return tensor_ops.det(ctx.input(0))


@onnx_op("BitCast")
def bit_cast(ctx: NodeContext) -> Tensor:
    target = ctx.elem_dtype("to")
    x = ctx.input(0)
    if target.itemsize != x.dtype.itemsize:
        raise UnsupportedOp(f"BitCast between sizes {x.dtype.itemsize} and {target.itemsize}")
    return tensor_ops.bitcast(x, target)


def _suppressed(box: np.ndarray, others: np.ndarray, center: int, threshold: float):
    """Whether each of ``others`` overlaps ``box`` by more than ``threshold`` IoU."""
    if center:
        def corners(b):
            return (b[..., 0] - b[..., 2] / 2, b[..., 0] + b[..., 2] / 2,
                    b[..., 1] - b[..., 3] / 2, b[..., 1] + b[..., 3] / 2)
    else:
        def corners(b):
            return (np.minimum(b[..., 1], b[..., 3]), np.maximum(b[..., 1], b[..., 3]),
                    np.minimum(b[..., 0], b[..., 2]), np.maximum(b[..., 0], b[..., 2]))
    x0, x1, y0, y1 = corners(box)
    ox0, ox1, oy0, oy1 = corners(others)
    width = np.minimum(x1, ox1) - np.maximum(x0, ox0)
    height = np.minimum(y1, oy1) - np.maximum(y0, oy0)
    intersection = np.where((width > 0) & (height > 0), width * height, 0.0)
    area, other_area = (x1 - x0) * (y1 - y0), (ox1 - ox0) * (oy1 - oy0)
    union = area + other_area - intersection
    with np.errstate(all="ignore"):
        iou = intersection / union
    valid = (intersection > 0) & (area > 0) & (other_area > 0) & (union > 0)
    return valid & (iou > threshold)


@onnx_op("NonMaxSuppression")
def non_max_suppression(ctx: NodeContext) -> Tensor:
    boxes, scores = ctx.static(0), ctx.static(1)
    limit = ctx.static_scalar(2, 0)
    iou = ctx.static_scalar(3, 0.0)
    score_threshold = ctx.static_scalar(4)
    center = ctx.attr("center_point_box", 0)
    selected = []
    for b in range(boxes.shape[0]):
        for c in range(scores.shape[1]):
            class_scores = scores[b, c]
            candidates = np.arange(len(class_scores))
            if score_threshold is not None:
                candidates = candidates[class_scores > score_threshold]
            order = candidates[np.lexsort((candidates, -class_scores[candidates]))]
            kept: list[int] = []
            for index in order:
                if len(kept) >= max(int(limit), 0):
                    break
                if kept and _suppressed(boxes[b, index], boxes[b, kept], center, iou).any():
                    continue
                kept.append(int(index))
                selected.append((b, c, int(index)))
    return ctx.constant(np.array(selected, dtype=np.int64).reshape(-1, 3))


def _groups(ctx: NodeContext, per: int) -> list[list[Tensor]]:
    count = (ctx.num_inputs - 2) // per
    return [[ctx.input(2 + k * count + i) for k in range(per)] for i in range(count)]


@onnx_op("Adagrad", domain=TRAINING)
def adagrad(ctx: NodeContext) -> list[Tensor]:
    rate, step = ctx.static_scalar(0), ctx.static_scalar(1)
    decay, eps = ctx.attr("decay_factor", 0.0), ctx.attr("epsilon", 0.0)
    norm = ctx.attr("norm_coefficient", 0.0)
    adjusted = rate / (1 + step * decay)
    xs, hs = [], []
    for x, g, h in _groups(ctx, 3):
        g = g + x * norm
        h_new = h + g * g
        xs.append(cast(x - g * adjusted / (unary(OpKind.SQRT, h_new) + eps), x.dtype))
        hs.append(h_new)
    return xs + hs


@onnx_op("Adam", domain=TRAINING)
def adam(ctx: NodeContext) -> list[Tensor]:
    rate, step = ctx.static_scalar(0), ctx.static_scalar(1)
    alpha, beta = ctx.attr("alpha", 0.9), ctx.attr("beta", 0.999)
    eps, norm = ctx.attr("epsilon", 0.0), ctx.attr("norm_coefficient", 0.0)
    post = ctx.attr("norm_coefficient_post", 0.0)
    if step > 0:
        rate = rate * np.sqrt(1 - beta ** step) / (1 - alpha ** step)
    xs, vs, hs = [], [], []
    for x, g, v, h in _groups(ctx, 4):
        g = g + x * norm
        v_new = v * alpha + g * (1 - alpha)
        h_new = h * beta + g * g * (1 - beta)
        x_new = x - v_new / (unary(OpKind.SQRT, h_new) + eps) * float(rate)
        xs.append(x_new * (1 - post))
        vs.append(v_new)
        hs.append(h_new)
    return xs + vs + hs


@onnx_op("Momentum", domain=TRAINING)
def momentum(ctx: NodeContext) -> list[Tensor]:
    rate, step = ctx.static_scalar(0), ctx.static_scalar(1)
    alpha, beta = ctx.attr("alpha"), ctx.attr("beta")
    norm, mode = ctx.attr("norm_coefficient", 0.0), ctx.attr("mode", "standard")
    beta = beta if step > 0 else 1.0
    xs, vs = [], []
    for x, g, v in _groups(ctx, 3):
        g = g + x * norm
        v_new = v * alpha + g * beta
        if mode == "nesterov":
            xs.append(x - (g + v_new * alpha) * rate)
        else:
            xs.append(x - v_new * rate)
        vs.append(v_new)
    return xs + vs

