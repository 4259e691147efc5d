"""Node building: inference with errors at the user's line, constants, casts, broadcasting."""

from __future__ import annotations

import functools
from collections import OrderedDict
from sys import _getframe

import numpy as np

from fuel.frontend import tape
from fuel.frontend.base import TensorBase, wrap
from fuel.graph.node import Node, creation_site, is_runtime_file, site_from, sites_in_progress
from fuel.graph.node import user_site_holder as _site_local
from fuel.ir import dtype as dt
from fuel.ir.device import Device
from fuel.ir.dtype import DType
from fuel.ir.errors import DeviceMismatch, FuelError, NoBackendForOp
from fuel.ir.layout import Layout
from fuel.ir.ops import NO_PARAMS, CastParams, OpKind, ShapeParams, infer, infer_keyed
from fuel.ir.params import bits_key

_CONSTANTS: OrderedDict = OrderedDict()
_CONSTANT_LIMIT = 1024


def at_user_line(function):
    """Mark an API entry point: the outermost call records the user's line once (every node
    it builds carries it), and a FuelError from graph building gets that line appended.

    The user's line is the caller's frame, read once per outermost call (no frame walk): a
    nested call from inside fuel finds the site already set and only forwards."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        local = _site_local
        outermost = False
        if local.site is None:
            # Called from fuel's own code outside an API entry: no site to set.
            site = user_site(_getframe(1))
            if site is not None:
                local.site = site
                sites_in_progress.append(None)
                outermost = True
        try:
            return function(*args, **kwargs)
        except FuelError as error:
            if getattr(error, "located", False):
                raise
            raise _located(error) from None
        finally:
            if outermost:
                local.site = None
                sites_in_progress.pop()

    return wrapper


def _located(error: FuelError) -> FuelError:
    file, line = creation_site()
    located = type(error)(f"{error} (at {file}:{line})")
    located.located = True
    return located


def make(op: OpKind, inputs: tuple[Node, ...], params,
         device: Device | None = None) -> TensorBase:
    """A new lazy node of ``op`` over ``inputs``; shape/dtype errors name the user's line.
    ``device`` is where the node runs (its inputs' device unless it is a copy)."""
    first = inputs[0]
    source_device = first.device
    if len(inputs) == 2:
        second = inputs[1]
        if second.device is not source_device and second.device != source_device:
            _raise_device_mismatch(op, source_device, second.device)
        shapes = (first.shape, second.shape)
        dtypes = (first.dtype, second.dtype)
    elif len(inputs) == 1:
        shapes = (first.shape,)
        dtypes = (first.dtype,)
    else:
        for other in inputs[1:]:
            if other.device is not source_device and other.device != source_device:
                _raise_device_mismatch(op, source_device, other.device)
        shapes = tuple([i.shape for i in inputs])
        dtypes = tuple([i.dtype for i in inputs])
    try:
        shape, dtype, structure = infer_keyed(op, params, shapes, dtypes)
    except FuelError as error:
        raise _located(type(error)(f"{op.value}: {error}")) from None
    site = _site_local.site if sites_in_progress else None
    node = Node(op, inputs, params, dtype, shape, device or source_device,
                site if site is not None else creation_site(), structure)
    if tape.ACTIVE:
        tape.record(node)
    return wrap(node)


_PAIR_RULES: dict = {}
_SITES: dict[str, dict[int, tuple[str, int]]] = {}  # file -> line -> the site tuple
# id(code) -> (code, {f_lasti: site}) for user code, (code, None) for fuel's own: a node's
# site found from the calling frame's code object and instruction offset, without reading the
# line table per node. The entry holds its code object, so an id is never reused under it.
code_sites: dict[int, tuple] = {}


def pair_rule(op: OpKind, dtype: DType, shape: tuple[int, ...]):
    """``infer_keyed(op, NO_PARAMS, ...)`` for two operands of ``dtype`` and ``shape``,
    memoized per (op, dtype, shape); None when the rule refuses them (the caller's general
    path then raises at the user's line)."""
    rule_key = (op, dtype, shape)
    found = _PAIR_RULES.get(rule_key)
    if found is None:
        try:
            found = infer_keyed(op, NO_PARAMS, (shape, shape), (dtype, dtype))
        except FuelError:
            return None
        if found[0] == shape:  # one shape object along a chain: the memos compare by identity
            found = (shape, found[1], found[2])
        if len(_PAIR_RULES) > 65536:
            _PAIR_RULES.clear()
        _PAIR_RULES[rule_key] = found
    return found


def user_site(frame) -> tuple[str, int] | None:
    """``frame``'s (file, line) when it runs user code, one shared tuple per call site
    (memoized by code object and instruction offset: no line-table read per node); None when
    it runs fuel's own code."""
    code = frame.f_code
    entry = code_sites.get(id(code))
    if entry is None or entry[0] is not code:
        if len(code_sites) > 4096:
            code_sites.clear()
        entry = code_sites[id(code)] = (code, None if is_runtime_file(code.co_filename)
                                        else {})
    lines = entry[1]
    if lines is None:
        return None
    offset = frame.f_lasti
    site = lines.get(offset)
    if site is None:
        by_line = _SITES.get(code.co_filename)
        if by_line is None:
            by_line = _SITES[code.co_filename] = {}
        line = frame.f_lineno
        site = by_line.get(line)
        if site is None:
            site = by_line[line] = (code.co_filename, line)
        lines[offset] = site
    return site


def frame_site(frame) -> tuple[str, int]:
    """The site of a node built by the call running in ``frame`` outside any API entry
    (``at_user_line``): the frame's own site when it is user code, else the first user frame
    behind it."""
    site = user_site(frame)
    return site if site is not None else site_from(frame)


def _raise_device_mismatch(op: OpKind, device: Device, other: Device):
    raise _located(DeviceMismatch(
        f"{op.value}: operands live on {device} and {other}; move one with .to() first"))


def make_source(op: OpKind, params, device: Device) -> TensorBase:
    """A node without inputs (a generator such as FULL or ARANGE)."""
    from fuel.backends import get_backend

    get_backend(device)  # an unusable device fails here, at the user's line
    shape, dtype = infer(op, params, (), ())
    return wrap(Node(op, (), params, dtype, shape, device, creation_site()))


def leaf(array: np.ndarray, device: Device) -> TensorBase:
    """A realized leaf holding ``array`` (uploaded to ``device``)."""
    from fuel.backends import get_backend

    backend = get_backend(device)
    if array.dtype.kind in "OUT" and not backend.holds_strings:
        raise _located(NoBackendForOp(
            f"load: no {backend.backend_id.value} kernel takes dtype string (strings live on "
            f"the cpu backend only); keep string tensors on cpu"))
    storage = backend.upload(device, array)
    shape = array.shape
    layout = _LEAF_LAYOUTS.get(shape)
    if layout is None:
        if len(_LEAF_LAYOUTS) > 4096:
            _LEAF_LAYOUTS.clear()
        layout = _LEAF_LAYOUTS[shape] = Layout.contiguous(shape)
        shape = layout.shape
    else:
        shape = layout.shape  # one shape tuple per layout: the memos compare by identity
    node = Node(OpKind.LOAD, (), None, storage.dtype, shape, device, creation_site())
    node.attach(storage, layout)
    return wrap(node)


_LEAF_LAYOUTS: dict = {}  # shape -> its contiguous Layout (immutable, shared by leaves)


def constant(value, dtype: DType, device: Device, shape: tuple[int, ...] = ()) -> Node:
    """A shared realized leaf holding ``value`` as ``dtype`` on ``device``, viewed at ``shape``
    with stride 0 (one element of storage, no expand node per use)."""
    kind = value.__class__
    # -0.0 is not 0.0: a float keys by its bits, except a non-zero, non-NaN one, whose value
    # is already unique to its bits (the common case, kept free of the packing).
    bits = value if kind is float and value and value == value else bits_key(value)
    key = (kind, bits, dtype, device.key, shape)
    try:
        found = _CONSTANTS.get(key)
    except TypeError:  # an unhashable value: a leaf of its own
        key, found = None, None
    if found is not None:
        return found
    node = leaf(np.asarray(value).astype(dtype.numpy).reshape(()), device)._node
    if shape:
        node.attach(node.buffer, Layout(shape, (0,) * len(shape), 0))
        node.shape = shape
    if key is not None:
        _CONSTANTS[key] = node
        if len(_CONSTANTS) > _CONSTANT_LIMIT:
            _CONSTANTS.popitem(last=False)
    return node


def cast(node: Node, dtype: DType) -> Node:
    """``node`` as ``dtype`` (itself when it already is)."""
    if node.dtype is dtype:
        return node
    return make(OpKind.CAST, (node,), CastParams(dtype))._node


def expand(node: Node, shape: tuple[int, ...]) -> Node:
    """``node`` broadcast to ``shape`` as a stride-0 view (itself when shapes match)."""
    if node.shape == shape:
        return node
    return make(OpKind.EXPAND, (node,), ShapeParams(shape))._node


def operand_nodes(values, dtype: DType | None = None, shape: tuple[int, ...] = ()
                  ) -> tuple[list[Node], DType]:
    """Tensors and Python scalars as nodes of one promoted dtype on the tensors' device;
    scalars become stride-0 constants of ``shape``."""
    tensors = [v for v in values if isinstance(v, TensorBase)]
    if not tensors:
        raise FuelError("at least one operand must be a fuel Tensor")
    device = tensors[0]._node.device
    if dtype is None:
        dtype = tensors[0]._node.dtype
        for t in tensors[1:]:
            dtype = dt.promote_types(dtype, t._node.dtype)
        for v in values:
            if not isinstance(v, TensorBase):
                dtype = dt.promote_with_scalar(dtype, _as_scalar(v))
    nodes = [
        cast(v._node, dtype) if isinstance(v, TensorBase)
        else constant(_as_scalar(v), dtype, device, shape)
        for v in values
    ]
    return nodes, dtype


def _as_scalar(value):
    if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value.item()
    dt.scalar_kind(value)  # raises a DTypeError naming the value
    return value


def normalize_dim(dim: int, ndim: int, what: str = "dim") -> int:
    """A dim in ``[-ndim, ndim)`` as a non-negative index; InvalidArgument otherwise."""
    from fuel.ir.errors import InvalidArgument

    if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool):
        raise InvalidArgument(f"{what} must be an integer, got {dim!r}")
    low = -max(ndim, 1)
    high = max(ndim, 1) - 1
    if not low <= dim <= high:
        raise InvalidArgument(
            f"{what} {dim} is out of range for a tensor with {ndim} dims "
            f"(expected between {low} and {high})"
        )
    return int(dim) % max(ndim, 1)


def normalize_dims(dim, ndim: int) -> tuple[int, ...]:
    """``None`` -> every dim; an int or a sequence -> sorted unique non-negative dims."""
    from fuel.ir.errors import InvalidArgument

    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, (list, tuple)):
        dims = tuple(sorted(normalize_dim(d, ndim) for d in dim))
        if len(set(dims)) != len(dims):
            raise InvalidArgument(f"dim {tuple(dim)} names a dimension twice")
        return dims if ndim else ()
    normalize_dim(dim, ndim)
    return (normalize_dim(dim, ndim),) if ndim else ()
