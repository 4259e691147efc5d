"""RoiAlign against onnx's reference evaluator (onnxruntime 1.32 fails the suite's RoiAlign
cases) and DeformConv against onnxruntime, on random inputs with groups, masks and boxes
that reach past the image."""

from __future__ import annotations

import numpy as np
import pytest

import fuel

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(7)


def _model(node, inputs, opset):
    graph = helper.make_graph([node], "regions",
                              [helper.make_tensor_value_info(*spec) for spec in inputs],
                              [helper.make_tensor_value_info("y", FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("mode,transform,ratio", [("avg", "half_pixel", 0),
                                                  ("max", "half_pixel", 2),
                                                  ("avg", "output_half_pixel", 3)])
def test_roi_align_matches_reference(mode, transform, ratio):
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], mode=mode,
                            coordinate_transformation_mode=transform, sampling_ratio=ratio,
                            output_height=3, output_width=2, spatial_scale=0.5)
    model = _model(node, [("x", FLOAT, [2, 3, 9, 7]), ("rois", FLOAT, [4, 4]),
                          ("batch", INT64, [4])], 16)
    feeds = {"x": RNG.standard_normal((2, 3, 9, 7)).astype(np.float32),
             "rois": np.array([[0, 0, 12, 16], [2.5, 1, 9, 7.5], [-4, -3, 20, 30],
                               [6, 6, 6.5, 6.2]], np.float32),
             "batch": np.array([0, 1, 1, 0], np.int64)}
    expected = ReferenceEvaluator(model).run(None, feeds)[0]
    (actual,) = fuel.onnx.load(model.SerializeToString()).run(feeds).values()
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("group,offset_group,masked", [(1, 1, False), (2, 2, True),
                                                       (1, 3, True)])
def test_deform_conv_matches_onnxruntime(group, offset_group, masked):
    n, channels, size, out_channels, kernel = 2, 6, 8, 4, 3
    out = (size + 2 - 2 * (kernel - 1) - 1) // 2 + 1  # pads 1, dilation 2, stride 2
    inputs = [("x", FLOAT, [n, channels, size, size]),
              ("w", FLOAT, [out_channels, channels // group, kernel, kernel]),
              ("offset", FLOAT, [n, offset_group * kernel * kernel * 2, out, out]),
              ("b", FLOAT, [out_channels])]
    names = ["x", "w", "offset", "b"]
    if masked:
        inputs.append(("mask", FLOAT, [n, offset_group * kernel * kernel, out, out]))
        names.append("mask")
    node = helper.make_node("DeformConv", names, ["y"], group=group, offset_group=offset_group,
                            pads=[1, 1, 1, 1], dilations=[2, 2], strides=[2, 2])
    model = _model(node, inputs, 19)
    feeds = {name: (RNG.standard_normal(shape) * (1.5 if name == "offset" else 1.0)).astype(
        np.float32) for name, _, shape in inputs}
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    expected = session.run(None, feeds)[0]
    (actual,) = fuel.onnx.load(model.SerializeToString()).run(feeds).values()
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)
