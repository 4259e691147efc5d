"""Node: one op application. Immutable except for the buffer a realize attaches to it."""

from __future__ import annotations

import os
import sys

from fuel.ir.device import Device
from fuel.ir.dtype import DType
from fuel.ir.ops import OpKind

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def creation_site() -> tuple[str, int]:
    """(file, line) of the first caller outside the fuel package: the user's source line."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    if frame is None:
        return ("<fuel>", 0)
    return (frame.f_code.co_filename, frame.f_lineno)


class Node:
    """An op, its input nodes and params, and the inferred dtype, shape and device.

    A realized node holds ``buffer`` (a Storage) and ``layout``; it is a leaf from then on and
    drops its inputs so that the graph behind it can be freed.
    """

    __slots__ = (
        "op", "inputs", "params", "dtype", "shape", "device", "site", "buffer", "layout",
        "__weakref__",
    )

    def __init__(
        self,
        op: OpKind,
        inputs: tuple[Node, ...],
        params,
        dtype: DType,
        shape: tuple[int, ...],
        device: Device,
        site: tuple[str, int],
    ) -> None:
        self.op = op
        self.inputs = inputs
        self.params = params
        self.dtype = dtype
        self.shape = shape
        self.device = device
        self.site = site
        self.buffer = None
        self.layout = None

    @property
    def realized(self) -> bool:
        return self.buffer is not None

    def attach(self, buffer, layout) -> None:
        """Make this node a realized leaf holding ``buffer`` viewed through ``layout``."""
        self.buffer = buffer
        self.layout = layout
        self.inputs = ()

    def describe(self) -> str:
        """``op`` with dtypes, shape and device, plus the user's line: for error messages."""
        file, line = self.site
        return (
            f"{self.op.value} -> {self.dtype.name}{list(self.shape)} on {self.device} "
            f"(created at {file}:{line})"
        )

    def __repr__(self) -> str:
        return f"Node({self.op.value}, {self.dtype.name}{list(self.shape)}, {self.device})"
