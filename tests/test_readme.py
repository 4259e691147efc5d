"""The README's examples run and print what the README shows."""

import subprocess
import sys

import numpy as np


def test_issue_example_prints_ones_and_explains():
    code = ("import fuel; x = fuel.randn(64, 64); "
            "print(((x @ x.T).softmax(-1).sum(-1)).numpy()[:3]); "
            "print(x.relu().sum().explain())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    first, *rest = done.stdout.splitlines()
    np.testing.assert_allclose(np.array(first.strip("[]").split(), float), 1.0, rtol=1e-6)
    table = "\n".join(rest)
    assert "relu" in table and "numpy" in table and "leaf" in table
