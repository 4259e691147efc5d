"""Time per dispatch on the wgpu backend for a chain of 500 small elementwise ops: recorded
into one command batch (the default) versus submitted one by one (``DISPATCH_LIMIT = 1``).
Each mode runs in its own process, alternating, 3 rounds; medians and their ratio are printed.

    python bench/wgpu_batching.py [--ops 500] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from child import child_result, repository_environment


def measure(mode: str, ops: int, repeats: int) -> float:
    """Seconds per dispatch of the chain in this process (best of ``repeats`` realizes)."""
    import numpy as np

    import fuel
    from fuel.backends.wgpu import runtime

    if mode == "per-op":
        runtime.DISPATCH_LIMIT = 1
    fuel.set_fusion(False)  # 500 launches, not one fused kernel
    x = fuel.tensor(np.linspace(-1, 1, 256, dtype=np.float32)).to("vulkan")
    fuel.realize(x)

    def chain():
        y = x
        for step in range(ops):
            y = y * 1.0001 if step % 2 else y + 0.5
        return y

    fuel.realize(chain())  # pipelines compiled, plan cached
    best = float("inf")
    for _ in range(repeats):
        y = chain()
        start = time.perf_counter()
        fuel.realize(y)
        best = min(best, time.perf_counter() - start)
    return best / ops


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=["batched", "per-op"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.ops, 5)))
        return
    env = repository_environment()
    results: dict[str, list[float]] = {"batched": [], "per-op": []}
    for _ in range(args.rounds):
        for mode in results:
            results[mode].append(child_result(__file__, ["--child", mode, "--ops",
                                                         str(args.ops)], env))
    batched = statistics.median(results["batched"])
    per_op = statistics.median(results["per-op"])
    print(f"wgpu, chain of {args.ops} small ops, median of {args.rounds} rounds")
    print(f"  batched (one submit):   {batched * 1e6:8.1f} us per dispatch")
    print(f"  submit per op:          {per_op * 1e6:8.1f} us per dispatch")
    print(f"  batched is {per_op / batched:.2f}x faster per dispatch")


if __name__ == "__main__":
    main()
