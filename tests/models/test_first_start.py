"""The first start tells, on standard error even when piped, that it converts the weights and
where it cached how much; later starts say nothing of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_first_start_says_where_it_cached_what(tiny_gguf, tmp_path):
    path = tiny_gguf()
    cache = tmp_path / "cache"
    environment = dict(os.environ, FUEL_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "fuel", "generate", "the cat", "--model", str(path),
               "--max-new-tokens", "2"]
    first = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=ROOT,
                           timeout=120)
    assert first.returncode == 0, first.stderr
    # The weight cache's one entry (generated kernels have a folder of their own beside it).
    (entry,) = [p for p in cache.iterdir() if p.name != "kernels"]
    size = (entry / "weights.bin").stat().st_size
    assert "converting" in first.stderr and str(entry) in first.stderr
    assert f"{size / 2**20:.1f} MiB" in first.stderr
    again = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=ROOT,
                           timeout=120)
    assert again.returncode == 0 and "converting" not in again.stderr
    assert again.stdout == first.stdout
