"""Fusion: which graph nodes run as one generated kernel, and that kernel's LoopKernel.

A group is a connected set of elementwise nodes (unary, binary, where, cast; composite ops
lowered through their registry expressions; broadcasts), with at most one row of reductions
(sum, max, min, mean over the last dim, keepdim) and their prologue and epilogue, and the
constant fills (``full``) only it reads, which become literals, on one backend with a kernel
generator, whose
every member but its last (the anchor) is read only inside the group: only the anchor's value
is materialized. Its inputs are whatever the members read from outside, views included, as
strided loads (broadcasts as stride 0). Groups of one node keep their hand-written kernel.

``FUEL_FUSION=0`` or ``fuel.set_fusion(False)`` turns fusion off. Which backends fuse is
not decided here: a backend publishes its ``FusionTarget`` with its kernels
(``KernelBindingTable.declare_backend``), and the resolution pass
(``fuel.runtime.resolve``) hands ``fusion_groups`` the target of each node's backend. This
module registers nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from fuel.compiler.kernel_ir import KernelBuilder, Load, LoopKernel, Store
from fuel.compiler.render_c import VECTOR_FUNCTIONS
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.ops import ELEMENTWISE_OPS, OpKind, definition

FUSIBLE_OPS = ELEMENTWISE_OPS | {OpKind.CAST}
# Reductions fused with their prologue and epilogue: over the last dim, keepdim, floats.
ROW_REDUCE_OPS = frozenset({OpKind.SUM, OpKind.MAX, OpKind.MIN, OpKind.MEAN})
# Math functions: they fuse only where the renderer's are as fast as the backend's own kernels.
MATH_OPS = VECTOR_FUNCTIONS
# Members that compute nothing of their own: left out of a group's name.
LAUNCHLESS_MEMBERS = frozenset({OpKind.EXPAND, OpKind.FULL})
# The dtypes a composite of ``FusionTarget.prefers_decomposed`` is decomposed in (the
# measurements behind each backend's set are of these).
PREFERRED_DECOMPOSITION_DTYPES = frozenset({dt.float32, dt.float64})
_switch: list[bool | None] = [None]


def set_fusion(enabled: bool) -> None:
    """Turn fusion on or off for this process (overrides ``FUEL_FUSION``); plans built from
    now on follow it (``fuel.set_fusion`` also drops cached plans)."""
    _switch[0] = bool(enabled)


def fusion_enabled() -> bool:
    """Whether plans fuse: ``set_fusion``'s choice, else ``FUEL_FUSION`` (default on)."""
    if _switch[0] is not None:
        return _switch[0]
    return os.environ.get("FUEL_FUSION", "1") not in ("0", "false", "off", "no")


@dataclass(frozen=True)
class FusionTarget:
    """What fusion asks of one backend's renderer. The backend declares it in its
    ``register(table)`` (``table.declare_backend(backend, BackendRecord(fusion=...))``) next
    to its kernel generator at ``(OpKind.FUSED, (), backend)``.

    ``unavailable_reason``: why the backend cannot fuse now (None when it can);
    ``renders(op, dtypes)``: whether an op over these dtypes (inputs, then output) renders;
    ``math_pays``: whether rendered math functions (exp, tanh, ...) are at least as fast as the
    backend's own kernels (else nodes using them keep those); ``reduce_dtypes``: the dtypes
    whose last-dim reductions fuse as rows; ``prefers_decomposed``: the composite ops whose
    hand-written kernel loses to the fused rendering of their decomposition on this backend
    (measured; the backend keeps the measurements next to the set): while it fuses math
    functions, such a node (float32/float64, a row op over the last dim only) is decomposed
    so it fuses with its neighbours."""

    unavailable_reason: Callable[[], str | None]
    renders: Callable[[str, tuple], bool]
    math_pays: Callable[[], bool]
    reduce_dtypes: frozenset = frozenset({dt.float32, dt.float64})
    prefers_decomposed: frozenset = frozenset()


def prefers_fused_decomposition(node, target: FusionTarget) -> bool:
    """Whether ``node`` is one of the composites ``target`` renders better decomposed: its op
    in ``prefers_decomposed``, a float32/float64 result, and, for a row op, over the last dim
    only (what the row renderers fuse). The caller checks that the target fuses math now."""
    op = node.op
    if op not in target.prefers_decomposed or node.dtype not in PREFERRED_DECOMPOSITION_DTYPES:
        return False
    params = node.params
    if op in (OpKind.SOFTMAX, OpKind.LOG_SOFTMAX) and params.dim != len(node.shape) - 1:
        return False
    if op in (OpKind.LAYER_NORM, OpKind.RMS_NORM) and params.axes != 1:
        return False
    return True


# What fusion_groups asks per backend: its target and whether math pays there now, or None
# when the backend does not fuse now.
TargetOf = Callable[[BackendId], "tuple[FusionTarget, bool] | None"]


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


def fusion_groups(graph, waited: set[int], target_of: TargetOf, rendered: dict,
                  alone: list[int] | None = None) -> dict[int, FusionGroup]:
    """Each member node id of each group of two or more nodes -> its group. ``waited``: nodes
    a later step waits individually (never internal to a group); ``target_of``: each
    backend's target (None: it does not fuse); ``rendered``: the memo of which (target, op,
    dtypes) render, kept by the caller per published table; ``alone``, when given, receives
    the nodes that could fuse but found no group (they keep their own kernel)."""
    usable: dict[BackendId, tuple[FusionTarget, bool] | None] = {}  # target, math pays
    reads, last_use = graph.reads, graph.last_use  # a node read once: its reader is its last use
    kept = set(graph.roots) | waited  # never internal to a group
    anchor_of: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    spaces: dict[int, tuple[tuple[int, ...], bool]] = {}  # anchor -> (loop shape, reduced)
    nodes = graph.nodes
    expand, full = OpKind.EXPAND, OpKind.FULL
    last_device = last_found = None
    for node_id in range(len(nodes) - 1, -1, -1):
        node = nodes[node_id]
        op = node.op
        if node.buffer is not None:
            continue
        elementwise = op in FUSIBLE_OPS
        if not (elementwise or op is expand or op is full or op in ROW_REDUCE_OPS):
            continue
        # The node's kernel backend: its device's (none of these ops is a COPY).
        device = node.device
        if device is not last_device:
            backend = device.backend
            found = usable.get(backend, False)
            if found is False:
                found = usable[backend] = target_of(backend)
            last_device, last_found = device, found
        else:
            found = last_found
        if found is None:
            continue
        target, math_pays = found
        if elementwise:  # _renders, its memo looked up inline (the common case)
            sources = node.inputs
            if len(sources) == 2:
                key = (id(target), math_pays, op, sources[0].dtype, sources[1].dtype,
                       node.dtype)
            else:
                key = (id(target), math_pays, op, *[i.dtype for i in sources], node.dtype)
            renders_here = rendered.get(key)
            if renders_here is None:
                renders_here = _renders(node, target, math_pays, rendered)
            if not renders_here:
                continue
            broadcast = reduce = False
        else:
            # Broadcasts and constant fills join a group (never start one), launch nothing.
            broadcast = op is expand or (op is full and target.renders("cast", (node.dtype,
                                                                                node.dtype)))
            reduce = op in ROW_REDUCE_OPS and _row_reduce(node, target)
            if not (reduce or broadcast):
                continue
        count = reads[node_id]
        if count == 1:
            anchor = anchor_of.get(last_use[node_id])
        elif count == 0:  # read by nothing: a root (no consumers to list)
            anchor = None
        else:
            anchors = {anchor_of.get(reader) for reader in graph.consumers()[node_id]}
            anchor = anchors.pop() if len(anchors) == 1 else None
        space = None
        if anchor is not None and node_id not in kept:
            space = spaces[anchor]
            if reduce or node.shape != space[0]:  # else it joins the loop shape as it is
                space = _joined_space(graph, node, reduce, members[anchor], space)
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
            if alone is not None:
                alone.append(anchor)
            continue
        ordered = tuple(sorted(ids))
        name = group_name([nodes[i].op._value_ for i in ordered
                           if nodes[i].op not in LAUNCHLESS_MEMBERS])
        groups.update(dict.fromkeys(ordered, FusionGroup(ordered, name, *spaces[anchor])))
    return groups


NAMED_MEMBERS = 16  # a group of more computing members is named by its op counts


def group_name(ops: list[str]) -> str:
    """A group's name in profiles and explain(): its members' ops in order,
    ``fused(mul,add,exp)``, or past ``NAMED_MEMBERS`` their counts in order of first use,
    ``fused[1000: mul x500, add x500]`` (explain() lists every member, and
    ``FusionGroup.members`` holds their node ids)."""
    if len(ops) <= NAMED_MEMBERS:
        return "fused(" + ",".join(ops) + ")"
    counts: dict[str, int] = {}
    for op in ops:
        counts[op] = counts.get(op, 0) + 1
    return f"fused[{len(ops)}: " + ", ".join(f"{op} x{n}" for op, n in counts.items()) + "]"


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


def _joined_space(graph, node, reduce: bool, ids: list[int], space):
    """The group's (loop shape, reduced) with ``node`` (a row reduction when ``reduce``)
    added, or None when it cannot join."""
    shape, reduced = space
    if not reduce:
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


def _renders(node, target: FusionTarget, math_pays: bool, rendered: dict) -> bool:
    """Whether the node renders on ``target`` and pays: a math function (exp, tanh, ...) only
    where ``math_pays`` (scalar libm is slower than NumPy's SIMD loops). Memoized in
    ``rendered`` per target, math_pays, op and dtypes."""
    inputs = node.inputs
    if len(inputs) == 2:
        key = (id(target), math_pays, node.op, inputs[0].dtype, inputs[1].dtype, node.dtype)
    else:
        key = (id(target), math_pays, node.op, *[i.dtype for i in inputs], node.dtype)
    found = rendered.get(key)
    if found is None:
        found = rendered[key] = _decide_renders(node.op, key[3:], target, math_pays)
    return found


def _decide_renders(op: OpKind, dtypes: tuple, target: FusionTarget, math_pays: bool) -> bool:
    expression = definition(op).expression
    names = {op.value} if expression is None else expression.ops()
    if names & MATH_OPS and not math_pays:
        return False
    if expression is None:
        return target.renders(op.value, dtypes)
    output = dtypes[-1]
    return all(target.renders("cast", (d, output)) for d in dtypes) and all(
        target.renders(name, (output, output)) for name in names)


def group_reads(graph, group: FusionGroup) -> tuple[list[int], tuple[int, ...]]:
    """The node ids the group reads from outside itself, in first-use order (members in
    order, each one's inputs in order: the loads ``lower_group`` makes), and the group's
    wiring: for each member's each input, its member position, or ``-1 - i`` for source i."""
    inputs = graph.inputs
    members = group.members
    local = dict(zip(members, range(len(members))))
    read = [source for member in members for source in inputs[member]]
    sources = list(dict.fromkeys([source for source in read if source not in local]))
    local.update(zip(sources, range(-1, -1 - len(sources), -1)))
    return sources, tuple([local[source] for source in read])


def lower_group(graph, group: FusionGroup, node_values: list) -> tuple[LoopKernel, list[int]]:
    """The group's LoopKernel over its anchor's shape, and the node ids it loads, in order
    (their planned ``(slot, layout)`` in ``node_values``)."""
    nodes, inputs = graph.nodes, graph.inputs
    shape = group.shape or nodes[group.anchor].shape
    builder = KernelBuilder(shape)
    apply = builder.apply
    value_of: dict[int, int] = {}
    sources: list[int] = []
    for member in group.members:
        node = nodes[member]
        for source in inputs[member]:
            if source not in value_of:
                layout = node_values[source][1].broadcast_to(shape)
                value_of[source] = builder.load(Load(nodes[source].dtype, layout.strides,
                                                     layout.offset))
                sources.append(source)
        sources_of = inputs[member]
        args = ((value_of[sources_of[0]], value_of[sources_of[1]]) if len(sources_of) == 2
                else tuple([value_of[source] for source in sources_of]))
        if node.op is OpKind.EXPAND:  # values are evaluated at broadcast coordinates already
            value_of[member] = args[0]
        elif node.op is OpKind.FULL:
            value_of[member] = builder.constant(node.params.value, node.dtype)
        else:
            value_of[member] = apply(node.op, args, node.dtype)
    anchor = graph.nodes[group.anchor]
    per_row = group.reduced and anchor.shape != shape
    store = Store(builder.cast(value_of[group.anchor], anchor.dtype), anchor.dtype, per_row)
    nodes = tuple([op._value_ for op in [graph.nodes[m].op for m in group.members]
                   if op not in LAUNCHLESS_MEMBERS])
    return builder.build(group.name, [store], nodes, int(group.reduced)), sources
