"""Tensor.explain(): the graph a realize would run, each node's recorded decision (its own
kernel, decomposed, fused into a group, a view, a leaf) with its reason, and the kernel it
dispatches to. It prints the resolution the planner plans from (``fuel.runtime.resolve``):
it decides nothing of its own."""

from __future__ import annotations

from dataclasses import dataclass

from fuel.dispatch.kernel import BindingEntry, KernelBindingTable, global_table
from fuel.graph import Graph
from fuel.graph.node import kernel_backend
from fuel.ir.errors import FuelError
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind
from fuel.runtime.judge import JUDGE, judged, key_head, shape_bucket
from fuel.runtime.judge import mode as judge_mode
from fuel.runtime.resolve import (
    DECOMPOSED,
    FUSED,
    KERNEL,
    LEAF,
    REALIZED,
    VIEW,
    Decision,
    Resolution,
    expanded_label,
    resolve,
)


@dataclass(frozen=True)
class ExplainRow:
    """One node: what it is, which kernel (source tag and revision) a realize would call, and
    the recorded decision (``kernel``, ``decomposed``, ``fused``, ``view``, ``leaf``,
    ``realized``, ``missing``) with its reason."""

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
    decision: str = ""
    reason: str = ""


class Explanation:
    """Rows of the graph; ``print`` shows them as a table."""

    def __init__(self, rows: list[ExplainRow]) -> None:
        self.rows = rows

    def __str__(self) -> str:
        def width(values, least: int) -> int:
            return max([least, *(len(value) + 2 for value in values)])

        shapes = [str(list(row.shape)) for row in self.rows]
        inputs = [",".join(map(str, row.inputs)) or "-" for row in self.rows]
        kernels = [row.dispatch + (f" #{row.kernel_revision_hash:016x}"
                                   if row.kernel_revision_hash else "") for row in self.rows]
        op_width = width([row.op for row in self.rows], 14)
        shape_width = width(shapes, 18)
        dtype_width = width([row.dtype for row in self.rows], 10)
        backend_width = width([row.backend for row in self.rows], 9)
        inputs_width = width(inputs, 12)
        kernel_width = width(kernels, 8)
        lines = [f"{'id':>4}  {'op':<{op_width}}{'shape':<{shape_width}}{'dtype':<{dtype_width}}"
                 f"{'backend':<{backend_width}}{'inputs':<{inputs_width}}"
                 f"{'kernel':<{kernel_width}}decision"]
        for row, shape, used, kernel in zip(self.rows, shapes, inputs, kernels):
            label = f"{row.node_id}.{row.part}" if row.part >= 0 else str(row.node_id)
            lines.append(
                f"{label:>4}  {row.op:<{op_width}}{shape:<{shape_width}}{row.dtype:<{dtype_width}}"
                f"{row.backend:<{backend_width}}{used:<{inputs_width}}{kernel:<{kernel_width}}"
                f"{row.decision}: {row.reason}".rstrip()
            )
        return "\n".join(lines)

    __repr__ = __str__

    def __len__(self) -> int:
        return len(self.rows)


def explain(tensors) -> Explanation:
    """Explain the realize of ``tensors`` without running it."""
    graph = Graph.build([t._node for t in tensors])
    table = global_table()
    try:
        resolution = resolve(graph, table)
    except FuelError:  # the realize would fail: show every node, the missing ones as such
        resolution = resolve(graph, table, strict=False)
        kernels = {}
    else:
        kernels = _group_kernels(graph, table, resolution)
    rows = []
    for node_id, node in enumerate(graph.nodes):
        decision = resolution.user_decision(node_id)
        label = str(node_id)
        dispatch, revision = _dispatch(decision, label, kernels)
        file, line = node.site
        rows.append(ExplainRow(
            node_id, node.op.value, node.shape, node.dtype.name, node.device.backend.value
            if node.op is not OpKind.COPY else f"->{node.device}", graph.inputs[node_id],
            dispatch, revision, f"{file}:{line}", decision=decision.kind,
            reason=decision.reason + _judged(decision, node) + _copied(node)))
        if decision.kind is DECOMPOSED:
            rows.extend(_part_rows(resolution, node_id, kernels))
    return Explanation(rows)


def _copied(node) -> str:
    """For a cross-device copy: the bytes it moves."""
    if node.op is not OpKind.COPY or not node.inputs:
        return ""
    count = 1
    for size in node.shape:
        count *= size
    moved = (count * node.inputs[0].dtype.bits + 7) // 8
    return f"; moves {moved:,} bytes {node.inputs[0].device} -> {node.device}"


def _judged(decision: Decision, node) -> str:
    """For a node whose siblings compete: the judge's candidates and times for buckets of the
    node's key it has decided (in this process or stored), or that none is decided yet."""
    binding = decision.binding
    if decision.kind is not KERNEL or binding is None:
        return ""
    if judged(binding.op, binding.dtypes, binding.backend, binding.siblings) is None:
        return ""
    device = node.device if node.op is not OpKind.COPY else node.inputs[0].device
    head = key_head(binding.op, binding.dtypes, binding.backend,
                    JUDGE.device_name(binding.backend, device.index))
    bucket = shape_bucket([Layout.contiguous(i.shape) for i in node.inputs]
                          + [Layout.contiguous(node.shape)])
    found = JUDGE.describe(head, bucket)
    if not found:
        return (f"; judge: candidates compete, shape bucket {list(map(list, bucket))} not "
                f"decided yet (FUEL_JUDGE={judge_mode()})")
    return "; " + "; ".join(found)


def _dispatch(decision: Decision, label: str, kernels: dict[int, BindingEntry]
              ) -> tuple[str, int | None]:
    """The kernel column of a row (and its revision) from the node's decision."""
    kind = decision.kind
    if kind is KERNEL:
        entry = decision.binding.entry
        return entry.kernel_source, entry.kernel_revision_hash
    if kind is FUSED:
        entry = kernels.get(decision.group.anchor)  # the group's compiled kernel
        if entry is None:  # not planned (the plan failed): the generator's tag
            entry = decision.binding.entry
            source, revision = (entry.kernel_source if entry else "?"), None
        else:
            source, revision = entry.kernel_source, entry.kernel_revision_hash
        where = "" if decision.anchor == label else f" in node {decision.anchor}"
        return f"{source} {decision.group.name}{where}", revision
    if kind is DECOMPOSED or kind is VIEW or kind is LEAF or kind is REALIZED:
        return kind, None
    return "MISSING (NoBackendForOp at realize)", None


def _part_rows(resolution: Resolution, user_id: int, kernels: dict[int, BindingEntry]
               ) -> list[ExplainRow]:
    """The rows of the primitives that replace decomposed user node ``user_id``: ids
    ``7.0, 7.1, ...``, inputs by user id or by such a label."""
    expansion = resolution.expansion
    graph = expansion.graph
    parts = expansion.decomposed[user_id]
    user_of = {expanded: user for user, expanded in enumerate(expansion.position)}
    rows = []
    for k, expanded in enumerate(parts):
        node = graph.nodes[expanded]
        decision = resolution.decisions[expanded]
        dispatch, revision = _dispatch(decision, f"{user_id}.{k}", kernels)
        inputs = tuple(expanded_label(expansion, source) if source in parts
                       else user_of.get(source, expanded_label(expansion, source))
                       for source in graph.inputs[expanded])
        file, line = node.site
        rows.append(ExplainRow(user_id, "  " + node.op.value, node.shape, node.dtype.name,
                               kernel_backend(node).value, inputs, dispatch, revision,
                               f"{file}:{line}", part=k, decision=decision.kind,
                               reason=decision.reason))
    return rows


def _group_kernels(graph: Graph, table: KernelBindingTable, resolution: Resolution
                   ) -> dict[int, BindingEntry]:
    """Each fused group's anchor (planned-graph id) -> its compiled kernel's entry, from the
    plan a realize would build over this resolution (fused kernels are compiled at plan time,
    so explain compiles them); {} when nothing fuses or the plan fails."""
    if not resolution.groups:
        return {}
    from fuel.runtime.plan import PlanBuilder

    try:
        steps = list(PlanBuilder(graph, table, resolution).expanded_steps())
    except FuelError:  # the realize would fail; the rows say what was decided
        return {}
    return {resolution.groups[step.node_id].anchor: step.compiled.entry for step in steps
            if step.__class__ is not tuple and step.compiled.op is OpKind.FUSED}
