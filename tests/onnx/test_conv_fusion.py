"""Conv epilogues fused at import (fuel.onnx.ops.conv_fusion): outputs match onnxruntime, and
the graph holds the one CONV_FUSED node the pattern promises (or the plain nodes where the
pattern does not hold)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fuel.onnx  # noqa: E402
from fuel.ir.ops import OpKind  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(3)


def _x(*shape, low=None):
    values = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(values) + low if low is not None else values


def _model(nodes, initializers, outputs=("y",), opset=17):
    graph = helper.make_graph(
        nodes, "fusion", [helper.make_tensor_value_info("x", F, [2, 4, 9, 8])],
        [helper.make_tensor_value_info(name, F, None) for name in outputs],
        [numpy_helper.from_array(array, name) for name, array in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _nodes(tensors) -> list:
    seen, stack, found = set(), [t._node for t in tensors], []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        found.append(node)
        stack.extend(node.inputs)
    return found


def _run(model):
    x = _x(2, 4, 9, 8)
    expected = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})
    loaded = fuel.onnx.load(model)
    actual = list(loaded.run({"x": x}).values())
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    tensors = loaded.graph_tensors({"x": x})
    return _nodes(tensors.values())


CONV = {"w": _x(6, 4, 3, 3), "b": _x(6)}
BN = {"scale": _x(6), "shift": _x(6), "mean": _x(6), "var": _x(6, low=0.5)}


def _conv(output="c", bias=True):
    return helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), [output],
                            pads=[1, 1, 1, 1])


def _bn(source="c", output="n"):
    return helper.make_node("BatchNormalization", [source, "scale", "shift", "mean", "var"],
                            [output], epsilon=1e-3)


def _fused(nodes) -> list:
    return [n for n in nodes if n.op is OpKind.CONV_FUSED]


def test_resnet_block_is_one_node():
    """Conv -> BatchNormalization -> Add(residual) -> Relu."""
    nodes = [_conv(bias=False), _bn(), helper.make_node("Add", ["n", "r"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    found = _run(_model(nodes, {**CONV, **BN, "r": _x(2, 6, 9, 8)}))
    fused = _fused(found)
    assert len(fused) == 1 and fused[0].params.activation == "relu" and fused[0].params.residual
    assert fused[0].params.constant_weights  # folded weights: a constant a kernel may transform
    assert not [n for n in found if n.op in (OpKind.ADD, OpKind.RELU, OpKind.SQRT)]


@pytest.mark.parametrize("make,activation", [
    (lambda: [helper.make_node("Clip", ["c", "lo", "hi"], ["y"])], "clip"),
    (lambda: [helper.make_node("HardSwish", ["c"], ["y"])], "hard_swish"),
    (lambda: [helper.make_node("HardSigmoid", ["c"], ["y"], alpha=0.3, beta=0.4)],
     "hard_sigmoid"),
    (lambda: [helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.2)], "leaky_relu"),
    (lambda: [helper.make_node("Sigmoid", ["c"], ["y"])], "sigmoid"),
    (lambda: [helper.make_node("Tanh", ["c"], ["y"])], "tanh"),
    (lambda: [helper.make_node("PRelu", ["c", "slope"], ["y"])], "prelu"),
    (lambda: [helper.make_node("Sigmoid", ["c"], ["g"]),
              helper.make_node("Mul", ["c", "g"], ["y"])], "silu"),
])
def test_activations_fuse(make, activation):
    constants = {**CONV, "lo": np.array(-0.5, np.float32), "hi": np.array(0.8, np.float32),
                 "slope": _x(6, 1, 1)}
    fused = _fused(_run(_model([_conv()] + make(), constants)))
    assert [n.params.activation for n in fused] == [activation]


def test_a_second_consumer_keeps_the_nodes_apart():
    nodes = [_conv(), helper.make_node("Relu", ["c"], ["y"]),
             helper.make_node("Neg", ["c"], ["z"])]
    found = _run(_model(nodes, CONV, outputs=("y", "z")))
    assert [n.params.activation for n in _fused(found)] == [""]
    assert [n for n in found if n.op is OpKind.RELU]


def test_batch_normalization_alone_is_one_multiply_add():
    nodes = [helper.make_node("Relu", ["x"], ["c"]),
             helper.make_node("BatchNormalization", ["c", "s4", "t4", "m4", "v4"], ["y"])]
    constants = {"s4": _x(4), "t4": _x(4), "m4": _x(4), "v4": _x(4, low=0.5)}
    found = _run(_model(nodes, constants))
    assert not [n for n in found if n.op in (OpKind.SQRT, OpKind.DIV, OpKind.RSQRT)]


def test_weights_from_an_input_are_not_constant():
    """A Conv whose weights are a graph input (not an initializer) is not marked as having
    constant weights (a kernel transforming them once would keep stale values)."""
    graph = helper.make_graph(
        [_conv(output="y")], "fusion",
        [helper.make_tensor_value_info("x", F, [2, 4, 9, 8]),
         helper.make_tensor_value_info("w", F, [6, 4, 3, 3])],
        [helper.make_tensor_value_info("y", F, None)], [numpy_helper.from_array(CONV["b"], "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    loaded = fuel.onnx.load(model)
    x = _x(2, 4, 9, 8)
    for weights in (CONV["w"], -CONV["w"]):  # new weights, new outputs
        expected = ort.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(
            None, {"x": x, "w": weights})[0]
        np.testing.assert_allclose(loaded.run({"x": x, "w": weights})["y"], expected,
                                   rtol=1e-4, atol=1e-4)
    fused = _fused(_nodes(loaded.graph_tensors({"x": x, "w": CONV["w"]}).values()))
    assert [n.params.constant_weights for n in fused] == [False]


@pytest.mark.parametrize("axes, keepdims, opset", [
    ([2, 3], 0, 17), ([-1, -2], 1, 17), ([2, 3], 1, 18), ([1, 2], 0, 17)])
def test_a_mean_over_whole_planes_is_an_average_pool(axes, keepdims, opset):
    """ReduceMean over every dim past the channels (torch's ``x.mean([2, 3])``) runs as one
    average pool over each plane; over other axes it stays a mean."""
    inputs = ["x", "axes"] if opset >= 18 else ["x"]
    attributes = {} if opset >= 18 else {"axes": axes}
    initializers = {"axes": np.array(axes, np.int64)} if opset >= 18 else {}
    node = helper.make_node("ReduceMean", inputs, ["y"], keepdims=keepdims, **attributes)
    ops = {n.op for n in _run(_model([node], initializers, opset=opset))}
    planes = sorted(a % 4 for a in axes) == [2, 3]
    assert (OpKind.AVG_POOL in ops) is planes and (OpKind.MEAN in ops) is not planes
