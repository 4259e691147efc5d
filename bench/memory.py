"""Peak memory of a realize against the liveness lower bound of its order.

For a MiniLM forward (1 x 12 and 8 x 128 tokens) and a SmolLM2 decode step, builds the graph,
computes the bound (every buffer freed right after its last reader), realizes from an empty
buffer pool and prints the measured peak (fuel.memory_stats) and the ratio peak / bound.
The bound counts an in-place write (the KV cache's index_copy_) as an allocation, so a decode
step can come in under it.
"""

from __future__ import annotations

import argparse

import numpy as np

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("minilm", "smollm"), default=None)
    args = parser.parse_args()
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
