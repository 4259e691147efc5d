"""Shared helpers of the ONNX tests: skip without onnx, build small models."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")


@pytest.fixture(autouse=True)
def _seeded_rng(request):
    """A test module's shared ``RNG`` reseeded per test from the test's name: its values do
    not depend on which tests ran before it in the same worker (pytest-xdist deals them out
    at random; onnxruntime oracles with a tolerance failed on one such draw)."""
    module = request.module
    if isinstance(getattr(module, "RNG", None), np.random.Generator):
        module.RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))


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
