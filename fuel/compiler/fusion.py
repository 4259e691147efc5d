"""Fusion: which graph nodes run as one generated kernel, and that kernel's LoopKernel.

A group is a connected set of elementwise nodes (unary, binary, where, cast; composite ops
lowered through their registry expressions; broadcasts), with at most one row of reductions
(sum, max, min, mean over the last dim, keepdim) and their prologue and epilogue, on one
backend with a kernel generator, whose
every member but its last (the anchor) is read only inside the group: only the anchor's value
is materialized. Its inputs are whatever the members read from outside, views included, as
strided loads (broadcasts as stride 0). Groups of one node keep their hand-written kernel.

``FUEL_FUSION=0`` or ``fuel.set_fusion(False)`` turns fusion off; without a C compiler the
CPU backend never fuses (``fuel backends`` says why).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from fuel.compiler.kernel_ir import KernelBuilder, Load, LoopKernel, Store
from fuel.compiler.render_c import C_DTYPES, VECTOR_FUNCTIONS, renders
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.ops import ELEMENTWISE_OPS, OpKind, definition

FUSIBLE_OPS = ELEMENTWISE_OPS | {OpKind.CAST}
# Reductions fused with their prologue and epilogue: over the last dim, keepdim, floats.
ROW_REDUCE_OPS = frozenset({OpKind.SUM, OpKind.MAX, OpKind.MIN, OpKind.MEAN})
_switch: list[bool | None] = [None]
# Backends besides the CPU whose FUSED generator renders every group the planner forms, with
# no toolchain to probe (the wgpu backend adds its id when it registers its kernels).
RENDERING_BACKENDS: set[BackendId] = set()


def set_fusion(enabled: bool) -> None:
    """Turn fusion on or off for this process (overrides ``FUEL_FUSION``); plans built from
    now on follow it (the plan cache keys on it)."""
    _switch[0] = bool(enabled)


def fusion_enabled() -> bool:
    """Whether plans fuse: ``set_fusion``'s choice, else ``FUEL_FUSION`` (default on)."""
    if _switch[0] is not None:
        return _switch[0]
    return os.environ.get("FUEL_FUSION", "1") not in ("0", "false", "off", "no")


def fusion_unavailable_reason(backend: BackendId) -> str | None:
    """Why ``backend`` does not fuse (None when it does)."""
    if backend in RENDERING_BACKENDS:
        return None
    if backend is not BackendId.CPU:
        return f"no kernel renderer for {backend.value} yet"
    from fuel.compiler import toolchain

    return toolchain.unavailable_reason()


def fuses_math(backend: BackendId) -> bool:
    """Whether plans for ``backend`` fuse now, math functions included (vector math)."""
    return fusion_enabled() and fusion_unavailable_reason(backend) is None and _vector_math()


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
    usable: dict[BackendId, bool] = {}
    vector_math = _vector_math()
    readers = graph.consumers()
    roots = set(graph.roots)
    anchor_of: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    spaces: dict[int, tuple[tuple[int, ...], bool]] = {}  # anchor -> (loop shape, reduced)
    for node_id in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[node_id]
        reduce = _row_reduce(node)
        broadcast = node.op is OpKind.EXPAND  # joins a group (never starts one): no launch
        if node.buffer is not None or not (reduce or broadcast or node.op in FUSIBLE_OPS
                                           and _renders(graph, node_id, vector_math)):
            continue
        backend = graph.target_backend(node_id)
        if backend not in usable:
            usable[backend] = fusion_unavailable_reason(backend) is None
        if not usable[backend]:
            continue
        anchors = {anchor_of.get(reader) for reader in readers[node_id]}
        anchor = anchors.pop() if len(anchors) == 1 else None
        space = _joined_space(graph, node, members[anchor], spaces[anchor]) if (
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


def _row_reduce(node) -> bool:
    """A reduction the row renderer takes: over the last dim, keepdim, a float dtype kept."""
    if node.op not in ROW_REDUCE_OPS or not node.inputs:
        return False
    source = node.inputs[0]
    return (node.params.keepdim and node.params.dims == (len(source.shape) - 1,)
            and source.dtype in (dt.float32, dt.float64) and node.dtype is source.dtype
            and all(source.shape))


def _broadcasts(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    lead = len(target) - len(shape)
    return lead >= 0 and all(s in (1, t) for s, t in zip(shape, target[lead:]))


def _joined_space(graph, node, ids: list[int], space):
    """The group's (loop shape, reduced) with ``node`` added, or None when it cannot join."""
    shape, reduced = space
    if not _row_reduce(node):
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


def _vector_math() -> bool:
    from fuel.compiler import toolchain

    found = toolchain.detect()
    return not isinstance(found, str) and found.vector_math


def _renders(graph, node_id: int, vector_math: bool) -> bool:
    """Whether the node's C rendering exists and pays: a math function (exp, tanh, ...) pays
    only with the vector math library; scalar libm is slower than NumPy's SIMD loops."""
    node = graph.nodes[node_id]
    dtypes = tuple(i.dtype for i in node.inputs) + (node.dtype,)
    expression = definition(node.op).expression
    names = {node.op.value} if expression is None else expression.ops()
    if not vector_math and names & VECTOR_FUNCTIONS:
        return False
    if expression is None:
        return renders(node.op.value, dtypes)
    return all(d in C_DTYPES for d in dtypes) and all(
        renders(name, (node.dtype, node.dtype)) for name in names)


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
