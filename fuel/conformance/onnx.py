"""The ONNX backend conformance harness.

    python -m fuel.conformance.onnx [--device D] [--filter REGEX] [--json out.json]
                                    [--suite node,models,light] [--markdown docs/CONFORMANCE.md]

Generates the node cases from the installed onnx into a cache directory (once), runs them and
the model folders the onnx wheel ships, and prints pass / mismatch / unsupported / error
counts per op and per suite.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from fuel.conformance.cases import ALL_SUITES, LIGHT_SUITE, MODEL_SUITES, NODE_SUITE, load_cases
from fuel.conformance.report import (
    as_json,
    failures_text,
    markdown,
    per_group_text,
    per_op_text,
    progress,
    totals,
    totals_text,
)
from fuel.conformance.runner import PASS, Result, run_case
from fuel.extras import install_command

SUITE_NAMES = {"node": (NODE_SUITE,), "models": MODEL_SUITES, "light": (LIGHT_SUITE,),
               "all": ALL_SUITES}


def parse_suites(text: str) -> tuple[str, ...]:
    suites: list[str] = []
    for name in text.split(","):
        name = name.strip()
        if name in SUITE_NAMES:
            suites += SUITE_NAMES[name]
        elif name in ALL_SUITES:
            suites.append(name)
        else:
            raise SystemExit(f"unknown suite {name!r}; choose from "
                             f"{', '.join(list(SUITE_NAMES) + list(ALL_SUITES))}")
    return tuple(dict.fromkeys(suites))


def run_all(cases, device: str = "cpu", runtime: str = "fuel", show_progress: bool = True,
            label: str | None = None) -> list[Result]:
    """Run ``cases`` in order; a progress bar on stderr when ``show_progress``."""
    iterator = progress(cases, label or runtime) if show_progress else cases
    return [run_case(case, device, runtime) for case in iterator]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m fuel.conformance.onnx",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="fuel device (default cpu)")
    parser.add_argument("--filter", help="only cases whose name matches this regex")
    parser.add_argument("--suite", default="all",
                        help="node, models, light, all or suite names, comma-separated")
    parser.add_argument("--json", help="write every result to this JSON file")
    parser.add_argument("--markdown", help="write the Markdown report (docs/CONFORMANCE.md)")
    parser.add_argument("--runtime", default="fuel", choices=("fuel", "onnxruntime"),
                        help="run the cases on fuel (default) or on onnxruntime")
    parser.add_argument("--failures", action="store_true", help="list every failing case")
    parser.add_argument("--compare", action="store_true",
                        help="also run onnxruntime on the same cases and show its passes")
    parser.add_argument("--no-ops", action="store_true", help="omit the per-op table")
    parser.add_argument("--fast-list", metavar="PATH",
                        help="write the fast subset (the first passing case of every op, every "
                             "passing light model) for the onnx_fast tests")
    return parser


def fast_subset(results: list[Result]) -> list[str]:
    """One passing case per node op (the first by name), then the first passing case running
    each op type no chosen case runs yet, and every passing light model: what the
    ``onnx_fast`` tests run."""
    passing = sorted((r.case for r in results if r.status == PASS), key=lambda c: c.name)
    chosen: dict[str, str] = {}
    for case in passing:
        if case.suite == NODE_SUITE and case.op not in chosen:
            chosen[case.op] = case.name
    names = set(chosen.values())
    covered: set[str] = set()
    kinds = {case.name: model_op_types(case.model_path) for case in passing
             if case.suite != LIGHT_SUITE}
    for name in names:
        covered |= kinds[name]
    for case in passing:
        if case.suite != LIGHT_SUITE and not kinds[case.name] <= covered:
            names.add(case.name)
            covered |= kinds[case.name]
    lights = [case.name for case in passing if case.suite == LIGHT_SUITE]
    return sorted(names) + lights


def model_op_types(path: str) -> set[str]:
    """Every op type in a model file, subgraphs included."""
    import onnx

    def walk(graph) -> set[str]:
        found = set()
        for node in graph.node:
            found.add(f"{node.domain}::{node.op_type}")
            for attribute in node.attribute:
                if attribute.HasField("g"):
                    found |= walk(attribute.g)
        return found

    return walk(onnx.load(path, load_external_data=False).graph)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import onnx
    except ImportError:
        print(f"the conformance harness needs onnx: {install_command('onnx')}",
              file=sys.stderr)
        return 2
    cases = load_cases(parse_suites(args.suite), args.filter,
                       progress=lambda items, label: progress(items, label))
    if not cases:
        print("no case matches", file=sys.stderr)
        return 1
    start = time.perf_counter()
    results = run_all(cases, args.device, args.runtime)
    seconds = time.perf_counter() - start
    if not args.no_ops:
        print(per_op_text(results))
        print()
    if args.failures:
        print(failures_text(results))
        print()
    print(totals_text(results))
    print("\n" + per_group_text(results))
    print(f"\n{len(results)} cases in {seconds:.1f} s on {args.runtime} ({args.device})")
    meta = {"onnx": onnx.__version__, "device": args.device, "runtime": args.runtime,
            "filter": args.filter, "seconds": round(seconds, 2)}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(as_json(results, meta), handle, indent=1)
    if args.fast_list:
        with open(args.fast_list, "w", encoding="utf-8") as handle:
            handle.write("# The onnx_fast subset, written by python -m fuel.conformance.onnx "
                         "--fast-list\n")
            handle.write("\n".join(fast_subset(results)) + "\n")
    peer = None
    if args.compare:
        import onnxruntime

        peer = run_all(cases, runtime="onnxruntime", label="onnxruntime")
        meta.update(peer="onnxruntime", peer_version=onnxruntime.__version__)
        print("\nonnxruntime on the same cases:\n" + totals_text(peer))
        print("\nper dtype group, fuel and onnxruntime:\n"
              + per_group_text(results, peer, "ort"))
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as handle:
            handle.write(markdown(results, meta, peer))
    return 0 if all(totals(results)) else 1


if __name__ == "__main__":
    sys.exit(main())
