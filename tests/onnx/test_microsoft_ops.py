"""``com.microsoft`` ops against onnxruntime (the oracle), each in a model built with
onnx.helper; a ``com.microsoft`` op fuel lacks is an UnsupportedOp naming domain and node."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fuel.onnx  # noqa: E402
from fuel.onnx import UnsupportedOp  # noqa: E402

F = TensorProto.FLOAT
MS = "com.microsoft"


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(
        nodes, "ms",
        [helper.make_tensor_value_info(name, F, shape) for name, shape in inputs],
        [helper.make_tensor_value_info(name, F, None) for name in outputs],
        [numpy_helper.from_array(array, name) for name, array in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _check(model, feeds, rtol=1e-4, atol=1e-5):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    actual = list(fuel.onnx.load(model).run(feeds).values())
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


RNG = np.random.default_rng(0)  # reseeded per test (tests/onnx/conftest.py)


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("activation,params", [
    ("", []), ("Relu", []), ("Tanh", []), ("Sigmoid", []), ("LeakyRelu", [0.1]),
    ("Clip", [-0.5, 0.7]), ("HardSigmoid", [0.3, 0.4])])
@pytest.mark.parametrize("residual", [False, True])
def test_fused_conv(activation, params, residual):
    attributes = {"kernel_shape": [3, 3], "pads": [1, 0, 1, 2], "strides": [1, 2]}
    if activation:
        attributes["activation"] = activation
    if params:
        attributes["activation_params"] = params
    inputs = ["x", "w", "b"] + (["z"] if residual else [])
    node = helper.make_node("FusedConv", inputs, ["y"], domain=MS, **attributes)
    feeds = {"x": _x(2, 4, 7, 9)}
    if residual:
        feeds["z"] = _x(2, 6, 7, 5)
    model = _model([node], [(name, list(a.shape)) for name, a in feeds.items()], ["y"],
                   [("w", _x(6, 4, 3, 3)), ("b", _x(6))])
    _check(model, feeds)


@pytest.mark.parametrize("activation", ["Relu", "LeakyRelu", "Sigmoid"])
def test_fused_gemm(activation):
    node = helper.make_node("FusedGemm", ["a", "b", "c"], ["y"], domain=MS, transB=1,
                            alpha=0.5, beta=2.0, activation=activation, activation_alpha=0.2)
    feeds = {"a": _x(3, 5), "b": _x(4, 5), "c": _x(4)}
    _check(_model([node], [(k, list(v.shape)) for k, v in feeds.items()], ["y"]), feeds)


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_fused_matmul(trans_a, trans_b):
    node = helper.make_node("FusedMatMul", ["a", "b"], ["y"], domain=MS, alpha=0.75,
                            transA=trans_a, transB=trans_b)
    a = _x(2, 5, 3) if trans_a else _x(2, 3, 5)
    b = _x(4, 5) if trans_b else _x(5, 4)
    _check(_model([node], [("a", list(a.shape)), ("b", list(b.shape))], ["y"]),
           {"a": a, "b": b})


@pytest.mark.parametrize("op,inputs,attributes", [
    ("Gelu", ["x"], {}), ("FastGelu", ["x"], {}), ("FastGelu", ["x", "bias"], {}),
    ("BiasGelu", ["x", "bias"], {}), ("QuickGelu", ["x"], {"alpha": 1.5})])
def test_gelus(op, inputs, attributes):
    feeds = {"x": _x(2, 3, 8), "bias": _x(8), "skip": _x(2, 3, 8)}
    feeds = {name: feeds[name] for name in inputs}
    node = helper.make_node(op, inputs, ["y"], domain=MS, **attributes)
    _check(_model([node], [(k, list(v.shape)) for k, v in feeds.items()], ["y"]), feeds)


def test_bias_add():
    """onnxruntime implements BiasAdd on CUDA only: X + bias + skip, checked against NumPy."""
    feeds = {"x": _x(2, 3, 8), "bias": _x(8), "skip": _x(2, 3, 8)}
    node = helper.make_node("BiasAdd", ["x", "bias", "skip"], ["y"], domain=MS)
    model = _model([node], [(k, list(v.shape)) for k, v in feeds.items()], ["y"])
    np.testing.assert_allclose(fuel.onnx.load(model).run(feeds)["y"],
                               feeds["x"] + feeds["bias"] + feeds["skip"], rtol=1e-6)


@pytest.mark.parametrize("with_bias", [False, True])
def test_skip_layer_normalization(with_bias):
    inputs = ["x", "skip", "gamma", "beta"] + (["bias"] if with_bias else [])
    node = helper.make_node("SkipLayerNormalization", inputs, ["y", "", "", "sum"], domain=MS,
                            epsilon=1e-5)
    feeds = {"x": _x(2, 3, 8), "skip": _x(2, 3, 8)}
    initializers = [("gamma", _x(8)), ("beta", _x(8))] + ([("bias", _x(8))] if with_bias
                                                          else [])
    _check(_model([node], [(k, list(v.shape)) for k, v in feeds.items()], ["y", "sum"],
                  initializers), feeds)


def test_skip_simplified_layer_normalization():
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"],
                            ["y"], domain=MS, epsilon=1e-6)
    feeds = {"x": _x(2, 3, 8), "skip": _x(2, 3, 8)}
    _check(_model([node], [(k, list(v.shape)) for k, v in feeds.items()], ["y"],
                  [("gamma", _x(8))]), feeds)


def test_simplified_layer_normalization():
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], axis=-1,
                            epsilon=1e-6)
    feeds = {"x": _x(2, 3, 8)}
    _check(_model([node], [("x", [2, 3, 8])], ["y"], [("scale", _x(8))]), feeds)


def test_missing_microsoft_op_names_domain_and_node():
    node = helper.make_node("NotAnOp", ["x"], ["y"], domain=MS, name="mystery")
    model = _model([node], [("x", [2])], ["y"])
    with pytest.raises(UnsupportedOp, match=r"mystery.*NotAnOp \(domain com\.microsoft\)"):
        fuel.onnx.load(model)


def _quantized(shape, low=-128, high=127):
    return RNG.integers(low, high + 1, shape).astype(np.int8 if low < 0 else np.uint8)


# Signed weights against uint8 activations, within 7 bits: onnxruntime's u8s8 kernels on
# a CPU without AVX512-VNNI or AVX-VNNI sum pairs of u8 * s8 products in int16 with
# saturation (vpmaddubsw; its quantizer's reduce_range exists for this), which fuel's exact
# int32 sums do not reproduce; a pair of 255 * 64 stays below 32767 on every CPU.
def _weights(shape):
    return _quantized(shape, -64, 63)


@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
@pytest.mark.parametrize("per_column", [False, True])
def test_dynamic_quantize_lstm(direction, per_column):
    """onnxruntime quantizes X and h per step (uint8): outputs agree to that precision."""
    dirs, steps, batch, size, hidden = (2 if direction == "bidirectional" else 1), 4, 2, 5, 3
    scales = (dirs, 4 * hidden) if per_column else (dirs,)
    constants = [
        ("w", _weights((dirs, size, 4 * hidden))), ("r", _weights((dirs, hidden, 4 * hidden))),
        ("b", _x(dirs, 8 * hidden) * 0.1),
        ("w_scale", np.abs(_x(*scales)) * 0.01 + 0.002), ("w_zero", np.zeros(scales, np.int8)),
        ("r_scale", np.abs(_x(*scales)) * 0.01 + 0.002), ("r_zero", np.zeros(scales, np.int8))]
    node = helper.make_node("DynamicQuantizeLSTM",
                            ["x", "w", "r", "b", "", "", "", "", "w_scale", "w_zero",
                             "r_scale", "r_zero"], ["y", "y_h", "y_c"], domain=MS,
                            hidden_size=hidden, direction=direction)
    graph = helper.make_graph(
        [node], "lstm", [helper.make_tensor_value_info("x", F, [steps, batch, size])],
        [helper.make_tensor_value_info(n, F, None) for n in ("y", "y_h", "y_c")],
        [numpy_helper.from_array(a, n) for n, a in constants])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    _check(model, {"x": _x(steps, batch, size)}, rtol=0, atol=2e-2)


@pytest.mark.parametrize("signed", [True, False])
def test_dynamic_quantize_matmul(signed):
    b = _weights((6, 4)) if signed else _quantized((6, 4), 0, 255)
    zero = np.array([0], np.int8) if signed else np.array([128], np.uint8)
    node = helper.make_node("DynamicQuantizeMatMul", ["a", "b", "scale", "zero", "bias"], ["y"],
                            domain=MS)
    model = _model([node], [("a", [3, 6])], ["y"],
                   [("b", b), ("scale", np.array([0.02], np.float32)), ("zero", zero),
                    ("bias", _x(4))])
    _check(model, {"a": _x(3, 6)}, rtol=0, atol=5e-2)


def test_nhwc_max_pool():
    node = helper.make_node("NhwcMaxPool", ["x"], ["y"], domain=MS, kernel_shape=[3, 3],
                            strides=[2, 2], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 7, 9, 3])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    _check(model, {"x": _quantized((1, 7, 9, 3), 0, 255)})
