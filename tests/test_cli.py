import subprocess
import sys

from fuel.cli import main


def test_kernels_lists_the_table_filtered(capsys):
    assert main(["kernels", "--op", "matmul", "--backend", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "matmul" in out and "float32, float32 -> float32" in out and "numpy" in out
    assert "softmax" not in out


def test_kernels_rejects_unknown_op(capsys):
    assert main(["kernels", "--op", "nonsense"]) == 2
    assert "nonsense" in capsys.readouterr().err


def test_backends_lists_cpu(capsys):
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "cpu" in out and "available" in out and "NumPy" in out


def test_console_script_entry_point_runs():
    done = subprocess.run([sys.executable, "-m", "fuel.cli", "kernels", "--op", "relu"],
                          capture_output=True, text=True, check=True)
    assert "relu" in done.stdout
