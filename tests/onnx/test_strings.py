"""String and ML-domain ONNX graphs against onnxruntime, on inputs other than the node
suite's: StringSplit, StringConcat, StringNormalizer, RegexFullMatch, Equal on strings,
LabelEncoder, TfIdfVectorizer (string pool) and TreeEnsemble (several trees, logistic)."""

from __future__ import annotations

import numpy as np
import pytest

import fuel

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

STRING, INT64, FLOAT = TensorProto.STRING, TensorProto.INT64, TensorProto.FLOAT
TEXTS = np.array([["Monday, tuesday", "", "a,,b , c"], ["中文,x", "  spaced  out ", "MONDAY"]],
                 dtype=object)


def _model(nodes, inputs, outputs, opset=20, ml=None):
    graph = helper.make_graph(
        nodes, "strings", [helper.make_tensor_value_info(*spec) for spec in inputs],
        [helper.make_tensor_value_info(*spec) for spec in outputs])
    opsets = [helper.make_opsetid("", opset)]
    if ml:
        opsets.append(helper.make_opsetid("ai.onnx.ml", ml))
    return helper.make_model(graph, opset_imports=opsets)


def _assert_same(model, feeds):
    """fuel's outputs equal onnxruntime's."""
    ours = list(fuel.onnx.load(model.SerializeToString()).run(feeds).values())
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    theirs = session.run(None, feeds)
    assert len(ours) == len(theirs)
    for mine, peer in zip(ours, theirs):
        mine, peer = np.asarray(mine), np.asarray(peer)
        assert mine.shape == peer.shape
        if peer.dtype == object:
            assert mine.tolist() == peer.tolist()
        else:
            assert mine.dtype == peer.dtype
            np.testing.assert_allclose(mine, peer, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("attributes", [{"delimiter": ","}, {}, {"delimiter": ",", "maxsplit": 1}])
def test_string_split(attributes):
    model = _model([helper.make_node("StringSplit", ["x"], ["parts", "count"], **attributes)],
                   [("x", STRING, [2, 3])], [("parts", STRING, None), ("count", INT64, None)])
    # onnxruntime splits "" into no substrings where ONNX's reference (Python's split, which
    # fuel follows) gives one empty substring: the comparison leaves "" out.
    _assert_same(model, {"x": np.where(TEXTS == "", "x", TEXTS)})


def test_string_concat_broadcasts_and_equal():
    model = _model([helper.make_node("StringConcat", ["x", "y"], ["joined"]),
                    helper.make_node("Equal", ["joined", "x"], ["same"])],
                   [("x", STRING, [2, 3]), ("y", STRING, [3])],
                   [("joined", STRING, None), ("same", TensorProto.BOOL, None)])
    _assert_same(model, {"x": TEXTS, "y": np.array(["!", "", "中"], dtype=object)})


@pytest.mark.parametrize("action,sensitive", [("UPPER", 0), ("LOWER", 1), ("NONE", 0)])
def test_string_normalizer(action, sensitive):
    """Against the operator's definition in Python: onnxruntime's StringNormalizer needs the
    en_US.UTF-8 locale installed, and onnx's reference evaluator truncates strings."""
    model = _model([helper.make_node("StringNormalizer", ["x"], ["y"],
                                     case_change_action=action, is_case_sensitive=sensitive,
                                     stopwords=["monday", "", "a,,b , c"])],
                   [("x", STRING, [1, 6])], [("y", STRING, None)], opset=10)
    texts = TEXTS.reshape(1, 6)
    stop = {"monday", "", "a,,b , c"}
    kept = [t for t in texts[0] if (t if sensitive else t.lower()) not in stop]
    change = {"UPPER": str.upper, "LOWER": str.lower, "NONE": str}[action]
    (result,) = fuel.onnx.load(model.SerializeToString()).run({"x": texts}).values()
    assert np.asarray(result).tolist() == [[change(t) for t in kept]]


def test_regex_full_match():
    model = _model([helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=r"[A-Za-z ,]*")],
                   [("x", STRING, [2, 3])], [("y", TensorProto.BOOL, None)])
    _assert_same(model, {"x": TEXTS})


def test_label_encoder_both_directions():
    model = _model([helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml",
                                     keys_strings=["", "MONDAY", "中文,x"],
                                     values_int64s=[7, 8, 9], default_int64=-5),
                    helper.make_node("LabelEncoder", ["y"], ["z"], domain="ai.onnx.ml",
                                     keys_int64s=[7, 9], values_strings=["seven", "nine"])],
                   [("x", STRING, [2, 3])], [("y", INT64, None), ("z", STRING, None)],
                   ml=4)
    _assert_same(model, {"x": TEXTS})


def test_tfidf_string_pool():
    tokens = np.array([["a", "b", "c", "a", "b"], ["b", "b", "a", "c", "c"]], dtype=object)
    model = _model([helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TFIDF",
                                     min_gram_length=1, max_gram_length=2, max_skip_count=1,
                                     ngram_counts=[0, 3], ngram_indexes=[4, 3, 2, 1, 0],
                                     pool_strings=["a", "b", "c", "a", "b", "b", "c"],
                                     weights=[0.5, 1.0, 1.5, 2.0, 2.5])],
                   [("x", STRING, [2, 5])], [("y", FLOAT, None)], opset=9)
    _assert_same(model, {"x": tokens})


def test_tree_ensemble_two_trees_average():
    """Post-transforms are checked against their definitions in the kernel suite: onnxruntime
    1.32 applies a softmax for post_transform 2, which the operator defines as logistic."""
    modes = helper.make_tensor("modes", TensorProto.UINT8, [3], [0, 3, 1])
    splits = helper.make_tensor("splits", FLOAT, [3], [0.5, -1.0, 2.0])
    weights = helper.make_tensor("weights", FLOAT, [4], [1.0, -2.0, 0.5, 3.0])
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", n_targets=2, aggregate_function=0,
        post_transform=0, tree_roots=[0, 2], nodes_featureids=[0, 1, 1], nodes_modes=modes,
        nodes_splits=splits, nodes_truenodeids=[0, 1, 2], nodes_trueleafs=[1, 1, 1],
        nodes_falsenodeids=[1, 0, 3], nodes_falseleafs=[0, 1, 1],
        leaf_targetids=[0, 1, 1, 0], leaf_weights=weights)
    model = _model([node], [("x", FLOAT, [5, 2])], [("y", FLOAT, None)], ml=5)
    x = np.array([[0.1, 0.0], [0.9, -3.0], [0.9, 0.0], [0.2, 5.0], [2.0, 2.0]], np.float32)
    _assert_same(model, {"x": x})


def test_string_tensors_stay_on_the_cpu():
    words = fuel.tensor(np.array(["a", "b"]))
    other = fuel.tensor(np.array(["a", "c"], dtype=object))
    assert words.dtype is fuel.string
    assert (words == other).numpy().tolist() == [True, False]
    with pytest.raises(fuel.DTypeError, match="strings"):
        fuel.tensor(np.array(["a", 1], dtype=object))
    from fuel.backends.opencl import BACKEND as OPENCL

    if OPENCL.is_available():
        device = str(OPENCL.devices()[0])
        with pytest.raises(fuel.NoBackendForOp, match="string"):
            fuel.tensor(np.array(["a"]), device=device)
        with pytest.raises(fuel.NoBackendForOp, match="string"):
            words.to(device).numpy()
