"""The errors an ONNX import raises: every one is a FuelError naming the node it concerns."""

from __future__ import annotations

from fuel.ir.errors import DTypeError, FuelError


class OnnxError(FuelError):
    """A model fuel cannot load or run: malformed file, bad feed, a node that failed."""


class UnsupportedOp(OnnxError):
    """An op (or an attribute value of an op) fuel does not implement."""


class UnsupportedDType(OnnxError, DTypeError):
    """A tensor element type fuel has no dtype for (string, uint16, float8, int4, ...)."""


class UnsupportedOpset(OnnxError):
    """An opset version outside the range fuel implements."""


def node_label(node) -> str:
    """``node 'conv1' (Conv)``; the name is omitted when the node has none."""
    name = getattr(node, "name", "")
    op_type = getattr(node, "op_type", "?")
    return f"node {name!r} ({op_type})" if name else f"node ({op_type}) -> {list(node.output)}"
