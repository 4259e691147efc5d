import json

import fuel
from fuel.dispatch import op_profile
from fuel.ir.device import BackendId
from fuel.runtime.resolve import fuses_math


def test_totals_sum_per_key_sort_longest_first_and_drain():
    op_profile.take()
    op_profile.record("add", "cpu", 0.002)
    op_profile.record("add", "cpu", 0.003)
    op_profile.record("matmul", "cpu", 0.001)
    op_profile.record("matmul", "opencl", 0.009)
    rows = [(o, b, n, round(s * 1000)) for o, b, n, s in op_profile.take()]
    assert rows == [("matmul", "opencl", 1, 9), ("add", "cpu", 2, 5), ("matmul", "cpu", 1, 1)]
    assert op_profile.take() == []


def test_off_records_nothing_and_phases_and_trace_when_on():
    op_profile.take()
    op_profile.take_trace()
    op_profile.take_phases()
    (fuel.ones(3) + 1).realize()
    assert op_profile.take() == [] and op_profile.take_phases() == []
    op_profile.set_enabled(True)
    op_profile.set_trace(True)
    try:
        x = fuel.ones(4, 4)
        (x @ x + 1).realize()
    finally:
        op_profile.set_enabled(False)
        op_profile.set_trace(False)
    ops = {row[0] for row in op_profile.take()}
    assert {"full", "matmul", "add"} <= ops
    phases = {name for name, _, _ in op_profile.take_phases()}
    assert {"realize", "realize.graph", "realize.compile", "realize.execute",
            "realize.drain"} <= phases
    trace = op_profile.take_trace()
    assert [row.op for row in trace] == ["full", "matmul", "add"]
    assert trace[1].src == "cpu" and trace[1].dst == "cpu" and trace[1].bytes == 64
    assert all(row.seconds >= 0 for row in trace)


def test_failed_launch_is_still_recorded():
    op_profile.take()
    op_profile.set_enabled(True)
    try:
        try:
            fuel.tensor([[1.0]]).index_select(0, fuel.tensor([5])).realize()
        except fuel.KernelError:
            pass
    finally:
        op_profile.set_enabled(False)
    assert any(row[0] == "index_select" for row in op_profile.take())


def test_user_profile_table_and_chrome_trace(tmp_path, capsys):
    x = fuel.randn(32, 32)
    with fuel.profile() as prof:
        (x @ x).softmax(-1).sum().realize()
    prof.table()
    out = capsys.readouterr().out
    # With fusion (and vector math) the softmax runs as its fused decomposition.
    softmax = "fused(max,sub,exp,sum,div)" if fuses_math(BackendId.CPU) else "softmax"
    assert "matmul" in out and softmax in out and "realize.execute" in out
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["name"] for e in events}
    assert {"matmul", softmax, "sum", "realize"} <= names
    assert all(e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 for e in events)
    assert not op_profile.enabled()
