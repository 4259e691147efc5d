"""Where the planner meets the decompositions: which nodes have a kernel in a binding table,
the expanded graph a plan is built from, and the translation of that plan back to the
user's graph (so the plan cache keys on, and replays against, the graph the user built)."""

from __future__ import annotations

from collections.abc import Iterator

from fuel.dispatch.compiled import dispatched_kernel_ident
from fuel.dispatch.kernel import KernelBindingTable
from fuel.graph import Graph, Node
from fuel.graph.decompositions import Expansion, expand_graph
from fuel.graph.node import kernel_backend
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.ops import VIEW_OPS, OpKind, lookup_dtypes

# Per backend, the composite ops whose hand-written kernel loses to the fused rendering of
# their decomposition (bench/fusion.py): while fusion is on (with math functions, see
# fuses_math), such a node is decomposed so it fuses with its neighbours. Row ops qualify when
# they reduce the last dim only (what the row renderers fuse).
# CPU, (4096, 4096) float32 with vector math: softmax 34 ms fused vs 70 hand-written (NumPy),
# layer_norm 21 vs 122, rms_norm 26 vs 74, gelu 25 vs 124.
# OpenCL on PoCL (opencl:0), same sizes, fused / hand-written: softmax 0.70x, layer_norm 0.73x,
# gelu 0.90x (its per-op kernel renders the same expression: decomposing costs nothing alone
# and saves a pass per neighbour it fuses with; so for gelu_tanh, silu, sigmoid), rms_norm
# 1.14x (slower: it keeps its kernel), log_softmax not measured (keeps its kernel).
FUSE_RATHER_THAN_KERNEL: dict[BackendId, frozenset[OpKind]] = {
    BackendId.CPU: frozenset({
        OpKind.SOFTMAX, OpKind.LOG_SOFTMAX, OpKind.LAYER_NORM, OpKind.RMS_NORM, OpKind.GELU,
        OpKind.GELU_TANH, OpKind.SILU, OpKind.SIGMOID}),
    BackendId.OPENCL: frozenset({
        OpKind.SOFTMAX, OpKind.LAYER_NORM, OpKind.GELU, OpKind.GELU_TANH, OpKind.SILU,
        OpKind.SIGMOID}),
}
_FUSED_DTYPES = frozenset({dt.float32, dt.float64})


def _prefers_fusion(node: Node, backend) -> bool:
    if node.op not in FUSE_RATHER_THAN_KERNEL.get(backend, ()) or \
            node.dtype not in _FUSED_DTYPES:
        return False
    params = node.params
    if node.op in (OpKind.SOFTMAX, OpKind.LOG_SOFTMAX) and params.dim != len(node.shape) - 1:
        return False
    if node.op in (OpKind.LAYER_NORM, OpKind.RMS_NORM) and params.axes != 1:
        return False
    from fuel.compiler.fusion import fuses_math

    return fuses_math(backend)


_known: dict = {}
_known_table: list = [None]


def kernel_predicate(table: KernelBindingTable):
    """``has_kernel(node)`` over ``table``, memoized per (op, dtypes, backend) while ``table``
    is the one asked; a composite the fused rendering beats counts as kernel-less while
    fusion is on."""
    if _known_table[0] is not table:
        _known.clear()
        _known_table[0] = table
    known = _known

    def has_kernel(node: Node) -> bool:
        op = node.op
        backend = node.device.backend if op is not OpKind.COPY else kernel_backend(node)
        if op in FUSE_RATHER_THAN_KERNEL.get(backend, ()) and _prefers_fusion(node, backend):
            return False
        key = (op, backend, node.dtype, *[i.dtype for i in node.inputs])
        found = known.get(key)
        if found is None:
            dtypes = lookup_dtypes(op, key[3:], node.dtype)
            found = known[key] = any(not entry.caps.requires_broadcast
                                     for entry in table.lookup_alternatives(op, dtypes, backend))
        return found

    return has_kernel


def expand_for_table(graph: Graph, table: KernelBindingTable, strict: bool = True
                     ) -> Expansion | None:
    """The expansion of ``graph`` for the kernels ``table`` holds; None when none is needed."""
    def describe_miss(node: Node) -> str:
        dtypes = lookup_dtypes(node.op, tuple(i.dtype for i in node.inputs), node.dtype)
        return str(table.miss_error(node.op, dtypes, kernel_backend(node)))

    return expand_graph(graph, kernel_predicate(table), strict, describe_miss)


def translate_steps(expansion: Expansion, steps: Iterator, plan) -> Iterator:
    """Relabel the steps of a plan built over the expanded graph with the user's node ids,
    and, once all are out, re-index ``plan.node_values`` by the user's node ids."""
    origin = expansion.origin
    for step in steps:
        if step.__class__ is not tuple:
            step.node_id = origin[step.node_id]
        yield step
    values = plan.node_values
    plan.node_values[:] = [values[p] for p in expansion.position]


def expanded_labels(expansion: Expansion | None, count: int) -> list[str]:
    """explain()'s label of each expanded node: its user node's id (``"7"``), or ``"7.2"`` for
    the third primitive replacing decomposed user node 7; ``count`` nodes when not expanded."""
    if expansion is None:
        return [str(node_id) for node_id in range(count)]
    labels = [""] * len(expansion.graph.nodes)
    for user, expanded in enumerate(expansion.position):
        labels[expanded] = str(user)
    for user, parts in expansion.decomposed.items():
        for k, expanded in enumerate(parts):
            labels[expanded] = f"{user}.{k}"
    return labels


def decomposed_rows(expansion: Expansion, user_id: int, table: KernelBindingTable,
                    fused: dict | None = None) -> list:
    """explain() rows of the primitives that replace decomposed user node ``user_id``: ids
    ``7.0, 7.1, ...``, inputs by user id or by such a label; ``fused`` maps such a label to
    its fused kernel (as ``explain._fused_kernels`` builds it)."""
    from fuel.explain import ExplainRow

    graph = expansion.graph
    parts = expansion.decomposed[user_id]
    labels = {expanded: f"{user_id}.{k}" for k, expanded in enumerate(parts)}
    user_of = {expanded: user for user, expanded in enumerate(expansion.position)}
    rows = []
    for k, expanded in enumerate(parts):
        node = graph.nodes[expanded]
        label = labels[expanded]
        identity = dispatched_kernel_ident(graph, expanded, table)
        if fused and label in fused:
            source, revision, name, anchor = fused[label]
            identity = (source, revision)
            dispatch = f"{source} {name}" + ("" if anchor == label else f" in node {anchor}")
        elif node.op in VIEW_OPS:
            dispatch = "view"
        else:
            dispatch = identity[0] if identity else "MISSING (NoBackendForOp at realize)"
        inputs = tuple(labels.get(source, user_of.get(source, source))
                       for source in graph.inputs[expanded])
        file, line = node.site
        rows.append(ExplainRow(user_id, "  " + node.op.value, node.shape, node.dtype.name,
                               kernel_backend(node).value, inputs, dispatch,
                               identity[1] if identity else None, f"{file}:{line}", part=k))
    return rows
