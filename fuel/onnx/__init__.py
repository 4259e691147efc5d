"""ONNX import: ``fuel.onnx.load(path).run(feeds)`` runs an ONNX model on fuel's lazy graph.

Needs the optional ``onnx`` package (``pip install 'pyfuel[onnx]'``); ``import fuel.onnx``
works without it and the first ``load`` explains what is missing.
"""

from __future__ import annotations

from fuel.extras import install_command
from fuel.onnx.errors import OnnxError, UnsupportedDType, UnsupportedOp, UnsupportedOpset

INSTALL_HINT = install_command("onnx")


def missing_onnx_error() -> OnnxError:
    """The error raised when the onnx package is not installed."""
    return OnnxError(f"the ONNX importer needs the onnx package: {INSTALL_HINT}")


def _load_ops() -> None:
    from fuel.onnx import ops  # noqa: F401 - registers every converter


_load_ops()

from fuel.onnx.model import InputSpec, Model, load  # noqa: E402

__all__ = ["InputSpec", "Model", "OnnxError", "UnsupportedDType", "UnsupportedOp",
           "UnsupportedOpset", "load", "missing_onnx_error"]
