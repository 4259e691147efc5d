"""Repeated ONNX Model.run against onnxruntime's InferenceSession.run, each in its own process.

Models: a generated chain of about 1000 small nodes (onnx.helper) and light_resnet50 from the
onnx package's backend test data. For fuel, the per-call overhead is a call's time minus the
kernels' time that ``fuel.profile()`` records for that same call, the median over the profiled
calls (pairing each call with its own kernels keeps kernel-time noise, which dominates
light_resnet50's calls, out of the difference; the profiler's own bookkeeping is included, so
it is an upper bound); onnxruntime's whole per-call time is the peer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
from child import child_result, median_seconds


def chain_model(nodes: int):
    """x[16] through ``nodes`` alternating Mul/Add nodes with small initializers."""
    from onnx import TensorProto, helper

    graph_nodes, initializers = [], []
    previous = "x"
    for index in range(nodes):
        constant = f"c{index}"
        initializers.append(helper.make_tensor(constant, TensorProto.FLOAT, [16],
                                               [1.0001 if index % 2 else 0.25] * 16))
        output = f"v{index}"
        graph_nodes.append(helper.make_node("Mul" if index % 2 else "Add",
                                            [previous, constant], [output]))
        previous = output
    graph = helper.make_graph(graph_nodes, "chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [16])],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def resnet_model():
    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        "light_resnet50.onnx")
    return onnx.load(path)


def _feeds(model) -> dict:
    rng = np.random.default_rng(0)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        shape = [d.dim_value or 1 for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def measure(system: str, name: str, repeats: int) -> dict:
    """Per-call seconds of one system on one model (run in this process)."""
    model = chain_model(1000) if name == "chain" else resnet_model()
    feeds = _feeds(model)
    if system == "onnxruntime":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        session = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])
        return {"call": median_seconds(lambda: session.run(None, feeds), repeats)}
    import fuel
    import fuel.onnx

    loaded = fuel.onnx.load(model)
    call = median_seconds(lambda: loaded.run(feeds), repeats)
    overheads, kernels = [], []
    for _ in range(repeats):
        with fuel.profile() as profile:
            start = time.perf_counter()
            loaded.run(feeds)
            seconds = time.perf_counter() - start
        launched = sum(row.seconds for row in profile.launches)
        kernels.append(launched)
        overheads.append(seconds - launched)
    replay = getattr(loaded, "_replay", None)
    return {"call": call, "kernels": statistics.median(kernels),
            "overhead": statistics.median(overheads), "overhead_low": min(overheads),
            "overhead_high": max(overheads), "replays": replay.replays if replay else 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--models", default="chain,light_resnet50")
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.system:
        print(json.dumps(measure(args.system, args.model, args.repeats)))
        return
    for name in args.models.split(","):
        results = {}
        for system in ("fuel", "onnxruntime"):
            results[system] = child_result(
                __file__, ["--system", system, "--model", name, "--repeats", str(args.repeats)])
        fuel_result, peer = results["fuel"], results["onnxruntime"]["call"]
        overhead = fuel_result["overhead"]
        print(f"{name}: fuel {fuel_result['call'] * 1e3:.2f} ms/call (kernels "
              f"{fuel_result['kernels'] * 1e3:.2f} ms, overhead {overhead * 1e3:.2f} ms, "
              f"from {fuel_result['overhead_low'] * 1e3:.2f} to "
              f"{fuel_result['overhead_high'] * 1e3:.2f} ms over {args.repeats} calls), "
              f"onnxruntime {peer * 1e3:.2f} ms/call; fuel overhead / onnxruntime call "
              f"{overhead / peer:.2f}x, fuel call / onnxruntime call "
              f"{fuel_result['call'] / peer:.2f}x")


if __name__ == "__main__":
    main()
