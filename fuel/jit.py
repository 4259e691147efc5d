"""fuel.jit: capture a function's plan on its first call per input signature, then replay it
on new inputs without rebuilding the graph, planning or allocating (fuel.runtime.jit runs it).

Arguments are bound by storage, not copied: a replay reads the tensors passed to it (made dense
first when they are lazy or strided views), and an in-place write to an argument lands in it,
as in an eager call. Outputs get fresh storages on every call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from fuel.dispatch import op_profile
from fuel.dispatch.kernel import table_generation
from fuel.graph.node import Node, creation_site
from fuel.ir.errors import InvalidArgument
from fuel.ir.ops import OpKind
from fuel.ir.params import bits_key
from fuel.runtime.jit import Capture
from fuel.tensor import Tensor


def _dense(tensor: Tensor) -> Node:
    """The realized node of ``tensor``, dense from offset 0 (a copy when it is a view)."""
    node = tensor.realize()._node
    assert node.layout is not None  # a realized node has its layout
    if node.layout.offset != 0 or not node.layout.is_contiguous():
        node = tensor.contiguous().realize()._node
    return node


def _traced(node: Node) -> Tensor:
    """A fresh leaf over ``node``'s storage: the argument slot of the capture."""
    leaf = Node(OpKind.LOAD, (), None, node.dtype, node.shape, node.device, creation_site())
    leaf.attach(node.buffer, node.layout)
    return Tensor(leaf)


def _python_key(value) -> tuple:
    """A non-tensor argument's part of a signature: by its bits (``bits_key``: -0.0 is not
    0.0, NaNs differ by payload), or by its repr when it is unhashable."""
    key = bits_key(value)
    try:
        hash(key)
    except TypeError:
        return ("py", repr(value))
    return ("py", value.__class__, key)


class JitFunction:
    """A function whose graph is captured per input signature and replayed afterwards."""

    def __init__(self, function: Callable) -> None:
        self.function = function
        self.captures: dict = {}  # signature -> (Capture, whether one Tensor is returned)
        self.replays = 0
        functools.update_wrapper(self, function)

    def __call__(self, *args):
        nodes = [_dense(a) if isinstance(a, Tensor) else None for a in args]
        signature = tuple((n.dtype, n.shape, n.device) if n is not None else _python_key(a)
                          for n, a in zip(nodes, args))
        storages = [n.buffer if n is not None else None for n in nodes]
        known = self.captures.get(signature)
        if known is None or known[0].generation != table_generation():
            known = self.captures[signature] = self._capture(nodes, args)
            outputs = known[0].run(storages)
        else:
            with op_profile.phase("jit.replay"):
                outputs = known[0].run(storages)
            self.replays += 1
        capture, single = known
        tensors = [Tensor(node) for node in capture.output_nodes(outputs)]
        return tensors[0] if single else tuple(tensors)

    def _capture(self, nodes: list, args: tuple) -> tuple[Capture, bool]:
        traced_args = [_traced(n) if n is not None else a for n, a in zip(nodes, args)]
        traced = self.function(*traced_args)
        single = isinstance(traced, Tensor)
        outputs = [traced] if single else list(traced) if isinstance(
            traced, (tuple, list)) else []
        if not outputs or not all(isinstance(o, Tensor) for o in outputs):
            raise InvalidArgument("a fuel.jit function must return a Tensor or a tuple of them")
        arguments = [t._node if n is not None else None for n, t in zip(nodes, traced_args)]
        return Capture(arguments, [o._node for o in outputs]), single


def jit(function: Callable) -> JitFunction:
    """Decorator: capture ``function``'s plan on first call, replay it on later calls."""
    return JitFunction(function)
