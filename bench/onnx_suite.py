"""The ONNX backend suite on fuel and on onnxruntime, timed in one run.

Runs every case (node cases generated from the installed onnx, the pytorch-converted,
pytorch-operator and simple folders, the light CNNs) on both runtimes, then prints the pass
counts side by side per suite with each runtime's time and the fuel / onnxruntime time ratio
(lower is better), then the node cases per dtype group (fuel.conformance.cases.DTYPE_GROUPS)
with both runtimes' passes. Each runtime's time covers loading, building and running every case.

    python bench/onnx_suite.py [--suite node,models,light] [--filter REGEX] [--device D]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy as np

from fuel.conformance.cases import load_cases
from fuel.conformance.onnx import parse_suites, run_all
from fuel.conformance.report import per_group_text, totals


def suite_seconds(results) -> dict[str, float]:
    """Seconds per suite row of ``totals`` (summed over the cases' own timings)."""
    seconds: dict[str, float] = {}
    for result in results:
        case = result.case
        rows = [case.suite] if case.suite != "node" else ["node"] + (
            ["node float32/int64"] if case.float32_int64_inputs else [])
        for row in rows:
            seconds[row] = seconds.get(row, 0.0) + result.seconds
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="all", help="node, models, light or all")
    parser.add_argument("--filter", help="only cases whose name matches this regex")
    parser.add_argument("--device", default="cpu", help="fuel device (default cpu)")
    args = parser.parse_args(argv)
    try:
        import onnx
        import onnxruntime
    except ImportError as error:
        print(f"bench/onnx_suite.py needs onnx and onnxruntime: {error}", file=sys.stderr)
        return 2
    cases = load_cases(parse_suites(args.suite), args.filter)
    print(f"onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, numpy "
          f"{np.__version__}, {platform.machine()}, {len(cases)} cases, fuel on {args.device}")
    timings = {}
    outcomes = {}
    for runtime in ("fuel", "onnxruntime"):
        start = time.perf_counter()
        outcomes[runtime] = run_all(cases, args.device, runtime, show_progress=False)
        timings[runtime] = time.perf_counter() - start
    ours, theirs = totals(outcomes["fuel"]), totals(outcomes["onnxruntime"])
    our_seconds = suite_seconds(outcomes["fuel"])
    their_seconds = suite_seconds(outcomes["onnxruntime"])
    print(f"\n{'suite':<22}{'cases':>6}{'fuel pass':>11}{'ort pass':>10}{'fuel s':>9}"
          f"{'ort s':>9}{'time ratio':>12}")
    for name, counts in ours.items():
        mine, peer = our_seconds.get(name, 0.0), their_seconds.get(name, 0.0)
        ratio = f"{mine / peer:.2f}x" if peer else "-"
        print(f"{name:<22}{counts['total']:>6}{counts['pass']:>11}{theirs[name]['pass']:>10}"
              f"{mine:>9.2f}{peer:>9.2f}{ratio:>12}")
    print("\nnode cases per dtype group (fuel passes more than onnxruntime?):")
    print(per_group_text(outcomes["fuel"], outcomes["onnxruntime"], "ort"))
    print(f"\nwhole sweep: fuel {timings['fuel']:.1f} s, onnxruntime "
          f"{timings['onnxruntime']:.1f} s, ratio {timings['fuel'] / timings['onnxruntime']:.2f}x"
          " (fuel / onnxruntime, lower is better)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
