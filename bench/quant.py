"""Quantized matmul at the decode shape (one row) per GGUF format: GB/s of weight read by
fuel's kernel against a plain NumPy streaming read of the same bytes, and the machine's copy
bandwidth. Each system runs in its own process; rounds alternate between them and the
medians are printed with the ratio fuel / NumPy read (1.0 = the kernel reads its weights as
fast as NumPy can stream them). Both cycle over copies of the weight (``STREAMED_BYTES``
together, 4x the L3), so both read from memory: a 22-38 MB weight read again and again would
be served partly from the 32 MB L3, faster for NumPy's one-thread read than a decode step's
weights are. The last column names the kernel variant the judge dispatched (``int-dot/1t``: one
thread; a verdict stored under load can pick it).

    python bench/quant.py [--rows N] [--k K] [--rounds R] [--formats q4_0,q4_1,...]
                          [--smollm [--activations M]] [--cpu-time] [--opencl]

``--smollm`` prints instead the per-launch time of SmolLM2-135M's quantized matmuls (q|k|v,
o, gate|up, down in q4_1; the tied lm_head in q8_0) at ``M`` activation rows (1: decode): the
kernel's prepared launcher, replayed as a decode step replays it, cycling over enough copies
of each weight (64 MB) that they stream from memory as in a real step; beside it NumPy's
streaming read of the same copies.

``--opencl`` compares, on ``opencl:0`` (PoCL here), fuel's quantized_matmul reading the blocks
as stored against the float32 matmul by the de-quantized weight on the same device (what the
device ran when it had no quantized kernels: weights de-quantized at load), at the decode
shape: GB/s of weight bytes read by each, and the ratio of their times; then the bytes the
SmolLM2 weights take on the device and its greedy decode tokens/s, loaded quantized against
loaded de-quantized (float32).

``--cpu-time`` times the process's CPU time instead of wall time, with fuel's kernels on one
thread (``FUEL_THREADS=1``): on a machine other processes load, it compares the work per call
where wall times mostly measure the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from functools import partial

import numpy as np
from child import child_result

FORMATS = ("q4_0", "q4_1", "q8_0", "q4_k", "q6_k", "q5_k", "iq4_nl", "q5_0", "q5_1", "q3_k",
           "q2_k", "iq4_xs", "f16_blocks", "bf16_blocks")
# SmolLM2-135M's quantized matmuls per decode step: (name, format, n, k, launches per token)
SMOLLM_SHAPES = (("q|k|v", "q4_1", 960, 576, 30), ("o", "q4_1", 576, 576, 30),
                 ("gate|up", "q4_1", 3072, 576, 30), ("down", "q4_1", 576, 1536, 30),
                 ("lm_head", "q8_0", 49152, 576, 1))
OPENCL = "opencl:0"
STREAMED_BYTES = 128 << 20  # weight copies cycled per shape: 4x the 32 MB last-level cache
# float16 scale offsets inside a block (the codes around them are random bytes)
SCALE_OFFSETS = {"q4_0": (0,), "q4_1": (0, 2), "q8_0": (0,), "q4_k": (0, 2), "q6_k": (208,),
                 "q5_k": (0, 2), "iq4_nl": (0,), "q5_0": (0,), "q5_1": (0, 2), "q3_k": (108,),
                 "q2_k": (80, 82), "iq4_xs": (0,), "f16_blocks": tuple(range(0, 64, 2)),
                 "bf16_blocks": ()}
# bfloat16 weights get values as weights have (random bytes as bfloat16 are 1 in 256
# subnormal, and a subnormal operand costs an fma a microcode assist: 3x the in-cache time of
# f16's random scales on the Xeon)
WEIGHT_VALUES = {"bf16_blocks": "bfloat16"}


def blocks(name: str, rows: int, k: int) -> np.ndarray:
    """Random (rows, row bytes) blocks of format ``name`` with small, finite scales."""
    from fuel.ir.dtype import from_name

    dtype = from_name(name)
    rng = np.random.default_rng(0)
    if name in WEIGHT_VALUES:
        import ml_dtypes

        values = rng.normal(0.0, 0.02, (rows, k)).astype(getattr(ml_dtypes, WEIGHT_VALUES[name]))
        return values.view(np.uint8).reshape(rows, -1)
    data = rng.integers(0, 256, (rows, k // dtype.block_size, dtype.block_bytes), np.uint8)
    for offset in SCALE_OFFSETS[name]:
        scales = rng.uniform(0.001, 0.01, data.shape[:2]).astype(np.float16)
        data[:, :, offset:offset + 2] = scales.view(np.uint8).reshape(*scales.shape, 2)
    return data.reshape(rows, -1)


def time_median(function, repeats: int) -> float:
    clock = time.process_time if os.environ.get("FUEL_BENCH_CPU_TIME") else time.perf_counter
    function()
    samples = []
    for _ in range(repeats):
        started = clock()
        function()
        samples.append(clock() - started)
    return statistics.median(samples)


def launch_worker(system: str, name: str, rows: int, k: int, activations: int,
                  repeats: int) -> dict:
    """Seconds per launch at one SmolLM2 shape, cycling over weight copies."""
    import types

    data = blocks(name, rows, k)
    copies = [data.copy() for _ in range(max(1, STREAMED_BYTES // data.nbytes))]
    calls = []
    if system == "numpy-read":
        for copy in copies:
            calls.append(copy.reshape(-1).view(np.uint64).sum)
    else:
        from fuel.backends.cpu.quantized import MATMUL, QuantizedKernel
        from fuel.ir import dtype as dt
        from fuel.ir.layout import Layout

        dtype = dt.from_name(name)
        kernel = QuantizedKernel(MATMUL, dtype)
        x = np.random.default_rng(1).normal(size=(activations * k,)).astype(np.float32)
        out = np.empty(activations * rows, np.float32)
        layouts = [Layout.contiguous((activations, k)), Layout.contiguous((rows, k)),
                   Layout.contiguous((activations, rows))]
        for copy in copies:
            storages = [types.SimpleNamespace(buffer=x, dtype=dt.float32, address=0),
                        types.SimpleNamespace(buffer=copy.reshape(-1), dtype=dtype,
                                              address=0),
                        types.SimpleNamespace(buffer=out, dtype=dt.float32, address=0)]
            calls.append(kernel.prepare(storages[:2], storages[2:], layouts, None))

    def cycle() -> None:
        for call in calls:
            call()

    return {"seconds": time_median(cycle, repeats) / len(calls), "bytes": int(data.nbytes)}


def streamed_copies(data: np.ndarray) -> list[np.ndarray]:
    """``data`` and copies of it, together at least STREAMED_BYTES: cycled over, each read
    comes from memory, not from the last-level cache."""
    return [data] + [data.copy() for _ in range(-(-STREAMED_BYTES // data.nbytes) - 1)]


def judged_variant() -> str:
    """The variant the judge dispatched for this process's quantized matmul (``rule``: the
    kernel's own choice, untimed)."""
    from fuel.runtime.judge import JUDGE

    found = [verdict for key, verdict in JUDGE.verdicts.items() if "quantized_matmul" in key]
    if not found:
        return "rule"
    verdict = found[0]
    return verdict.winner + ("" if verdict.seconds else " (rule)")


def worker(system: str, name: str, rows: int, k: int, repeats: int) -> dict:
    """Seconds per decode-shape call, cycling over weight copies of at least STREAMED_BYTES
    (so both systems read from memory at every size; repeated reads of one 22-38 MB weight
    would be served partly from the 32 MB L3 for NumPy's fast read)."""
    data = blocks(name, rows, k)
    copies = streamed_copies(data)
    variant = ""
    if system == "numpy-read":  # stream every byte once: a reduction over 8-byte words
        calls = [copy.reshape(-1).view(np.uint64).sum for copy in copies]
    elif system == "numpy-copy":
        target = np.empty_like(data)
        calls = [partial(np.copyto, target, copy) for copy in copies]
    else:
        import fuel

        x = fuel.from_numpy(np.random.default_rng(1).normal(size=(1, k)).astype(np.float32))
        calls = []
        for copy in copies:
            weight = fuel.from_quantized(copy, name, (rows, k))
            step = fuel.jit(lambda x, weight=weight: fuel.quantized_matmul(x, weight))
            calls.append(lambda step=step: step(x).numpy())
        for call in calls:
            call()
        variant = judged_variant()

    def cycle() -> None:
        for call in calls:
            call()

    return {"seconds": time_median(cycle, max(5, repeats // len(calls))) / len(calls),
            "bytes": int(data.nbytes), "variant": variant}


def opencl_worker(system: str, name: str, rows: int, k: int, repeats: int) -> dict:
    """Seconds per decode-shape call on opencl:0: ``opencl-quantized`` (quantized_matmul on
    the blocks) or ``opencl-float32`` (x @ the de-quantized (k, n) float32 weight)."""
    import fuel

    data = blocks(name, rows, k)
    x = fuel.tensor(np.random.default_rng(1).normal(size=(1, k)).astype(np.float32),
                    device=OPENCL)
    if system == "opencl-quantized":
        weight = fuel.from_quantized(data, name, (rows, k), device=OPENCL)
        step = fuel.jit(lambda x: fuel.quantized_matmul(x, weight))
        size = data.nbytes
    else:
        from gguf.quants import dequantize

        from fuel.ir.dtype import from_name

        values = dequantize(data, from_name(name).gguf_type)
        weight = fuel.tensor(np.ascontiguousarray(values.T), device=OPENCL)
        step = fuel.jit(lambda x: x @ weight)
        size = values.nbytes
    return {"seconds": time_median(lambda: step(x).numpy(), repeats), "bytes": int(size)}


def opencl_model_worker(system: str, tokens: int) -> dict:
    """SmolLM2 loaded on opencl:0 with its weights as stored (``opencl-model-quantized``) or
    de-quantized to float32 at load: the bytes fuel holds there after the load, and greedy
    decode tokens/s over ``tokens`` tokens (after a warm-up generation)."""
    import gc

    import fuel
    from fuel.backends import get_backend
    from fuel.ir.device import parse_device
    from fuel.models.llama import load_gguf

    device = parse_device(OPENCL)
    quantized = system == "opencl-model-quantized"
    model = load_gguf(device=OPENCL, dtype="quantized" if quantized else "float32",
                      use_cache=False)
    fuel.empty_cache()
    gc.collect()
    held = int(get_backend(device).memory_stats(device)["live_bytes"])
    ids = model.encode("The capital of France is")
    model.generate_ids(ids, 4)
    started = time.perf_counter()
    generated = model.generate_ids(ids, tokens)
    seconds = time.perf_counter() - started
    return {"bytes": held, "quantized": bool(model.weights.layers[0].o_t.dtype.is_quantized),
            "tokens_per_second": len(generated) / seconds}


def opencl_table(args) -> None:
    """Decode-shape quantized_matmul against the de-quantized float32 matmul on opencl:0, then
    the device bytes of SmolLM2's weights both ways."""
    from fuel.backends import get_backend
    from fuel.ir.device import parse_device

    device = parse_device(OPENCL)
    print(f"opencl:0 = {get_backend(device).describe_device(device)}")
    print(f"decode shape: (1, {args.k}) x ({args.rows}, {args.k}).T, medians of {args.rounds} "
          f"alternated rounds x {args.repeats} calls (each call downloads its 1 x n result)")
    print(f"\n{'format':<8}{'q MB':>7}{'q ms':>8}{'q GB/s':>8}{'f32 MB':>8}{'f32 ms':>8}"
          f"{'f32 GB/s':>10}{'f32 ms / q ms':>15}")
    for name in args.formats.split(","):
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(run("opencl-quantized", name, args))
            theirs.append(run("opencl-float32", name, args))
        q, f = (statistics.median(r["seconds"] for r in rs) for rs in (ours, theirs))
        qb, fb = ours[0]["bytes"], theirs[0]["bytes"]
        print(f"{name:<8}{qb / 1e6:>7.1f}{q * 1e3:>8.2f}{qb / q / 1e9:>8.2f}{fb / 1e6:>8.1f}"
              f"{f * 1e3:>8.2f}{fb / f / 1e9:>10.2f}{f / q:>15.2f}")
    print("GB/s: weight bytes read per second by each kernel; ratio > 1: quantized is faster")
    kept, dense = [], []
    for _ in range(args.rounds):
        kept.append(run("opencl-model-quantized", "q8_0", args))
        dense.append(run("opencl-model-float32", "q8_0", args))
    fast, slow = (statistics.median(r["tokens_per_second"] for r in rs) for rs in (kept, dense))
    print(f"\nSmolLM2 on opencl:0, weights as stored (quantized: {kept[0]['quantized']}) / "
          f"de-quantized to float32 at load:")
    held, full = kept[0]["bytes"], dense[0]["bytes"]
    print(f"  bytes fuel holds after load  {held / 2**20:8.1f} MiB {full / 2**20:8.1f} MiB   "
          f"ratio {full / held:.2f}")
    print(f"  greedy decode tok/s ({args.tokens} tokens, median of {args.rounds}) {fast:8.2f} "
          f"{slow:8.2f}   ratio {fast / slow:.2f}")


def run(system: str, name: str, args, rows: int | None = None, k: int | None = None) -> dict:
    arguments = ["--worker", system, "--formats", name,
                 "--rows", str(rows or args.rows), "--k", str(k or args.k),
                 "--repeats", str(args.repeats), "--activations", str(args.activations),
                 "--tokens", str(args.tokens)]
    if args.smollm:
        arguments.append("--smollm")
    environment = dict(os.environ)
    if args.cpu_time:
        environment.update(FUEL_BENCH_CPU_TIME="1", FUEL_THREADS="1")
    return child_result(__file__, arguments, environment)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=16384, help="weight rows (outputs)")
    parser.add_argument("--k", type=int, default=4096, help="weight columns (inputs)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds per system")
    parser.add_argument("--repeats", type=int, default=20, help="timed calls per process")
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--smollm", action="store_true",
                        help="per-launch time of SmolLM2's quantized matmul shapes")
    parser.add_argument("--activations", type=int, default=1,
                        help="activation rows for --smollm (1: decode)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="CPU time, fuel on one thread (for a loaded machine)")
    parser.add_argument("--opencl", action="store_true",
                        help="quantized vs de-quantized float32 matmul and weight bytes on "
                             "opencl:0")
    parser.add_argument("--tokens", type=int, default=16,
                        help="greedy tokens timed per SmolLM2 decode with --opencl")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    formats = args.formats.split(",")
    if args.worker:
        if args.worker.startswith("opencl-model"):
            result = opencl_model_worker(args.worker, args.tokens)
        elif args.worker.startswith("opencl"):
            result = opencl_worker(args.worker, formats[0], args.rows, args.k, args.repeats)
        elif args.smollm:
            result = launch_worker(args.worker, formats[0], args.rows, args.k, args.activations,
                                   args.repeats)
        else:
            result = worker(args.worker, formats[0], args.rows, args.k, args.repeats)
        print(json.dumps(result))
        return
    if args.smollm:
        smollm_table(args)
        return
    if args.opencl:
        opencl_table(args)
        return
    print(f"decode shape: (1, {args.k}) x ({args.rows}, {args.k}).T, {os.cpu_count()} CPUs, "
          f"medians of {args.rounds} alternated rounds x {args.repeats} calls"
          f"{', one thread, CPU time' if args.cpu_time else ''}")
    copies = [run("numpy-copy", "q8_0", args) for _ in range(args.rounds)]
    copy = statistics.median(c["bytes"] / c["seconds"] for c in copies)
    print(f"machine copy bandwidth (np.copyto, read + write of the q8_0 bytes): "
          f"{copy / 1e9:.1f} GB/s of bytes copied")
    print(f"\n{'format':<12}{'MB':>6}{'fuel ms':>9}{'fuel GB/s':>11}{'numpy read GB/s':>17}"
          f"{'ratio':>8}  fuel's kernel (judge)")
    for name in formats:
        fuel_rates, numpy_rates, size, variants = [], [], 0, set()
        for _ in range(args.rounds):
            ours = run("fuel", name, args)
            variants.add(ours["variant"])
            theirs = run("numpy-read", name, args)
            size = ours["bytes"]
            fuel_rates.append(size / ours["seconds"])
            numpy_rates.append(theirs["bytes"] / theirs["seconds"])
        ours, theirs = statistics.median(fuel_rates), statistics.median(numpy_rates)
        print(f"{name:<12}{size / 1e6:>6.1f}{size / ours * 1e3:>9.2f}{ours / 1e9:>11.1f}"
              f"{theirs / 1e9:>17.1f}{ours / theirs:>8.2f}  {', '.join(sorted(variants))}")
    print("ratio: fuel's weight-read GB/s / NumPy's streaming read of the same bytes; both cycle "
          f"over copies of the weight of {STREAMED_BYTES >> 20} MB together, so both read from "
          "memory")


def smollm_table(args) -> None:
    """Per-launch microseconds of SmolLM2's shapes, fuel's launcher against NumPy's read."""
    print(f"SmolLM2-135M quantized matmuls, {args.activations} activation row(s), "
          f"{os.cpu_count()} CPUs, medians of {args.rounds} alternated rounds x {args.repeats} "
          f"cycles over {STREAMED_BYTES >> 20} MB of weight copies per shape"
          f"{', one thread, CPU time' if args.cpu_time else ''}")
    print(f"\n{'shape':<9}{'format':<8}{'n x k':>12}{'KB':>8}{'fuel us':>9}{'fuel GB/s':>11}"
          f"{'numpy read GB/s':>17}{'ratio':>8}")
    total = 0.0
    for label, name, rows, k, per_token in SMOLLM_SHAPES:
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(run("fuel", name, args, rows, k)["seconds"])
            theirs.append(run("numpy-read", name, args, rows, k)["seconds"])
        seconds, read = statistics.median(ours), statistics.median(theirs)
        size = blocks(name, 1, k).nbytes * rows
        total += seconds * per_token
        print(f"{label:<9}{name:<8}{f'{rows} x {k}':>12}{size / 1e3:>8.0f}{seconds * 1e6:>9.1f}"
              f"{size / seconds / 1e9:>11.1f}{size / read / 1e9:>17.1f}{read / seconds:>8.2f}")
    print(f"per token (launches x time): {total * 1e3:.2f} ms of quantized matmul")
    print("ratio: fuel's weight-read GB/s / NumPy's streaming read of the same bytes")


if __name__ == "__main__":
    main()
