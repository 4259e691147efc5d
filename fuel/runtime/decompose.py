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
from fuel.ir.ops import VIEW_OPS, lookup_dtypes


def kernel_predicate(table: KernelBindingTable):
    """``has_kernel(node)`` over ``table``, memoized per (op, dtypes, backend)."""
    known: dict = {}

    def has_kernel(node: Node) -> bool:
        dtypes = lookup_dtypes(node.op, tuple(i.dtype for i in node.inputs), node.dtype)
        key = (node.op, dtypes, kernel_backend(node))
        found = known.get(key)
        if found is None:
            found = known[key] = any(not entry.caps.requires_broadcast
                                     for entry in table.lookup_alternatives(*key))
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


def decomposed_rows(expansion: Expansion, user_id: int, table: KernelBindingTable) -> list:
    """explain() rows of the primitives that replace decomposed user node ``user_id``: ids
    ``7.0, 7.1, ...``, inputs by user id or by such a label."""
    from fuel.explain import ExplainRow

    graph = expansion.graph
    parts = expansion.decomposed[user_id]
    labels = {expanded: f"{user_id}.{k}" for k, expanded in enumerate(parts)}
    user_of = {expanded: user for user, expanded in enumerate(expansion.position)}
    rows = []
    for k, expanded in enumerate(parts):
        node = graph.nodes[expanded]
        identity = dispatched_kernel_ident(graph, expanded, table)
        if node.op in VIEW_OPS:
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
