"""The judge's cost and its second process: a cold ``fuel tune minilm smollm2`` (no stored
winners; the kernel cache as it is), then a new process that loads both models and runs their
first calls, which must time nothing (``fuel.judge_stats()``), with its first-call times beside
the same process's warm calls (the median of the next five) and each model's load time (the
GGUF's includes its warm start: the step shapes ``fuel tune`` recorded, prepared).

    python bench/tune.py [--keep]

The winners go to a temporary file (``FUEL_JUDGE_FILE``), so the user's stored winners are
untouched; ``--keep`` tunes into the cache folder's own file instead.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from child import child_result, repository_environment


def second_process() -> dict:
    """Load both models (timed), time each first call and the warm ones after it (the
    median of WARM_CALLS), report the judge's stats."""
    import numpy as np

    import fuel
    from fuel.models import minilm
    from fuel.models.llama import load_gguf

    found = {}
    started = time.perf_counter()
    encoder = minilm.load().encoder
    found["minilm load ms"] = (time.perf_counter() - started) * 1e3
    ids = np.random.default_rng(0).integers(1000, 20000, (1, 12)).astype(np.int64)
    times = []
    for _ in range(1 + WARM_CALLS):
        started = time.perf_counter()
        encoder.mean_pooled(ids, np.ones_like(ids)).numpy()
        times.append((time.perf_counter() - started) * 1e3)
    found["minilm 1x12 first ms"] = times[0]
    found["minilm 1x12 warm ms"] = float(np.median(times[1:]))
    started = time.perf_counter()
    model = load_gguf()
    found["smollm2 load ms"] = (time.perf_counter() - started) * 1e3
    for text in PROMPTS:  # lengths fuel tune never ran: each runs padded to a row bucket
        prompt = model.encode(text)
        times = []
        for _ in range(1 + WARM_CALLS):
            stream = model.stream_ids(prompt, 1)
            started = time.perf_counter()
            next(iter(stream))
            times.append((time.perf_counter() - started) * 1e3)
        found[f"smollm2 first token ({len(prompt)}-token prompt), first call, ms"] = times[0]
        found[f"smollm2 first token ({len(prompt)}-token prompt), warm, ms"] = float(
            np.median(times[1:]))
        found[f"smollm2 first token ({len(prompt)}-token prompt), warm range, ms"] = (
            min(times[1:]), max(times[1:]))
    found["judge"] = fuel.judge_stats()
    return found


WARM_CALLS = 5  # calls after the first; their median is the warm time
PROMPTS = ("The capital of France is",
           "Write a short story about a lighthouse keeper who finds a message in a bottle, "
           "and tell it in the voice of an old sailor.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true",
                        help="tune into the cache folder's winners file (default: a temp one)")
    parser.add_argument("--second-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.second_process:
        print(json.dumps(second_process()))
        return
    with tempfile.TemporaryDirectory() as folder:
        overrides = {} if args.keep else {"FUEL_JUDGE_FILE": os.path.join(folder, "w.json")}
        environment = repository_environment(**overrides)
        load = os.getloadavg()[0]
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "fuel", "tune", "minilm", "smollm2"],
                              env=environment, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode:
            raise SystemExit(f"fuel tune failed:\n{done.stderr[-3000:]}")
        print(done.stdout.strip().splitlines()[-1])
        print(f"cold fuel tune minilm smollm2: {seconds:.1f} s wall (load average before: "
              f"{load:.1f})")
        found = child_result(__file__, ["--second-process"], environment)
    stats = found.pop("judge")
    print(f"second process: timed {stats['timed']} bucket(s), took {stats['stored']} from the "
          f"stored winners, {stats['default']} left to the kernels' rules")
    for name, value in found.items():
        shown = f"{value[0]:.1f}-{value[1]:.1f}" if isinstance(value, list) else f"{value:.1f}"
        print(f"  {name:<40}{shown:>10}")


if __name__ == "__main__":
    main()
