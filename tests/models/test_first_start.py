"""The first start tells, on standard error even when piped, what it does with the weights: by
default it maps the GGUF's blocks and caches nothing; with --dtype float32 it converts them and
says where it cached how much, and later starts say nothing of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_default_start_maps_the_blocks_and_caches_no_weights(tiny_gguf, tmp_path):
    path = tiny_gguf()
    cache = tmp_path / "cache"
    environment = dict(os.environ, FUEL_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "fuel", "generate", "the cat", "--model", str(path),
               "--max-new-tokens", "2"]
    run = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=ROOT,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "weights as stored (F16, F32, Q4_1, Q8_0; memory-mapped" in run.stderr
    assert "converting" not in run.stderr
    assert [p.name for p in cache.iterdir()] == ["kernels"]  # compiled kernels only
    floats = subprocess.run(command + ["--dtype", "float32"], capture_output=True, text=True,
                            env=environment, cwd=ROOT, timeout=120)
    assert floats.returncode == 0 and floats.stdout == run.stdout


def test_first_start_says_where_it_cached_what(tiny_gguf, tmp_path):
    path = tiny_gguf()
    cache = tmp_path / "cache"
    environment = dict(os.environ, FUEL_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "fuel", "generate", "the cat", "--model", str(path),
               "--max-new-tokens", "2", "--dtype", "float32"]
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
