"""fuel.onnx.load and Model: sources, outputs in graph order, lazy graph tensors, host-side
shape subgraphs, control flow and sequences, compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import fuel
import fuel.onnx
from fuel.tensor import Tensor
from tests.onnx.conftest import make_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _mlp():
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["a"]),
        helper.make_node("MatMul", ["a", "w2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        helper.make_node("ArgMax", ["logits"], ["label"], axis=1, keepdims=0),
    ]
    return make_model(nodes, [("x", F, ["batch", 4])],
                      [("probs", F, None), ("label", I64, None)], initializers=[w1, w2])


def _onnxruntime(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


@pytest.mark.parametrize("source", ["proto", "bytes", "path"])
def test_load_sources_and_match_onnxruntime(source, tmp_path):
    model = _mlp()
    if source == "bytes":
        loaded = fuel.onnx.load(model.SerializeToString())
    elif source == "path":
        path = tmp_path / "mlp.onnx"
        path.write_bytes(model.SerializeToString())
        loaded = fuel.onnx.load(path)
    else:
        loaded = fuel.onnx.load(model)
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    outputs = loaded.run({"x": x})
    assert list(outputs) == ["probs", "label"]
    probs, label = _onnxruntime(model, {"x": x})
    np.testing.assert_allclose(outputs["probs"], probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(outputs["label"], label)
    assert [spec.name for spec in loaded.inputs] == ["x"]  # initializers are not inputs
    assert loaded.inputs[0].shape == ("batch", 4)


def test_graph_tensors_are_lazy_and_explainable():
    model = fuel.onnx.load(_mlp())
    values = model.graph_tensors({"x": np.ones((2, 4), np.float32)})
    probs = values["probs"]
    assert isinstance(probs, Tensor) and not probs.is_realized
    explanation = str(probs.explain())
    assert "matmul" in explanation and "softmax" in explanation
    assert probs.numpy().shape == (2, 3)


def test_shape_subgraph_is_evaluated_on_the_host():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "first"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "first"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    model = make_model(nodes, [("x", F, ["a", 3, 4])], [("y", F, None)], initializers=inits)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    y = fuel.onnx.load(model).graph_tensors({"x": x})["y"]
    assert y.shape == (2, 12)  # static: known before anything runs
    np.testing.assert_array_equal(y.numpy(), x.reshape(2, 12))


def test_shared_shape_leaves_in_different_places_do_not_share_a_plan():
    # Two host shape computations with the same structure but different sharing of a leaf:
    # a cached plan of the first must not be replayed for the second.
    def leaf(v):
        return fuel.tensor(np.array([v]))

    from fuel.nn.tensor_ops import trunc_divide

    b, h, hk, q, v = leaf(2), leaf(8), leaf(4), leaf(64), leaf(32)
    first = fuel.cat([b, hk, trunc_divide(q, h), trunc_divide(v, hk)]).numpy()
    second = fuel.cat([b, h, trunc_divide(q, h), trunc_divide(v, hk)]).numpy()
    assert first.tolist() == [2, 4, 8, 8]
    assert second.tolist() == [2, 8, 8, 8]


def test_if_loop_and_sequences():
    then_graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["t"])], "then", [],
        [helper.make_tensor_value_info("t", F, None)])
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [],
        [helper.make_tensor_value_info("e", F, None)])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["step"])],
        "body",
        [helper.make_tensor_value_info("i", I64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, None),
         helper.make_tensor_value_info("step", F, None)])
    nodes = [
        helper.make_node("If", ["flag"], ["branch"], then_branch=then_graph,
                         else_branch=else_graph),
        helper.make_node("Loop", ["trips", "", "x"], ["power", "steps"], body=body),
        helper.make_node("SequenceConstruct", ["x", "branch"], ["seq"]),
        helper.make_node("ConcatFromSequence", ["seq"], ["joined"], axis=0),
    ]
    model = make_model(nodes, [("flag", TensorProto.BOOL, []), ("trips", I64, []),
                               ("x", F, [2])],
                       [("branch", F, None), ("power", F, None), ("steps", F, None),
                        ("joined", F, None)])
    feeds = {"flag": np.array(False), "trips": np.array(3, np.int64),
             "x": np.array([2.0, -1.0], np.float32)}
    outputs = fuel.onnx.load(model).run(feeds)
    expected = _onnxruntime(model, feeds)
    for got, want in zip(outputs.values(), expected):
        np.testing.assert_allclose(got, want)
    np.testing.assert_allclose(outputs["power"], [16.0, 1.0])


def test_run_on_another_device_when_available():
    from tests.backends.opencl.support import opencl_device

    device = opencl_device()
    model = fuel.onnx.load(_mlp())
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    on_cpu = model.run({"x": x})
    on_device = model.run({"x": x}, device=device)
    np.testing.assert_allclose(on_device["probs"], on_cpu["probs"], rtol=1e-4, atol=1e-6)


def test_weights_in_an_external_data_file(tmp_path):
    import onnx

    model = _mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").exists()
    x = np.ones((2, 4), np.float32)
    expected = fuel.onnx.load(_mlp()).run({"x": x})["probs"]
    np.testing.assert_allclose(fuel.onnx.load(path).run({"x": x})["probs"], expected)
