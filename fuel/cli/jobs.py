"""The batch-job options of ``fuel embed --input`` and ``fuel run --inputs``, and their handlers.

The model and ONNX command modules only call ``add_*_arguments`` and hand over to
``run_*_job`` when a batch option is given; nothing here imports Ray until a job runs with it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fuel.ir.errors import InvalidArgument

DEFAULT_BATCH_SIZE = 32


def _add_job_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", metavar="FILE",
                        help="batch job: where to write one output row per input row "
                             "(.npy, .npz or .parquet)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                        help=f"batch job: rows per batch (default {DEFAULT_BATCH_SIZE}); a "
                             "re-run after an interruption skips the batches already written")
    parser.add_argument("--errors", metavar="FILE",
                        help="batch job: the bad rows, one JSON line each (default "
                             "OUTPUT.errors.jsonl)")
    parser.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                        help="batch job on Ray: 'auto', a cluster address, or nothing for a "
                             "local cluster (needs the ray extra)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="with --ray: model actors (default 1)")
    parser.add_argument("--threads-per-worker", type=int, default=None, metavar="T",
                        help="BLAS threads (and Ray CPUs) of each worker; default 1 on Ray, "
                             "all for a job in this process")
    parser.add_argument("--no-progress", action="store_true",
                        help="batch job: no progress bar")


def add_embed_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--input`` and the batch-job options to ``fuel embed``."""
    parser.add_argument("--input", metavar="FILE",
                        help="batch job: embed every row of FILE (text lines, JSONL, Parquet) "
                             "into --output")
    parser.add_argument("--field", default="text", metavar="NAME",
                        help="the JSONL field or Parquet column holding the text (default text)")
    parser.add_argument("--format", choices=("text", "jsonl", "parquet"), default=None,
                        help="the input's format (default: from its suffix; else text)")
    _add_job_arguments(parser)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--inputs`` and the batch-job options to ``fuel run``."""
    parser.add_argument("--inputs", metavar="DIR_OR_NPZ",
                        help="batch job: run every row (a file of DIR, or index 0.. of axis 0 "
                             "of an .npz's arrays, one per input) into --output")
    _add_job_arguments(parser)


def _check(args: argparse.Namespace, option: str) -> None:
    if not args.output:
        raise InvalidArgument(f"{option} needs --output FILE (.npy, .npz or .parquet)")
    if args.ray is None and args.workers != 1:
        raise InvalidArgument("--workers needs --ray (without it the job runs in this process)")


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``1 row``, ``2 rows``, ``1,000 rows``; ``nouns`` when the plural is not noun + s."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"


def _finish(report, verb: str) -> int:
    bad = f", {report.bad_rows} bad (see {report.errors_path})" if report.bad_rows else ""
    resumed = f", {report.batches_skipped} resumed" if report.batches_skipped else ""
    print(f"{verb} {plural(report.rows, 'row')}{bad} into {report.output} in "
          f"{report.seconds:.1f} s ({report.rows_per_second:,.1f} rows/s); "
          f"{plural(report.batches_computed, 'batch', 'batches')} computed{resumed}")
    return 0


def _interrupted(output: str) -> int:
    parts = Path(output).with_name(Path(output).name + ".parts")
    print(f"\ninterrupted: the finished batches are kept in {parts}; run the same command "
          "again to resume", file=sys.stderr)
    return 130


def run_embed_job(args: argparse.Namespace) -> int:
    """``fuel embed --input FILE --output FILE``: the batch embedding job."""
    from fuel.distributed.api import embed

    _check(args, "--input")
    if args.texts:
        raise InvalidArgument("give sentences on the command line or --input FILE, not both")
    try:
        report = embed(args.input, args.output, field=args.field, input_format=args.format,
                       batch_size=args.batch_size, model=args.model, device=args.device,
                       errors=args.errors, ray=args.ray, workers=args.workers,
                       threads_per_worker=args.threads_per_worker,
                       progress=not args.no_progress)
    except KeyboardInterrupt:
        return _interrupted(args.output)
    return _finish(report, "embedded")


def run_onnx_job(args: argparse.Namespace) -> int:
    """``fuel run MODEL --inputs DIR_OR_NPZ --output FILE``: the batch ONNX job."""
    from fuel.distributed.api import run_onnx

    _check(args, "--inputs")
    for option, given in (("--input", args.input), ("--save", args.save),
                          ("--profile", args.profile), ("--trace", args.trace),
                          ("--dim", args.dim)):
        if given:
            raise InvalidArgument(f"{option} is for one run; a batch job (--inputs) takes its "
                                  "rows from --inputs and writes --output")
    try:
        report = run_onnx(args.model, args.inputs, args.output, batch_size=args.batch_size,
                          device=args.device, errors=args.errors, ray=args.ray,
                          workers=args.workers, threads_per_worker=args.threads_per_worker,
                          progress=not args.no_progress)
    except KeyboardInterrupt:
        return _interrupted(args.output)
    return _finish(report, "ran")
