"""ONNX Gradient (ai.onnx.preview.training) against torch.autograd: broadcasting arithmetic,
tanh, relu and a matmul, and a clear error for an op without a backward rule."""

from __future__ import annotations

import numpy as np
import pytest

import fuel

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper  # noqa: E402

FLOAT = TensorProto.FLOAT


def _model(nodes, inputs, xs, y):
    gradient = helper.make_node("Gradient", xs, [f"d_{x}" for x in xs], xs=xs, y=y,
                                domain="ai.onnx.preview.training")
    graph = helper.make_graph(
        nodes + [gradient], "gradient",
        [helper.make_tensor_value_info(name, FLOAT, shape) for name, shape in inputs],
        [helper.make_tensor_value_info(f"d_{x}", FLOAT, None) for x in xs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid(
                                                       "ai.onnx.preview.training", 1)])


def test_gradient_matches_torch_autograd():
    nodes = [helper.make_node("MatMul", ["a", "w"], ["h"]),
             helper.make_node("Add", ["h", "bias"], ["z"]),
             helper.make_node("Tanh", ["z"], ["t"]),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Mul", ["t", "r"], ["m"]),
             helper.make_node("Div", ["m", "bias"], ["q"]),
             helper.make_node("Sub", ["q", "a2"], ["y"])]
    inputs = [("a", [3, 4]), ("w", [4, 5]), ("bias", [5]), ("a2", [3, 1])]
    model = _model(nodes, inputs, ["a", "w", "bias", "a2"], "y")
    rng = np.random.default_rng(3)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in inputs}
    feeds["bias"] = feeds["bias"] + np.float32(3.0)  # away from zero: Div
    ours = fuel.onnx.load(model.SerializeToString()).run(feeds)
    leaves = {k: torch.tensor(v, requires_grad=True) for k, v in feeds.items()}
    h = leaves["a"] @ leaves["w"]
    y = torch.tanh(h + leaves["bias"]) * torch.relu(h) / leaves["bias"] - leaves["a2"]
    y.sum().backward()
    for name in leaves:
        np.testing.assert_allclose(ours[f"d_{name}"], leaves[name].grad.numpy(), rtol=1e-5,
                                   atol=1e-6)


def test_gradient_through_an_unsupported_op_names_it():
    model = _model([helper.make_node("Cos", ["a"], ["y"])], [("a", [2])], ["a"], "y")
    with pytest.raises(fuel.FuelError, match="Gradient through cos"):
        fuel.onnx.load(model.SerializeToString()).run({"a": np.ones(2, np.float32)})
