"""Fuzz fuel's model loaders with mutated real files: GGUF, ONNX, safetensors, tokenizer.json.

    python bench/fuzz.py --format gguf --count 2000          # one format
    python bench/fuzz.py --format all --count 2000 --keep /tmp/fuzz-cases

Each case is a seed file (small real files written here: a tiny Llama GGUF, onnx.helper
models, one with external data, a tiny BERT's model.safetensors and tokenizer.json; the
shipped MiniLM tokenizer.json) mutated by a seeded RNG: bit flips, truncation, byte insertion
and deletion, chunk overwrite and duplication, and field-aware mutations (GGUF's lengths,
counts, types, dims and offsets; ONNX's protobuf fields through reflection; safetensors'
header length, dtypes, shapes and data offsets; JSON values). A case is loaded and run the
way a user would (``load_gguf`` + two generated tokens, ``fuel.onnx.load`` + ``run``,
``minilm.load`` + ``encode``) in a worker process; each outcome is one of

  ok         the damage did not matter (the file still loads and runs)
  refused    a FuelError naming the file (the only acceptable failure)
  unnamed    a FuelError that does not name the file (a bug)
  traceback  any other exception (a bug: a dependency's error leaked)
  crash      the worker died (a signal: a C kernel or a dependency read out of bounds)
  hang       no answer within --timeout seconds

Cases are reproducible from (format, --seed, case number); ``--keep`` saves the failing
ones. The exit status is 1 when any case is a bug. tests/models/test_fuzz_loaders.py runs a
bounded number of cases per format through the same code.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUGS = ("unnamed", "traceback", "crash", "hang")

if __package__:  # imported as bench.fuzz (tests/models/test_fuzz_loaders.py)
    from bench.fuzz_cases import FORMATS, make_case, write_seeds
else:  # run as a script
    from fuzz_cases import FORMATS, make_case, write_seeds

__all__ = ["BUGS", "FORMATS", "fuzz", "make_case", "write_seeds"]


# ------------------------------------------------------------------ targets (in the worker)
def run_target(fmt: str, path: Path, number: int) -> None:
    """Load and run ``path`` as a user would; raises what the loader raises."""
    if fmt == "gguf":
        from fuel.models.llama import load_gguf

        model = load_gguf(path, dtype="quantized" if number % 2 == 0 else "float32",
                          use_cache=False)
        ids = model.encode("the cat")
        if ids:
            model.generate_ids(ids, max_new_tokens=2)
    elif fmt == "onnx":
        import numpy as np

        import fuel.onnx

        model = fuel.onnx.load(str(path))
        feeds = {}
        for spec in model.inputs:
            if spec.name == "ids":
                feeds[spec.name] = np.array([1, 5, 15], np.int64)
            elif spec.shape is not None and len(spec.shape) == 2:
                feeds[spec.name] = np.ones((2, 3), np.float32)
            else:
                feeds[spec.name] = np.ones((1, 1, 6, 6), np.float32)
        model.run(feeds)
    else:
        from fuel.models.minilm import load

        encoder = load(path.parent)
        encoder.encode(["the cat sat on the mat.", "hello world"])


def worker(fmt: str) -> None:
    """Read ``case-path number`` lines; answer one JSON line per case."""
    import contextlib
    import io

    from fuel.ir.errors import FuelError

    stdout = sys.stdout
    for line in sys.stdin:
        path_text, number = line.rsplit(" ", 1)
        path = Path(path_text)
        result = {"outcome": "ok"}
        try:
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                run_target(fmt, path, int(number))
        except FuelError as error:
            message = str(error)
            named = path.name in message or path.parent.name in message
            result = {"outcome": "refused" if named else "unnamed",
                      "detail": f"{type(error).__name__}: {message[:300]}"}
        except BaseException as error:  # noqa: BLE001 - the point: report every escape
            if isinstance(error, KeyboardInterrupt):
                raise
            frames = traceback.extract_tb(error.__traceback__)
            where = "; ".join(f"{Path(f.filename).name}:{f.lineno}" for f in frames[-3:])
            result = {"outcome": "traceback",
                      "detail": f"{type(error).__name__}: {str(error)[:200]} [{where}]"}
        stdout.write(json.dumps(result) + "\n")
        stdout.flush()


# ------------------------------------------------------------------ the runner
class Worker:
    """A worker process; restarted after a crash or a hang. Its stderr goes to ``log`` (an
    AddressSanitizer report, a fatal signal's message), whose tail a crash reports."""

    def __init__(self, fmt: str, env: dict, log: Path) -> None:
        self.fmt, self.env, self.log = fmt, env, log
        self.process = None

    def start(self) -> None:
        with open(self.log, "w") as errors:
            self.process = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--worker", self.fmt],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors,
                env=self.env, text=True, bufsize=1)

    def run(self, path: Path, number: int, timeout: float) -> dict:
        if self.process is None or self.process.poll() is not None:
            self.start()
        try:
            self.process.stdin.write(f"{path} {number}\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            return self._died()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            self.stop()
            return {"outcome": "hang", "detail": f"no answer in {timeout:.0f} s"}
        line = self.process.stdout.readline()
        if not line:
            return self._died()
        return json.loads(line)

    def _died(self) -> dict:
        code = self.process.wait()
        self.stop()
        tail = " ".join(self.log.read_text(errors="replace").split()[-60:])
        return {"outcome": "crash", "detail": f"worker exited with {code}: {tail}"}

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process.stdin.close()
            self.process.stdout.close()
            self.process = None


def asan_environment(env: dict, folder: Path) -> dict:
    """``env`` with fuel's C kernels built under AddressSanitizer (a compiler wrapper as
    ``CC``, the runtime preloaded, a kernel cache of their own): an out-of-bounds access in a
    kernel aborts the worker, a crash with ASan's report."""
    def library(name: str) -> str:
        found = subprocess.run(["cc", f"-print-file-name={name}"], capture_output=True,
                               text=True).stdout.strip()
        if not found or not Path(found).exists():
            raise SystemExit(f"--asan needs a C compiler with AddressSanitizer ({name})")
        return found

    # libstdc++ preloaded too: else ASan cannot intercept a C++ extension's throw (onnx's
    # checker) and aborts where the process would raise a Python exception.
    preload = f"{library('libasan.so')} {library('libstdc++.so')}"
    wrapper = folder / "asan-cc"
    wrapper.write_text('#!/bin/sh\nexec cc -fsanitize=address -fno-omit-frame-pointer "$@"\n')
    wrapper.chmod(0o755)
    return dict(env, CC=str(wrapper), LD_PRELOAD=preload, FUEL_CACHE_DIR=str(folder / "asan"),
                ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:allocator_may_return_null=1")


def fuzz(fmt: str, count: int, seed: int = 0, timeout: float = 60.0, keep: Path | None = None,
         workdir: Path | None = None, verbose: bool = False, asan: bool = False) -> dict:
    """Run ``count`` cases of ``fmt``; returns {"counts": Counter, "bugs": [...], ...}."""
    own = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix=f"fuel-fuzz-{fmt}-")) if own else workdir
    try:
        seeds = write_seeds(workdir / "seeds", fmt)
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        if asan:
            env = asan_environment(env, workdir)
        runner = Worker(fmt, env, workdir / "worker-stderr.txt")
        counts: Counter = Counter()
        bugs = []
        started = time.perf_counter()
        for number in range(count):
            case = make_case(fmt, number, seeds, seed)
            folder = workdir / "cases" / f"{number % 4}"
            if folder.exists():
                shutil.rmtree(folder)
            shutil.copytree(case.seed_path.parent, folder)
            path = folder / case.seed_path.name
            path.write_bytes(case.data)
            # the first case of a worker compiles kernels: give it longer
            result = runner.run(path, number, timeout * (3 if number < 2 else 1))
            counts[result["outcome"]] += 1
            if result["outcome"] in BUGS:
                bugs.append({"case": number, "seed": case.seed_path.name, "steps": case.steps,
                             **result})
                if keep is not None:
                    keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(path, keep / f"{fmt}-{number}-{path.name}")
            if verbose:
                print(number, result["outcome"], case.steps, result.get("detail", "")[:160],
                      flush=True)
        runner.stop()
        return {"format": fmt, "cases": count, "counts": counts, "bugs": bugs,
                "seconds": time.perf_counter() - started}
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", default="all", choices=FORMATS + ("all",))
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds one case may take before it counts as a hang")
    parser.add_argument("--keep", type=Path, help="copy failing cases into this folder")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--asan", action="store_true",
                        help="build fuel's C kernels with AddressSanitizer (out-of-bounds "
                             "accesses become crashes)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return 0
    failed = False
    for fmt in FORMATS if args.format == "all" else (args.format,):
        report = fuzz(fmt, args.count, args.seed, args.timeout, args.keep, verbose=args.verbose,
                      asan=args.asan)
        counts = report["counts"]
        print(f"{fmt}: {report['cases']} cases in {report['seconds']:.0f} s: "
              + ", ".join(f"{k} {counts.get(k, 0)}" for k in ("ok", "refused") + BUGS))
        for bug in report["bugs"]:
            print(f"  case {bug['case']} ({bug['seed']}, {' + '.join(bug['steps'])}): "
                  f"{bug['outcome']}: {bug.get('detail', '')}")
        failed |= bool(report["bugs"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
