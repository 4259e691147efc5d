"""Fusion: which graph nodes run as one generated kernel, and that kernel's LoopKernel.

A group is a connected set of elementwise nodes (unary, binary, where, cast; composite ops
lowered through their registry expressions) on one backend with a kernel generator, whose
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
from fuel.compiler.render_c import C_DTYPES, renders
from fuel.ir.device import BackendId
from fuel.ir.ops import ELEMENTWISE_OPS, OpKind, definition

FUSIBLE_OPS = ELEMENTWISE_OPS | {OpKind.CAST}
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


def fusion_unavailable_reason(backend: BackendId) -> str | None:
    """Why ``backend`` does not fuse (None when it does)."""
    if backend is not BackendId.CPU:
        return f"no kernel renderer for {backend.value} yet"
    from fuel.compiler import toolchain

    return toolchain.unavailable_reason()


@dataclass(frozen=True, slots=True)
class FusionGroup:
    """Members in topological order, the anchor (last, the one materialized value) included."""

    members: tuple[int, ...]
    name: str

    @property
    def anchor(self) -> int:
        return self.members[-1]


def fusion_groups(graph, waited: set[int]) -> dict[int, FusionGroup]:
    """Each member node id of each group of two or more nodes -> its group; {} when fusion is
    off. ``waited``: nodes a later step waits individually (never internal to a group)."""
    if not fusion_enabled():
        return {}
    usable: dict[BackendId, bool] = {}
    readers = graph.consumers()
    roots = set(graph.roots)
    anchor_of: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    for node_id in range(len(graph.nodes) - 1, -1, -1):
        node = graph.nodes[node_id]
        if node.buffer is not None or node.op not in FUSIBLE_OPS or not _renders(graph, node_id):
            continue
        backend = graph.target_backend(node_id)
        if backend not in usable:
            usable[backend] = fusion_unavailable_reason(backend) is None
        if not usable[backend]:
            continue
        anchors = {anchor_of.get(reader) for reader in readers[node_id]}
        if (node_id not in roots and node_id not in waited and len(anchors) == 1
                and None not in anchors):
            anchor = anchors.pop()
            anchor_of[node_id] = anchor
            members[anchor].append(node_id)
        else:
            anchor_of[node_id] = node_id
            members[node_id] = [node_id]
    groups: dict[int, FusionGroup] = {}
    for ids in members.values():
        if len(ids) < 2:
            continue
        ordered = tuple(sorted(ids))
        name = "fused(" + ",".join(graph.nodes[i].op.value for i in ordered) + ")"
        group = FusionGroup(ordered, name)
        for member in ordered:
            groups[member] = group
    return groups


def _renders(graph, node_id: int) -> bool:
    node = graph.nodes[node_id]
    dtypes = tuple(i.dtype for i in node.inputs) + (node.dtype,)
    expression = definition(node.op).expression
    if expression is None:
        return renders(node.op.value, dtypes)
    return all(d in C_DTYPES for d in dtypes) and all(
        renders(name, (node.dtype, node.dtype)) for name in expression.ops())


def lower_group(graph, group: FusionGroup, node_values: list) -> tuple[LoopKernel, list[int]]:
    """The group's LoopKernel over its anchor's shape, and the node ids it loads, in order
    (their planned ``(slot, layout)`` in ``node_values``)."""
    shape = graph.nodes[group.anchor].shape
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
        value_of[member] = builder.apply(node.op, tuple(args), node.dtype)
    anchor = graph.nodes[group.anchor]
    store = Store(builder.cast(value_of[group.anchor], anchor.dtype), anchor.dtype)
    nodes = tuple(graph.nodes[m].op.value for m in group.members)
    return builder.build(group.name, [store], nodes), sources
