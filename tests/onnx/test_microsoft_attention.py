"""``com.microsoft`` Attention, GroupQueryAttention and EmbedLayerNormalization against
onnxruntime (the oracle), each in a small model built with onnx.helper."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fuel.onnx  # noqa: E402
from fuel.onnx.errors import UnsupportedOp  # noqa: E402

MS = "com.microsoft"
RNG = np.random.default_rng(17)
TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
         np.dtype(np.int32): TensorProto.INT32}


def _model(node, feeds, initializers, outputs):
    graph = helper.make_graph(
        [node], "ms",
        [helper.make_tensor_value_info(k, TYPES[v.dtype], list(v.shape)) for k, v in feeds.items()],
        [helper.make_empty_tensor_value_info(name) for name in outputs],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    return model


def _check(node, feeds, initializers, outputs, rtol=1e-4, atol=1e-5):
    model = _model(node, feeds, initializers, outputs)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    expected = ort.InferenceSession(model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"]).run(None, feeds)
    actual = list(fuel.onnx.load(model).run(feeds).values())
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        got = np.asarray(got)
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("mask", ["none", "lengths", "raw", "raw3d"])
@pytest.mark.parametrize("unidirectional", [0, 1])
def test_attention(mask, unidirectional):
    batch, length, hidden, heads = 2, 5, 8, 2
    feeds = {"x": _x(batch, length, hidden)}
    inputs = ["x", "w", "b", ""]
    if mask == "lengths":
        feeds["m"] = np.array([5, 3], np.int32)
    elif mask == "raw":
        feeds["m"] = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32)
    elif mask == "raw3d":
        feeds["m"] = (RNG.random((batch, length, length)) > 0.3).astype(np.int32)
        feeds["m"][:, :, 0] = 1
    if mask != "none":
        inputs[3] = "m"
    initializers = {"w": _x(hidden, 3 * hidden) * 0.5, "b": _x(3 * hidden) * 0.1}
    node = helper.make_node("Attention", inputs, ["y", "present"], domain=MS, num_heads=heads,
                            unidirectional=unidirectional)
    _check(node, feeds, initializers, ["y", "present"])


@pytest.mark.parametrize("extra", ["past", "bias"])
def test_attention_with_past_or_bias(extra):
    batch, length, past, hidden, heads = 2, 3, 4, 8, 2
    feeds = {"x": _x(batch, length, hidden)}
    if extra == "past":
        feeds["past"] = _x(2, batch, heads, past, hidden // heads)
        inputs = ["x", "w", "b", "", "past"]
    else:
        feeds["bias"] = _x(batch, heads, length, length) * 0.3
        inputs = ["x", "w", "b", "", "", "bias"]
    initializers = {"w": _x(hidden, 3 * hidden) * 0.5, "b": _x(3 * hidden) * 0.1}
    node = helper.make_node("Attention", inputs, ["y", "present"], domain=MS, num_heads=heads,
                            unidirectional=1)
    _check(node, feeds, initializers, ["y", "present"])


def test_attention_qkv_hidden_sizes_and_scale():
    batch, length, hidden, heads = 1, 4, 6, 2
    node = helper.make_node("Attention", ["x", "w", "b"], ["y"], domain=MS, num_heads=heads,
                            qkv_hidden_sizes=[4, 4, 8], scale=0.3)
    _check(node, {"x": _x(batch, length, hidden)},
           {"w": _x(hidden, 16) * 0.5, "b": _x(16) * 0.1}, ["y"])


@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("window,softcap", [(-1, 0.0), (3, 0.0), (-1, 2.0)])
def test_group_query_attention_prompt(kv_heads, window, softcap):
    batch, length, heads, size = 2, 5, 4, 16
    feeds = {"q": _x(batch, length, heads * size), "k": _x(batch, length, kv_heads * size),
             "v": _x(batch, length, kv_heads * size),
             "seqlens": np.full((batch,), length - 1, np.int32),
             "total": np.array(length, np.int32)}
    node = helper.make_node("GroupQueryAttention",
                            ["q", "k", "v", "", "", "seqlens", "total"],
                            ["y", "present_key", "present_value"], domain=MS, num_heads=heads,
                            kv_num_heads=kv_heads, local_window_size=window, softcap=softcap)
    _check(node, feeds, {}, ["y", "present_key", "present_value"])


@pytest.mark.parametrize("rotary", [0, 1])
@pytest.mark.parametrize("batch,length", [(2, 1), (1, 3)])
def test_group_query_attention_with_past(rotary, batch, length):
    past, heads, kv_heads, size = 3, 4, 2, 16
    feeds = {"q": _x(batch, length, heads * size), "k": _x(batch, length, kv_heads * size),
             "v": _x(batch, length, kv_heads * size),
             "pk": _x(batch, kv_heads, past, size), "pv": _x(batch, kv_heads, past, size),
             "seqlens": np.full((batch,), past + length - 1, np.int32),
             "total": np.array(past + length, np.int32)}
    inputs = ["q", "k", "v", "pk", "pv", "seqlens", "total"]
    initializers = {}
    if rotary:
        angles = np.arange(16)[:, None] * (1.0 / 100.0 ** (np.arange(size // 2) / (size // 2)))
        initializers = {"cos": np.cos(angles).astype(np.float32),
                        "sin": np.sin(angles).astype(np.float32)}
        inputs += ["cos", "sin"]
    node = helper.make_node("GroupQueryAttention", inputs,
                            ["y", "present_key", "present_value"], domain=MS, num_heads=heads,
                            kv_num_heads=kv_heads, do_rotary=rotary)
    _check(node, feeds, initializers, ["y", "present_key", "present_value"])


def test_group_query_attention_packed_rotary_prompt():
    batch, length, heads, kv_heads, size = 1, 4, 2, 1, 16
    angles = np.arange(8)[:, None] * (1.0 / 100.0 ** (np.arange(size // 2) / (size // 2)))
    feeds = {"qkv": _x(batch, length, (heads + 2 * kv_heads) * size),
             "seqlens": np.full((batch,), length - 1, np.int32),
             "total": np.array(length, np.int32)}
    initializers = {"cos": np.cos(angles).astype(np.float32),
                    "sin": np.sin(angles).astype(np.float32)}
    node = helper.make_node("GroupQueryAttention",
                            ["qkv", "", "", "", "", "seqlens", "total", "cos", "sin"],
                            ["y", "present_key", "present_value"], domain=MS, num_heads=heads,
                            kv_num_heads=kv_heads, do_rotary=1, rotary_interleaved=1)
    _check(node, feeds, initializers, ["y", "present_key", "present_value"])


@pytest.mark.parametrize("segments,mask,positions", [(True, True, False), (False, False, False),
                                                     (True, True, True)])
def test_embed_layer_normalization(segments, mask, positions):
    batch, length, hidden, vocab = 2, 5, 8, 11
    feeds = {"ids": RNG.integers(0, vocab, (batch, length)).astype(np.int32)}
    inputs = ["ids", "", "word", "pos", "", "gamma", "beta"]
    initializers = {"word": _x(vocab, hidden), "pos": _x(16, hidden), "gamma": _x(hidden),
                    "beta": _x(hidden)}
    if segments:
        feeds["seg"] = RNG.integers(0, 2, (batch, length)).astype(np.int32)
        initializers["segw"] = _x(2, hidden)
        inputs[1], inputs[4] = "seg", "segw"
    if mask:
        feeds["mask"] = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], np.int32)
        inputs.append("mask")
    if positions:
        feeds["positions"] = RNG.integers(0, 16, (batch, length)).astype(np.int32)
        inputs += [""] * (8 - len(inputs)) + ["positions"]
    outputs = ["y", "mask_index", "sum"]
    node = helper.make_node("EmbedLayerNormalization", inputs, outputs, domain=MS,
                            epsilon=1e-5)
    _check(node, feeds, initializers, outputs)


def test_attention_with_an_unsupported_mask_names_the_op():
    node = helper.make_node("Attention", ["x", "w", "b", "m"], ["y"], domain=MS, num_heads=2)
    model = _model(node, {"x": _x(1, 3, 4), "m": np.ones((1, 1, 3, 3), np.int32)},
                   {"w": _x(4, 12), "b": _x(12)}, ["y"])
    with pytest.raises(UnsupportedOp, match="Attention"):
        fuel.onnx.load(model).run({"x": _x(1, 3, 4), "m": np.ones((1, 1, 3, 3), np.int32)})
