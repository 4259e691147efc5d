"""Tensor.explain(): the graph a realize would run, with the kernel each node dispatches to."""

from __future__ import annotations

from dataclasses import dataclass

from fuel.dispatch.compiled import dispatched_kernel_ident
from fuel.dispatch.kernel import global_table
from fuel.graph import Graph
from fuel.ir.errors import FuelError
from fuel.ir.ops import VIEW_OPS, OpKind
from fuel.runtime.decompose import decomposed_rows, expand_for_table, expanded_labels


@dataclass(frozen=True)
class ExplainRow:
    """One node: what it is and which kernel (source tag and revision) a realize would call."""

    node_id: int
    op: str
    shape: tuple[int, ...]
    dtype: str
    backend: str
    inputs: tuple[int | str, ...]
    dispatch: str
    kernel_revision_hash: int | None
    site: str
    part: int = -1  # >= 0: the part-th primitive of decomposed node ``node_id`` ("7.2")


class Explanation:
    """Rows of the graph; ``print`` shows them as a table."""

    def __init__(self, rows: list[ExplainRow]) -> None:
        self.rows = rows

    def __str__(self) -> str:
        def width(values, least: int) -> int:
            return max([least, *(len(value) + 2 for value in values)])

        shapes = [str(list(row.shape)) for row in self.rows]
        inputs = [",".join(map(str, row.inputs)) or "-" for row in self.rows]
        op_width = width([row.op for row in self.rows], 14)
        shape_width = width(shapes, 18)
        dtype_width = width([row.dtype for row in self.rows], 10)
        backend_width = width([row.backend for row in self.rows], 9)
        inputs_width = width(inputs, 12)
        lines = [f"{'id':>4}  {'op':<{op_width}}{'shape':<{shape_width}}{'dtype':<{dtype_width}}"
                 f"{'backend':<{backend_width}}{'inputs':<{inputs_width}}kernel"]
        for row, shape, used in zip(self.rows, shapes, inputs):
            revision = f" #{row.kernel_revision_hash:016x}" if row.kernel_revision_hash else ""
            label = f"{row.node_id}.{row.part}" if row.part >= 0 else str(row.node_id)
            lines.append(
                f"{label:>4}  {row.op:<{op_width}}{shape:<{shape_width}}{row.dtype:<{dtype_width}}"
                f"{row.backend:<{backend_width}}{used:<{inputs_width}}{row.dispatch}{revision}"
            )
        return "\n".join(lines)

    __repr__ = __str__

    def __len__(self) -> int:
        return len(self.rows)


def explain(tensors) -> Explanation:
    """Explain the realize of ``tensors`` without running it."""
    graph = Graph.build([t._node for t in tensors])
    table = global_table()
    fused = _fused_kernels(graph, table)
    rows = []
    expansion = expand_for_table(graph, table, strict=False)
    for node_id, node in enumerate(graph.nodes):
        identity = None
        label = str(node_id)
        if label in fused:
            source, revision, name, anchor = fused[label]
            identity = (source, revision)
            dispatch = f"{source} {name}" + ("" if anchor == label else f" in node {anchor}")
        elif expansion is not None and node_id in expansion.decomposed:
            dispatch = "decomposed"
        elif node.buffer is not None:
            dispatch = "realized" if node.op is not OpKind.LOAD else "leaf"
        elif node.op in VIEW_OPS:
            dispatch = "view"
        else:
            identity = dispatched_kernel_ident(graph, node_id, table)
            dispatch = identity[0] if identity else "MISSING (NoBackendForOp at realize)"
        file, line = node.site
        rows.append(ExplainRow(
            node_id, node.op.value, node.shape, node.dtype.name, node.device.backend.value
            if node.op is not OpKind.COPY else f"->{node.device}", graph.inputs[node_id],
            dispatch, identity[1] if identity else None, f"{file}:{line}",
        ))
        if dispatch == "decomposed":
            rows.extend(decomposed_rows(expansion, node_id, table, fused))
    return Explanation(rows)


def _fused_kernels(graph: Graph, table) -> dict[str, tuple[str, int, str, str]]:
    """Each fused node's explain label (``"7"``, or ``"7.2"`` for a part of decomposed node 7)
    -> (source tag, revision, group name, the anchor's label), from the plan a realize would
    build (fused kernels are compiled at plan time, so explain compiles them)."""
    from fuel.runtime.plan import PlanBuilder

    try:
        builder = PlanBuilder(graph, table)
        if not builder.groups:
            return {}
        steps = list(builder.expanded_steps())
    except FuelError:  # the realize would fail; the per-node rows say where
        return {}
    labels = expanded_labels(builder.expansion, len(builder.graph.nodes))
    found = {}
    for step in steps:
        if step.__class__ is tuple or step.compiled.op is not OpKind.FUSED:
            continue
        group = builder.groups[step.node_id]
        entry = step.compiled.entry
        for member in group.members:
            found[labels[member]] = (entry.kernel_source, entry.kernel_revision_hash, group.name,
                                     labels[group.anchor])
    return found
