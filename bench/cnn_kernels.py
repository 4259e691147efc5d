"""Where a CNN's time goes: fuel's and onnxruntime's kernel times by op on one and two threads.

For each model (bench/cnn.py's exports) it runs fuel with ``FUEL_THREADS`` 1 and 2 and
onnxruntime with ``intra_op_num_threads`` 1 and 2, each in its own process (alternated,
``--rounds`` times), and prints the fastest round's wall time per system and team, then per
op kind the summed kernel times (``fuel.profile()`` launches; onnxruntime's profiler's node
times; each launch's median over a round's profiled calls, the smallest sum over the
rounds), fuel / onnxruntime on each team, and each system's two-thread speed-up. ``--each``
also lists every convolution, paired by launch order (right for a chain such as a ResNet,
not for branches whose order differs between the two systems).

    python bench/cnn_kernels.py --models resnet50,squeezenet1_1 [--batch 1] [--rounds 2]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cnn  # noqa: E402
from child import median_seconds  # noqa: E402

CALLS = 20
PROFILED = 5
# fuel's op names -> onnxruntime's node op types (the kinds compared)
KINDS = {"conv_fused": "Conv", "conv": "Conv", "conv_blocked": "Conv", "max_pool": "MaxPool",
         "avg_pool": "GlobalAveragePool", "cat": "Concat", "matmul": "Gemm"}


def _ort(path: str, inputs: dict, threads: int) -> tuple[float, list[tuple[str, float]]]:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    wall = median_seconds(lambda: session.run(None, inputs), CALLS, warmup=5)
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tempfile.gettempdir(), f"ort_{os.getpid()}")
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for _ in range(PROFILED):
        session.run(None, inputs)
    trace = session.end_profiling()
    with open(trace) as handle:
        events = json.load(handle)
    os.remove(trace)
    per_node: dict[str, list] = collections.defaultdict(list)
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            per_node[event["name"]].append((event["args"]["op_name"], event["dur"] * 1e-6))
    return wall, [(runs[0][0], statistics.median(s for _, s in runs))
                  for runs in per_node.values()]


def _fuel(path: str, inputs: dict, threads: int) -> tuple[float, list[tuple[str, float]]]:
    os.environ["FUEL_THREADS"] = str(threads)
    import fuel
    import fuel.onnx

    model = fuel.onnx.load(path)
    wall = median_seconds(lambda: model.run(inputs), CALLS, warmup=5)
    runs: dict[tuple[int, str], list[float]] = collections.defaultdict(list)
    for _ in range(PROFILED):
        with fuel.profile() as profile:
            model.run(inputs)
        for index, row in enumerate(profile.launches):
            runs[(index, row.op)].append(row.seconds)
    return wall, [(KINDS.get(op, op), statistics.median(s)) for (_, op), s in runs.items()]


def child(system: str, name: str, batch: int, threads: int) -> None:
    """One measurement in this process, printed as JSON."""
    inputs = cnn.feeds(name, batch)
    path = str(cnn.model_path(name))
    wall, rows = (_ort if system == "onnxruntime" else _fuel)(path, inputs, threads)
    print(json.dumps({"wall": wall, "rows": rows}))


def measure(system: str, name: str, batch: int, threads: int) -> dict:
    output = subprocess.run([sys.executable, __file__, "--child", system, name, str(batch),
                             str(threads)], check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def report(name: str, batch: int, found: dict, each: bool) -> None:
    """Per system and team: the fastest round's wall time, and per op kind (and per
    convolution) the smallest time over the rounds (a busy machine slows rounds at random)."""
    walls = {key: min(run["wall"] for run in runs) for key, runs in found.items()}
    keys = (("fuel", 1), ("onnxruntime", 1), ("fuel", 2), ("onnxruntime", 2))
    print(f"\n{name} batch {batch}: wall ms fuel 1t {walls[keys[0]] * 1e3:.2f}, 2t "
          f"{walls[keys[2]] * 1e3:.2f}; onnxruntime 1t {walls[keys[1]] * 1e3:.2f}, 2t "
          f"{walls[keys[3]] * 1e3:.2f}")
    totals: dict[tuple, dict[str, list]] = {}
    for key, runs in found.items():
        kinds: dict[str, list] = {}
        for run in runs:
            summed: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
            for kind, seconds in run["rows"]:
                summed[kind][0] += 1
                summed[kind][1] += seconds
            for kind, (count, seconds) in summed.items():
                if kind not in kinds or seconds < kinds[kind][1]:
                    kinds[kind] = [count, seconds]
        totals[key] = kinds
    kinds = sorted(set(totals[keys[0]]) | set(totals[keys[1]]),
                   key=lambda k: -totals[keys[0]].get(k, [0, 0.0])[1])
    print(f"{'op':<20}{'n':>4}{'fuel 1t':>9}{'ort 1t':>9}{'ratio':>7}{'fuel 2t':>9}"
          f"{'ort 2t':>9}{'ratio':>7}{'fuel x':>8}{'ort x':>7}  (ms)")

    def ratio(a: float, b: float) -> str:
        return f"{a / b:6.2f}x" if b else "      -"

    for kind in kinds:
        f1, o1, f2, o2 = (totals[key].get(kind, [0, 0.0])[1] * 1e3 for key in keys)
        count = max(totals[keys[0]].get(kind, [0])[0], totals[keys[1]].get(kind, [0])[0])
        print(f"{kind[:19]:<20}{count:>4}{f1:>9.2f}{o1:>9.2f}{ratio(f1, o1)}{f2:>9.2f}"
              f"{o2:>9.2f}{ratio(f2, o2)}{ratio(f1, f2)} {ratio(o1, o2)}")
    if each:
        convs = {key: [min(values) for values in zip(*(
            [s for kind, s in run["rows"] if kind == "Conv"] for run in found[key]))]
            for key in keys}
        print(f"{'conv':>5}{'fuel 1t':>9}{'ort 1t':>9}{'fuel 2t':>9}{'ort 2t':>9}  (us)")
        for index, values in enumerate(zip(*(convs[key] for key in keys))):
            print(f"{index:>5}" + "".join(f"{v * 1e6:>9.0f}" for v in values))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        system, name, batch, threads = sys.argv[2:6]
        child(system, name, int(batch), int(threads))
        return
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet50,squeezenet1_1")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--each", action="store_true", help="list every convolution too")
    args = parser.parse_args()
    print("machine load (1/5/15 min):", " ".join(f"{v:.2f}" for v in os.getloadavg()),
          f"{os.cpu_count()} cpus")
    for name in args.models.split(","):
        cnn.model_path(name)  # exported once, outside the timed processes
        found: dict[tuple, list] = collections.defaultdict(list)
        for _ in range(args.rounds):
            for threads in (1, 2):
                for system in ("fuel", "onnxruntime"):
                    found[(system, threads)].append(measure(system, name, args.batch, threads))
        report(name, args.batch, found, args.each)
    print("machine load now:", " ".join(f"{v:.2f}" for v in os.getloadavg()))


if __name__ == "__main__":
    main()
