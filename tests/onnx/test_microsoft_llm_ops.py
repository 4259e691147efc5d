"""``com.microsoft`` MatMulNBits, RotaryEmbedding and MultiHeadAttention against onnxruntime
(the oracle), each in a model built with onnx.helper."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import fuel.onnx  # noqa: E402

MS = "com.microsoft"
RNG = np.random.default_rng(11)
TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
         np.dtype(np.int32): TensorProto.INT32}


def _check(node, feeds, initializers, outputs, rtol=1e-4, atol=1e-5):
    graph = helper.make_graph(
        [node], "ms",
        [helper.make_tensor_value_info(k, TYPES[v.dtype], list(v.shape)) for k, v in feeds.items()],
        [helper.make_empty_tensor_value_info(name) for name in outputs],
        [numpy_helper.from_array(v, k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    expected = ort.InferenceSession(model.SerializeToString(), options,
                                    providers=["CPUExecutionProvider"]).run(None, feeds)
    actual = list(fuel.onnx.load(model).run(feeds).values())
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol)


def _x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("zeros", ["none", "packed", "float"])
@pytest.mark.parametrize("k,block", [(64, 32), (48, 16), (40, 16)])
def test_matmul_nbits(bits, zeros, k, block):
    if bits == 8 and zeros == "float":
        pytest.skip("onnxruntime's CPU MatMulNBits refuses 8-bit weights with float zeros")
    n = 6
    blocks = (k + block - 1) // block
    codes = RNG.integers(0, 1 << bits, (n, blocks * block)).astype(np.uint8)
    per_byte = 8 // bits
    packed = np.zeros((n, blocks * block // per_byte), np.uint8)
    for i in range(per_byte):
        packed |= (codes[:, i::per_byte] << (i * bits)).astype(np.uint8)
    initializers = {"b": packed.reshape(n, blocks, -1),
                    "scales": RNG.uniform(0.01, 0.1, n * blocks).astype(np.float32),
                    "bias": _x(n)}
    inputs = ["a", "b", "scales"]
    if zeros == "packed":
        zero_codes = RNG.integers(0, 1 << bits, (n, blocks)).astype(np.uint8)
        width = (blocks + per_byte - 1) // per_byte
        zero_packed = np.zeros((n, width), np.uint8)
        padded = np.zeros((n, width * per_byte), np.uint8)
        padded[:, :blocks] = zero_codes
        for i in range(per_byte):
            zero_packed |= (padded[:, i::per_byte] << (i * bits)).astype(np.uint8)
        initializers["zeros"] = zero_packed.reshape(-1)
        inputs.append("zeros")
    elif zeros == "float":
        initializers["zeros"] = RNG.uniform(0, (1 << bits) - 1, n * blocks).astype(np.float32)
        inputs.append("zeros")
    else:
        inputs.append("")
    inputs += ["", "bias"]
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain=MS, K=k, N=n, bits=bits,
                            block_size=block)
    _check(node, {"a": _x(2, 3, k)}, initializers, ["y"])


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["3d", "4d"])
@pytest.mark.parametrize("positions", ["offset", "ids"])
def test_rotary_embedding(interleaved, layout, positions):
    batch, length, heads, size = 2, 5, 3, 8
    x = _x(batch, length, heads * size) if layout == "3d" else _x(batch, heads, length, size)
    feeds = {"x": x, "pos": (np.array([2], np.int64) if positions == "offset"
                             else RNG.integers(0, 12, (batch, length)).astype(np.int64))}
    angles = np.arange(16)[:, None] * (1e-2 ** (np.arange(size // 2) / (size // 2)))[None, :]
    initializers = {"cos": np.cos(angles).astype(np.float32),
                    "sin": np.sin(angles).astype(np.float32)}
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS,
                            interleaved=interleaved, **({"num_heads": heads}
                                                        if layout == "3d" else {}))
    _check(node, feeds, initializers, ["y"])


@pytest.mark.parametrize("variant", ["plain", "bias", "padding", "past",
                                     "attention_bias"])
def test_multi_head_attention(variant):
    batch, queries, keys, heads, size = 2, 3, 5, 2, 4
    hidden = heads * size
    feeds = {"q": _x(batch, queries, hidden), "k": _x(batch, keys, hidden),
             "v": _x(batch, keys, hidden)}
    inputs = ["q", "k", "v", "", "", "", "", ""]
    outputs = ["y"]
    attributes = {"num_heads": heads}
    if variant == "bias":
        feeds["bias"] = _x(3 * hidden)
        inputs[3] = "bias"
    if variant == "padding":
        feeds["mask"] = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int32)
        inputs[4] = "mask"
    if variant == "attention_bias":
        feeds["ab"] = _x(1, heads, queries, keys)
        inputs[5] = "ab"
    if variant == "past":
        feeds["pk"], feeds["pv"] = _x(batch, heads, 2, size), _x(batch, heads, 2, size)
        inputs[6], inputs[7] = "pk", "pv"
        outputs += ["present_k", "present_v"]
    while inputs and not inputs[-1]:
        inputs.pop()
    node = helper.make_node("MultiHeadAttention", inputs, outputs, domain=MS, **attributes)
    _check(node, feeds, {}, outputs)


def test_multi_head_attention_unidirectional_is_refused_by_name():
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain=MS,
                            num_heads=2, unidirectional=1)
    graph = helper.make_graph([node], "ms", [helper.make_tensor_value_info(
        name, TensorProto.FLOAT, [1, 2, 4]) for name in "qkv"],
        [helper.make_empty_tensor_value_info("y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid(MS, 1)])
    with pytest.raises(fuel.onnx.UnsupportedOp, match="unidirectional"):
        fuel.onnx.load(model).run({name: _x(1, 2, 4) for name in "qkv"})
