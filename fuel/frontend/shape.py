"""Views (free of copies), indexing, and the ops that move data between positions."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fuel.frontend import tape
from fuel.frontend.base import TensorBase, wrap
from fuel.frontend.build import at_user_line, expand, make, normalize_dim, operand_nodes
from fuel.ir.device import parse_device
from fuel.ir.errors import DTypeError, IndexOutOfRange, InvalidArgument, ShapeError
from fuel.ir.layout import Layout
from fuel.ir.ops import (
    INPLACE_OPS,
    AxisParams,
    CopyParams,
    DiagonalParams,
    IndexCopyParams,
    OpKind,
    PadParams,
    PermuteParams,
    ShapeParams,
    SliceAssignParams,
    SliceParams,
    check_operand,
)

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self from Python 3.11


def _sizes(args) -> tuple:
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def reshape(x: TensorBase, *shape) -> TensorBase:
    """Same elements under a new shape (one size may be -1); a view when strides allow."""
    shape = _sizes(shape)
    total = x.numel()
    if any(not isinstance(s, (int, np.integer)) for s in shape):
        raise InvalidArgument(f"reshape sizes must be integers, got {shape}")
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1 or any(s < -1 for s in shape):
        raise ShapeError(f"invalid shape {shape} for reshape of {x.shape}")
    if -1 in shape:
        known = 1
        for s in shape:
            if s != -1:
                known *= s
        if known == 0 or total % known:
            raise ShapeError(f"cannot reshape {x.shape} ({total} elements) into {shape}")
        shape = tuple(total // known if s == -1 else s for s in shape)
    count = 1
    for s in shape:
        count *= s
    if count != total:
        raise ShapeError(f"cannot reshape {x.shape} ({total} elements) into {shape}")
    if shape == x.shape:
        return x
    return make(OpKind.RESHAPE, (x._node,), ShapeParams(shape))


def permute(x: TensorBase, *dims) -> TensorBase:
    dims = tuple(normalize_dim(d, x.ndim) for d in _sizes(dims))
    if sorted(dims) != list(range(x.ndim)):
        raise InvalidArgument(f"permute dims {dims} are not a permutation of {x.ndim} dims")
    if dims == tuple(range(x.ndim)):
        return x
    return make(OpKind.PERMUTE, (x._node,), PermuteParams(dims))


def transpose(x: TensorBase, dim0: int, dim1: int) -> TensorBase:
    if x.ndim < 2 and dim0 in (0, -1) and dim1 in (0, -1):
        return x
    order = list(range(x.ndim))
    a, b = normalize_dim(dim0, x.ndim), normalize_dim(dim1, x.ndim)
    order[a], order[b] = order[b], order[a]
    return permute(x, *order)


def t(x: TensorBase) -> TensorBase:
    if x.ndim > 2:
        raise ShapeError(f"t() expects at most 2 dims, got shape {x.shape}; use transpose")
    return transpose(x, 0, 1) if x.ndim == 2 else x


def expand_to(x: TensorBase, *sizes) -> TensorBase:
    """Broadcast to ``sizes`` as a stride-0 view (-1 keeps a dim)."""
    sizes = _sizes(sizes)
    if len(sizes) < x.ndim:
        raise ShapeError(f"expand to {sizes} has fewer dims than the tensor {x.shape}")
    lead = len(sizes) - x.ndim
    target = []
    for axis, size in enumerate(sizes):
        own = x.shape[axis - lead] if axis >= lead else 1
        if size == -1:
            if axis < lead:
                raise ShapeError(f"expand: -1 is not allowed for a new leading dim in {sizes}")
            size = own
        if own != 1 and own != size:
            raise ShapeError(f"cannot expand shape {x.shape} to {tuple(sizes)}")
        target.append(int(size))
    return wrap(expand(x._node, tuple(target)))


def unsqueeze(x: TensorBase, dim: int) -> TensorBase:
    axis = normalize_dim(dim, x.ndim + 1)
    return reshape(x, x.shape[:axis] + (1,) + x.shape[axis:])


def squeeze(x: TensorBase, dim=None) -> TensorBase:
    if dim is None:
        return reshape(x, tuple(s for s in x.shape if s != 1))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    drop = {normalize_dim(d, x.ndim) for d in dims} if x.ndim else set()
    return reshape(x, tuple(s for axis, s in enumerate(x.shape) if not (axis in drop and s == 1)))


def flatten(x: TensorBase, start_dim: int = 0, end_dim: int = -1) -> TensorBase:
    if x.ndim == 0:
        return reshape(x, (1,))
    start, end = normalize_dim(start_dim, x.ndim), normalize_dim(end_dim, x.ndim)
    if start > end:
        raise InvalidArgument(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    middle = 1
    for s in x.shape[start:end + 1]:
        middle *= s
    return reshape(x, x.shape[:start] + (middle,) + x.shape[end + 1:])


def slice_view(x: TensorBase, slices: list[slice]) -> TensorBase:
    """A SLICE view from one Python slice per dim (steps may be negative)."""
    starts, stops, steps = [], [], []
    for s, size in zip(slices, x.shape):
        if s.step == 0:
            raise InvalidArgument("slice step cannot be zero")
        start, stop, step = s.indices(size)
        starts.append(start)
        stops.append(stop)
        steps.append(step)
    if all(a == 0 and b == n and c == 1 for a, b, c, n in zip(starts, stops, steps, x.shape)):
        return x
    return make(OpKind.SLICE, (x._node,), SliceParams(tuple(starts), tuple(stops), tuple(steps)))


def flip(x: TensorBase, *dims) -> TensorBase:
    flipped = {normalize_dim(d, x.ndim) for d in _sizes(dims)}
    return slice_view(x, [slice(None, None, -1) if axis in flipped else slice(None)
                          for axis in range(x.ndim)])


def narrow(x: TensorBase, dim: int, start: int, length: int) -> TensorBase:
    axis = normalize_dim(dim, x.ndim)
    slices = [slice(None)] * x.ndim
    slices[axis] = slice(start, start + length)
    return slice_view(x, slices)


def getitem(x: TensorBase, index) -> TensorBase:
    """Ints, slices (any step), None, ``...`` and one integer tensor (or list) per index."""
    items = list(index) if isinstance(index, tuple) else [index]
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise InvalidArgument("an index can only have one ellipsis")
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    if consumed > x.ndim:
        raise IndexOutOfRange(f"too many indices ({consumed}) for a tensor of {x.ndim} dims")
    if Ellipsis in [i if i is Ellipsis else None for i in items]:
        at = next(k for k, i in enumerate(items) if i is Ellipsis)
        items[at:at + 1] = [slice(None)] * (x.ndim - consumed)
    items += [slice(None)] * (x.ndim - sum(1 for i in items if i is not None))
    slices, out_shape, tensor_index = [], [], None
    axis = 0
    for item in items:
        if item is None:
            out_shape.append(("new", None))
            continue
        size = x.shape[axis]
        if isinstance(item, (list, np.ndarray)) or isinstance(item, TensorBase):
            if tensor_index is not None:
                raise InvalidArgument("only one dim can be indexed by a tensor")
            tensor_index = (axis, _index_tensor(item, x))
            slices.append(slice(None))
            out_shape.append(("tensor", axis))
        elif isinstance(item, slice):
            slices.append(item)
            out_shape.append(("keep", axis))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            position = int(item)
            if not -size <= position < size:
                raise IndexOutOfRange(f"index {position} is out of range for dim {axis} of "
                                      f"size {size}")
            position %= size
            slices.append(slice(position, position + 1))
        else:
            raise InvalidArgument(f"unsupported index {item!r} ({type(item).__name__})")
        axis += 1
    viewed = slice_view(x, slices)
    if tensor_index is not None:
        dim, index = tensor_index
        flat = index.reshape(-1) if index.ndim != 1 else index
        viewed = index_select(viewed, dim, flat)
    shape = []
    for kind, axis in out_shape:
        if kind == "new":
            shape.append(1)
        elif kind == "keep":
            shape.append(viewed.shape[axis])
        else:
            shape.extend(tensor_index[1].shape)
    return reshape(viewed, tuple(shape))


def _index_tensor(item, x: TensorBase) -> TensorBase:
    from fuel.frontend.factories import tensor as make_tensor

    index = item if isinstance(item, TensorBase) else make_tensor(np.asarray(item), device=x.device)
    if index.dtype.is_bool:
        raise InvalidArgument("boolean mask indexing has a data-dependent shape; use "
                              "where() or masked_fill() instead")
    if not isinstance(item, TensorBase) and index.dtype.is_integer:
        return index if index.dtype.name == "int64" else index.long()  # host ints, as torch
    check_operand("index tensors", "index", index.dtype)
    return index


def setitem(x: TensorBase, index, value) -> None:
    """``x[index] = value`` for int/slice/``...`` indices: rebinds ``x`` to the written tensor.

    On a realized ``x`` the write goes into its own storage at the next realize (in place, as
    in torch); lazy tensors built from ``x`` earlier and realized later see the new values.
    """
    from fuel.frontend.build import cast, constant

    items = list(index) if isinstance(index, tuple) else [index]
    if any(i is None or isinstance(i, (TensorBase, list, np.ndarray)) for i in items):
        raise InvalidArgument("assignment supports int, slice and ... indices only")
    indexed_shape = getitem(x, index).shape  # validates every index
    bounds = [s.indices(n) for s, n in zip(_region_slices(x, items), x.shape)]
    region_shape = tuple(len(range(*b)) for b in bounds)
    if isinstance(value, TensorBase):
        value_tensor = wrap(cast(value._node, x.dtype))
    else:
        value_tensor = wrap(constant(value, x.dtype, x._node.device))
    value_tensor = reshape(expand_to(value_tensor, *indexed_shape), region_shape)
    starts, stops, steps = (tuple(b[k] for b in bounds) for k in range(3))
    node = x._node
    params = SliceAssignParams(starts, stops, steps, _writable_in_place(node))
    tape.rebind(x, make(OpKind.SLICE_ASSIGN, (node, value_tensor._node), params)._node)


def _writable_in_place(node) -> bool:
    """A realized tensor, or an in-place write into one, can take another in-place write."""
    return node.buffer is not None or (node.op in INPLACE_OPS and node.params.inplace)


def index_copy(x: TensorBase, dim: int, index: TensorBase, source,
               inplace: bool = False) -> TensorBase:
    """``x`` with the slices at ``index`` (1-D, int) along ``dim`` replaced by ``source``.
    The positions are data, so a decode loop writing a new position each step keeps one graph
    structure (and hits the plan cache)."""
    from fuel.frontend.build import cast

    axis = normalize_dim(dim, x.ndim)
    index_node = index_operand("index_copy", index)
    value = source if isinstance(source, TensorBase) else wrap(
        _scalar_like(x, source, x.shape[:axis] + index.shape + x.shape[axis + 1:]))
    params = IndexCopyParams(axis, inplace and _writable_in_place(x._node))
    return make(OpKind.INDEX_COPY, (x._node, index_node, cast(value._node, x.dtype)), params)


def index_copy_(x: TensorBase, dim: int, index: TensorBase, source) -> TensorBase:
    """In-place ``index_copy``: on a realized ``x`` the write goes into its own storage."""
    tape.rebind(x, index_copy(x, dim, index, source, inplace=True)._node)
    return x


def _scalar_like(x: TensorBase, value, shape):
    from fuel.frontend.build import constant

    return constant(value, x.dtype, x._node.device, tuple(shape))


def _region_slices(x: TensorBase, items: list) -> list[slice]:
    if sum(1 for i in items if i is Ellipsis) == 1:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (x.ndim - len(items) + 1)
    items = items + [slice(None)] * (x.ndim - len(items))
    slices = []
    for item, size in zip(items, x.shape):
        if isinstance(item, slice):
            slices.append(item)
        else:
            position = int(item) % size
            slices.append(slice(position, position + 1))
    return slices


@at_user_line
def index_select(x: TensorBase, dim: int, index: TensorBase) -> TensorBase:
    axis = normalize_dim(dim, x.ndim)
    node = index_operand("index_select", index)
    return make(OpKind.INDEX_SELECT, (x._node, node), AxisParams(axis))


@at_user_line
def gather(x: TensorBase, dim: int, index: TensorBase) -> TensorBase:
    node = index_operand("gather", index)
    return make(OpKind.GATHER, (x._node, node), AxisParams(normalize_dim(dim, x.ndim)))


def index_operand(function: str, index) -> object:
    """The node of ``function``'s index operand: a Tensor of an index dtype (int32 or
    int64), never converted (torch refuses a float or bool index; so does fuel)."""
    if not isinstance(index, TensorBase):
        raise DTypeError(f"{function}: index must be a Tensor, got {type(index).__name__}")
    check_operand(f"{function}: index", "index", index.dtype)
    return index._node


@at_user_line
def cat(tensors, dim: int = 0) -> TensorBase:
    tensors = list(tensors)
    if not tensors:
        raise InvalidArgument("cat() needs at least one tensor")
    nodes, _ = operand_nodes(tensors)
    axis = normalize_dim(dim, tensors[0].ndim)
    return make(OpKind.CAT, tuple(nodes), AxisParams(axis))


@at_user_line
def stack(tensors, dim: int = 0) -> TensorBase:
    tensors = list(tensors)
    if not tensors:
        raise InvalidArgument("stack() needs at least one tensor")
    shapes = {t.shape for t in tensors}
    if len(shapes) > 1:
        raise ShapeError(f"stack() needs equal shapes, got {sorted(shapes)}")
    axis = normalize_dim(dim, tensors[0].ndim + 1)
    return cat([unsqueeze(t, axis) for t in tensors], axis)


@at_user_line
def split(x: TensorBase, split_size_or_sections, dim: int = 0) -> tuple[TensorBase, ...]:
    axis = normalize_dim(dim, x.ndim)
    size = x.shape[axis]
    if isinstance(split_size_or_sections, int):
        if split_size_or_sections <= 0:
            raise InvalidArgument("split size must be positive")
        sections = [min(split_size_or_sections, size - s)
                    for s in range(0, size, split_size_or_sections)] or [0]
    else:
        sections = list(split_size_or_sections)
        if sum(sections) != size:
            raise ShapeError(f"split sections {sections} do not add up to dim size {size}")
    parts, start = [], 0
    for length in sections:
        parts.append(narrow(x, axis, start, length))
        start += length
    return tuple(parts)


@at_user_line
def chunk(x: TensorBase, chunks: int, dim: int = 0) -> tuple[TensorBase, ...]:
    if chunks <= 0:
        raise InvalidArgument("chunks must be positive")
    size = x.shape[normalize_dim(dim, x.ndim)]
    return split(x, max(1, -(-size // chunks)), dim)


def triangle(op: OpKind, x: TensorBase, diagonal: int = 0) -> TensorBase:
    return make(op, (x._node,), DiagonalParams(int(diagonal)))


def pad(x: TensorBase, widths, value=0) -> TensorBase:
    """torch order: ``(last_before, last_after, second_last_before, ...)``; non-negative."""
    widths = list(widths)
    if len(widths) % 2 or len(widths) // 2 > x.ndim:
        raise InvalidArgument(f"pad widths {tuple(widths)} must be pairs for at most {x.ndim} dims")
    if any(w < 0 for w in widths):
        raise InvalidArgument("negative padding is not supported; slice instead")
    per_dim = [(0, 0)] * x.ndim
    for k in range(len(widths) // 2):
        per_dim[x.ndim - 1 - k] = (int(widths[2 * k]), int(widths[2 * k + 1]))
    return make(OpKind.PAD, (x._node,), PadParams(tuple(per_dim), value))


def copy_to(x: TensorBase, device) -> TensorBase:
    """``x`` on ``device``: a COPY node, or ``x`` itself when it already lives there."""
    target = parse_device(device)
    if target == x._node.device:
        return x
    from fuel.backends import get_backend

    get_backend(target)  # fail now, at the user's line, when the device is unusable
    return make(OpKind.COPY, (x._node,), CopyParams(target), device=target)


def build_layout(node) -> Layout:
    """The layout ``node`` will have once realized, known from the graph alone: views of a
    realized leaf keep its strides; every other op writes a dense buffer."""
    if node.buffer is not None:
        return node.layout
    params = node.params
    if node.op is OpKind.RESHAPE:
        source = build_layout(node.inputs[0])
        return source.reshape(params.shape) or Layout.contiguous(params.shape)
    if node.op is OpKind.PERMUTE:
        return build_layout(node.inputs[0]).permute(params.dims)
    if node.op is OpKind.EXPAND:
        return build_layout(node.inputs[0]).broadcast_to(params.shape)
    if node.op is OpKind.SLICE:
        return build_layout(node.inputs[0]).slice(params.starts, params.stops, params.steps)
    return Layout.contiguous(node.shape)


def view(x: TensorBase, *shape) -> TensorBase:
    """torch's ``view``: the same storage under a new shape, refused when the strides do not
    allow it (``reshape`` is the one that may copy)."""
    result = reshape(x, *shape)
    if result is not x and build_layout(x._node).reshape(result.shape) is None:
        raise ShapeError(f"view size {result.shape} is not compatible with the input's shape "
                         f"{x.shape} and strides {build_layout(x._node).strides} (at least "
                         "one dim spans two non-contiguous ranges); use .reshape(...) instead")
    return result


class ShapeMethods:
    """Tensor's views, indexing and data-movement methods."""

    __slots__ = ()

    @at_user_line
    def reshape(self, *shape) -> Self:
        """Same elements under a new shape (one size may be -1); copies when strides demand."""
        return reshape(self, *shape)

    @at_user_line
    def view(self, *shape) -> Self:
        """Same storage under a new shape; ShapeError where torch's view would refuse."""
        return view(self, *shape)

    @at_user_line
    def permute(self, *dims) -> Self:
        """Reorder the dims (a view)."""
        return permute(self, *dims)

    @at_user_line
    def transpose(self, dim0: int, dim1: int) -> Self:
        """Swap two dims (a view)."""
        return transpose(self, dim0, dim1)

    swapaxes = transpose

    @at_user_line
    def t(self) -> Self:
        """Transpose a matrix (at most 2 dims)."""
        return t(self)

    @property
    def mT(self) -> Self:  # noqa: N802 - torch's name
        """The last two dims swapped."""
        return transpose(self, -2, -1)

    @property
    def T(self) -> Self:  # noqa: N802 - torch's name
        """Every dim reversed."""
        return permute(self, *reversed(range(self.ndim)))

    @at_user_line
    def expand(self, *sizes) -> Self:
        """Broadcast to ``sizes`` as a stride-0 view (-1 keeps a dim)."""
        return expand_to(self, *sizes)

    @at_user_line
    def broadcast_to(self, shape) -> Self:
        """Broadcast to ``shape`` as a stride-0 view."""
        return expand_to(self, *shape)

    @at_user_line
    def expand_as(self, other) -> Self:
        """Broadcast to ``other``'s shape."""
        return expand_to(self, *other.shape)

    @at_user_line
    def unsqueeze(self, dim: int) -> Self:
        """A new size-1 dim at ``dim``."""
        return unsqueeze(self, dim)

    @at_user_line
    def squeeze(self, dim=None) -> Self:
        """Drop size-1 dims (all, or those named)."""
        return squeeze(self, dim)

    @at_user_line
    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
        """Merge dims ``start_dim`` through ``end_dim``."""
        return flatten(self, start_dim, end_dim)

    @at_user_line
    def flip(self, *dims) -> Self:
        """Reverse the order along ``dims`` (a view with negative strides)."""
        return flip(self, *dims)

    @at_user_line
    def narrow(self, dim: int, start: int, length: int) -> Self:
        """``length`` elements from ``start`` along ``dim`` (a view)."""
        return narrow(self, dim, start, length)

    @at_user_line
    def __getitem__(self, index) -> Self:
        return getitem(self, index)

    @at_user_line
    def __setitem__(self, index, value) -> None:
        setitem(self, index, value)

    @at_user_line
    def index_copy(self, dim: int, index, source) -> Self:
        """A copy with the slices at ``index`` along ``dim`` replaced by ``source``."""
        return index_copy(self, dim, index, source)

    @at_user_line
    def index_copy_(self, dim: int, index, source) -> Self:
        """In-place ``index_copy``: on a realized tensor the write goes into its storage."""
        return index_copy_(self, dim, index, source)

    @at_user_line
    def index_select(self, dim: int, index) -> Self:
        """Slices along ``dim`` picked by a 1-D integer index."""
        return index_select(self, dim, index)

    @at_user_line
    def gather(self, dim: int, index) -> Self:
        """Values at ``index`` positions along ``dim``."""
        return gather(self, dim, index)

    @at_user_line
    def split(self, split_size_or_sections, dim: int = 0) -> tuple[Self, ...]:
        """Views of equal size (or the given sizes) along ``dim``."""
        return split(self, split_size_or_sections, dim)

    @at_user_line
    def chunk(self, chunks: int, dim: int = 0) -> tuple[Self, ...]:
        """``chunks`` views of near-equal size along ``dim``."""
        return chunk(self, chunks, dim)

    @at_user_line
    def tril(self, diagonal: int = 0) -> Self:
        """Zero above ``diagonal``."""
        return triangle(OpKind.TRIL, self, diagonal)

    @at_user_line
    def triu(self, diagonal: int = 0) -> Self:
        """Zero below ``diagonal``."""
        return triangle(OpKind.TRIU, self, diagonal)
