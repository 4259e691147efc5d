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


def test_readme_ten_lines_print_what_the_readme_shows():
    """The README's first example, run as written, prints the README's output (revision
    hashes aside: they change whenever a kernel's code does)."""
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    section = readme[readme.index("## Ten lines"):readme.index("## Benchmarks")]
    code = section.split("```python\n")[1].split("```")[0]
    shown = section.split("prints\n\n```text\n")[1].split("```")[0]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)

    def without_hashes(text: str) -> list[str]:
        return [re.sub(r"#[0-9a-f]{16}", "#", line).rstrip() for line in text.splitlines()]

    assert without_hashes(done.stdout) == without_hashes(shown)
