"""``fuel tune``: run a model's usual shapes once with the judge on, so that later processes
dispatch the measured winners from the stored verdicts and time nothing."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from fuel.ir.errors import InvalidArgument

MINILM_SHAPES = [(batch, length) for batch in (1, 8) for length in (4, 8, 16, 32, 64, 128, 256)]
# One prompt per row bucket up to a prefill chunk (fuel.models.llama_graph.ROW_BUCKETS): a
# prompt runs padded to its bucket, so these steps serve every prompt length up to 128, and
# the steps they ran are recorded for a later load to prepare (fuel.models.warm_steps).
SMOLLM_PROMPTS = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
SMOLLM_NEW_TOKENS = 8


def add_commands(subparsers) -> None:
    """Register ``tune``."""
    tune = subparsers.add_parser(
        "tune", help="time the competing kernels of a model's shapes and store the winners",
        description="Run TARGET's usual shapes once with the judge on (FUEL_JUDGE=on): each "
                    "kernel key with competing candidates is timed on the real operands, per "
                    "shape bucket, and the winners are stored in the cache folder, so later "
                    "processes time nothing. TARGET: minilm, smollm2, a .gguf file, a .onnx "
                    "file or a MiniLM folder. Prints what it chose.")
    tune.add_argument("targets", nargs="+", metavar="TARGET")
    tune.add_argument("--budget", type=float, default=15.0, metavar="SECONDS",
                      help="seconds of timing allowed per target (default 15)")
    tune.add_argument("--dim", action="append", default=[], metavar="NAME=N",
                      help="ONNX: size of a named free dimension (repeatable; others 1)")
    tune.add_argument("--quiet", action="store_true", help="print only the summary line")
    tune.set_defaults(handler=run_tune)


def run_tune(args: argparse.Namespace) -> int:
    """Tune every target; print the verdicts each one reached and a summary."""
    saved = {name: os.environ.get(name) for name in ("FUEL_JUDGE", "FUEL_JUDGE_BUDGET")}
    try:
        return _tune(args)
    finally:  # a caller's own settings come back (fuel.cli.main runs in-process too)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _tune(args: argparse.Namespace) -> int:
    import fuel
    from fuel.runtime.judge import JUDGE

    os.environ["FUEL_JUDGE"] = "on"
    os.environ["FUEL_JUDGE_SHARE"] = "inf"  # tuning is this process's work: only --budget bounds it
    started = time.perf_counter()
    for target in args.targets:
        os.environ["FUEL_JUDGE_BUDGET"] = str(JUDGE.spent + max(args.budget, 0.0))
        before = set(JUDGE.verdicts)
        begun = time.perf_counter()
        _run_target(target, args.dim, args.quiet)
        new = {key: verdict for key, verdict in JUDGE.verdicts.items() if key not in before}
        if not args.quiet:
            _print_verdicts(target, new, time.perf_counter() - begun)
    JUDGE.flush()  # the winners on disk before saying where they are
    stats = fuel.judge_stats()
    print(f"tuned {', '.join(args.targets)} in {time.perf_counter() - started:.1f} s: "
          f"{stats['timed']} bucket(s) timed ({stats['spent_seconds']:.1f} s), "
          f"{stats['stored']} already stored, {stats['switched']} switched from the kernels' "
          f"rules; winners in {stats['path']}")
    return 0


def _run_target(target: str, dims: list[str], quiet: bool) -> None:
    name = target.lower()
    path = Path(target)
    folder = path.is_dir() and (path / "config.json").exists()
    if name in ("minilm", "all-minilm-l6-v2") or folder:
        _tune_minilm(None if name in ("minilm", "all-minilm-l6-v2") else path, quiet)
    elif name in ("smollm2", "smollm") or path.suffix == ".gguf":
        _tune_gguf(None if name in ("smollm2", "smollm") else path, quiet)
    elif path.suffix == ".onnx":
        _tune_onnx(path, dims, quiet)
    else:
        raise InvalidArgument(f"fuel tune: don't know how to run {target!r}: give minilm, "
                              "smollm2, a .gguf file, a .onnx file or a MiniLM folder")


def _progress(quiet: bool, text: str) -> None:
    if not quiet:
        print(f"  {text}", file=sys.stderr, flush=True)


def _tune_minilm(path: Path | None, quiet: bool) -> None:
    import numpy as np

    from fuel.models import minilm

    encoder = minilm.load(path).encoder
    rng = np.random.default_rng(0)
    for batch, length in MINILM_SHAPES:
        _progress(quiet, f"minilm {batch} x {length}")
        ids = rng.integers(1000, 20000, (batch, length)).astype(np.int64)
        encoder.mean_pooled(ids, np.ones_like(ids)).numpy()


def _tune_gguf(path: Path | None, quiet: bool) -> None:
    from fuel.models import warm_steps
    from fuel.models.llama import load_gguf

    model = load_gguf(path, warm=False)
    for length in SMOLLM_PROMPTS:
        _progress(quiet, f"prompt of {length} tokens + {SMOLLM_NEW_TOKENS} decode steps")
        ids = [(7 * k + 11) % 1000 + 100 for k in range(length)]
        model.generate_ids(ids, SMOLLM_NEW_TOKENS)
    if model.source_path is not None:
        warm_steps.record(model.source_path, model.ran_steps)
        _progress(quiet, f"recorded {len(model.ran_steps)} step shapes for a warm start in "
                         f"{warm_steps.record_path()}")


def _tune_onnx(path: Path, dims: list[str], quiet: bool) -> None:
    from fuel.cli.onnx import _feeds
    from fuel.onnx import load

    model = load(path)
    feeds = _feeds(model, argparse.Namespace(input=[], dim=dims, seed=0))
    _progress(quiet, f"{path.name} on "
                     f"{', '.join(f'{name}{list(value.shape)}' for name, value in feeds.items())}")
    model.run(feeds)


def _print_verdicts(target: str, verdicts: dict, seconds: float) -> None:
    print(f"{target}: {len(verdicts)} shape bucket(s) decided in {seconds:.1f} s")
    if not verdicts:
        return
    print(f"  {'op':<10}{'bucket':<44}{'winner':<14}{'rule':<14}{'speedup':>8}")
    for key, verdict in sorted(verdicts.items()):
        op = key.split("|", 1)[0]
        bucket = key.split("|")[-2]
        speedup = ""
        if verdict.seconds.get(verdict.winner) and verdict.seconds.get(verdict.default):
            speedup = f"{verdict.seconds[verdict.default] / verdict.seconds[verdict.winner]:.2f}x"
        print(f"  {op:<10}{bucket[:42]:<44}{verdict.winner:<14}{verdict.default:<14}"
              f"{speedup:>8}  ({verdict.source})")
