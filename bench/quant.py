"""Quantized matmul at the decode shape (one row) per GGUF format: GB/s of weight read by
fuel's kernel against a plain NumPy streaming read of the same bytes, and the machine's copy
bandwidth. Each system runs in its own process; rounds alternate between them and the
medians are printed with the ratio fuel / NumPy read (1.0 = the kernel reads its weights as
fast as NumPy can stream them).

    python bench/quant.py [--rows N] [--k K] [--rounds R] [--formats q4_0,q4_1,...]
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

FORMATS = ("q4_0", "q4_1", "q8_0", "q4_k", "q6_k")
# float16 scale offsets inside a block (the codes around them are random bytes)
SCALE_OFFSETS = {"q4_0": (0,), "q4_1": (0, 2), "q8_0": (0,), "q4_k": (0, 2), "q6_k": (208,)}


def blocks(name: str, rows: int, k: int) -> np.ndarray:
    """Random (rows, row bytes) blocks of format ``name`` with small, finite scales."""
    from fuel.ir.dtype import from_name

    dtype = from_name(name)
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, (rows, k // dtype.block_size, dtype.block_bytes), np.uint8)
    for offset in SCALE_OFFSETS[name]:
        scales = rng.uniform(0.001, 0.01, data.shape[:2]).astype(np.float16)
        data[:, :, offset:offset + 2] = scales.view(np.uint8).reshape(*scales.shape, 2)
    return data.reshape(rows, -1)


def time_median(function, repeats: int) -> float:
    function()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def worker(system: str, name: str, rows: int, k: int, repeats: int) -> dict:
    data = blocks(name, rows, k)
    if system == "numpy-read":  # stream every byte once: a reduction over 8-byte words
        words = data.reshape(-1).view(np.uint64)
        seconds = time_median(lambda: words.sum(), repeats)
    elif system == "numpy-copy":
        target = np.empty_like(data)
        seconds = time_median(lambda: np.copyto(target, data), repeats)
    else:
        import fuel

        weight = fuel.from_quantized(data, name, (rows, k))
        x = fuel.from_numpy(np.random.default_rng(1).normal(size=(1, k)).astype(np.float32))
        step = fuel.jit(lambda x: fuel.quantized_matmul(x, weight))
        seconds = time_median(lambda: step(x).numpy(), repeats)
    return {"seconds": seconds, "bytes": int(data.nbytes)}


def run(system: str, name: str, args) -> dict:
    command = [sys.executable, __file__, "--worker", system, "--formats", name,
               "--rows", str(args.rows), "--k", str(args.k), "--repeats", str(args.repeats)]
    result = subprocess.run(command, capture_output=True, text=True, check=True,
                            env=dict(os.environ))
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16384, help="weight rows (outputs)")
    parser.add_argument("--k", type=int, default=4096, help="weight columns (inputs)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds per system")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per process")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    formats = args.formats.split(",")
    if args.worker:
        print(json.dumps(worker(args.worker, formats[0], args.rows, args.k, args.repeats)))
        return
    print(f"decode shape: (1, {args.k}) x ({args.rows}, {args.k}).T, {os.cpu_count()} CPUs, "
          f"medians of {args.rounds} alternated rounds x {args.repeats} calls")
    copies = [run("numpy-copy", "q8_0", args) for _ in range(args.rounds)]
    copy = statistics.median(c["bytes"] / c["seconds"] for c in copies)
    print(f"machine copy bandwidth (np.copyto, read + write of the q8_0 bytes): "
          f"{copy / 1e9:.1f} GB/s of bytes copied")
    print(f"\n{'format':<8}{'MB':>8}{'fuel ms':>9}{'fuel GB/s':>11}{'numpy read GB/s':>17}"
          f"{'ratio':>8}")
    for name in formats:
        fuel_rates, numpy_rates, size = [], [], 0
        for _ in range(args.rounds):
            ours = run("fuel", name, args)
            theirs = run("numpy-read", name, args)
            size = ours["bytes"]
            fuel_rates.append(size / ours["seconds"])
            numpy_rates.append(theirs["bytes"] / theirs["seconds"])
        ours, theirs = statistics.median(fuel_rates), statistics.median(numpy_rates)
        print(f"{name:<8}{size / 1e6:>8.1f}{size / ours * 1e3:>9.2f}{ours / 1e9:>11.1f}"
              f"{theirs / 1e9:>17.1f}{ours / theirs:>8.2f}")
    print("ratio: fuel's weight-read GB/s / NumPy's streaming read of the same bytes")


if __name__ == "__main__":
    main()
