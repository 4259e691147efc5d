"""Fused generated kernels against one kernel per op: an 8-op chain and four row functions.

The chain ``neg((relu(x * 1.5 + 0.5) - x) * x / 2 + 1)`` (mul, add, relu, sub, mul, div, add,
neg) over 16M float32 elements, run by fuel with fusion on (one generated C kernel), fuel with
fusion off (one NumPy kernel per op), fuel fused ending in ``.numpy()`` (a view of the
result's storage, no copy), fuel fused with OpenMP (``FUEL_OPENMP=1``: the outer
loop on all cores), NumPy one op at a time, torch eager, and one NumPy pass
``np.add(x, 1, out=y)`` (the memory-bound floor) and ``np.add(x, 1)``, which like every
other system here writes a fresh 64 MB result (its page faults cost about as much as the
pass). Each system runs in its own process; each reports the median of its repeats after a
warm-up (plan built and kernel compiled). Prints milliseconds and ratios to the one-pass floor.

Row functions: softmax, layer_norm, rms_norm (written from primitives: one fused kernel each)
and gelu over (4096, 4096) float32 by fuel fused, fuel's hand-written NumPy kernels (fusion
off), NumPy one op at a time and torch, one thread each.

OpenCL (``--only opencl``, also in the default run when OpenCL works): the same chain and row
functions on ``opencl:0`` (PoCL on this machine), fused (one generated OpenCL kernel per
group) against fusion off (the OpenCL kernels per op, and the hand-written row kernels).

    PYTHONPATH=. python bench/fusion.py [--elements N] [--size S] [--repeats R] [--rounds K]
        [--only chain|rows|opencl]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np
from child import median_seconds

SYSTEMS = ("fuel fused", "fuel fused .numpy()", "fuel fused openmp", "fuel unfused",
           "numpy per op", "torch eager", "numpy one pass", "numpy one pass allocating")


def _measure(system: str, elements: int, repeats: int) -> float:
    x = np.random.default_rng(0).standard_normal(elements).astype(np.float32)
    if system.startswith(("fuel", "opencl")):
        import fuel

        fuel.set_fusion(system not in ("fuel unfused", "opencl unfused"))
        source = fuel.tensor(x, device=OPENCL_DEVICE if system.startswith("opencl") else "cpu")

        to_host = system.endswith(".numpy()")

        def run():
            y = fuel.neg((fuel.relu(source * 1.5 + 0.5) - source) * source / 2.0 + 1.0)
            return y.numpy() if to_host else y.realize()
        return median_seconds(run, repeats)
    if system == "torch eager":
        import torch

        torch.set_num_threads(1)
        source = torch.from_numpy(x)
        return median_seconds(lambda: torch.neg((torch.relu(source * 1.5 + 0.5) - source) * source
                                       / 2.0 + 1.0), repeats)
    if system == "numpy per op":
        def run():
            return np.negative((np.maximum(x * np.float32(1.5) + np.float32(0.5), 0) - x) * x
                               / np.float32(2.0) + np.float32(1.0))
        return median_seconds(run, repeats)
    if system == "numpy one pass allocating":
        return median_seconds(lambda: np.add(x, np.float32(1.0)), repeats)
    output = np.empty_like(x)
    return median_seconds(lambda: np.add(x, np.float32(1.0), out=output), repeats)


OPENCL_DEVICE = "opencl:0"
OPENCL_SYSTEMS = ("opencl fused", "opencl unfused")
OPENCL_ROW_SYSTEMS = ("opencl fused", "opencl hand-written")
ROW_FUNCTIONS = ("softmax", "layer_norm", "rms_norm", "gelu")
ROW_SYSTEMS = ("fuel fused", "fuel hand-written", "numpy per op", "torch")


def _row_function(name: str, library: str):
    """``name`` over the last dim, written from primitives in ``library`` (fuel or numpy)."""
    import fuel

    ops = fuel if library == "fuel" else None

    def softmax(x, w):
        if ops is None:
            e = np.exp(x - x.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)
        e = (x - x.amax(-1, keepdim=True)).exp()
        return e / e.sum(-1, keepdim=True)

    def layer_norm(x, w):
        if ops is None:
            centered = x - x.mean(-1, keepdims=True)
            variance = (centered * centered).mean(-1, keepdims=True)
            return centered / np.sqrt(variance + np.float32(1e-5)) * w
        centered = x - x.mean(-1, keepdim=True)
        variance = (centered * centered).mean(-1, keepdim=True)
        return centered / (variance + 1e-5).sqrt() * w

    def rms_norm(x, w):
        if ops is None:
            return x / np.sqrt((x * x).mean(-1, keepdims=True) + np.float32(1e-6)) * w
        return x * ((x * x).mean(-1, keepdim=True) + 1e-6).rsqrt() * w

    def gelu(x, w):
        if ops is None:
            from scipy.special import erf

            return np.float32(0.5) * x * (np.float32(1) + erf(x * np.float32(0.7071067811865476)))
        return 0.5 * x * (1.0 + fuel.erf(x * 0.7071067811865476))

    return {"softmax": softmax, "layer_norm": layer_norm, "rms_norm": rms_norm,
            "gelu": gelu}[name]


def _measure_row(name: str, system: str, size: int, repeats: int) -> float:
    random = np.random.default_rng(0)
    x = random.standard_normal((size, size)).astype(np.float32)
    w = random.standard_normal(size).astype(np.float32)
    if system == "torch":
        import torch
        import torch.nn.functional as functional

        torch.set_num_threads(1)
        tx, tw = torch.from_numpy(x), torch.from_numpy(w)
        run = {"softmax": lambda: torch.softmax(tx, -1),
               "layer_norm": lambda: functional.layer_norm(tx, (size,), tw),
               "rms_norm": lambda: functional.rms_norm(tx, (size,), tw, 1e-6),
               "gelu": lambda: functional.gelu(tx)}[name]
        return median_seconds(run, repeats)
    if system == "numpy per op":
        function = _row_function(name, "numpy")
        return median_seconds(lambda: function(x, w), repeats)
    import fuel
    import fuel.nn.functional as functional

    fuel.set_fusion(system in ("fuel fused", "opencl fused"))
    device = OPENCL_DEVICE if system.startswith("opencl") else "cpu"
    fx, fw = fuel.tensor(x, device=device), fuel.tensor(w, device=device)
    if system in ("fuel fused", "opencl fused"):
        function = _row_function(name, "fuel")
        return median_seconds(lambda: function(fx, fw).realize(), repeats)
    hand_written = {"softmax": lambda: functional.softmax(fx, -1),
                    "layer_norm": lambda: functional.layer_norm(fx, (size,), fw),
                    "rms_norm": lambda: functional.rms_norm(fx, (size,), fw, 1e-6),
                    "gelu": lambda: functional.gelu(fx)}[name]
    return median_seconds(lambda: hand_written().realize(), repeats)


def _rows_table(args) -> None:
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.rounds):
        for name in ROW_FUNCTIONS:
            for system in ROW_SYSTEMS:
                result = subprocess.run([sys.executable, __file__, "--row", name, "--system",
                                         system, "--size", str(args.size), "--repeats",
                                         str(args.repeats)], capture_output=True, text=True,
                                        env=dict(os.environ, FUEL_OPENMP="0"))
                if result.returncode != 0:
                    print(f"{name} {system}: failed: {result.stderr.strip().splitlines()[-1:]}")
                    continue
                seconds = json.loads(result.stdout.strip().splitlines()[-1])
                key = (name, system)
                best[key] = min(best.get(key, seconds), seconds)
    print(f"\nrow functions over ({args.size}, {args.size}) float32, last dim (median of "
          f"{args.repeats}, best of {args.rounds} rounds, one thread each); ms and x torch")
    print(f"{'function':<12}" + "".join(f"{system:>22}" for system in ROW_SYSTEMS))
    for name in ROW_FUNCTIONS:
        torch_time = best.get((name, "torch"))
        cells = []
        for system in ROW_SYSTEMS:
            seconds = best.get((name, system))
            ratio = f" ({seconds / torch_time:.2f}x)" if seconds and torch_time else ""
            cells.append(f"{seconds * 1e3:.1f}{ratio}" if seconds else "-")
        print(f"{name:<12}" + "".join(f"{cell:>22}" for cell in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=16 * 1024 * 1024)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=2, help="alternate systems this often")
    parser.add_argument("--size", type=int, default=4096, help="rows and row length")
    parser.add_argument("--only", choices=("chain", "rows", "opencl"), help="run one table")
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.system and args.row:
        print(json.dumps(_measure_row(args.row, args.system, args.size, args.repeats)))
        return
    if args.system:
        print(json.dumps(_measure(args.system, args.elements, args.repeats)))
        return
    if args.only in (None, "chain"):
        _chain_table(args)
    if args.only in (None, "rows"):
        _rows_table(args)
    if args.only in (None, "opencl"):
        _opencl_table(args)


def _run_system(arguments: list[str], environment=None) -> float | None:
    """Seconds one system reported from its own process (None, printed, when it failed)."""
    result = subprocess.run([sys.executable, __file__, *arguments], capture_output=True,
                            text=True, env=environment)
    if result.returncode != 0:
        print(f"{' '.join(arguments)}: failed: {result.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(result.stdout.strip().splitlines()[-1])


def _opencl_table(args) -> None:
    """The chain and the row functions on opencl:0, fused vs fusion off, in one run."""
    samples: dict[tuple[str, str], list[float]] = {}
    environment = dict(os.environ, FUEL_OPENMP="0")
    for _ in range(args.rounds):
        for system in OPENCL_SYSTEMS:
            seconds = _run_system(["--system", system, "--elements", str(args.elements),
                                   "--repeats", str(args.repeats)], environment)
            if seconds is not None:
                samples.setdefault(("chain", system), []).append(seconds)
        for name in ROW_FUNCTIONS:
            for system in OPENCL_ROW_SYSTEMS:
                seconds = _run_system(["--row", name, "--system", system, "--size",
                                       str(args.size), "--repeats", str(args.repeats)],
                                      environment)
                if seconds is not None:
                    samples.setdefault((name, system), []).append(seconds)
    print(f"\nOpenCL on {OPENCL_DEVICE}: 8-op chain over {args.elements} float32 elements and "
          f"row functions over ({args.size}, {args.size}) float32 (median of {args.repeats} "
          f"per process, median of {args.rounds} alternated rounds); ms, fused / fusion off")
    print(f"{'workload':<12}{'fused':>12}{'fusion off':>14}{'ratio':>10}")
    for name, baseline in [("chain", "opencl unfused")] + [(n, "opencl hand-written")
                                                             for n in ROW_FUNCTIONS]:
        fused, off = samples.get((name, "opencl fused")), samples.get((name, baseline))
        if not fused or not off:
            continue
        fused_ms, off_ms = statistics.median(fused) * 1e3, statistics.median(off) * 1e3
        print(f"{name:<12}{fused_ms:>12.1f}{off_ms:>14.1f}{fused_ms / off_ms:>9.2f}x")


def _chain_table(args) -> None:
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
        if "fuel fused .numpy()" in best:
            print(f"fused with .numpy() / one NumPy pass = "
                  f"{best['fuel fused .numpy()'] / floor:.2f} (target <= 1.3)")
        allocating = best.get("numpy one pass allocating")
        if allocating:
            print(f"fused / one allocating NumPy pass = {best['fuel fused'] / allocating:.2f}")


if __name__ == "__main__":
    main()
