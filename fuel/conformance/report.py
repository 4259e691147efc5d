"""Tables of conformance results: per op, per suite, totals; text, JSON and Markdown."""

from __future__ import annotations

import sys
from collections import Counter, defaultdict

from fuel.conformance.cases import GROUP_NAMES, LIGHT_SUITE, MODEL_SUITES, NODE_SUITE
from fuel.conformance.notes import JUDGING, reason_for
from fuel.conformance.runner import PASS, STATUSES, Result

SHORT = {"pass": "pass", "mismatch": "mismatch", "unsupported op": "no op",
         "unsupported dtype": "no dtype", "error": "error"}


def progress(items, label: str):
    """tqdm when installed, else a plain bar on stderr."""
    items = list(items)
    try:
        from tqdm import tqdm

        # disable=None: a bar on a terminal, nothing when stderr is a file or a pipe
        return tqdm(items, desc=label, unit="case", file=sys.stderr, leave=False, disable=None)
    except ImportError:
        return _simple_progress(items, label)


def _simple_progress(items, label: str):
    total = len(items)
    step = max(total // 50, 1)
    for index, item in enumerate(items):
        if index % step == 0 and sys.stderr.isatty():
            done = index * 40 // max(total, 1)
            sys.stderr.write(f"\r{label} [{'#' * done}{'.' * (40 - done)}] {index}/{total}")
            sys.stderr.flush()
        yield item
    if sys.stderr.isatty():
        sys.stderr.write(f"\r{label} done ({total}){' ' * 50}\n")


def totals(results: list[Result]) -> dict[str, dict[str, int]]:
    """Status counts for: node (all), node float32/int64 inputs, each model suite, light."""
    groups: dict[str, Counter] = defaultdict(Counter)
    for result in results:
        case = result.case
        if case.suite == NODE_SUITE:
            groups["node"][result.status] += 1
            if case.float32_int64_inputs:
                groups["node float32/int64"][result.status] += 1
        else:
            groups[case.suite][result.status] += 1
    order = ["node", "node float32/int64", *MODEL_SUITES, LIGHT_SUITE]
    return {name: {s: groups[name][s] for s in STATUSES} | {"total": sum(groups[name].values())}
            for name in order if name in groups}


def per_op(results: list[Result]) -> dict[str, dict[str, int]]:
    """Status counts per tested op of the node suite."""
    table: dict[str, Counter] = defaultdict(Counter)
    for result in results:
        if result.case.suite == NODE_SUITE:
            table[result.case.op][result.status] += 1
    return {op: {s: table[op][s] for s in STATUSES} | {"total": sum(table[op].values())}
            for op in sorted(table)}


def per_group(results: list[Result]) -> dict[str, dict[str, int]]:
    """Status counts per dtype group of the node suite (``cases.DTYPE_GROUPS``)."""
    table: dict[str, Counter] = defaultdict(Counter)
    for result in results:
        if result.case.suite == NODE_SUITE:
            table[result.case.dtype_group][result.status] += 1
    return {group: {s: table[group][s] for s in STATUSES} | {"total": sum(table[group].values())}
            for group in GROUP_NAMES if group in table}


def per_group_text(results: list[Result], peer: list[Result] | None = None,
                   peer_name: str = "ort") -> str:
    """The per-dtype-group table; with ``peer``, its passes and whether fuel passes more."""
    theirs = per_group(peer) if peer else {}
    header = f"{'dtype group':<22}{'cases':>6}" + "".join(f"{SHORT[s]:>10}" for s in STATUSES)
    if peer:
        header += f"{peer_name + ' pass':>10}  fuel > {peer_name}"
    lines = [header]
    for group, counts in per_group(results).items():
        line = f"{group:<22}{counts['total']:>6}" + "".join(f"{counts[s]:>10}" for s in STATUSES)
        if peer:
            other = theirs.get(group, {}).get(PASS, 0)
            line += f"{other:>10}  {'yes' if counts[PASS] > other else 'NO'}"
        lines.append(line)
    return "\n".join(lines)


def totals_text(results: list[Result]) -> str:
    header = f"{'suite':<22}{'cases':>6}" + "".join(f"{SHORT[s]:>10}" for s in STATUSES)
    lines = [header]
    for name, counts in totals(results).items():
        lines.append(f"{name:<22}{counts['total']:>6}"
                     + "".join(f"{counts[s]:>10}" for s in STATUSES))
    return "\n".join(lines)


def per_op_text(results: list[Result]) -> str:
    header = f"{'op':<28}{'cases':>6}" + "".join(f"{SHORT[s]:>10}" for s in STATUSES)
    lines = [header]
    for op, counts in per_op(results).items():
        lines.append(f"{op:<28}{counts['total']:>6}"
                     + "".join(f"{counts[s]:>10}" for s in STATUSES))
    return "\n".join(lines)


def failures_text(results: list[Result], limit: int | None = None) -> str:
    rows = [r for r in results if r.status != PASS]
    lines = [f"{r.case.name:<60}{r.status:<19}{r.detail}" for r in rows[:limit]]
    return "\n".join(lines)


def as_json(results: list[Result], meta: dict) -> dict:
    return {
        "meta": meta,
        "totals": totals(results),
        "per_op": per_op(results),
        "per_dtype_group": per_group(results),
        "cases": [{"name": r.case.name, "suite": r.case.suite, "op": r.case.op,
                   "status": r.status, "detail": r.detail, "seconds": round(r.seconds, 5),
                   "float32_int64_inputs": r.case.float32_int64_inputs,
                   "dtype_group": r.case.dtype_group} for r in results],
    }


def markdown(results: list[Result], meta: dict, peer: list[Result] | None = None) -> str:
    """docs/CONFORMANCE.md: totals, every op with its counts (and the peer runtime's passes),
    the model cases and the node cases that do not pass."""
    peer_name = meta.get("peer", "onnxruntime")
    peer_totals = totals(peer) if peer else {}
    peer_ops = per_op(peer) if peer else {}
    extra_head = f" | {peer_name} pass" if peer else ""
    extra_rule = "---:|" if peer else ""
    lines = [
        "# ONNX conformance",
        "",
        "Generated by `python -m fuel.conformance.onnx --markdown docs/CONFORMANCE.md "
        "--compare` (onnx",
        f"{meta.get('onnx', '?')}, fuel on {meta.get('device', 'cpu')}); do not edit by hand. "
        "Every case runs with",
        "rtol 1e-3 / atol 1e-5 (or the case's own, when looser)." + (
            f" The last column is {peer_name} {meta.get('peer_version', '')} on the same "
            "cases in the same run." if peer else ""),
        "",
        "Status: **pass**; **mismatch** (ran, wrong values, shape or dtype); **no op** (an op "
        "or attribute",
        "value fuel does not implement); **no dtype** (an element type fuel has no dtype for: "
        "string,",
        "uint16/32/64, float8, int4, ...); **error** (any other failure).",
        "",
        "Casts from a float to a 2- or 4-bit integer (INT4, UINT4, INT2, UINT2) truncate toward "
        "zero and give 0",
        "where the truncated value is out of the type's range, NaN and infinities included. "
        "The ONNX specification",
        "leaves a float out of a fixed-point type's range undefined (Cast: \"fixed point: "
        "undefined if OOR\"); fuel",
        "takes ml_dtypes' answer from 0.7 on, the library that defines these types for NumPy "
        "(0.6 wrapped: -9 -> 7),",
        "and the node cases' expected outputs are written from that rule on every ml_dtypes "
        "(`fuel.conformance.cases`),",
        "so the counts do not depend on the machine's version. The generated cases are cached "
        "per onnx, ml_dtypes and",
        "NumPy version under `$FUEL_CACHE_DIR/onnx-node-cases` (`$FUEL_ONNX_CASES` moves them).",
        "",
        "## Totals",
        "",
        "| suite | cases | " + " | ".join(SHORT[s] for s in STATUSES) + extra_head + " |",
        "|---|---:|" + "---:|" * len(STATUSES) + extra_rule,
    ]
    for name, counts in totals(results).items():
        tail = f" | {peer_totals.get(name, {}).get('pass', '-')}" if peer else ""
        lines.append(f"| {name} | {counts['total']} | "
                     + " | ".join(str(counts[s]) for s in STATUSES) + tail + " |")
    peer_groups = per_group(peer) if peer else {}
    lines += ["", "## Node cases per dtype group", "",
              "A case belongs to the first group one of its element types (inputs, outputs, "
              "initializers,", "constants, Cast targets) is in, in this order; `float32/int64` "
              "holds the cases whose types", "are all float32, int64 or bool, `other` the rest "
              "(float64, int8/16/32, ...).", "",
              "| dtype group | cases | " + " | ".join(SHORT[s] for s in STATUSES) + extra_head
              + " |", "|---|---:|" + "---:|" * len(STATUSES) + extra_rule]
    for group, counts in per_group(results).items():
        tail = f" | {peer_groups.get(group, {}).get('pass', '-')}" if peer else ""
        lines.append(f"| {group} | {counts['total']} | "
                     + " | ".join(str(counts[s]) for s in STATUSES) + tail + " |")
    lines += ["", "## Node cases per op", "",
              "| op | cases | " + " | ".join(SHORT[s] for s in STATUSES) + extra_head + " |",
              "|---|---:|" + "---:|" * len(STATUSES) + extra_rule]
    for op, counts in per_op(results).items():
        tail = f" | {peer_ops.get(op, {}).get('pass', '-')}" if peer else ""
        lines.append(f"| {op} | {counts['total']} | "
                     + " | ".join(str(counts[s]) for s in STATUSES) + tail + " |")
    lines += ["", "## Models", "", "| case | suite | status | detail |", "|---|---|---|---|"]
    for result in results:
        if result.case.suite != NODE_SUITE:
            lines.append(f"| {result.case.name} | {result.case.suite} | {result.status} | "
                         f"{_cell(result.detail)} |")
    lines += ["", "## Cases that do not pass, and why", "",
              "The reasons are hand-written (`fuel/conformance/notes.py`); a case without one "
              "says so.", "", "| case | op | status | detail | why |", "|---|---|---|---|---|"]
    for result in results:
        if result.status != PASS:
            lines.append(f"| {result.case.name} | {result.case.op} | {result.status} | "
                         f"{_cell(result.detail)} | {reason_for(result.case.name)} |")
    if peer:
        behind = [group for group, counts in per_group(results).items()
                  if counts[PASS] <= peer_groups.get(group, {}).get(PASS, 0)]
        lines += ["", "## Dtype groups where fuel does not pass more than " + peer_name, "",
                  ", ".join(behind) if behind else "None: fuel passes more cases than "
                  f"{peer_name} in every dtype group."]
    lines += ["", "## How cases are judged", "", JUDGING]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= 160 else text[:157] + "..."
