"""The resolution pass: each node's decision and reason is recorded once; explain prints it
and it equals what runs (the plan's steps and the profiled launches); what a backend decides
comes from the record it published with its kernels."""

import dataclasses
import re
from collections import Counter

import numpy as np
import pytest

import fuel
import fuel.nn.functional as F
from fuel.backends.cpu import PREFERS_DECOMPOSED
from fuel.compiler import fusion
from fuel.dispatch.kernel import NO_RECORD, BackendRecord, KernelBindingTable, global_table
from fuel.graph import Graph
from fuel.graph.decompositions import DECOMPOSITIONS
from fuel.ir.device import BackendId
from fuel.ir.ops import OpKind
from fuel.runtime.plan import PlanBuilder
from fuel.runtime.resolve import (
    DECOMPOSED,
    FUSED,
    KERNEL,
    MISSING,
    PREFERS_FUSED,
    SINGLE_NODE,
    fuses_math,
    resolve,
)
from tests.backends.primitive_backend import DEVICE, PRIMITIVE_BACKEND_ID, primitive_backend


@pytest.fixture(autouse=True)
def fusion_on():
    fuel.set_fusion(True)
    yield
    fuel.set_fusion(True)


def _array(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _mixed(device="cpu"):
    """A graph with every kind of decision: kernels (matmul, a lone relu), a composite the
    CPU prefers decomposed and fused, an elementwise group, views, leaves."""
    x = fuel.from_numpy(_array((6, 8), 0)).to(device)
    w = fuel.from_numpy(_array((8, 5), 1)).to(device)
    scores = (x @ w).softmax(-1) * 2.0 + 1.0
    return (scores.permute(1, 0).relu().sum(0) * 0.5).exp()


def _launches_in(rows) -> Counter:
    """What explain's rows say will launch: each KERNEL row, once per FUSED group (its
    anchor's row), as (name, kernel source, revision)."""
    launched = Counter()
    for row in rows:
        label = f"{row.node_id}.{row.part}" if row.part >= 0 else str(row.node_id)
        if row.decision == KERNEL:
            launched[(row.op.strip(), row.dispatch, row.kernel_revision_hash)] += 1
        elif row.decision == FUSED and row.reason.endswith(f"(anchor node {label})"):
            assert " in node " not in row.dispatch
            source, name = row.dispatch.split(" ", 1)
            launched[(name, source, row.kernel_revision_hash)] += 1
    return launched


@pytest.mark.parametrize("device", ["cpu", "primitive"])
def test_explain_prints_the_decisions_that_run(device):
    if device == "primitive":
        primitive_backend()
        device = str(DEVICE)
    result = _mixed(device)
    rows = result.explain().rows
    assert all(row.decision and row.reason for row in rows)
    assert f"{rows[1].decision}: {rows[1].reason}" in str(result.explain())
    expected = _launches_in(rows)
    graph = Graph.build([result._node])
    steps = [step for step in PlanBuilder(graph, global_table()).steps()
             if step.__class__ is not tuple and not (
                 step.compiled.op is OpKind.CONTIGUOUS
                 and graph.nodes[step.node_id].op is not OpKind.CONTIGUOUS)]
    planned = Counter((s.compiled.name, s.compiled.entry.kernel_source,
                       s.compiled.entry.kernel_revision_hash) for s in steps)
    assert planned == expected
    with fuel.profile() as profile:
        values = result.numpy()
    ran = Counter(row.op for row in profile.launches if row.op != "contiguous")
    assert ran == Counter({name: count for (name, _, _), count in expected.items()})
    x, w = _array((6, 8), 0), _array((8, 5), 1)
    logits = x @ w
    softmax = np.exp(logits - logits.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    reference = np.exp(np.maximum((softmax * 2 + 1).T, 0).sum(0) * 0.5)
    np.testing.assert_allclose(values, reference, rtol=1e-5)


def test_each_decision_says_why():
    result = _mixed()
    rows = {row.op.strip(): row for row in result.explain().rows if row.part < 0}
    assert rows["matmul"].decision == KERNEL and rows["permute"].decision == "view"
    assert rows["load"].decision == "leaf"
    if fuses_math(BackendId.CPU):
        assert (rows["softmax"].decision, rows["softmax"].reason) == (DECOMPOSED, PREFERS_FUSED)
        fused = [row for row in result.explain().rows if row.decision == FUSED]
        assert fused
        for row in fused:  # the reason names the anchor the kernel column points at
            found = re.fullmatch(r"fused into group \d+ \(anchor node ([\d.]+)\)", row.reason)
            label = f"{row.node_id}.{row.part}" if row.part >= 0 else str(row.node_id)
            anchor = row.dispatch.split(" in node ")[1] if " in node " in row.dispatch else label
            assert found and found.group(1) == anchor
        # relu reads a permuted view of the group's anchor: it stays alone with its kernel
        assert (rows["relu"].decision, rows["relu"].reason) == (KERNEL, SINGLE_NODE)
    fuel.set_fusion(False)
    unfused = {row.op.strip(): row for row in result.explain().rows if row.part < 0}
    assert unfused["softmax"].decision == KERNEL and unfused["relu"].reason != SINGLE_NODE


def test_a_backend_without_the_kernel_decomposes_and_says_so():
    primitive_backend()
    x = fuel.from_numpy(_array((3, 4), 2)).to(DEVICE)
    rows = x.softmax(-1).explain().rows
    row = next(row for row in rows if row.op == "softmax")
    assert row.decision == DECOMPOSED
    assert row.reason == "no kernel for softmax(float32 -> float32) on primitive -> decomposed"
    copy = next(row for row in rows if row.op == "copy")
    assert copy.reason.startswith("cross-device copy: kernel at its source (cpu); moves ")
    assert copy.dispatch == "numpy"  # the CPU's kernel, not the primitive backend's


def test_fused_groups_number_in_order_and_name_their_anchor():
    a, b = _array((4, 6), 3), _array((4, 6), 4)
    x, y = fuel.from_numpy(a), fuel.from_numpy(b)
    first = (x * 2.0 + y).relu()
    second = (first.sum(0) * 3.0 - 1.0).tanh()  # a reduction over dim 0 ends the first group
    graph = Graph.build([second._node])
    record = resolve(graph, global_table())
    groups = sorted({id(d): d for d in record.decisions if d.kind is FUSED}.values(),
                    key=lambda d: d.index)
    if not fusion.fusion_enabled() or not groups:
        pytest.skip("nothing fuses here (no C compiler)")
    assert [d.index for d in groups] == list(range(len(groups)))
    for decision in groups:
        anchor = decision.group.anchor
        assert decision.reason == f"fused into group {decision.index} (anchor node {anchor})"
        assert all(record.decisions[m] is decision for m in decision.group.members)


def test_backends_publish_their_record_with_their_kernels():
    fuel.ones(1).realize()  # the CPU backend is registered
    cpu = global_table().backend_record(BackendId.CPU)
    assert cpu.fusion is not None and cpu.fusion.prefers_decomposed == PREFERS_DECOMPOSED
    assert global_table().backend_record(PRIMITIVE_BACKEND_ID) is NO_RECORD or (
        global_table().backend_record(PRIMITIVE_BACKEND_ID).fusion is None)
    # The compiler registers nothing: a table nobody registered into has no records.
    assert KernelBindingTable().backend_records() == {}
    assert not [name for name, value in vars(fusion).items()  # no registry by backend there
                if isinstance(value, dict) and any(isinstance(k, BackendId) for k in value)]
    copied = global_table().copy()
    assert copied.backend_record(BackendId.CPU) is cpu


def test_a_backend_selects_its_decomposition_table():
    primitive_backend()
    x = fuel.from_numpy(_array((3, 4), 5)).to(DEVICE)
    graph = Graph.build([x.softmax(-1)._node])
    table = global_table().copy()
    without = {op: f for op, f in DECOMPOSITIONS.items() if op is not OpKind.SOFTMAX}
    table.declare_backend(PRIMITIVE_BACKEND_ID, BackendRecord(decompositions=without))
    record = resolve(graph, table, strict=False)
    softmax = len(graph.nodes) - 1
    assert record.user_decision(softmax).kind is MISSING
    with pytest.raises(fuel.NoBackendForOp, match="softmax"):
        list(PlanBuilder(graph, table, record).steps())

    def doubled(node, builder):  # a backend's own table: softmax(x) as x + x (a test value)
        return builder.op(OpKind.ADD, node.inputs[0], node.inputs[0])

    table.declare_backend(PRIMITIVE_BACKEND_ID,
                          BackendRecord(decompositions={**without, OpKind.SOFTMAX: doubled}))
    record = resolve(graph, table)
    assert record.user_decision(softmax).kind is DECOMPOSED
    assert [graph.op.value for graph in
            [record.graph.nodes[i] for i in record.expansion.decomposed[softmax]]] == ["add"]
    # the global table was not touched: the primitive backend still decomposes softmax
    assert resolve(graph, global_table()).user_decision(softmax).kind is DECOMPOSED


def test_preferred_decompositions_follow_the_backends_record():
    if not fuses_math(BackendId.CPU):
        pytest.skip("the CPU does not fuse math functions here")
    x = fuel.from_numpy(_array((3, 5), 6))
    graph = Graph.build([F.layer_norm(x, (5,))._node])
    layer_norm = len(graph.nodes) - 1
    assert resolve(graph, global_table()).user_decision(layer_norm).reason == PREFERS_FUSED
    table = global_table().copy()
    target = table.backend_record(BackendId.CPU).fusion
    table.declare_backend(BackendId.CPU, BackendRecord(
        fusion=dataclasses.replace(target, prefers_decomposed=frozenset())))
    assert resolve(graph, table).user_decision(layer_norm).kind is KERNEL


def test_explain_shows_the_bytes_each_copy_moves():
    """A cross-device copy's row says how many bytes it moves, between which devices."""
    primitive_backend()
    x = fuel.from_numpy(np.ones((3, 5), np.float32)).to(str(DEVICE))
    row = [r for r in (x * 2.0).to("cpu").explain().rows if r.op == "copy"]
    assert [r.reason.split("; ")[-1] for r in row] == [
        f"moves 60 bytes cpu -> {DEVICE}", f"moves 60 bytes {DEVICE} -> cpu"]
