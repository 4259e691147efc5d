"""Per-node host overhead: a chain of tiny elementwise ops in fuel, torch eager and NumPy.

Prints microseconds per node and the ratios against torch eager measured in the same run
(every system with its default threads):
  fuel new shape      build the chain at a size this process has never seen and realize it
                      (a plan of its own: resolved, grouped and planned afresh; the fused
                      group's generated kernel serves the new size without a new build)
  fuel fresh          build the chain and realize it with the plan cache off (the same size)
  fuel cached         build the chain and realize it (plan cache hit: no compile, no planning)
  fuel replay         re-run a captured plan with new leaf data (fuel.jit), no graph building
"""

from __future__ import annotations

import argparse

import numpy as np
from child import median_seconds

import fuel


def chain(x, length: int):
    for k in range(length):
        x = x * 1.0001 + 0.5 if k % 2 else x - 0.25
    return x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--size", type=int, default=16, help="elements per tensor")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    data = np.random.default_rng(0).standard_normal(args.size).astype(np.float32)
    length = args.nodes // 2  # each step of the chain is two elementwise nodes on average
    x = fuel.from_numpy(data)
    nodes = len(chain(x, length).explain().rows)

    def fuel_fresh():
        fuel.set_plan_cache_capacity(0)
        chain(fuel.from_numpy(data), length).realize()

    def fuel_cached():
        chain(fuel.from_numpy(data), length).realize()

    compiled = fuel.jit(lambda t: chain(t, length))
    source = fuel.from_numpy(data)

    def fuel_replay():
        compiled(source)

    sizes = iter(range(args.size + 1, args.size + 10_000))

    def fuel_new_shape():
        chain(fuel.from_numpy(np.resize(data, next(sizes))), length).realize()

    rows = {}
    rows["fuel new shape build + realize"] = median_seconds(fuel_new_shape, args.repeats) / nodes
    rows["fuel fresh build + realize"] = median_seconds(fuel_fresh, args.repeats) / nodes
    fuel.set_plan_cache_capacity(128)
    rows["fuel build + cached plan"] = median_seconds(fuel_cached, args.repeats) / nodes
    rows["fuel replay (fuel.jit)"] = median_seconds(fuel_replay, args.repeats) / nodes
    rows["numpy"] = median_seconds(lambda: chain(data, length), args.repeats) / nodes
    try:
        import torch

        tensor = torch.from_numpy(data)
        with torch.inference_mode():
            rows["torch eager"] = median_seconds(lambda: chain(tensor, length),
                                                 args.repeats) / nodes
    except ImportError:
        print("torch is not installed: no torch column")
    torch_time = rows.get("torch eager")
    threads = f", torch threads {torch.get_num_threads()}" if torch_time else ""
    print(f"chain of {nodes} nodes on {args.size}-element float32 tensors, median of "
          f"{args.repeats}{threads}")
    print(f"{'':30}{'us/node':>10}{'vs torch':>10}")
    for name, seconds in rows.items():
        ratio = f"{seconds / torch_time:>9.2f}x" if torch_time else ""
        print(f"{name:30}{seconds * 1e6:>10.2f}{ratio:>10}")


if __name__ == "__main__":
    main()
