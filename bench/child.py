"""Running one benchmarked system in its own process: every bench script re-runs itself with
worker arguments and reads the JSON its worker prints on the last line."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def repository_environment(**overrides: str) -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH (a worker imports
    this checkout's fuel, not an installed one), plus ``overrides``."""
    paths = [str(ROOT), *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **overrides)


def child_result(script: str, arguments: Sequence[str], environment=None):
    """Run ``script`` with ``arguments`` in a fresh Python process and return the JSON value on
    the last line of its output; a failed worker stops the benchmark with its error's tail."""
    done = subprocess.run([sys.executable, script, *arguments], capture_output=True, text=True,
                          env=environment)
    if done.returncode != 0:
        raise SystemExit(f"{Path(script).name} {' '.join(arguments)[:200]} failed:\n"
                         f"{done.stderr.strip()[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_seconds(function, runs: int, warmup: int = 1, seconds: float = 0.0) -> float:
    """The median of at least ``runs`` timed calls of ``function``, after ``warmup`` untimed
    ones, calling on until the timed calls took ``seconds`` in all (a short call's median then
    rests on hundreds of calls, not a handful)."""
    for _ in range(warmup):
        function()
    samples: list[float] = []
    total = 0.0
    while len(samples) < runs or total < seconds:
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
        total += samples[-1]
    return statistics.median(samples)
