"""Peak memory of a realize against the liveness lower bound of its order, and the resident
memory of a loaded SmolLM2 against its GGUF file's size.

For a MiniLM forward (1 x 12 and 8 x 128 tokens) and a SmolLM2 decode step, builds the graph,
computes the bound (every buffer freed right after its last reader), realizes from an empty
buffer pool and prints the measured peak (fuel.memory_stats) and the ratio peak / bound.
The bound counts an in-place write (the KV cache's index_copy_) as an allocation, so a decode
step can come in under it.

Resident memory (``--only resident``): a fresh process per weight format (quantized, the
default, and float32) reports its resident set (VmRSS) after ``import fuel`` (Python, NumPy
and fuel: the baseline), after ``load_gguf`` and after generating 16 tokens (every weight page
touched); the model's share is the difference to the baseline, set against the file size
(target: at most 1.3x). Everything the model brings is in it: the gguf and tokenizers
imports, the tokenizer, the weights (pages of the GGUF mapped in and copies made at load),
plans, kernels, KV cache and pools. The split shows the GGUF file's mapped pages and the
growth of anonymous memory (copies, tokenizer, Python objects, the heap's free space).
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from child import child_result

import fuel
from fuel.graph import Graph
from fuel.memory.pool import reset_peak
from fuel.runtime.liveness import liveness_bound


def measure(name: str, output, rows: list) -> None:
    graph = Graph.build([output._node])
    bound = liveness_bound(graph)
    fuel.empty_cache()
    reset_peak("cpu")
    stats = fuel.memory_stats("cpu")
    base = stats["allocated"] + stats["pooled"]
    output.realize()
    peak = fuel.memory_stats("cpu")["peak"] - base
    rows.append((name, len(graph), bound, peak))


def minilm_rows(rows: list) -> None:
    from fuel.models import minilm

    encoder = minilm.load().encoder
    encoder.use_jit = False
    for batch, length in ((1, 12), (8, 128)):
        ids = np.random.default_rng(0).integers(1000, 30000, size=(batch, length))
        ids[:, 0], ids[:, -1] = 101, 102
        lazy = encoder._pooled(*encoder._leaves(ids, np.ones_like(ids)))
        measure(f"MiniLM forward {batch} x {length}", lazy, rows)


def smollm_rows(rows: list) -> None:
    from fuel.models.llama import StepInputs, decoder_step, load_gguf

    model = load_gguf()
    model.use_jit = False
    cache = model.new_cache(256)
    model.forward(model.encode("Once upon a time"), cache)  # fill a few positions
    step = StepInputs.create(np.array([42]), cache.length, model.config,
                             model._inverse_frequencies, cache.capacity, model.device)
    logits = decoder_step(model.weights, model.config, step, cache, False)
    measure("SmolLM2 decode step", logits, rows)


def resident_bytes() -> int:
    """This process's resident set size (VmRSS) in bytes."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def resident_split(path) -> tuple[int, int]:
    """(bytes of ``path``'s mapped pages resident, anonymous bytes resident) of this process,
    from /proc/self/smaps."""
    mapped = anonymous = 0
    current = ""
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's first line
                current = fields[5] if len(fields) > 5 else ""
            elif fields[0] == "Rss:" and current == str(path):
                mapped += int(fields[1]) * 1024
            elif fields[0] == "Anonymous:":
                anonymous += int(fields[1]) * 1024
    return mapped, anonymous


def resident_worker(dtype: str, gguf: str | None = None) -> None:
    """In a fresh process: RSS after import, after loading, after 16 tokens, and the split of
    the last (JSON). ``gguf``: SmolLM2 requantized to that format (bench/requantize.py)."""
    from requantize import smollm_path

    import fuel.models.llama as llama

    path = smollm_path(gguf)
    baseline = resident_bytes()
    anonymous_baseline = resident_split(path)[1]
    model = llama.load_gguf(path, dtype=dtype)
    loaded = resident_bytes()
    model.generate_ids(model.encode("Once upon a time"), 16)
    mapped, anonymous = resident_split(path)
    print(json.dumps({"baseline": baseline, "loaded": loaded, "generated": resident_bytes(),
                      "file": path.stat().st_size, "mapped": mapped,
                      "anonymous": anonymous - anonymous_baseline}))


def resident_rows(gguf: str | None = None) -> None:
    if gguf:
        print(f"SmolLM2 requantized to {gguf}")
    print(f"{'SmolLM2 weights':<16}{'import MiB':>11}{'loaded MiB':>11}{'+16 tok MiB':>12}"
          f"{'model MiB':>10}{'GGUF map':>9}{'anon':>7}{'file MiB':>9}{'model/file':>11}"
          f"{'process/file':>13}")
    for dtype in ("quantized", "float32"):
        values = child_result(__file__, ["--resident-worker", dtype]
                              + (["--gguf", gguf] if gguf else []))
        model = values["generated"] - values["baseline"]
        mib = 2**20
        print(f"{dtype:<16}{values['baseline'] / mib:>11.1f}{values['loaded'] / mib:>11.1f}"
              f"{values['generated'] / mib:>12.1f}{model / mib:>10.1f}"
              f"{values['mapped'] / mib:>9.1f}{values['anonymous'] / mib:>7.1f}"
              f"{values['file'] / mib:>9.1f}{model / values['file']:>11.3f}"
              f"{values['generated'] / values['file']:>13.2f}")
    print("model: resident after 16 tokens minus the baseline, resident after import fuel "
          "(Python, NumPy, fuel); target <= 1.3x the file. GGUF map: the file's pages mapped "
          "in; anon: anonymous memory grown since the baseline (weights copied at load, the "
          "tokenizer, ...); the rest is other files' pages (libraries, kernels)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("minilm", "smollm", "resident"), default=None)
    parser.add_argument("--resident-worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--gguf", default=None,
                        help="resident memory of SmolLM2 requantized to this llama.cpp format")
    args = parser.parse_args()
    if args.resident_worker:
        resident_worker(args.resident_worker, args.gguf)
        return
    if args.only in (None, "resident"):
        resident_rows(args.gguf)
        if args.only == "resident":
            return
    rows: list = []
    if args.only in (None, "minilm"):
        minilm_rows(rows)
    if args.only in (None, "smollm"):
        smollm_rows(rows)
    print(f"{'graph':<28}{'nodes':>7}{'bound MiB':>11}{'peak MiB':>10}{'peak/bound':>12}")
    for name, nodes, bound, peak in rows:
        print(f"{name:<28}{nodes:>7}{bound / 2**20:>11.2f}{peak / 2**20:>10.2f}"
              f"{peak / bound:>12.3f}")


if __name__ == "__main__":
    main()
