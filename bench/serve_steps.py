"""bench/serve.py's in-process measurements (no server): where one engine step's time goes.

    python bench/serve.py --steps [--step-rows 1,8,32]   # one engine step of B decode rows
    python bench/serve.py --kernels   # its quantized matmuls per tile, and the multiply floor
    python bench/serve.py --profile [--step-rows 1,8,32]   # one step of B rows by kernel

Each runs in a child process (``base``: bench/serve.py's environment) so thread counts and
the judge are set before fuel is imported.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOTAL_TIMEOUT_S = 1800


def one_thread(base: dict) -> dict:
    """``base`` on one thread with the judge off (each kernel its rule's form)."""
    return dict(base, FUEL_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                FUEL_JUDGE="off")


def child_json(code: str, arguments: list[str], values: dict, what: str):
    """The JSON printed last by ``code`` run in a child Python with ``values``."""
    done = subprocess.run([sys.executable, "-c", code, *arguments], cwd=ROOT, env=values,
                          capture_output=True, text=True, timeout=TOTAL_TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def step_ratios(options: argparse.Namespace, base: dict) -> int:
    """``--steps``: one engine step (fuel.models.paged_step, in this process, no server) of B
    decode rows for each B of --step-rows (each row a request at position 60 over its own
    blocks): median wall time on --threads threads, and CPU time on one thread in a child
    process (what the machine's other load changes least); the ratio of each to B=1's."""
    rows = [int(b) for b in options.step_rows.split(",")]
    code = ("import json, os, sys, time\nimport numpy as np\n"
            "from fuel.models.llama import load_gguf\n"
            "from fuel.models.kv_cache import PagedKVPool\n"
            "from fuel.models.paged_step import Chunk, PagedStepper\n"
            f"model = load_gguf({options.model!r})\nconfig = model.config\n"
            "width = -(-config.context_length // 16)\n"
            f"rows = {rows!r}\n"
            "pool = PagedKVPool(config.num_layers, config.num_kv_heads, config.head_dim,"
            " 8 * max(rows) + 1, 16, model.device)\n"
            f"stepper = PagedStepper(model, pool, width, {options.activations!r})\n"
            "clock = time.perf_counter if "
            "sys.argv[1] == 'wall' else time.process_time\nresult = {}\n"
            "for b in rows:\n"
            "    chunks = [Chunk([100 + r], 60, list(range(1 + 8 * r, 9 + 8 * r)), True)"
            " for r in range(b)]\n"
            "    for _ in range(3):\n        stepper.step(chunks)\n    times = []\n"
            "    for _ in range(15):\n        start = clock()\n        stepper.step(chunks)\n"
            "        times.append(clock() - start)\n"
            "    result[b] = float(np.median(times))\n"
            "print(json.dumps(result))\n")
    found = {}
    for kind, threads in (("wall", options.threads), ("cpu", 1)):
        values = dict(base)
        values.update(FUEL_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
                      OPENBLAS_NUM_THREADS=str(threads), FUEL_JUDGE="off")
        done = subprocess.run([sys.executable, "-c", code, kind], cwd=ROOT, env=values,
                              capture_output=True, text=True, timeout=TOTAL_TIMEOUT_S)
        if done.returncode != 0:
            raise SystemExit(f"the step measurement failed:\n{done.stderr[-2000:]}")
        found[kind] = {int(b): t for b, t in json.loads(done.stdout.splitlines()[-1]).items()}
    load = os.getloadavg()[0]
    print(f"one engine step of B decode rows (position 60), {options.activations} activations, "
          f"SmolLM2 unless --model; load average {load:.2f} on {os.cpu_count()} cores")
    print(f"{'B':>4}{'wall ms':>10}{'/ B=1':>8}{'per row':>10}{'cpu ms 1t':>11}{'/ B=1':>8}"
          f"{'per row':>10}")
    for b in rows:
        wall, cpu = found["wall"][b], found["cpu"][b]
        print(f"{b:>4}{wall * 1e3:>10.2f}{wall / found['wall'][rows[0]]:>8.2f}"
              f"{wall / b * 1e3:>10.2f}{cpu * 1e3:>11.2f}{cpu / found['cpu'][rows[0]]:>8.2f}"
              f"{cpu / b * 1e3:>10.2f}")
    return 0


KERNELS_CODE = """
import ctypes, json, sys, time
import numpy as np
from fuel.backends.cpu import quantized, quantized_rows
from fuel.models.llama import load_gguf
model = load_gguf(sys.argv[1] if sys.argv[1] != "None" else None)
layer = model.weights.layers[0]
weights = [layer.qkv_t, layer.o_t, layer.gate_up_t, layer.down_t, model.weights.output_t]
weights = [w for w in weights if w.dtype in quantized_rows.FORMATS]
rng = np.random.default_rng(0)
best = {}
for rows in (1, 8, 32):
    for weight in weights:
        n, k = weight.shape
        x = rng.standard_normal((rows, k)).astype(np.float32)
        out = np.empty((rows, n), np.float32)
        data = (ctypes.c_void_p * 3)(x.ctypes.data, weight._node.buffer.buffer.ctypes.data,
                                     out.ctypes.data)
        sizes = (ctypes.c_int64 * 5)(1, rows, n, k, 1)
        repeats = max(2, int(3e7 / (rows * n * k)))
        for tile, function in (("int-dot", quantized.library(weight.dtype)),
                               ("int-rows", quantized.rows_library(weight.dtype))):
            for _ in range(5):
                function(data, sizes, None)
                start = time.process_time()
                for _ in range(repeats):
                    function(data, sizes, None)
                spent = (time.process_time() - start) / repeats
                key = f"{tile} {rows}"
                per_layer = spent * (1 if weight is weights[-1] else len(model.weights.layers))
                best.setdefault(key, {})[n * k] = min(best.get(key, {}).get(n * k, 1e9),
                                                      per_layer)
blocks = sum(w.shape[0] * w.shape[1] // 32 * (1 if w is weights[-1] else len(model.weights.layers))
             for w in weights)
found = {key: sum(values.values()) for key, values in best.items()}
found["blocks"] = blocks
print(json.dumps(found))
"""


def kernel_ratios(options: argparse.Namespace, base: dict) -> int:
    """``--kernels``: a step's quantized matmuls (every layer's projections and the logits,
    the formats quantized_rows.c serves) at 1, 8 and 32 rows, on one thread (CPU time, best
    of 5 rounds, in a child process): quantized.c's integer tile against quantized_rows.c's."""
    values = dict(base)
    values.update(FUEL_THREADS="1", OMP_NUM_THREADS="1", FUEL_JUDGE="off")
    done = subprocess.run([sys.executable, "-c", KERNELS_CODE, str(options.model)], cwd=ROOT,
                          env=values, capture_output=True, text=True, timeout=TOTAL_TIMEOUT_S)
    if done.returncode != 0:
        raise SystemExit(f"the kernel measurement failed:\n{done.stderr[-2000:]}")
    found = json.loads(done.stdout.splitlines()[-1])
    print(f"a step's quantized matmuls, 1 thread, CPU ms; load average {os.getloadavg()[0]:.2f}")
    print(f"{'rows':>5}{'int-dot':>10}{'int-rows':>10}{'rows/dot':>10}{'per row':>10}"
          f"{'x 1 row':>9}{'ns/pair':>9}")
    single = found["int-dot 1"]
    pairs = found["blocks"]  # (weight block, activation row) pairs per activation row
    for rows in (1, 8, 32):
        dot, tile = found[f"int-dot {rows}"], found[f"int-rows {rows}"]
        best = tile if rows > 1 else dot
        print(f"{rows:>5}{dot * 1e3:>10.2f}{tile * 1e3:>10.2f}{tile / dot:>10.2f}"
              f"{best / rows * 1e3:>10.3f}{best / rows / single:>9.2f}"
              f"{best / rows / pairs * 1e9:>9.3f}")
    floor = multiply_floor(values)
    if floor is None:
        print("multiply floor: needs AVX-512 with VNNI (not on this machine)")
        return 0
    lone = single / pairs * 1e9
    print(f"multiply floor of one core (512-bit, 10 independent chains, ns per instruction): "
          f"vpdpwssd {floor['dpwssd']:.3f}, vpdpbusd {floor['dpbusd']:.3f}, vpmaddwd "
          f"{floor['maddwd']:.3f}")
    print(f"  a (weight block, activation row) pair is 32 products: one vpdpwssd with 16-bit "
          f"activation codes ({floor['dpwssd']:.3f} ns), half a vpdpbusd with 8-bit ones "
          f"({floor['dpbusd'] / 2:.3f} ns); a row alone takes {lone:.3f} ns per block, so a "
          f"batched row costs at least {floor['dpwssd'] / lone:.2f}x a row alone with 16-bit "
          f"activations ({floor['dpbusd'] / 2 / lone:.2f}x with 8-bit)")
    return 0


# One core's throughput of the 512-bit multiply instructions a quantized dot is made of: 10
# independent accumulators (more than latency x throughput), register operands, so nothing
# but the execution ports bounds it. Operation 0: vpdpwssd, 1: vpdpbusd, 2: vpmaddwd;
# the output is the accumulators' sum (so none is optimized away), INT32_MIN where the build
# has no AVX-512 VNNI.
FLOOR_SOURCE = r"""
#include <immintrin.h>
#include <stdint.h>
#define CHAINS 10
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define THROUGHPUT(name, type, start, step, total) \
    static int32_t name(int64_t count) { \
        type v[CHAINS]; \
        for (int j = 0; j < CHAINS; j++) v[j] = start; \
        for (int64_t i = 0; i < count; i++) { \
            for (int j = 0; j < CHAINS; j++) v[j] = step; \
            for (int j = 0; j < CHAINS; j++) __asm__ volatile("" : "+v"(v[j])); \
        } \
        int32_t sum = 0; \
        for (int j = 0; j < CHAINS; j++) sum += (int32_t)total(v[j]); \
        return sum; \
    }
THROUGHPUT(dpwssd, __m512i, _mm512_set1_epi32(j),
           _mm512_dpwssd_epi32(v[j], _mm512_set1_epi32(0x30005), _mm512_set1_epi32(0x20007)),
           _mm512_reduce_add_epi32)
THROUGHPUT(dpbusd, __m512i, _mm512_set1_epi32(j),
           _mm512_dpbusd_epi32(v[j], _mm512_set1_epi32(0x30005), _mm512_set1_epi32(0x20007)),
           _mm512_reduce_add_epi32)
THROUGHPUT(maddwd, __m512i, _mm512_set1_epi32(j),
           _mm512_madd_epi16(v[j], _mm512_set1_epi32(0x30005)), _mm512_reduce_add_epi32)
#endif
void fuel_kernel(void **data, const int64_t *sizes, const int64_t *strides) {
    (void)strides;
    int32_t *out = (int32_t *)data[0];
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    int32_t (*const kinds[3])(int64_t) = {dpwssd, dpbusd, maddwd};
    const int32_t sum = kinds[sizes[1] % 3](sizes[0]);
    *out = sum == INT32_MIN ? 0 : sum;
#else
    (void)sizes;
    *out = INT32_MIN;
#endif
}
"""

FLOOR_CODE = """
import ctypes, json, sys, time
from fuel.compiler import toolchain
built = toolchain.build(sys.argv[1], "bench_multiply_floor")
sink = ctypes.c_int32()
data = (ctypes.c_void_p * 1)(ctypes.addressof(sink))
built.function(data, (ctypes.c_int64 * 2)(1, 0), None)
if sink.value == -2**31:
    print(json.dumps(None))
    raise SystemExit
found = {}
for operation, name in enumerate(("dpwssd", "dpbusd", "maddwd")):
    count = 2_000_000
    best = 1e9
    for _ in range(5):
        sizes = (ctypes.c_int64 * 2)(count, operation)
        start = time.process_time()
        built.function(data, sizes, None)
        best = min(best, (time.process_time() - start) / (count * 10))
    found[name] = best * 1e9
print(json.dumps(found))
"""


def multiply_floor(base: dict) -> dict | None:
    """ns per 512-bit vpdpwssd, vpdpbusd and vpmaddwd on one core (CPU time, best of
    5), or None without AVX-512 VNNI."""
    return child_json(FLOOR_CODE, [FLOOR_SOURCE], one_thread(base), "the multiply floor")


PROFILE_CODE = """
import json, sys
import fuel
from fuel.models.llama import load_gguf
from fuel.models.kv_cache import PagedKVPool
from fuel.models.paged_step import Chunk, PagedStepper
model = load_gguf(None if sys.argv[1] == "None" else sys.argv[1])
config = model.config
rows = [int(b) for b in sys.argv[2].split(",")]
pool = PagedKVPool(config.num_layers, config.num_kv_heads, config.head_dim, 8 * max(rows) + 1,
                   16, model.device)
stepper = PagedStepper(model, pool, -(-config.context_length // 16), sys.argv[3])
result = {}
for b in rows:
    chunks = [Chunk([100 + r], 60, list(range(1 + 8 * r, 9 + 8 * r)), True) for r in range(b)]
    for _ in range(2):
        stepper.step(chunks)
    best = {}
    for _ in range(3):
        with fuel.profile() as prof:
            stepper.step(chunks)
        for op, backend, count, seconds in prof.ops:
            best[op] = min(best.get(op, 1e9), seconds)
    result[b] = best
print(json.dumps(result))
"""
# op names of a step's kernels by part (fused elementwise kernels are named fused(...))
PARTS = (("quantized matmul", ("quantized_matmul", "quantized_matmul_int8")),
         ("attention", ("paged_attention",)),
         ("RoPE (batched matmul)", ("matmul",)), ("KV writes", ("index_copy",)))


def step_profiles(options: argparse.Namespace, base: dict) -> int:
    """``--profile``: one engine step of B decode rows (position 60) for each B of
    --step-rows, by kernel (fuel.profile, the step run eagerly launch by launch, one thread,
    best of 3 per op): ms per step and per row of each part, and a row's share against B=1's."""
    rows = [int(b) for b in options.step_rows.split(",")]
    found = child_json(PROFILE_CODE, [str(options.model), options.step_rows,
                                      options.activations],
                       one_thread(base), "the step profile")
    found = {int(b): ops for b, ops in found.items()}
    print(f"one engine step of B decode rows by kernel, 1 thread, CPU ms per step; load "
          f"average {os.getloadavg()[0]:.2f}")
    print(f"{'part':<24}" + "".join(f"{f'B={b} ms':>10}{'per row':>9}{'x B=1':>7}"
                                    for b in rows))
    named = {op for _, ops in PARTS for op in ops}
    parts = [(name, ops) for name, ops in PARTS]
    parts.append(("everything else", None))
    parts.append(("all kernels", ()))
    for name, ops in parts:
        line = f"{name:<24}"
        base_row = None
        for b in rows:
            if ops is None:
                ms = sum(v for op, v in found[b].items() if op not in named) * 1e3
            elif ops == ():
                ms = sum(found[b].values()) * 1e3
            else:
                ms = sum(found[b].get(op, 0.0) for op in ops) * 1e3
            per_row = ms / b
            base_row = per_row if base_row is None else base_row
            line += f"{ms:>10.2f}{per_row:>9.3f}{per_row / base_row if base_row else 0:>7.2f}"
        print(line)
    return 0


ENGINE_CODE = """
import json, sys, threading, time
from fuel.models.llama import load_gguf
from fuel.models.sampling import SamplingConfig
from fuel.serve.engine import DEFAULT_BLOCK_SIZE, Engine, Job
model_path, counts, block_size, budget, max_tokens, topics = (
    sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4]),
    int(sys.argv[5]), json.loads(sys.argv[6]))
block_size = block_size or DEFAULT_BLOCK_SIZE
model = load_gguf(None if model_path == "None" else model_path)
engine = Engine(model, slots=max(counts), token_budget=budget, block_size=block_size,
                max_queue=2 * max(counts), activations=sys.argv[7])
engine.start()


def burst(chats):
    done, lock, left, made = threading.Event(), threading.Lock(), [len(chats)], [0]

    def emit(kind, payload):
        if kind in ("done", "error"):
            with lock:
                made[0] += payload[2] if kind == "done" else 0
                left[0] -= 1
                if not left[0]:
                    done.set()

    cpu, wall, rows = time.process_time(), time.perf_counter(), engine.stepper.rows
    for chat in chats:
        engine.submit(Job(emit=emit, ids=list(model.encode_chat(chat)), max_tokens=max_tokens,
                          sampling=SamplingConfig(temperature=0.0)))
    done.wait()
    return (made[0], time.process_time() - cpu, time.perf_counter() - wall,
            engine.stepper.rows - rows)


def chats(names):
    return [[{"role": "user", "content": f"Write a short paragraph about {t}."}] for t in names]


burst(chats(["a pond"]))
for n in counts:  # every step shape once
    burst(chats([f"{t}s" for t in topics[:n]]))
result = {}
for n in counts:
    if n == 1:  # one client: each topic alone, in turn
        runs = [burst(chats([t])) for t in topics[:max(counts)]]
        result[n] = [sum(r[i] for r in runs) for i in range(4)]
    else:
        result[n] = list(burst(chats(topics[:n])))
engine.stop()
print(json.dumps(result))
"""


def engine_ratios(options: argparse.Namespace, base: dict, topics: list[str]) -> int:
    """``--engine``: bench/serve.py's load in-process, no HTTP (the engine's own scheduling,
    prefix reuse and steps): one client (each topic alone, in turn), then each --clients
    count at once, greedy, --max-tokens answers; CPU time per generated token on one thread
    (what the machine's other load changes least) and its ratio to one client's."""
    counts = [1] + [n for n in options.clients if n != 1]
    values = one_thread(base)
    found = child_json(ENGINE_CODE, [str(options.model), json.dumps(counts),
                                     json.dumps(options.block_size), str(options.token_budget),
                                     str(options.max_tokens), json.dumps(topics),
                                     options.activations],
                       values, "the engine measurement")
    size = options.block_size or "the server's default"
    print(f"the engine in-process (no HTTP), 1 thread, {options.activations} activations, "
          f"block size {size}, token budget "
          f"{options.token_budget}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'clients':>8}{'tokens':>8}{'rows':>7}{'CPU ms/token':>14}{'x 1 client':>12}"
          f"{'wall tok/s':>12}")
    single = None
    for n in counts:
        tokens, cpu, wall, rows = found[str(n)]
        per_token = cpu / tokens
        single = per_token if single is None else single
        print(f"{n:>8}{tokens:>8}{rows:>7}{per_token * 1e3:>14.2f}{single / per_token:>12.2f}"
              f"{tokens / wall:>12.1f}")
    return 0
