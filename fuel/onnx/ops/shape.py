"""Shape and layout ONNX ops: Shape, Size, Reshape, Flatten, Transpose, (Un)Squeeze, Concat,
Split, Slice, Expand, Tile, Pad, ConstantOfShape, Constant, Range, EyeLike, Trilu, ..."""

from __future__ import annotations

import numpy as np

import fuel
from fuel.frontend.shape import cat
from fuel.frontend.shape import pad as constant_pad
from fuel.ir import dtype as dt
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.common import Tensor, axis_of, narrow, slice_axes


@onnx_op("Shape")
def shape(ctx: NodeContext) -> Tensor:
    dims = ctx.input(0).shape
    rank = len(dims)
    start = ctx.attr("start", 0)
    end = ctx.attr("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return ctx.constant(np.array(dims[start:end], dtype=np.int64))


@onnx_op("Size")
def size(ctx: NodeContext) -> Tensor:
    return ctx.constant(np.array(ctx.input(0).numel(), dtype=np.int64))


@onnx_op("Reshape")
def reshape(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    target = ctx.static_ints(1) if ctx.opset >= 5 else list(ctx.attr("shape", []))
    allow_zero = ctx.attr("allowzero", 0)
    shape_ = []
    for axis, size_ in enumerate(target):
        if size_ == 0 and not allow_zero:
            if axis >= x.ndim:
                raise OnnxError(f"shape {target}: 0 at dim {axis} copies a dim the input "
                                f"{x.shape} lacks")
            size_ = x.shape[axis]
        shape_.append(size_)
    return x.reshape(tuple(shape_))


@onnx_op("Flatten")
def flatten(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    axis = ctx.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        raise OnnxError(f"axis {ctx.attr('axis', 1)} is out of range for rank {x.ndim}")
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis:], dtype=np.int64))
    return x.reshape((outer, inner))


@onnx_op("Transpose")
def transpose(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    perm = ctx.attr("perm")
    if perm is None:
        perm = list(reversed(range(x.ndim)))
    if sorted(axis_of(p, x.ndim, "perm entry") for p in perm) != list(range(x.ndim)):
        raise OnnxError(f"perm {perm} is not a permutation of {x.ndim} dims")
    return x.permute(*perm) if x.ndim else x


@onnx_op("Squeeze")
def squeeze(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    axes = ctx.ints_from(1, "axes") if ctx.opset >= 13 else ctx.attr("axes")
    if axes is None:
        return x.reshape(tuple(s for s in x.shape if s != 1))
    axes = {axis_of(a, x.ndim) for a in axes}
    for axis in axes:
        if x.shape[axis] != 1:
            raise OnnxError(f"cannot squeeze dim {axis} of size {x.shape[axis]}")
    return x.reshape(tuple(s for axis, s in enumerate(x.shape) if axis not in axes))


@onnx_op("Unsqueeze")
def unsqueeze(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    axes = ctx.ints_from(1, "axes") if ctx.opset >= 13 else ctx.attr("axes")
    if not axes:
        raise OnnxError("Unsqueeze needs axes")
    rank = x.ndim + len(axes)
    axes = sorted(axis_of(a, rank) for a in axes)
    if len(set(axes)) != len(axes):
        raise OnnxError(f"axes {axes} repeat a dim")
    dims = iter(x.shape)
    return x.reshape(tuple(1 if axis in axes else next(dims) for axis in range(rank)))


@onnx_op("Concat")
def concat(ctx: NodeContext) -> Tensor:
    tensors = [ctx.input(i) for i in range(ctx.num_inputs) if ctx.has(i)]
    axis = axis_of(ctx.attr("axis", 0), tensors[0].ndim)
    dtype = tensors[0].dtype
    if any(t.dtype is not dtype for t in tensors):
        raise OnnxError("Concat inputs must share a dtype")
    if len(tensors) == 1:
        return tensors[0]
    return cat(tensors, axis)


@onnx_op("Split")
def split(ctx: NodeContext) -> list[Tensor]:
    x = ctx.input(0)
    axis = axis_of(ctx.attr("axis", 0), x.ndim)
    length = x.shape[axis]
    sizes = ctx.ints_from(1, "split") if ctx.opset >= 13 else ctx.attr("split")
    if not sizes:
        count = ctx.attr("num_outputs", ctx.num_outputs)
        if ctx.has_attr("num_outputs"):
            chunk = -(-length // count)
            sizes = [min(chunk, max(length - chunk * k, 0)) for k in range(count)]
        else:
            if length % count:
                raise OnnxError(f"cannot split dim of size {length} into {count} equal parts")
            sizes = [length // count] * count
    if sum(sizes) != length:
        raise OnnxError(f"split sizes {sizes} do not add up to {length}")
    parts, start = [], 0
    for size_ in sizes:
        parts.append(narrow(x, axis, start, start + size_))
        start += size_
    return parts


def slice_bounds(start: int, end: int, step: int, size: int) -> tuple[int, int]:
    """ONNX's clamping of a Slice's start and end for one dim of ``size``."""
    if start < 0:
        start += size
    if end < 0:
        end += size
    if step > 0:
        return min(max(start, 0), size), min(max(end, 0), size)
    return min(max(start, 0), size - 1), min(max(end, -1), size - 1)


@onnx_op("Slice")
def slice_(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    if ctx.opset >= 10:
        starts, ends = ctx.static_ints(1), ctx.static_ints(2)
        axes, steps = ctx.static_ints(3), ctx.static_ints(4)
    else:
        starts, ends, axes, steps = ctx.attr("starts"), ctx.attr("ends"), ctx.attr("axes"), None
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise OnnxError("starts, ends, axes and steps must have the same length")
    begin, stop, stride = [0] * x.ndim, list(x.shape), [1] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = axis_of(axis, x.ndim)
        if step == 0:
            raise OnnxError("slice step cannot be 0")
        begin[axis], stop[axis] = slice_bounds(start, end, step, x.shape[axis])
        stride[axis] = step
    return slice_axes(x, begin, stop, stride)


@onnx_op("Expand")
def expand(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    target = ctx.static_ints(1)
    rank = max(len(target), x.ndim)
    own = (1,) * (rank - x.ndim) + tuple(x.shape)
    wanted = (1,) * (rank - len(target)) + tuple(target)
    out = []
    for a, b in zip(own, wanted):
        if a != b and 1 not in (a, b):
            raise OnnxError(f"cannot expand shape {x.shape} to {target}")
        out.append(a if b == 1 else b)
    result = x.reshape(own) if own != x.shape else x
    return result.expand(*out) if tuple(out) != own else result


@onnx_op("Tile")
def tile(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    repeats = ctx.static_ints(1)
    if len(repeats) != x.ndim:
        raise OnnxError(f"repeats {repeats} must have one entry per dim of {x.shape}")
    interleaved = tuple(v for s in x.shape for v in (1, s))
    target = tuple(v for r, s in zip(repeats, x.shape) for v in (r, s))
    out = tuple(r * s for r, s in zip(repeats, x.shape))
    return x.reshape(interleaved).expand(*target).reshape(out)


@onnx_op("Pad")
def pad(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    mode = ctx.attr("mode", "constant")
    if ctx.opset >= 11:
        pads = ctx.static_ints(1)
        value = ctx.static(2)
        value = value.reshape(-1)[0].item() if value is not None and value.size else 0
        axes = ctx.static_ints(3)
    else:
        pads = ctx.attr("pads", ctx.attr("paddings"))
        value, axes = ctx.attr("value", 0.0), None
    axes = [axis_of(a, x.ndim) for a in axes] if axes is not None else list(range(x.ndim))
    if len(pads) != 2 * len(axes):
        raise OnnxError(f"pads {pads} must have 2 entries per padded axis ({len(axes)})")
    widths = [(0, 0)] * x.ndim
    for k, axis in enumerate(axes):
        widths[axis] = (pads[k], pads[k + len(axes)])
    return pad_tensor(x, widths, mode, value)


def pad_tensor(x: Tensor, widths, mode: str, value=0) -> Tensor:
    """Pad (negative widths crop) with ONNX's constant, reflect, edge or wrap modes."""
    if mode == "constant":
        starts = [max(-b, 0) for b, _ in widths]
        stops = [n - max(-a, 0) for n, (_, a) in zip(x.shape, widths)]
        x = slice_axes(x, starts, stops, [1] * x.ndim)
        flat = [w for b, a in reversed(widths) for w in (max(b, 0), max(a, 0))]
        if not any(flat):
            return x
        if x.dtype.is_bool:
            value = bool(value)
        elif x.dtype.is_integer:
            value = int(value)
        return constant_pad(x, flat, value)
    if mode not in ("reflect", "edge", "wrap"):
        raise UnsupportedOp(f"Pad mode {mode!r} is not supported")
    result = x
    for axis, (before, after) in enumerate(widths):
        if before == 0 and after == 0:
            continue
        positions = _pad_positions(x.shape[axis], before, after, mode)
        index = fuel.tensor(positions, device=x.device)
        result = result.index_select(axis, index)
    return result


def _pad_positions(size: int, before: int, after: int, mode: str) -> np.ndarray:
    """The source position of every output position along one axis."""
    positions = np.arange(size, dtype=np.int64)
    crop_before, crop_after = max(-before, 0), max(-after, 0)
    positions = positions[crop_before:size - crop_after]
    before, after = max(before, 0), max(after, 0)
    if size == 0 and (before or after):
        raise OnnxError(f"cannot {mode}-pad an empty axis")
    return np.pad(positions, (before, after), mode={"reflect": "reflect", "edge": "edge",
                                                     "wrap": "wrap"}[mode])


@onnx_op("ConstantOfShape")
def constant_of_shape(ctx: NodeContext) -> Tensor:
    dims = ctx.static_ints(0)
    value = ctx.attr("value")
    if value is None:
        value = np.zeros((1,), dtype=np.float32)
    value = np.asarray(value)
    fill = value.reshape(-1)[0].item()
    dtype = dt.from_numpy(value.dtype)
    if any(d < 0 for d in dims):
        raise OnnxError(f"negative dim in shape {dims}")
    # A constant filled once, when the model is built (a leaf: a replay does not fill it
    # again, and a convolution can fold its values).
    return ctx.constant(np.full(tuple(dims), fill, dtype=dtype.numpy))


@onnx_op("Constant")
def constant(ctx: NodeContext) -> Tensor:
    for name in ("value", "sparse_value"):
        if ctx.has_attr(name):
            return ctx.constant(ctx.attr(name))
    conversions = {"value_float": np.float32, "value_floats": np.float32,
                   "value_int": np.int64, "value_ints": np.int64}
    for name, numpy_type in conversions.items():
        if ctx.has_attr(name):
            return ctx.constant(np.array(ctx.attr(name), dtype=numpy_type))
    if ctx.has_attr("value_string") or ctx.has_attr("value_strings"):
        from fuel.onnx.errors import UnsupportedDType

        raise UnsupportedDType("string constants have no fuel dtype")
    raise OnnxError("Constant has no value attribute")


@onnx_op("Range")
def range_(ctx: NodeContext) -> Tensor:
    start, limit, delta = (ctx.static_scalar(i) for i in range(3))
    dtype = ctx.input(0).dtype
    if delta == 0:
        raise OnnxError("Range delta cannot be 0")
    count = max(int(np.ceil((limit - start) / delta)), 0)
    if dtype.is_integer:
        values = int(start) + np.arange(count, dtype=np.int64) * int(delta)
    else:
        values = float(start) + np.arange(count, dtype=np.float64) * float(delta)
    return ctx.constant(values.astype(dtype.numpy))


@onnx_op("EyeLike")
def eye_like(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    if x.ndim != 2:
        raise OnnxError(f"EyeLike needs a 2-D input, got {x.shape}")
    dtype = ctx.elem_dtype("dtype", x.dtype)
    k = ctx.attr("k", 0)
    return ctx.constant(np.eye(x.shape[0], x.shape[1], k, dtype=dtype.numpy))


@onnx_op("Trilu")
def trilu(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    k = ctx.static(1)
    k = int(np.asarray(k).reshape(-1)[0]) if k is not None else 0
    return x.triu(k) if ctx.attr("upper", 1) else x.tril(k)


@onnx_op("DepthToSpace")
def depth_to_space(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    block = ctx.attr("blocksize")
    n, c, h, w = x.shape
    depth = c // (block * block)
    if ctx.attr("mode", "DCR") == "DCR":
        y = x.reshape((n, block, block, depth, h, w)).permute(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape((n, depth, block, block, h, w)).permute(0, 1, 4, 2, 5, 3)
    return y.reshape((n, depth, h * block, w * block))


@onnx_op("SpaceToDepth")
def space_to_depth(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    block = ctx.attr("blocksize")
    n, c, h, w = x.shape
    y = x.reshape((n, c, h // block, block, w // block, block))
    if ctx.attr("mode", "DCR") == "CRD":
        y = y.permute(0, 1, 3, 5, 2, 4)
    else:
        y = y.permute(0, 3, 5, 1, 2, 4)
    return y.reshape((n, c * block * block, h // block, w // block))


@onnx_op("CenterCropPad")
def center_crop_pad(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    target = ctx.static_ints(1)
    axes = ctx.attr("axes") or list(range(x.ndim))
    widths = [(0, 0)] * x.ndim
    for size_, axis in zip(target, axes):
        axis = axis_of(axis, x.ndim)
        diff = size_ - x.shape[axis]
        if diff >= 0:
            widths[axis] = (diff // 2, diff - diff // 2)
        else:
            crop = -diff
            widths[axis] = (-(crop // 2), -(crop - crop // 2))
    return pad_tensor(x, widths, "constant", 0)


@onnx_op("Dropout")
def dropout(ctx: NodeContext):
    x = ctx.input(0)
    training = ctx.static_scalar(2)
    ratio = ctx.static_scalar(1)
    ratio = float(ratio) if ratio is not None else ctx.attr("ratio", 0.5)
    if training is not None and bool(training) and ratio != 0:
        from fuel.onnx.ops.random import training_dropout

        return training_dropout(ctx, x, ratio)
    mask = fuel.full(x.shape, True, dtype=dt.bool_, device=ctx.device)
    return [x, mask]
