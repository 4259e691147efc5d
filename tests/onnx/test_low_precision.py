"""Low-precision ONNX graphs against onnxruntime, bit for bit: QuantizeLinear ->
DequantizeLinear round trips through float8 and saturating Casts. onnxruntime's Python API
cannot return float8 arrays, so the graphs also output the float8 values cast to float32
(exact: float32 holds every float8 value), compared bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import fuel

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

RNG = np.random.default_rng(16)


def _run_both(model, feeds: dict) -> tuple[list, list]:
    ours = fuel.onnx.load(model.SerializeToString()).run(feeds)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    theirs = session.run(None, feeds)
    return list(ours.values()), theirs


def _round_trip_model(elem_type: int, saturate: int):
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], saturate=saturate),
        helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"]),
        helper.make_node("Cast", ["q"], ["q_float"], to=TensorProto.FLOAT),
    ]
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("q_float", TensorProto.FLOAT, [4, 8]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor("scale", TensorProto.FLOAT, [], [0.37]),
         helper.make_tensor("zero", elem_type, [], [0.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _same_bits(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Equal float32 bit patterns, any NaN matching any NaN (payloads differ by runtime)."""
    both_nan = np.isnan(ours) & np.isnan(theirs)
    np.testing.assert_array_equal(np.where(both_nan, 0, ours.view(np.uint32)),
                                  np.where(both_nan, 0, theirs.view(np.uint32)))


@pytest.mark.parametrize("elem_type", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2,
                                       TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2FNUZ])
@pytest.mark.parametrize("saturate", [1, 0])
def test_float8_quantize_dequantize_matches_onnxruntime(elem_type, saturate):
    x = (RNG.standard_normal((4, 8)) * 40).astype(np.float32)
    x.reshape(-1)[:4] = (1e6, -1e6, 0.0, -0.0)  # beyond every float8's range, signed zeros
    (q, y), (q_ort, y_ort) = _run_both(_round_trip_model(elem_type, saturate), {"x": x})
    _same_bits(q, q_ort)
    _same_bits(y, y_ort)


def test_uint16_quantize_dequantize_matches_onnxruntime():
    model = _round_trip_model(TensorProto.UINT16, 1)
    x = (RNG.standard_normal((4, 8)) * 5000 + 10000).astype(np.float32)
    x.reshape(-1)[:2] = (-5.0, 1e6)  # clamped to 0 and 65535
    (q, y), (q_ort, y_ort) = _run_both(model, {"x": x})
    np.testing.assert_array_equal(q, q_ort)
    np.testing.assert_array_equal(y, y_ort)


@pytest.mark.parametrize("target", [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2,
                                    TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2FNUZ])
@pytest.mark.parametrize("saturate", [1, 0])
def test_float8_cast_matches_onnxruntime(target, saturate):
    nodes = [helper.make_node("Cast", ["x"], ["y"], to=target, saturate=saturate),
             helper.make_node("Cast", ["y"], ["y_float"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(
        nodes, "cast", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16])],
        [helper.make_tensor_value_info("y_float", TensorProto.FLOAT, [16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = (RNG.standard_normal(16) * 300).astype(np.float32)
    x[:5] = (np.inf, -np.inf, 1e9, -1e9, 0.0)
    (y,), (y_ort,) = _run_both(model, {"x": x})
    _same_bits(y, y_ort)


@pytest.mark.parametrize("elem_type", [TensorProto.INT4, TensorProto.UINT4])
def test_int4_quantize_dequantize_matches_onnxruntime(elem_type):
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"]),
        helper.make_node("Cast", ["q"], ["q_wide"], to=TensorProto.INT8),
    ]
    graph = helper.make_graph(
        nodes, "qdq4", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7])],
        [helper.make_tensor_value_info("q_wide", TensorProto.INT8, [3, 7]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 7])],
        [helper.make_tensor("scale", TensorProto.FLOAT, [], [0.25]),
         helper.make_tensor("zero", elem_type, [], [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    x = (RNG.standard_normal((3, 7)) * 2).astype(np.float32)
    x.reshape(-1)[:2] = (100.0, -100.0)  # saturate at the int4 range
    (q, y), (q_ort, y_ort) = _run_both(model, {"x": x})
    np.testing.assert_array_equal(q, q_ort)
    np.testing.assert_array_equal(y.view(np.uint32), y_ort.view(np.uint32))
