"""Quantized elementwise chains as onnxruntime's quantize_static writes them (a QOperator
HardSwish: DequantizeLinear -> HardSigmoid -> QuantizeLinear -> QLinearMul; a squeeze-excite
QLinearMul broadcast over the spatial dims; QLinearSigmoid; a residual QLinearAdd) against
onnxruntime, and run as QLINEAR_LOOKUP tables and QLINEAR_BINARY passes (the launches say so).
At most one quantization step apart, on at most 1% of the values."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fuel  # noqa: E402
import fuel.onnx  # noqa: E402

MS = "com.microsoft"


def _scale(value):
    return np.asarray(value, np.float32)


def _model(dtype):
    rng = np.random.default_rng(11)
    zero = (lambda v: np.asarray(v, dtype))
    signed = dtype == np.int8
    base = -100 if signed else 28
    values = {
        "xs": _scale(0.02), "xz": zero(0 if signed else 128),
        "w": rng.integers(-60, 60, (8, 4, 1, 1)).astype(np.int8), "ws": _scale(0.01),
        "wz": np.asarray(0, np.int8),
        "cs": _scale(0.03), "cz": zero(base + 10),
        "hs": _scale(1 / 255), "hz": zero(-128 if signed else 0),
        "ms": _scale(0.025), "mz": zero(base + 20),
        "ps": _scale(0.01), "pz": zero(base + 30),
        "gs": _scale(1 / 256), "gz": zero(-128 if signed else 0),
        "es": _scale(0.02), "ez": zero(base + 25),
        "as": _scale(0.04), "az": zero(base + 5),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "cs", "cz"],
                         ["c"]),
        helper.make_node("DequantizeLinear", ["c", "cs", "cz"], ["cf"]),
        helper.make_node("HardSigmoid", ["cf"], ["hf"], alpha=1 / 6, beta=0.5),
        helper.make_node("QuantizeLinear", ["hf", "hs", "hz"], ["h"]),
        helper.make_node("QLinearMul", ["c", "cs", "cz", "h", "hs", "hz", "ms", "mz"], ["m"],
                         domain=MS),
        helper.make_node("QLinearGlobalAveragePool", ["m", "ms", "mz", "ps", "pz"], ["p"],
                         domain=MS),
        helper.make_node("QLinearSigmoid", ["p", "ps", "pz", "gs", "gz"], ["g"], domain=MS),
        helper.make_node("QLinearMul", ["g", "gs", "gz", "m", "ms", "mz", "es", "ez"], ["e"],
                         domain=MS),
        helper.make_node("QLinearAdd", ["e", "es", "ez", "c", "cs", "cz", "as", "az"], ["a"],
                         domain=MS),
        helper.make_node("DequantizeLinear", ["a", "as", "az"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "chains", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 9, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in values.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_quantized_chains_match_onnxruntime_as_tables(dtype):
    model = _model(dtype)
    x = np.random.default_rng(3).standard_normal((2, 4, 9, 7)).astype(np.float32) * 1.5
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    loaded = fuel.onnx.load(model)
    loaded.run({"x": x})  # the build (its constants are read on the host) before the replay
    with fuel.profile() as profile:
        got = loaded.run({"x": x})["y"]
    steps = np.rint(np.abs(got.astype(np.float64) - expected) / 0.04)
    assert steps.max() <= 1 and (steps > 0).mean() <= 0.01, (steps.max(), steps.mean())
    launches = {row[0]: row[2] for row in profile.ops}
    # the HardSwish and the sigmoid as tables; the two-input Mul and Add one pass each
    assert launches.get("qlinear_lookup") == 2 and launches.get("qlinear_binary") == 2, launches
    assert not any("maximum" in op and "round" in op and "mul,add" in op for op in launches)
