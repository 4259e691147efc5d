"""The autograd tape: which nodes the backward pass can reach, recorded as nodes are built.

A node built (by ``fuel.frontend.build.make``) from an input that requires grad, while grad
mode is on, gets a ``Record`` in its ``grad_record`` slot: its inputs, kept past a realize
(which drops ``Node.inputs``), plus the hooks and retained grad of the tensor over it. A leaf
that requires grad holds a ``Leaf``: its ``.grad``, its hooks; when an in-place op under
``no_grad`` rebinds the tensor to a new node, the Leaf moves with it (``rebind``). Nothing is
recorded until some tensor requires grad (``ACTIVE``), so inference pays one global read per
node built.
"""

from __future__ import annotations

import threading

from fuel.ir.errors import FuelError

ACTIVE = False  # set once any tensor requires grad: make() checks it before recording


class _Mode(threading.local):
    enabled = True


MODE = _Mode()


class Leaf:
    """A tensor that requires grad and was not computed from one: ``.grad`` lands here."""

    __slots__ = ("grad", "hooks", "__weakref__")

    def __init__(self) -> None:
        self.grad = None
        self.hooks: list = []


class Record:
    """A node computed from tensors that require grad: its inputs, for the backward pass;
    ``inputs`` is None once a backward without ``retain_graph`` went through it."""

    __slots__ = ("inputs", "hooks", "retain", "grad")

    def __init__(self, inputs: tuple) -> None:
        self.inputs = inputs
        self.hooks: list | None = None
        self.retain = False
        self.grad = None


def record_of(node):
    """The node's Leaf or Record, or None when it does not require grad."""
    return getattr(node, "grad_record", None)


def activate() -> None:
    global ACTIVE
    ACTIVE = True


def record(node) -> None:
    """Give ``node`` a Record when grad mode is on, it is floating point and one of its inputs
    requires grad (called by make() once ``ACTIVE``)."""
    if not MODE.enabled or node.dtype.kind != "f":
        return
    for source in node.inputs:
        if getattr(source, "grad_record", None) is not None:
            node.grad_record = Record(node.inputs)
            return


def rebind(tensor, node) -> None:
    """Point ``tensor`` at ``node`` (an in-place op's result). A leaf that requires grad keeps
    its Leaf under ``no_grad``; in grad mode an in-place op on it is an error, as in torch."""
    if ACTIVE:
        found = getattr(tensor._node, "grad_record", None)
        if found.__class__ is Leaf:
            if MODE.enabled:
                raise FuelError("an in-place operation on a leaf tensor that requires grad; "
                                "wrap it in `with fuel.no_grad():`")
            node.grad_record = found
    tensor._node = node


def move_leaf(tensor, node) -> None:
    """Point ``tensor`` at ``node`` (a state update); its Leaf, if any, moves along."""
    found = getattr(tensor._node, "grad_record", None)
    if found.__class__ is Leaf:
        node.grad_record = found
    tensor._node = node


class GradMode:
    """``no_grad()`` / ``enable_grad()`` / ``set_grad_enabled(flag)``: a context manager (and
    decorator) that sets grad mode on this thread and restores it on exit."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = bool(enabled)
        self.saved: list[bool] = []

    def __enter__(self) -> GradMode:
        self.saved.append(MODE.enabled)
        MODE.enabled = self.enabled
        return self

    def __exit__(self, *exc_info) -> None:
        MODE.enabled = self.saved.pop()

    def __call__(self, function):
        import functools

        enabled = self.enabled

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with GradMode(enabled):
                return function(*args, **kwargs)

        return wrapper


def no_grad() -> GradMode:
    """Build nodes without recording them for the backward pass (torch.no_grad)."""
    return GradMode(False)


def enable_grad() -> GradMode:
    """Record for the backward pass again inside a ``no_grad`` block."""
    return GradMode(True)


class _Restore:
    def __init__(self, previous: bool) -> None:
        self.previous = previous

    def __enter__(self) -> _Restore:
        return self

    def __exit__(self, *exc_info) -> None:
        MODE.enabled = self.previous


def set_grad_enabled(enabled: bool) -> _Restore:
    """Set grad mode now; as a context manager, restore the previous mode on exit (torch)."""
    restore = _Restore(MODE.enabled)
    MODE.enabled = bool(enabled)
    return restore


def is_grad_enabled() -> bool:
    return MODE.enabled
