"""Node: one op application. Immutable except for the buffer a realize attaches to it."""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from fuel.ir.device import BackendId, Device
from fuel.ir.dtype import DType
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Code in these sub-packages uses the runtime like a user would: their lines are the sites.
_USER_SUBPACKAGES = tuple(_PACKAGE_DIR + name + os.sep for name in ("models", "onnx",
                                                                     "conformance"))
_is_runtime: dict[str, bool] = {}


class _UserSite(threading.local):
    """The site of the outermost API call in progress on this thread (None outside one)."""

    site: tuple[str, int] | None = None


_local = _UserSite()
# Public names of the two for the front end's hot path (at_user_line, make).
user_site_holder = _local
runtime_file_memo = _is_runtime
# One entry per site set on some thread (at_user_line's outermost call, set_user_site): while
# it is empty no thread has one, and the operators' inline path skips the thread-local read.
# list.append and list.pop are atomic.
sites_in_progress: list = []


def is_runtime_file(filename: str) -> bool:
    """Whether ``filename`` is fuel's own runtime code (not a user of it)."""
    known = _is_runtime.get(filename)
    if known is None:
        known = filename.startswith(_PACKAGE_DIR) and not filename.startswith(_USER_SUBPACKAGES)
        _is_runtime[filename] = known
    return known


def current_user_site():
    """The site set by the outermost API call in progress on this thread, if any."""
    return _local.site


def set_user_site(site) -> None:
    """Set (or, with None, clear) this thread's site: every node built meanwhile carries it."""
    if (site is None) is not (_local.site is None):
        if site is None:
            sites_in_progress.pop()
        else:
            sites_in_progress.append(None)
    _local.site = site


def creation_site() -> tuple[str, int]:
    """(file, line) of the first caller outside the fuel runtime: the user's source line."""
    site = _local.site
    if site is not None:
        return site
    return site_from(sys._getframe(2))


def site_from(frame) -> tuple[str, int]:
    """(file, line) of ``frame`` or of the first frame outside the fuel runtime behind it."""
    while frame is not None and is_runtime_file(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return ("<fuel>", 0)
    return (frame.f_code.co_filename, frame.f_lineno)


class Node:
    """An op, its input nodes and params, and the inferred dtype, shape and device.

    A realized node holds ``buffer`` (a Storage) and ``layout``; it is a leaf from then on and
    drops its inputs so that the graph behind it can be freed. ``grad_record`` (unset unless
    autograd records the node: ``fuel.frontend.tape``) keeps what the backward pass needs.
    """

    __slots__ = (
        "op", "inputs", "params", "dtype", "shape", "device", "site", "buffer", "layout", "key",
        "grad_record", "__weakref__",
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
        structure: int | None = None,
    ) -> None:
        self.op = op
        self.inputs = inputs
        self.params = params
        self.dtype = dtype
        self.shape = shape
        self.device = device
        self.site = site
        # The Storage a realize attaches (the memory layer's type, above this one) and the
        # Layout it is viewed through.
        self.buffer: Any = None
        self.layout: Layout | None = None
        # Structural key, built incrementally: equal keys mean equal graphs up to leaf data.
        # ``structure`` is hash((op, params, dtype, shape)) when the caller has it (cached by
        # fuel.ir.ops.infer_keyed per op record and operands).
        try:
            if structure is None:
                structure = hash((op, params, dtype, shape))
        except TypeError:  # unhashable params: this node never matches a cached plan
            self.key = id(self)
            return
        if len(inputs) == 2:
            self.key = hash((structure, device.key, inputs[0].key, inputs[1].key))
        else:
            self.key = hash((structure, device.key, *[i.key for i in inputs]))

    @property
    def realized(self) -> bool:
        return self.buffer is not None

    def attach(self, buffer, layout) -> None:
        """Make this node a realized leaf holding ``buffer`` viewed through ``layout``."""
        self.buffer = buffer
        self.layout = layout
        self.inputs = ()
        self.key = hash(("leaf", self.dtype, self.shape, layout.strides, layout.offset,
                         self.device.key))

    def describe(self) -> str:
        """``op`` with dtypes, shape and device, plus the user's line: for error messages."""
        file, line = self.site
        return (
            f"{self.op.value} -> {self.dtype.name}{list(self.shape)} on {self.device} "
            f"(created at {file}:{line})"
        )

    def __repr__(self) -> str:
        return f"Node({self.op.value}, {self.dtype.name}{list(self.shape)}, {self.device})"


def kernel_backend(node: Node, source: Node | None = None) -> BackendId:
    """The backend whose kernel runs ``node``: its device's, except that a COPY runs at its
    source (the source backend reads its own memory and writes the destination's). The one
    rule the planner, the graph, ``dispatched_kernel_ident`` and ``explain`` all follow;
    ``source`` is the COPY's input where the caller holds it apart from ``node.inputs``."""
    if node.op is OpKind.COPY:
        origin = source if source is not None else (node.inputs[0] if node.inputs else None)
        if origin is not None:
            return origin.device.backend
    return node.device.backend
