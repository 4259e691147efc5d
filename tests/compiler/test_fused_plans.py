"""Fused groups in plans: one launch per group, named in explain and profiles, replayed by
fuel.jit and the plan cache without compiling, errors naming the node, no compiler no fusion."""

import dataclasses

import numpy as np
import pytest

import fuel
from fuel.backends.cpu import generated as cpu
from fuel.compiler import fusion, toolchain
from fuel.compiler.render_c import CProgram
from fuel.dispatch.kernel import global_table
from fuel.graph import Graph
from fuel.runtime import plan
from fuel.runtime.plan import PlanBuilder

pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason=str(toolchain.unavailable_reason()))


@pytest.fixture(autouse=True)
def fusion_on():
    fuel.set_fusion(True)
    yield
    fuel.set_fusion(True)


def _chain(x, y):
    return ((x * 2.0 + y).exp() - x).relu()


def _arrays():
    random = np.random.default_rng(1)
    return (random.standard_normal((6, 5)).astype(np.float32),
            random.standard_normal(5).astype(np.float32))


def _expected(x, y):
    return np.maximum(np.exp(x * np.float32(2.0) + y) - x, 0)


def test_a_chain_is_one_launch_materializing_only_its_result():
    x, y = _arrays()
    result = _chain(fuel.tensor(x), fuel.tensor(y))
    graph = Graph.build([result._node])
    steps = [s for s in PlanBuilder(graph, global_table()).steps() if s.__class__ is not tuple]
    assert len(steps) == 1 and steps[0].compiled.name == "fused(mul,add,exp,sub,relu)"
    assert steps[0].compiled.entry.kernel_source == "c"
    with fuel.profile() as profile:
        values = result.numpy()
    assert [row.op for row in profile.launches] == ["fused(mul,add,exp,sub,relu)"]
    np.testing.assert_allclose(values, _expected(x, y), rtol=1e-6)


def test_explain_names_the_fused_kernel_and_the_nodes_it_covers():
    x, y = _arrays()
    rows = _chain(fuel.tensor(x), fuel.tensor(y)).explain().rows
    fused = [row for row in rows if row.dispatch.startswith("c fused(")]
    # (y's broadcast to x's shape is a member too: the kernel reads y with stride 0)
    assert [row.op for row in fused if row.op != "expand"] == ["mul", "add", "exp", "sub",
                                                               "relu"]
    assert len({row.kernel_revision_hash for row in fused}) == 1
    assert fused[-1].dispatch == "c fused(mul,add,exp,sub,relu)"
    assert fused[0].dispatch.endswith(f"in node {fused[-1].node_id}")


def test_explain_labels_a_decomposed_members_by_the_users_node_ids():
    # softmax decomposes when fusion is on, so the plan's graph has more nodes than the
    # user's: explain must still name user nodes (and "1.k" parts), never expanded-graph ids.
    x = fuel.tensor(_arrays()[0])
    rows = (x.softmax(-1) * 2.0 + 1.0).explain().rows
    by_label = {(f"{row.node_id}.{row.part}" if row.part >= 0 else str(row.node_id)): row
                for row in rows}
    softmax = next(row for row in rows if row.op == "softmax")
    assert softmax.dispatch == "decomposed"
    anchor = next(row for row in rows if row.part < 0 and row.dispatch.startswith("c fused(")
                  and " in node " not in row.dispatch)
    assert anchor.op == "add"  # the last user node of the group
    members = [row for row in rows if row.dispatch.endswith(f"in node {anchor.node_id}")]
    assert {row.op.strip() for row in members} >= {"max", "sub", "exp", "sum", "div", "mul"}
    assert all(f"{row.node_id}.{row.part}" in by_label for row in members if row.part >= 0)
    loads = [row for row in rows if row.op == "load"]
    assert loads and all(row.dispatch == "leaf" for row in loads)


def test_set_fusion_false_runs_one_numpy_kernel_per_node():
    x, y = _arrays()
    fuel.set_fusion(False)
    with fuel.profile() as profile:
        values = _chain(fuel.tensor(x), fuel.tensor(y)).numpy()
    assert [row.op for row in profile.launches] == ["mul", "add", "exp", "sub", "relu"]
    np.testing.assert_allclose(values, _expected(x, y), rtol=1e-6)


def test_plan_cache_hits_and_jit_replays_never_compile(monkeypatch):
    x, y = _arrays()
    tx, ty = fuel.tensor(x), fuel.tensor(y)
    first = _chain(tx, ty).numpy()
    step = fuel.jit(_chain)
    step(tx, ty).numpy()

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled during a replay")

    monkeypatch.setattr(toolchain, "build", no_compiling)
    monkeypatch.setattr(cpu, "render_c", no_compiling)
    np.testing.assert_array_equal(_chain(tx, ty).numpy(), first)
    other = fuel.tensor(x + 1)
    np.testing.assert_allclose(step(other, ty).numpy(), _expected(x + 1, y), rtol=1e-6)


def test_a_compiler_error_is_a_kernel_error_naming_the_node_and_the_source(monkeypatch,
                                                                           tmp_path):
    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu, "render_c", lambda kernel, threshold=None, vector_math=False: CProgram(
        "void fuel_kernel(void) { not C }", (1,), ()))
    x, y = _arrays()
    result = fuel.tensor(x).exp() * fuel.tensor(y)  # this line is the group's first
    with pytest.raises(fuel.KernelError) as raised:
        result.realize()
    message = str(raised.value)
    assert "test_fused_plans.py" in message and str(tmp_path) in message
    assert "error" in message
    monkeypatch.undo()  # the renderer works again: the next realize compiles and runs
    np.testing.assert_allclose((fuel.tensor(x).exp() - fuel.tensor(y)).numpy(), np.exp(x) - y,
                               rtol=1e-6)


def test_without_a_compiler_nothing_fuses(monkeypatch):
    monkeypatch.setattr(toolchain, "_detected", ["no C compiler: 'cc' is not on PATH (set CC)"])
    x, y = _arrays()
    with fuel.profile() as profile:
        values = _chain(fuel.tensor(x), fuel.tensor(y)).numpy()
    assert all(not row.op.startswith("fused") for row in profile.launches)
    np.testing.assert_allclose(values, _expected(x, y), rtol=1e-6)


def test_pipelined_realize_compiles_cold_kernels_on_its_planning_thread(monkeypatch, tmp_path):
    """The two groups' kernels are compiled (into this test's cache folder) during the
    pipelined realize. Counted among the kernels built into that folder only: a build an
    earlier test left running may finish now and land in the loaded list too."""
    for pending in list(toolchain._building.values()):
        pending.result()
    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(toolchain, "_loaded", {})
    monkeypatch.setattr(plan, "_compiled_cache", {})
    fuel.set_fusion(True)  # (drops cached plans)
    x, y = _arrays()
    tx, ty = fuel.tensor(x), fuel.tensor(y)
    first = _chain(tx, ty)
    second = (first * 3.0 - ty).tanh() + 1.5  # a second group, compiled on the planning thread
    fuel.realize(first, second, pipelined=True)
    expected = _expected(x, y)
    np.testing.assert_allclose(first.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(second.numpy(), np.tanh(expected * 3 - y) + 1.5, rtol=1e-5)
    built_here = [kernel for kernel in toolchain.built_kernels()
                  if str(kernel.source_path).startswith(str(tmp_path))]
    assert len(built_here) == 2


def test_without_vector_math_math_functions_keep_their_numpy_kernels(monkeypatch):
    found = toolchain.detect()
    monkeypatch.setattr(toolchain, "_detected", [dataclasses.replace(found, vector_math=False)])
    x = fuel.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4))
    with fuel.profile() as profile:
        values = ((x * 2.0 + 1.0).exp() * 3.0 - 1.0).numpy()
    assert [row.op for row in profile.launches] == ["fused(mul,add)", "exp", "fused(mul,sub)"]
    expected = np.exp(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4) * 2 + 1) * 3 - 1
    np.testing.assert_allclose(values, expected, rtol=1e-6)


def test_constant_fills_read_only_by_a_group_become_literals():
    x, y = _arrays()
    result = (fuel.tensor(x) + fuel.full((5,), 0.25)) * (fuel.tensor(y) - fuel.full((6, 1), 3.0))
    shared = fuel.full((5,), 2.0)
    kept = (fuel.tensor(x) * shared).exp(), (fuel.tensor(y) @ shared).reshape(1)
    with fuel.profile() as profile:
        fuel.realize(result, *kept)
    launched = [row.op for row in profile.launches]
    # the fills of ``result`` launch nothing; ``shared`` is also read by a matmul: filled once
    assert launched.count("full") == 1 and "fused(add,sub,mul)" in launched
    np.testing.assert_allclose(result.numpy(), (x + np.float32(0.25)) * (y - np.float32(3)),
                               rtol=1e-6)
    np.testing.assert_allclose(kept[0].numpy(), np.exp(x * np.float32(2)), rtol=1e-6)
    np.testing.assert_allclose(kept[1].numpy(), [y @ np.full(5, 2, np.float32)], rtol=1e-5)


@pytest.mark.parametrize("replayed", [False, True])
def test_a_faulting_fused_launch_names_the_groups_first_line_and_the_next_realize_works(
        monkeypatch, replayed):
    from fuel.dispatch import in_flight_counts

    x, y = _arrays()
    tx, ty = fuel.tensor(x), fuel.tensor(y)
    if replayed:  # the plan is cached and bound: the fault comes from a replay
        for _ in range(2):
            _chain(tx, ty).realize()

    def fault(self, inputs, outputs, layouts, params):
        def launch():
            raise OSError("exception: access violation reading 0x0")
        return launch

    monkeypatch.setattr(cpu.GeneratedKernel, "prepare", fault)
    result = _chain(tx, ty)  # the group's first member is made on _chain's line
    with pytest.raises(fuel.KernelError) as raised:
        result.realize()
    message = str(raised.value)
    line = _chain.__code__.co_firstlineno + 1
    assert f"test_fused_plans.py:{line} failed" in message
    assert "access violation" in message and "fused(mul,add,exp,sub,relu)" in message
    assert all(count == 0 for count in in_flight_counts().values())
    monkeypatch.undo()
    np.testing.assert_allclose(_chain(tx, ty).numpy(), _expected(x, y), rtol=1e-6)


def test_a_large_group_is_named_by_its_op_counts():
    """A 1000-op fused chain's profile row is ``fused[N: op xK, ...]``, not a list of N ops;
    explain() still shows every member with the group's kernel."""
    data = np.linspace(-1, 1, 16, dtype=np.float32)
    x = fuel.tensor(data)
    expected = data.copy()
    for k in range(500):
        x = x * 1.0001 if k % 2 else x + 0.5
        expected = expected * np.float32(1.0001) if k % 2 else expected + np.float32(0.5)
    members = [row for row in x.explain().rows if row.decision.startswith("fused")]
    assert len(members) == 500  # the full member list, each row naming the group's kernel
    assert all("fused[500: add x250, mul x250]" in row.dispatch for row in members)
    with fuel.profile() as profile:
        values = x.numpy()
    names = [row.op for row in profile.launches]
    assert names == ["fused[500: add x250, mul x250]"], names
    np.testing.assert_allclose(values, expected, rtol=1e-5)
    assert fusion.group_name(["mul", "add"]) == "fused(mul,add)"
