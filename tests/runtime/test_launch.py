"""One launch path: a fuel.jit replay launches through execute_compiled like a first run
(profile rows, KernelError naming the node and the user's line, Pending handles); one rule says
which backend runs a node; a cached CompiledNode carries no graph's label."""

import dataclasses
import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fuel
from fuel.dispatch import dispatched_kernel_ident, global_table, in_flight
from fuel.graph import Graph
from fuel.ir.device import BackendId
from fuel.ir.ops import OpKind
from fuel.runtime.plan import PlanBuilder, compile_graph_node
from tests.runtime.threaded_backend import DEVICE, THREADED, shared_backend

ROOT = Path(__file__).resolve().parents[2]


def _line() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


def _pick(values, index):
    return values.index_select(0, index) * 2.0


_PICK_LINE = inspect.getsourcelines(_pick)[1] + 1


def _device_step(x):
    a = x + 1.0
    b = a * 2.0
    return b.to("cpu") + a.to("cpu")


_MUL_LINE = inspect.getsourcelines(_device_step)[1] + 2


def _model(x, w):
    return ((x @ w).relu() + 1.0).softmax(-1).sum(-1) * x.mean()


@pytest.fixture
def backend():
    registered = shared_backend("threaded", delay=0.002)
    registered.completions_recorded = 0
    registered.fault = None
    registered.rejected = None
    yield registered
    registered.rejected = None
    assert in_flight(DEVICE) == 0


def test_runtime_does_not_import_the_front_end():
    # A bare ``fuel`` package object: importing fuel.runtime.* runs none of fuel/__init__.py.
    code = textwrap.dedent(f"""
        import importlib, pkgutil, sys, types
        package = types.ModuleType("fuel")
        package.__path__ = [{str(ROOT / "fuel")!r}]
        sys.modules["fuel"] = package
        import fuel.runtime
        names = [m.name for m in pkgutil.iter_modules(fuel.runtime.__path__, "fuel.runtime.")]
        for name in names:
            importlib.import_module(name)
        print(",".join(names))
        print(",".join(sorted(m for m in sys.modules
                              if m == "fuel.tensor" or m.startswith("fuel.frontend"))))
    """)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    loaded, front_end = result.stdout.split("\n")[:2]
    assert {"fuel.runtime.executor", "fuel.runtime.jit", "fuel.runtime.plan"} <= set(
        loaded.split(","))
    assert front_end == ""


def test_a_copy_runs_at_its_source_and_plan_explain_and_ident_agree(backend):
    x = fuel.from_numpy(np.ones(4, np.float32))
    back = ((x + 1.0).to("threaded:0") * 2.0).to("cpu")
    graph = Graph.build([back._node])
    copies = [i for i, node in enumerate(graph.nodes) if node.op is OpKind.COPY]
    assert [graph.nodes[i].device.backend for i in copies] == [THREADED, BackendId.CPU]
    assert [graph.target_backend(i) for i in copies] == [BackendId.CPU, THREADED]
    table = global_table()
    planned = {step.node_id: step.compiled for step in PlanBuilder(graph, table).steps()
               if step.__class__ is not tuple and step.compiled.op is OpKind.COPY}
    rows = back.explain().rows
    for node_id in copies:
        entry = planned[node_id].entry
        assert planned[node_id].backend is graph.target_backend(node_id)
        ident = dispatched_kernel_ident(graph, node_id, table)
        assert ident == (entry.kernel_source, entry.kernel_revision_hash)
        assert (rows[node_id].dispatch, rows[node_id].kernel_revision_hash) == ident
    assert dispatched_kernel_ident(graph, copies[1], table)[0] == backend.kernel_source
    assert dispatched_kernel_ident(graph, copies[0], table)[0] != backend.kernel_source
    np.testing.assert_array_equal(back.numpy(), np.full(4, 4, np.float32))


def test_graphs_sharing_a_compiled_node_keep_their_own_labels():
    data = np.arange(4, dtype=np.float32)
    first, first_line = fuel.from_numpy(data) * 3.0, _line()
    second, second_line = fuel.from_numpy(data) * 3.0, _line()
    graphs = [Graph.build([t._node]) for t in (first, second)]
    shared = [compile_graph_node(g, len(g.nodes) - 1, global_table()) for g in graphs]
    assert shared[0] is shared[1]
    assert not hasattr(shared[0], "label")
    with pytest.raises(dataclasses.FrozenInstanceError):
        shared[0].op_params = "another graph's params"
    hits = fuel.plan_cache_stats()["hits"]
    with fuel.profile() as prof:
        first.realize()
        second.realize()
    assert fuel.plan_cache_stats()["hits"] > hits
    rows = [row for row in prof.launches if row.op == "mul"]
    assert [row.node.rsplit(":", 1)[-1] for row in rows] == [str(first_line), str(second_line)]
    assert all("test_launch.py" in row.node for row in rows)


def test_failures_in_graphs_sharing_a_plan_name_their_own_lines():
    values = fuel.from_numpy(np.arange(6, dtype=np.float32))
    values.index_select(0, fuel.from_numpy(np.array([0, 1]))).realize()  # plan cached
    bad = np.array([0, 9])
    first, first_line = values.index_select(0, fuel.from_numpy(bad)), _line()
    second, second_line = values.index_select(0, fuel.from_numpy(bad)), _line()
    for tensor, line in ((first, first_line), (second, second_line)):
        with pytest.raises(fuel.KernelError, match=rf"test_launch.py:{line}\b") as info:
            tensor.realize()
        assert isinstance(info.value, fuel.IndexOutOfRange)


@pytest.mark.parametrize("profiled", [False, True])
def test_kernel_failing_in_a_cpu_replay_names_the_node_and_line(profiled):
    pick = fuel.jit(_pick)
    values = fuel.from_numpy(np.arange(6, dtype=np.float32))
    np.testing.assert_array_equal(pick(values, fuel.from_numpy(np.array([1, 2]))).numpy(),
                                  [2, 4])
    with fuel.profile() if profiled else _nothing(), \
            pytest.raises(fuel.KernelError) as info:
        pick(values, fuel.from_numpy(np.array([0, 9])))
    message = str(info.value)
    assert "index_select" in message and f"test_launch.py:{_PICK_LINE}" in message
    assert isinstance(info.value, fuel.IndexOutOfRange)
    np.testing.assert_array_equal(pick(values, fuel.from_numpy(np.array([5, 0]))).numpy(),
                                  [10, 0])
    assert len(pick.captures) == 1 and pick.replays == 1


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_kernel_failing_in_a_device_replay_closes_pending_handles(backend):
    step = fuel.jit(_device_step)
    x = fuel.from_numpy(np.ones(4, np.float32)).to("threaded:0").realize()
    eager = _device_step(x)
    eager.realize()
    eager_completions = backend.completions_recorded
    assert eager_completions == 2  # both copies' producers are waited individually
    np.testing.assert_array_equal(step(x).numpy(), np.full(4, 6, np.float32))
    backend.completions_recorded = 0
    backend.rejected = np.multiply
    with pytest.raises(fuel.KernelError) as info:
        step(x)
    message = str(info.value)
    assert "mul" in message and "threaded" in message and f"test_launch.py:{_MUL_LINE}" in message
    assert isinstance(info.value.__cause__, ValueError)
    assert backend.completions_recorded == 1  # the add's handle was open when mul failed
    assert in_flight(DEVICE) == 0
    backend.rejected = None
    backend.completions_recorded = 0
    np.testing.assert_array_equal(step(x).numpy(), np.full(4, 6, np.float32))
    assert backend.completions_recorded == eager_completions
    assert in_flight(DEVICE) == 0 and step.replays == 1


def test_replay_profile_shows_every_launch_like_an_eager_run(tmp_path):
    rng = np.random.default_rng(0)
    w = fuel.from_numpy(rng.standard_normal((8, 8)).astype(np.float32))

    def inputs():
        return fuel.from_numpy(rng.standard_normal((4, 8)).astype(np.float32))

    with fuel.profile() as eager:
        _model(inputs(), w).realize()
    replayed = fuel.jit(_model)
    replayed(inputs(), w)
    with fuel.profile() as prof:
        result = replayed(inputs(), w)
    assert replayed.replays == 1
    assert sorted(r.op for r in prof.launches) == sorted(r.op for r in eager.launches)
    assert len(prof.launches) == len(eager.launches) >= 5
    assert all("test_launch.py" in row.node for row in prof.launches)
    assert {row.node.split(" (")[0] for row in prof.launches} == {
        row.node.split(" (")[0] for row in eager.launches}
    launches = {op: count for op, _, count, _ in prof.ops}
    assert launches == {op: count for op, _, count, _ in eager.ops}
    assert "jit.replay" in prof.table_text()
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(trace)
    events = json.loads(trace.read_text())["traceEvents"]
    kernels = [e for e in events if e["cat"] != "phase"]
    assert len(kernels) == len(eager.launches)
    assert all("test_launch.py" in e["args"]["node"] for e in kernels)
    assert result.shape == (4,)
