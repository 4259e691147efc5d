"""Fused generated kernels against one kernel per op: an 8-op elementwise chain.

The chain ``neg((relu(x * 1.5 + 0.5) - x) * x / 2 + 1)`` (mul, add, relu, sub, mul, div, add,
neg) over 16M float32 elements, run by fuel with fusion on (one generated C kernel), fuel with
fusion off (one NumPy kernel per op), fuel fused with OpenMP (``FUEL_OPENMP=1``: the outer
loop on all cores), NumPy one op at a time, torch eager, and one NumPy pass
``np.add(x, 1, out=y)`` (the memory-bound floor) and ``np.add(x, 1)``, which like every
other system here writes a fresh 64 MB result (its page faults cost about as much as the
pass). Each system runs in its own process; each reports the median of its repeats after a
warm-up (plan built and kernel compiled). Prints milliseconds and ratios to the one-pass floor.

    PYTHONPATH=. python bench/fusion.py [--elements N] [--repeats R] [--rounds K]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

SYSTEMS = ("fuel fused", "fuel fused openmp", "fuel unfused", "numpy per op", "torch eager",
           "numpy one pass", "numpy one pass allocating")


def _time(run, repeats: int) -> float:
    run()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _measure(system: str, elements: int, repeats: int) -> float:
    x = np.random.default_rng(0).standard_normal(elements).astype(np.float32)
    if system.startswith("fuel"):
        import fuel

        fuel.set_fusion(system != "fuel unfused")
        source = fuel.tensor(x)

        def run():
            y = fuel.neg((fuel.relu(source * 1.5 + 0.5) - source) * source / 2.0 + 1.0)
            y.realize()
        return _time(run, repeats)
    if system == "torch eager":
        import torch

        torch.set_num_threads(1)
        source = torch.from_numpy(x)
        return _time(lambda: torch.neg((torch.relu(source * 1.5 + 0.5) - source) * source
                                       / 2.0 + 1.0), repeats)
    if system == "numpy per op":
        def run():
            return np.negative((np.maximum(x * np.float32(1.5) + np.float32(0.5), 0) - x) * x
                               / np.float32(2.0) + np.float32(1.0))
        return _time(run, repeats)
    if system == "numpy one pass allocating":
        return _time(lambda: np.add(x, np.float32(1.0)), repeats)
    output = np.empty_like(x)
    return _time(lambda: np.add(x, np.float32(1.0), out=output), repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=2, help="alternate systems this often")
    parser.add_argument("--system", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.system:
        print(json.dumps(_measure(args.system, args.elements, args.repeats)))
        return
    best: dict[str, float] = {}
    for _ in range(args.rounds):  # alternate systems: a busy machine skews one less
        for system in SYSTEMS:
            environment = dict(os.environ, FUEL_OPENMP="1" if "openmp" in system else "0")
            result = subprocess.run([sys.executable, __file__, "--system", system, "--elements",
                                     str(args.elements), "--repeats", str(args.repeats)],
                                    capture_output=True, text=True, env=environment)
            if result.returncode != 0:
                print(f"{system}: failed: {result.stderr.strip().splitlines()[-1:]}")
                continue
            seconds = json.loads(result.stdout.strip().splitlines()[-1])
            best[system] = min(best.get(system, seconds), seconds)
    floor = best.get("numpy one pass")
    print(f"8-op elementwise chain, {args.elements} float32 elements (median of {args.repeats}, "
          f"best of {args.rounds} rounds, one thread each but openmp)")
    print(f"{'system':<28}{'ms':>10}{'x one pass':>12}")
    for system in SYSTEMS:
        if system in best:
            ratio = f"{best[system] / floor:>12.2f}" if floor else ""
            print(f"{system:<28}{best[system] * 1e3:>10.2f}{ratio}")
    if "fuel fused" in best and floor:
        print(f"fused / one NumPy pass = {best['fuel fused'] / floor:.2f} (target <= 1.5)")
        allocating = best.get("numpy one pass allocating")
        if allocating:
            print(f"fused / one allocating NumPy pass = {best['fuel fused'] / allocating:.2f}")


if __name__ == "__main__":
    main()
