"""``fuel run MODEL.onnx``: random or given inputs, free dims, profile and trace output, the
message without onnx installed."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from fuel.cli import main
from tests.onnx.conftest import make_model

F = TensorProto.FLOAT


@pytest.fixture
def model_path(tmp_path):
    weight = numpy_helper.from_array(np.eye(3, dtype=np.float32) * 2, "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="project"),
             helper.make_node("Relu", ["h"], ["y"], name="act")]
    model = make_model(nodes, [("x", F, ["batch", 3])], [("y", F, None)],
                       initializers=[weight])
    path = tmp_path / "tiny.onnx"
    path.write_bytes(model.SerializeToString())
    return path


def test_run_with_random_inputs_and_free_dims(model_path, capsys):
    assert main(["run", str(model_path), "--dim", "batch=4", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "input  x: float32[4, 3]" in out
    assert "output y: float32[4, 3]" in out
    assert "min " in out and "mean " in out


def test_run_with_a_given_input_profile_trace_and_save(model_path, tmp_path, capsys):
    x = np.array([[1.0, -2.0, 3.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    trace, saved = tmp_path / "trace.json", tmp_path / "out.npz"
    code = main(["run", str(model_path), "--input", f"x={tmp_path / 'x.npy'}", "--profile",
                 "--trace", str(trace), "--save", str(saved)])
    assert code == 0
    out = capsys.readouterr().out
    assert "matmul" in out and "relu" in out and "launches" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["name"] for e in events} >= {"matmul", "relu"}
    np.testing.assert_allclose(np.load(saved)["y"], [[2.0, 0.0, 6.0]])


def test_bad_arguments_are_fuel_errors(model_path, capsys):
    assert main(["run", str(model_path), "--input", "nope=1.npy"]) == 2
    assert "unknown inputs ['nope']" in capsys.readouterr().err
    assert main(["run", str(model_path), "--dim", "batch=two"]) == 2
    assert "must be an integer" in capsys.readouterr().err
    assert main(["run", str(model_path) + ".missing"]) == 2
    assert "cannot read ONNX model" in capsys.readouterr().err


def test_without_onnx_the_command_says_what_to_install(model_path):
    script = (
        "import sys; sys.modules['onnx'] = None\n"
        "from fuel.cli import main\n"
        f"sys.exit(main(['run', {str(model_path)!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 2
    from fuel.extras import install_command

    assert install_command("onnx") in done.stderr  # -e <checkout> in a checkout


def test_help_lists_run(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "--dim" in capsys.readouterr().out


def test_run_repeat_reports_the_per_run_time(model_path, capsys):
    assert main(["run", str(model_path), "--dim", "batch=2", "--repeat", "4"]) == 0
    out = capsys.readouterr().out
    assert "repeated 3 more runs: median" in out and "ms per run" in out
