"""Quantized ONNX ops against onnxruntime (the oracle), each in a model built with onnx.helper:
QLinearConv, ConvInteger, MatMulInteger, QLinearMatMul, the com.microsoft QOperator ops
(QGemm, QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearConcat,
QLinearGlobalAveragePool, QLinearAveragePool) and QDQ convolutions folded at load.

Integer results (ConvInteger, MatMulInteger) must be equal. Re-quantized results are equal
but for a value on a rounding edge, where onnxruntime's integer tricks may land one step
away: at most one step, on at most 1% of the values."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fuel.onnx  # noqa: E402

MS = "com.microsoft"
RNG = np.random.default_rng(7)
TYPES = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
         np.dtype(np.int32): TensorProto.INT32, np.dtype(np.float32): TensorProto.FLOAT}


def _model(nodes, feeds: dict, outputs: list, initializers: dict, opset: int = 21):
    graph = helper.make_graph(
        nodes, "q",
        [helper.make_tensor_value_info(name, TYPES[a.dtype], list(a.shape))
         for name, a in feeds.items()],
        [helper.make_empty_tensor_value_info(name) for name in outputs],
        [numpy_helper.from_array(np.asarray(a), name) for name, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model


def _run(model, feeds, optimize=False):
    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)
    actual = [np.asarray(v) for v in fuel.onnx.load(model).run(feeds).values()]
    assert len(actual) == len(expected)
    return actual, expected


def _check(model, feeds, exact=False, optimize=False, edges=0.01):
    for got, want in zip(*_run(model, feeds, optimize)):
        assert got.dtype == want.dtype and got.shape == want.shape
        if exact or not np.issubdtype(want.dtype, np.integer):
            np.testing.assert_array_equal(got, want) if exact else \
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            continue
        steps = np.abs(got.astype(np.int64) - want.astype(np.int64))
        assert steps.max() <= 1 and (steps > 0).mean() <= edges, (steps.max(), steps.mean())


def _ints(dtype, *shape, low=None, high=None):
    info = np.iinfo(dtype)
    low = info.min if low is None else low
    high = info.max if high is None else high
    return RNG.integers(low, high + 1, size=shape).astype(dtype)


def _scalar(value, dtype=np.float32):
    return np.asarray(value, dtype)


@pytest.mark.parametrize("x_type,w_type", [(np.uint8, np.int8), (np.int8, np.int8),
                                           (np.uint8, np.uint8)])
@pytest.mark.parametrize("case", [
    dict(x=(1, 3, 11, 13), w=(8, 3, 3, 3), pads=[1, 1, 1, 1]),
    dict(x=(2, 6, 9, 9), w=(6, 2, 3, 3), group=3, strides=[2, 2], pads=[1, 0, 1, 2]),
    dict(x=(1, 8, 7, 7), w=(8, 1, 3, 3), group=8, pads=[1, 1, 1, 1], dilations=[2, 2]),
    dict(x=(1, 16, 5, 6), w=(12, 16, 1, 1)),
    dict(x=(2, 4, 17), w=(5, 4, 3), strides=[2]),
    # a patch matrix past one band (512 KiB) of output rows: bands of 8 rows, the last of 4
    dict(x=(1, 20, 60, 340), w=(3, 20, 3, 3), strides=[3, 1], pads=[1, 1, 1, 1]),
])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(x_type, w_type, case, per_channel):
    case = dict(case)
    x_shape, w_shape = case.pop("x"), case.pop("w")
    channels = w_shape[0]
    x = _ints(x_type, *x_shape)
    w = _ints(w_type, *w_shape, low=-100 if w_type == np.int8 else 0)
    w_scale = (RNG.uniform(0.002, 0.02, channels) if per_channel else
               np.asarray(0.01)).astype(np.float32)
    w_zero = np.zeros(channels if per_channel else (), w_type)
    if w_type == np.uint8:
        w_zero = np.full(w_zero.shape, 128, np.uint8)
    initializers = {"xs": _scalar(0.05), "xz": np.asarray(x.reshape(-1)[0], x_type),
                    "w": w, "ws": w_scale, "wz": w_zero, "ys": _scalar(0.7),
                    "yz": np.asarray(3, x_type), "b": _ints(np.int32, channels, low=-2000,
                                                             high=2000)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                            ["y"], **case)
    _check(_model([node], {"x": x}, ["y"], initializers), {"x": x})


@pytest.mark.parametrize("x_type,w_type", [(np.uint8, np.int8), (np.uint8, np.uint8)])
@pytest.mark.parametrize("channels,strides", [(4, [1, 2]), (32, [1, 1])])
def test_conv_integer(x_type, w_type, channels, strides):
    x = _ints(x_type, 2, channels, 8, 9)
    initializers = {"w": _ints(w_type, 6, channels, 3, 3), "xz": np.asarray(17, x_type),
                    "wz": np.asarray(5, w_type)}
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], pads=[1, 1, 1, 1],
                            strides=strides)
    _check(_model([node], {"x": x}, ["y"], initializers), {"x": x}, exact=True)


@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
def test_matmul_integer(b_type, per_column):
    a = _ints(np.uint8, 2, 5, 33)
    b_zero = (_ints(b_type, 7, low=0, high=9) if per_column else np.asarray(3, b_type))
    initializers = {"b": _ints(b_type, 33, 7), "az": np.asarray(128, np.uint8), "bz": b_zero}
    node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
    _check(_model([node], {"a": a}, ["y"], initializers), {"a": a}, exact=True)


@pytest.mark.parametrize("a_type", [np.uint8, np.int8])
def test_qlinear_matmul(a_type):
    a = _ints(a_type, 3, 4, 40)
    initializers = {"as": _scalar(0.03), "az": np.asarray(2, a_type), "b": _ints(np.int8, 40, 6),
                    "bs": _scalar(0.02), "bz": np.asarray(0, np.int8), "ys": _scalar(0.5),
                    "yz": np.asarray(1, a_type)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"],
                            ["y"])
    _check(_model([node], {"a": a}, ["y"], initializers), {"a": a})


@pytest.mark.parametrize("quantized_output", [True, False])
@pytest.mark.parametrize("trans_b,alpha", [(1, 1.0), (0, 0.5)])
def test_qgemm(quantized_output, trans_b, alpha):
    a = _ints(np.uint8, 4, 30)
    b = _ints(np.int8, *((9, 30) if trans_b else (30, 9)))
    initializers = {"as": _scalar(0.04), "az": np.asarray(120, np.uint8), "b": b,
                    "bs": RNG.uniform(0.01, 0.03, 9).astype(np.float32),
                    "bz": np.zeros(9, np.int8), "c": _ints(np.int32, 9, low=-500, high=500),
                    "ys": _scalar(0.9), "yz": np.asarray(128, np.uint8)}
    inputs = ["a", "as", "az", "b", "bs", "bz", "c"] + (["ys", "yz"] if quantized_output else [])
    node = helper.make_node("QGemm", inputs, ["y"], domain=MS, transB=trans_b, alpha=alpha)
    _check(_model([node], {"a": a}, ["y"], initializers), {"a": a})


def _qparams(prefix, dtype, scale, zero):
    return {f"{prefix}s": _scalar(scale), f"{prefix}z": np.asarray(zero, dtype)}


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_binary(op, dtype):
    a, b = _ints(dtype, 2, 3, 4, 5), _ints(dtype, 3, 1, 5)
    initializers = {**_qparams("a", dtype, 0.05, 7), **_qparams("b", dtype, 0.08, -3 if
                                                                dtype == np.int8 else 9),
                    **_qparams("c", dtype, 0.11 if op == "QLinearAdd" else 0.6, 4)}
    node = helper.make_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["c"],
                            domain=MS)
    feeds = {"a": a, "b": b}
    _check(_model([node], feeds, ["c"], initializers), feeds)


@pytest.mark.parametrize("op,attributes", [("QLinearSigmoid", {}),
                                           ("QLinearLeakyRelu", {"alpha": 0.2})])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_unary(op, attributes, dtype):
    x = np.arange(np.iinfo(dtype).min, np.iinfo(dtype).max + 1).astype(dtype).reshape(4, 64)
    initializers = {**_qparams("x", dtype, 0.05, 10), **_qparams("y", dtype, 1 / 256
                                                                  if op == "QLinearSigmoid"
                                                                  else 0.04, 0)}
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain=MS, **attributes)
    _check(_model([node], {"x": x}, ["y"], initializers), {"x": x})


def test_qlinear_concat():
    a, b, c = _ints(np.uint8, 1, 2, 3, 3), _ints(np.uint8, 1, 4, 3, 3), _ints(np.uint8, 1, 1, 3, 3)
    initializers = {**_qparams("y", np.uint8, 0.1, 128), **_qparams("a", np.uint8, 0.05, 100),
                    **_qparams("b", np.uint8, 0.2, 3)}
    node = helper.make_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz",
                                              "c", "ys", "yz"], ["y"], domain=MS, axis=1)
    feeds = {"a": a, "b": b, "c": c}
    _check(_model([node], feeds, ["y"], initializers), feeds)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_global_average_pool(channels_last, dtype):
    x = _ints(dtype, 2, 5, 7, 6)
    initializers = {**_qparams("x", dtype, 0.05, 11), **_qparams("y", dtype, 0.03, -2
                                                                  if dtype == np.int8 else 2)}
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"],
                            domain=MS, channels_last=channels_last)
    _check(_model([node], {"x": x}, ["y"], initializers), {"x": x})


def test_qlinear_average_pool():
    x = _ints(np.uint8, 1, 3, 8, 7)
    initializers = {**_qparams("x", np.uint8, 0.05, 11), **_qparams("y", np.uint8, 0.04, 6)}
    node = helper.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"],
                            domain=MS, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                            count_include_pad=1)
    # onnxruntime's means round like neither the float nor the integer-sum formula on about
    # one value in ten inputs' worth (checked against both in NumPy): one step, rarely
    _check(_model([node], {"x": x}, ["y"], initializers), {"x": x}, edges=0.05)


def _qdq_conv_model(bias_scale_matches=True, shared_input=False):
    """QuantizeLinear -> DequantizeLinear -> Conv (weights and int32 bias through DQ) ->
    QuantizeLinear -> DequantizeLinear, as quantize_static writes it."""
    w = _ints(np.int8, 8, 4, 3, 3, low=-90, high=90)
    w_scale = RNG.uniform(0.002, 0.01, 8).astype(np.float32)
    x_scale = np.float32(0.02)
    b_scale = x_scale * w_scale if bias_scale_matches else w_scale
    initializers = {"xs": _scalar(x_scale), "xz": np.asarray(-5, np.int8), "w": w,
                    "ws": w_scale, "wz": np.zeros(8, np.int8),
                    "b": _ints(np.int32, 8, low=-3000, high=3000), "bs": b_scale.astype(
                        np.float32), "bz": np.zeros(8, np.int32), "ys": _scalar(0.03),
                    "yz": np.asarray(-128, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["yf"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    outputs = ["y"]
    if shared_input:
        nodes.append(helper.make_node("Relu", ["xf"], ["r"]))
        outputs.append("r")
    return _model(nodes, {"x": np.zeros((2, 4, 10, 9), np.float32)}, outputs, initializers)


def test_qdq_conv_folds_and_matches_onnxruntime():
    from fuel.onnx.qdq import fold_qdq

    model = _qdq_conv_model()
    assert [n.op_type for n in fold_qdq(model.graph).node].count("QLinearConv") == 1
    feeds = {"x": RNG.standard_normal((2, 4, 10, 9)).astype(np.float32) * 2}
    got, want = _run(model, feeds, optimize=True)
    steps = np.abs(got[0] - want[0]) / 0.03
    assert steps.max() <= 1.001 and (steps > 0.5).mean() <= 0.01


@pytest.mark.parametrize("variant", [dict(bias_scale_matches=False), dict(shared_input=True)])
def test_qdq_conv_that_does_not_fold_runs_as_written(variant):
    from fuel.onnx.qdq import fold_qdq

    model = _qdq_conv_model(**variant)
    assert "QLinearConv" not in [n.op_type for n in fold_qdq(model.graph).node]
    feeds = {"x": RNG.standard_normal((2, 4, 10, 9)).astype(np.float32) * 2}
    for got, want in zip(*_run(model, feeds)):
        assert np.abs(got - want).max() <= 0.03 * 1.001


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_eight_bit_max_pool(dtype):
    x = _ints(dtype, 2, 3, 9, 8)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1])
    _check(_model([node], {"x": x}, ["y"], {}), {"x": x}, exact=True)
