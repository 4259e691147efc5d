"""The liveness lower bound of a graph's order: the most bytes that must be alive at once
when every buffer is allocated by its kernel and freed right after its last reader."""

from __future__ import annotations

from math import prod

from fuel.graph import Graph
from fuel.ir.ops import VIEW_OPS


def liveness_bound(graph: Graph) -> int:
    """Peak bytes of kernel outputs alive together (views share their producer's buffer;
    roots stay alive to the end; leaves already exist and are not counted)."""
    owner = list(range(len(graph.nodes)))
    for node_id, node in enumerate(graph.nodes):
        if node.buffer is None and node.op in VIEW_OPS:
            owner[node_id] = owner[graph.inputs[node_id][0]]
    last: dict[int, int] = {}
    for node_id, sources in enumerate(graph.inputs):
        last[owner[node_id]] = max(last.get(owner[node_id], node_id), node_id)
        for source in sources:
            last[owner[source]] = max(last.get(owner[source], node_id), node_id)
    frees: dict[int, list[int]] = {}
    for buffer, when in last.items():
        frees.setdefault(when, []).append(buffer)
    roots = {owner[r] for r in graph.roots}
    live = peak = 0
    for node_id, node in enumerate(graph.nodes):
        if node.buffer is None and node.op not in VIEW_OPS:
            live += _nbytes(node)
            peak = max(peak, live)
        for buffer in frees.get(node_id, ()):
            producer = graph.nodes[buffer]
            if buffer not in roots and producer.buffer is None and producer.op not in VIEW_OPS:
                live -= _nbytes(producer)
    return peak


def _nbytes(node) -> int:
    return prod(node.shape) * node.dtype.itemsize
