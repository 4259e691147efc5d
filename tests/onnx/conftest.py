"""Shared helpers of the ONNX tests: skip without onnx, build small models."""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx")


def make_model(nodes, inputs, outputs, opset: int = 17, initializers=(), ir_version=None):
    """A ModelProto from helper-made nodes and (name, elem_type, shape) inputs/outputs."""
    from onnx import helper

    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(name, kind, shape) for name, kind, shape in inputs],
        [helper.make_tensor_value_info(name, kind, shape) for name, kind, shape in outputs],
        initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        model.ir_version = ir_version
    return model
