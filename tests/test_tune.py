"""``fuel tune`` on a small ONNX model: it times the competing matmul candidates, stores the
winners, and a second run (a fresh judge, as in a new process) times nothing."""

from __future__ import annotations

import numpy as np
import pytest

from fuel.cli import main
from fuel.compiler import toolchain
from fuel.runtime.judge import JUDGE, judge_stats

onnx = pytest.importorskip("onnx")
pytestmark = pytest.mark.skipif(toolchain.unavailable_reason() is not None,
                                reason="no C compiler")


def test_tune_stores_winners_and_a_second_run_times_nothing(tmp_path, monkeypatch, capsys):
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((96, 80)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 96])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 80])],
        [numpy_helper.from_array(weight, "w")])
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FUEL_JUDGE_MAX_LOAD", "1000")  # store whatever the machine's load
    JUDGE.forget()
    assert main(["tune", str(path), "--dim", "rows=12"]) == 0
    out = capsys.readouterr().out
    assert "mm.onnx: 1 shape bucket(s) decided" in out and "matmul" in out
    assert judge_stats()["timed"] == 1
    assert (tmp_path / "cache" / "judge" / "winners.json").exists()
    JUDGE.forget()
    assert main(["tune", str(path), "--dim", "rows=13", "--quiet"]) == 0  # the same bucket
    assert judge_stats()["timed"] == 0 and judge_stats()["stored"] == 1
    assert "0 bucket(s) timed" in capsys.readouterr().out
    JUDGE.forget()


def test_tune_refuses_an_unknown_target(capsys):
    assert main(["tune", "no-such-model"]) == 2
    assert "don't know how to run 'no-such-model'" in capsys.readouterr().err
