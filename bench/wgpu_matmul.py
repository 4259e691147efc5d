"""Time of the wgpu matmul's two shader shapes on the SmolLM2-135M shapes (a decode step's
matrix-vector products and a 6-token prefill's; the 49152-column LM head is left out to
keep the run short): ``register`` (rows accumulated in registers,
no workgroup memory; the choice on CPU adapters such as lavapipe) versus ``tiled`` (16x16
tiles through workgroup memory; the choice on GPUs). Each shape runs in its own process,
alternating, 3 rounds; medians and their ratio are printed.

    python bench/wgpu_matmul.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from child import child_result, repository_environment

SHAPES = ((1, 576, 960), (1, 576, 3072), (1, 1536, 576), (6, 576, 1536))  # (m, k, n)


def measure(shape: str, repeats: int) -> float:
    """Seconds for one pass over ``SHAPES`` (best of ``repeats``) in this process."""
    import numpy as np

    import fuel
    from fuel.backends.wgpu import BACKEND

    rng = np.random.default_rng(0)
    pairs = [(fuel.tensor(rng.standard_normal((m, k), np.float32)).to("vulkan"),
              fuel.tensor(rng.standard_normal((k, n), np.float32)).to("vulkan"))
             for m, k, n in SHAPES]
    BACKEND.context(BACKEND.devices()[0]).matmul_shape = shape
    fuel.realize(*[a @ b for a, b in pairs])  # pipelines compiled, plan cached
    best = float("inf")
    for _ in range(repeats):
        products = [a @ b for a, b in pairs]
        start = time.perf_counter()
        fuel.realize(*products)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", choices=["register", "tiled"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, 3)))
        return
    env = repository_environment()
    results: dict[str, list[float]] = {"register": [], "tiled": []}
    for _ in range(args.rounds):
        for shape in results:
            results[shape].append(child_result(__file__, ["--child", shape], env))
    register = statistics.median(results["register"])
    tiled = statistics.median(results["tiled"])
    print(f"wgpu matmul, SmolLM2 shapes {SHAPES} (m, k, n), median of {args.rounds} rounds")
    print(f"  register-blocked: {register * 1e3:9.1f} ms")
    print(f"  16x16 tiled:      {tiled * 1e3:9.1f} ms")
    print(f"  register-blocked is {tiled / register:.2f}x faster")


if __name__ == "__main__":
    main()
