"""Fusion: which graph nodes run as one generated kernel, and that kernel's LoopKernel.

A group is a connected set of elementwise nodes (unary, binary, where, cast; composite ops
lowered through their registry expressions; broadcasts), with at most one row of reductions
(sum, max, min, mean over the last dim, keepdim) and their prologue and epilogue, on one
backend with a kernel generator, whose
every member but its last (the anchor) is read only inside the group: only the anchor's value
is materialized. Its inputs are whatever the members read from outside, views included, as
strided loads (broadcasts as stride 0). Groups of one node keep their hand-written kernel.

``FUEL_FUSION=0`` or ``fuel.set_fusion(False)`` turns fusion off. A backend fuses when it
registered a ``FusionTarget`` (the CPU's is below; OpenCL's is in its backend); without a C
compiler the CPU backend never fuses (``fuel backends`` says why).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from fuel.compiler.kernel_ir import KernelBuilder, Load, LoopKernel, Store
from fuel.compiler.render_c import VECTOR_FUNCTIONS, renders
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.ops import ELEMENTWISE_OPS, OpKind, definition

FUSIBLE_OPS = ELEMENTWISE_OPS | {OpKind.CAST}
# Reductions fused with their prologue and epilogue: over the last dim, keepdim, floats.
ROW_REDUCE_OPS = frozenset({OpKind.SUM, OpKind.MAX, OpKind.MIN, OpKind.MEAN})
# Math functions: they fuse only where the renderer's are as fast as the backend's own kernels.
MATH_OPS = VECTOR_FUNCTIONS
_switch: list[bool | None] = [None]


def set_fusion(enabled: bool) -> None:
    """Turn fusion on or off for this process (overrides ``FUEL_FUSION``); plans built from
    now on follow it (the plan cache keys on it)."""
    _switch[0] = bool(enabled)


def fusion_enabled() -> bool:
    """Whether plans fuse: ``set_fusion``'s choice, else ``FUEL_FUSION`` (default on)."""
    if _switch[0] is not None:
        return _switch[0]
    return os.environ.get("FUEL_FUSION", "1") not in ("0", "false", "off", "no")


@dataclass(frozen=True)
class FusionTarget:
    """What fusion asks of one backend's renderer. The backend registers it
    (``register_fusion_target``) with its kernel generator at ``(OpKind.FUSED, (), backend)``.

    ``unavailable_reason``: why the backend cannot fuse now (None when it can);
    ``renders(op, dtypes)``: whether an op over these dtypes (inputs, then output) renders;
    ``math_pays``: whether rendered math functions (exp, tanh, ...) are at least as fast as the
    backend's own kernels (else nodes using them keep those); ``reduce_dtypes``: the dtypes
    whose last-dim reductions fuse as rows."""

    unavailable_reason: Callable[[], str | None]
    renders: Callable[[str, tuple], bool]
    math_pays: Callable[[], bool]
    reduce_dtypes: frozenset = frozenset({dt.float32, dt.float64})


_targets: dict[BackendId, FusionTarget] = {}


def register_fusion_target(backend: BackendId, target: FusionTarget) -> None:
    """Make ``backend``'s nodes fuse through ``target`` (its generator registered apart)."""
    _targets[backend] = target


def fusion_unavailable_reason(backend: BackendId) -> str | None:
    """Why ``backend`` does not fuse (None when it does)."""
    target = _targets.get(backend)
    if target is None:
        return f"no kernel renderer for {backend.value} yet"
    return target.unavailable_reason()


def fuses_math(backend: BackendId) -> bool:
    """Whether plans for ``backend`` fuse now, math functions included."""
    if not fusion_enabled() or fusion_unavailable_reason(backend) is not None:
        return False
    return _targets[backend].math_pays()


@dataclass(frozen=True, slots=True)
class FusionGroup:
    """Members in topological order, the anchor (last, the one materialized value) included;
    ``shape``: the loop nest's (with a reduction, the reduced input's; its last dim the row)."""

    members: tuple[int, ...]
    name: str
    shape: tuple[int, ...] = ()
    reduced: bool = False

    @property
    def anchor(self) -> int:
        return self.members[-1]


def fusion_groups(graph, waited: set[int]) -> dict[int, FusionGroup]:
    """Each member node id of each group of two or more nodes -> its group; {} when fusion is
    off. ``waited``: nodes a later step waits individually (never internal to a group)."""
    if not fusion_enabled():
        return {}
    usable: dict[BackendId, FusionTarget | None] = {}
    readers = graph.consumers()
    roots = set(graph.roots)
    anchor_of: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    spaces: dict[int, tuple[tuple[int, ...], bool]] = {}  # anchor -> (loop shape, reduced)
    for node_id in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[node_id]
        if node.buffer is not None:
            continue
        backend = graph.target_backend(node_id)
        if backend not in usable:
            usable[backend] = _targets[backend] if fusion_unavailable_reason(backend) is None \
                else None
        target = usable[backend]
        if target is None:
            continue
        reduce = _row_reduce(node, target)
        broadcast = node.op is OpKind.EXPAND  # joins a group (never starts one): no launch
        if not (reduce or broadcast or node.op in FUSIBLE_OPS and _renders(node, target)):
            continue
        anchors = {anchor_of.get(reader) for reader in readers[node_id]}
        anchor = anchors.pop() if len(anchors) == 1 else None
        space = _joined_space(graph, node, members[anchor], spaces[anchor], target) if (
            anchor is not None and node_id not in roots and node_id not in waited) else None
        if space is not None:
            anchor_of[node_id] = anchor
            members[anchor].append(node_id)
            spaces[anchor] = space
        elif not broadcast:
            anchor_of[node_id] = node_id
            members[node_id] = [node_id]
            spaces[node_id] = (node.inputs[0].shape, True) if reduce else (node.shape, False)
    groups: dict[int, FusionGroup] = {}
    for anchor, ids in members.items():
        if len(ids) < 2:
            continue
        ordered = tuple(sorted(ids))
        name = "fused(" + ",".join(graph.nodes[i].op.value for i in ordered
                                   if graph.nodes[i].op is not OpKind.EXPAND) + ")"
        group = FusionGroup(ordered, name, *spaces[anchor])
        for member in ordered:
            groups[member] = group
    return groups


def _row_reduce(node, target: FusionTarget) -> bool:
    """A reduction the row renderer takes: over the last dim, keepdim, a float dtype kept."""
    if node.op not in ROW_REDUCE_OPS or not node.inputs:
        return False
    source = node.inputs[0]
    return (node.params.keepdim and node.params.dims == (len(source.shape) - 1,)
            and source.dtype in target.reduce_dtypes and node.dtype is source.dtype
            and all(source.shape))


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    lead = len(target) - len(shape)
    return lead >= 0 and all(s in (1, t) for s, t in zip(shape, target[lead:]))


def _joined_space(graph, node, ids: list[int], space, target: FusionTarget):
    """The group's (loop shape, reduced) with ``node`` added, or None when it cannot join."""
    shape, reduced = space
    if not _row_reduce(node, target):
        return space if _broadcasts(node.shape, shape) else None
    source = node.inputs[0].shape
    if reduced:
        return space if source == shape else None
    anchor_shape = graph.nodes[max(ids)].shape
    if anchor_shape not in (source, source[:-1] + (1,)):
        return None
    if not all(_broadcasts(graph.nodes[i].shape, source) for i in ids):
        return None
    return (source, True)


def _renders(node, target: FusionTarget) -> bool:
    """Whether the node renders on ``target`` and pays: a math function (exp, tanh, ...) only
    where ``target.math_pays()`` (scalar libm is slower than NumPy's SIMD loops)."""
    dtypes = tuple(i.dtype for i in node.inputs) + (node.dtype,)
    expression = definition(node.op).expression
    names = {node.op.value} if expression is None else expression.ops()
    if names & MATH_OPS and not target.math_pays():
        return False
    if expression is None:
        return target.renders(node.op.value, dtypes)
    return all(target.renders("cast", (d, node.dtype)) for d in dtypes) and all(
        target.renders(name, (node.dtype, node.dtype)) for name in names)


def _vector_math() -> bool:
    from fuel.compiler import toolchain

    found = toolchain.detect()
    return not isinstance(found, str) and found.vector_math


def _c_unavailable_reason() -> str | None:
    from fuel.compiler import toolchain

    return toolchain.unavailable_reason()


# The C renderer's target (the CPU backend registers its generator, fuel.compiler.cpu).
register_fusion_target(BackendId.CPU, FusionTarget(_c_unavailable_reason, renders, _vector_math))


def lower_group(graph, group: FusionGroup, node_values: list) -> tuple[LoopKernel, list[int]]:
    """The group's LoopKernel over its anchor's shape, and the node ids it loads, in order
    (their planned ``(slot, layout)`` in ``node_values``)."""
    shape = group.shape or graph.nodes[group.anchor].shape
    builder = KernelBuilder(shape)
    value_of: dict[int, int] = {}
    sources: list[int] = []
    for member in group.members:
        node = graph.nodes[member]
        args = []
        for source in graph.inputs[member]:
            if source not in value_of:
                layout = node_values[source][1].broadcast_to(shape)
                value_of[source] = builder.load(Load(graph.nodes[source].dtype, layout.strides,
                                                     layout.offset))
                sources.append(source)
            args.append(value_of[source])
        if node.op is OpKind.EXPAND:  # values are evaluated at broadcast coordinates already
            value_of[member] = args[0]
        else:
            value_of[member] = builder.apply(node.op, tuple(args), node.dtype)
    anchor = graph.nodes[group.anchor]
    per_row = group.reduced and anchor.shape != shape
    store = Store(builder.cast(value_of[group.anchor], anchor.dtype), anchor.dtype, per_row)
    nodes = tuple(graph.nodes[m].op.value for m in group.members
                  if graph.nodes[m].op is not OpKind.EXPAND)
    return builder.build(group.name, [store], nodes, int(group.reduced)), sources
