"""float32 matmul GFLOP/s per shape: fuel's C kernel (forced, whatever the selection rule
says), NumPy/OpenBLAS and torch on the same operand layouts, and "fuel" = the registered kernel
with its selection rule (C or OpenBLAS per shape). Shapes: MiniLM's Linear layers (x @ W.T,
and a contiguous (k, n) B) at m = 1, 4, 12, 64, 1024; MiniLM's attention at 1x12 and 8x128;
SmolLM2's decode attention (grouped-query, over the KV cache) and RoPE. Each system runs in its
own process with its thread count set before import (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS,
FUEL_THREADS, torch.set_num_threads); rounds alternate the systems; medians are printed with
the ratios C / OpenBLAS and rule / OpenBLAS (above 1: faster than OpenBLAS).

    python bench/matmul.py [--threads 1,2] [--rounds 3] [--systems c,fuel,numpy,torch]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
from child import child_result

SYSTEMS = ("c", "fuel", "numpy", "torch")
ROWS = (1, 4, 12, 64, 1024)
CACHE = 512  # SmolLM2 decode: the KV cache's capacity (attention spans all of it)


def shapes() -> list[tuple[str, tuple, tuple, bool]]:
    """(name, a shape, b shape, b given as the transpose of its last two dims)."""
    rows = []
    for m in ROWS:
        rows.append((f"linear 384->1536 m={m}", (m, 384), (1536, 384), True))
        rows.append((f"linear 1536->384 m={m}", (m, 1536), (384, 1536), True))
        rows.append((f"(k,n) B 384x1536 m={m}", (m, 384), (384, 1536), False))
    rows += [
        ("minilm 1x12 q@k.T", (1, 12, 12, 32), (1, 12, 12, 32), True),
        ("minilm 1x12 p@v", (1, 12, 12, 12), (1, 12, 12, 32), False),
        ("minilm 8x128 q@k.T", (8, 12, 128, 32), (8, 12, 128, 32), True),
        ("minilm 8x128 p@v", (8, 12, 128, 128), (8, 12, 128, 32), False),
        (f"smollm decode q@k.T cache={CACHE}", (3, 3, 64), (3, CACHE, 64), True),
        (f"smollm decode p@v cache={CACHE}", (3, 3, CACHE), (3, CACHE, 64), False),
        ("smollm decode rope", (1, 12, 64), (1, 64, 64), False),
    ]
    return rows


def operands(a_shape: tuple, b_shape: tuple, transposed: bool):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    return a, (np.swapaxes(b, -1, -2) if transposed else b)


def seconds_per_call(function, budget: float = 0.05) -> float:
    """The fastest of 5 batches of calls, each batch about ``budget`` / 5 seconds (the least
    disturbed by other processes on a shared machine)."""
    function()
    started, calls = time.perf_counter(), 0
    while time.perf_counter() - started < budget / 5:
        function()
        calls += 1
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            function()
        samples.append((time.perf_counter() - started) / calls)
    return min(samples)


def fuel_launcher(kernel, a: np.ndarray, b: np.ndarray, out: np.ndarray):
    """``kernel`` prepared on storages holding a, b (their layouts as NumPy strides) and out."""
    from fuel.backends.cpu import BACKEND
    from fuel.ir.device import CPU
    from fuel.ir.layout import Layout

    def storage_and_layout(array: np.ndarray):
        base = array.base if array.base is not None else array
        storage = BACKEND.upload(CPU, base)
        strides = tuple(s // array.itemsize for s in array.strides)
        return storage, Layout(array.shape, strides, 0)

    (sa, la), (sb, lb) = storage_and_layout(a), storage_and_layout(b)
    so = BACKEND.upload(CPU, out)
    return kernel.prepare([sa, sb], [so], [la, lb, Layout(out.shape, tuple(
        s // out.itemsize for s in out.strides), 0)], None)


def worker(system: str) -> dict:
    """This process's seconds per call for every shape."""
    results = {}
    if system == "torch":
        import torch

        torch.set_num_threads(int(os.environ["FUEL_THREADS"]))
    for name, a_shape, b_shape, transposed in shapes():
        a, b = operands(a_shape, b_shape, transposed)
        out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2],
                                                                          b.shape[-1]), np.float32)
        if system == "numpy":
            function = lambda a=a, b=b, out=out: np.matmul(a, b, out=out)  # noqa: E731
        elif system == "torch":
            ta, to = torch.from_numpy(a), torch.from_numpy(out)
            tb = (torch.from_numpy(np.swapaxes(b, -1, -2)).transpose(-1, -2) if transposed
                  else torch.from_numpy(b))
            function = lambda ta=ta, tb=tb, to=to: torch.matmul(ta, tb, out=to)  # noqa: E731
        else:
            from fuel.backends.cpu.matmul import CMatmul

            kernel = CMatmul(forced=True) if system == "c" else CMatmul()
            function = fuel_launcher(kernel, a, b, out)
            function()
            np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-4, atol=1e-3 * a.shape[-1])
        results[name] = seconds_per_call(function)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker)))
        return
    systems = [s for s in args.systems.split(",") if s]
    for threads in (int(t) for t in args.threads.split(",")):
        environment = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads),
                           OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                           FUEL_THREADS=str(threads))
        samples: dict = {s: {} for s in systems}
        for _ in range(args.rounds):
            for system in systems:
                for name, seconds in child_result(__file__, ["--worker", system],
                                                  environment).items():
                    samples[system].setdefault(name, []).append(seconds)
        print(f"\nfloat32 matmul GFLOP/s, threads={threads}, median of {args.rounds} alternated "
              f"rounds, each system in its own process:")
        header = f"{'shape':<34}" + "".join(f"{s:>9}" for s in systems)
        ratios = [s for s in ("c", "fuel") if s in systems and "numpy" in systems]
        print(header + "".join(f"{s + '/blas':>10}" for s in ratios))
        for name, a_shape, b_shape, transposed in shapes():
            m, k = a_shape[-2:]
            n = b_shape[-2] if transposed else b_shape[-1]
            batch = int(np.prod(np.broadcast_shapes(a_shape[:-2], b_shape[:-2])))
            flops = 2.0 * batch * m * n * k
            seconds = {s: statistics.median(samples[s][name]) for s in systems}
            line = f"{name:<34}" + "".join(f"{flops / seconds[s] / 1e9:>9.1f}" for s in systems)
            line += "".join(f"{seconds['numpy'] / seconds[s]:>10.2f}" for s in ratios)
            print(line)


if __name__ == "__main__":
    main()
