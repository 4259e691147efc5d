"""SmolLM2 time to first token with a cold kernel cache, pipelined vs serial compile, and
with a warm one.

Each case runs in its own fresh process: load the model (weights from the usual cache, not
timed), point the kernel cache (``FUEL_CACHE_DIR``) at an empty folder, or at the folder a
previous case filled, and time ``generate_ids(prompt, 1)``: prompt processing, every C
compiler run its plan needs, and the greedy pick. ``captured``: the default, each prompt step
captured (fuel.jit) at its first call; ``eager pipelined``: the model's step realized
without capture, planning and compiling on a thread ahead of execution; ``eager serial``:
the whole plan compiled before the first step runs. Prints the medians over rounds and their
ratios to the warm time.

    PYTHONPATH=. python bench/cold_start.py [--rounds N] [--prompt-tokens N] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

import numpy as np  # before threadpool_limits, which limits only the BLAS already loaded
from child import child_result

# "captured": the model's default (each prompt step captured at its first call); "eager":
# use_jit off, the step realized pipelined (planning and compiling on a thread, ahead of
# execution) or serially (the whole plan compiled before the first step runs).
CASES = ("cold, captured", "cold, eager pipelined", "cold, eager serial", "warm")


def _child(case: str, kernel_folder: str, prompt_tokens: int) -> None:
    from fuel.compiler import toolchain
    from fuel.dispatch import op_profile
    from fuel.models.llama import load_gguf

    model = load_gguf(warm=False)  # nothing planned or compiled before the timed call
    model.use_jit = not case.startswith("cold, eager")
    model.pipelined = case != "cold, eager serial"
    os.environ["FUEL_CACHE_DIR"] = kernel_folder  # kernels only: the weights are loaded
    ids = np.random.default_rng(0).integers(100, 40000, size=prompt_tokens).tolist()
    op_profile.set_enabled(True)  # for the compile.c phase
    started = time.perf_counter()
    model.generate_ids(ids, 1)
    seconds = time.perf_counter() - started
    phases = {name: total for name, _, total in op_profile.take_phases()}
    print(json.dumps({"ms": seconds * 1e3, "compiles": phases.get("compile.c", 0.0) * 1e3,
                      "kernels": len(toolchain.built_kernels())}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt-tokens", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads")
    parser.add_argument("--case", choices=CASES, help=argparse.SUPPRESS)
    parser.add_argument("--kernel-folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.threads is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
    if args.case:
        _child(args.case, args.kernel_folder, args.prompt_tokens)
        return
    samples: dict = {case: [] for case in CASES}
    warm_folder = tempfile.mkdtemp(prefix="fuel-warm-kernels-")
    try:
        for _ in range(args.rounds):
            for case in CASES:
                folder = warm_folder if case == "warm" else tempfile.mkdtemp(
                    prefix="fuel-cold-kernels-")
                arguments = ["--case", case, "--kernel-folder", folder,
                             "--prompt-tokens", str(args.prompt_tokens)]
                if args.threads is not None:
                    arguments += ["--threads", str(args.threads)]
                try:
                    samples[case].append(child_result(__file__, arguments))
                finally:
                    if case == "cold, eager serial":  # leave its kernels for the warm case
                        shutil.copytree(folder, warm_folder, dirs_exist_ok=True)
                    if folder != warm_folder:
                        shutil.rmtree(folder, ignore_errors=True)
    finally:
        shutil.rmtree(warm_folder, ignore_errors=True)
    warm = statistics.median(s["ms"] for s in samples["warm"])
    print(f"SmolLM2 first token, {args.prompt_tokens}-token prompt, each case in a fresh "
          f"process, median of {args.rounds} rounds:")
    print(f"{'case':<18}{'ms':>10}{'cc ms':>10}{'kernels':>9}{'x warm':>8}")
    for case in CASES:
        ms = statistics.median(s["ms"] for s in samples[case])
        compiles = statistics.median(s["compiles"] for s in samples[case])
        kernels = samples[case][-1]["kernels"]
        print(f"{case:<18}{ms:>10.1f}{compiles:>10.1f}{kernels:>9}{ms / warm:>8.2f}")
    print("cc ms: time inside C compiler runs (phase compile.c); kernels: generated kernels "
          "the process loaded")


if __name__ == "__main__":
    main()
