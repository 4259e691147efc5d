"""fuel.jit: capture a function's plan on its first call per input signature, then replay it
on new inputs without rebuilding the graph, planning or allocating (fuel.runtime.jit runs it).

Arguments are bound by storage, not copied: a replay reads the tensors passed to it (made dense
first when they are lazy or strided views), and an in-place write to an argument lands in it,
as in an eager call. Outputs get fresh storages on every call.

A training step is captured whole: while the function is traced, ``backward`` leaves the
gradients lazy and the state updates of ``fuel.frontend.backward.assign`` (an optimizer's
parameters and moments, batch norm's running statistics) are recorded as the capture's
effects: extra outputs, each written back into the updated tensor's own storage where the
plan allows it (in place, as the eager fused optimizers do: a replay allocates no new
parameters or moments; a state whose old value a later step still reads gets a new storage
per call instead), and the tensor pointed at its new value after each (its autograd leaf kept).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from fuel.dispatch import op_profile
from fuel.dispatch.kernel import table_generation
from fuel.frontend import tape
from fuel.frontend.backward import defer_realize
from fuel.graph.node import Node, creation_site
from fuel.ir.errors import InvalidArgument
from fuel.ir.ops import OpKind
from fuel.ir.params import bits_key
from fuel.runtime.jit import Capture, collector_paused
from fuel.runtime.replay import HeldArena
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


def _python_key(value: object) -> tuple:
    """A non-tensor argument's part of a signature: by its bits (``bits_key``: -0.0 is not
    0.0, NaNs differ by payload), or by its repr when it is unhashable."""
    key = bits_key(value)
    try:
        hash(key)
    except TypeError:
        return ("py", repr(value))
    return ("py", value.__class__, key)


# Signatures a jit function keeps captured (each capture holds its intermediate buffers):
# past this many, the least recently called one is dropped, and captured again if it returns.
KEPT_CAPTURES = 32


def _signature(args: tuple) -> tuple[list, tuple]:
    """Each argument's dense node (None for a non-tensor) and the call's capture key: the
    tensors' dtype, shape and device, the other arguments' values."""
    nodes = [_dense(a) if isinstance(a, Tensor) else None for a in args]
    return nodes, tuple((n.dtype, n.shape, n.device) if n is not None else _python_key(a)
                        for n, a in zip(nodes, args))


class JitFunction:
    """A function whose graph is captured per input signature and replayed afterwards; the
    ``keep`` most recently called signatures stay captured."""

    def __init__(self, function: Callable, keep: int = KEPT_CAPTURES,
                 arena: HeldArena | None = None) -> None:
        self.function = function
        # signature -> (Capture, whether one Tensor is returned, the effects' tensors), the
        # most recently called last
        self.captures: dict = {}
        self.keep = keep
        self.replays = 0
        # The captures' intermediates share one arena (``arena``: one shared with other jit
        # functions that never run at the same time), so one capture runs at a time: a new
        # shape reuses memory earlier shapes paged in, and kept captures cost one arena.
        self.arena = arena if arena is not None else HeldArena()
        self.lock = self.arena.lock
        functools.update_wrapper(self, function)

    def __call__(self, *args: Any) -> Any:
        with self.lock:
            return self._call(args)

    def _call(self, args: tuple) -> Any:
        nodes, signature = _signature(args)
        storages = [n.buffer if n is not None else None for n in nodes]
        captures = self.captures
        known = captures.get(signature)
        if known is None or known[0].generation != table_generation():
            known = self._captured(signature, nodes, args)
            capture, single, effects, before = known
            outputs = capture.run(storages + before)
        else:
            if next(reversed(captures)) != signature:  # the most recently called last
                del captures[signature]
                captures[signature] = known
            capture, single, effects, _ = known
            with op_profile.phase("jit.replay"):
                outputs = capture.run(storages + [_dense(t).buffer for t in effects])
            self.replays += 1
        results = capture.output_nodes(outputs)
        count = len(results) - len(effects)
        for tensor, node in zip(effects, results[count:]):
            tape.move_leaf(tensor, node)
        tensors = [Tensor(node) for node in results[:count]]
        return tensors[0] if single else tuple(tensors)

    def prepare(self, *args: Any) -> None:
        """Capture ``args``' signature (unless it is captured) and prepare every launch on
        these arguments' storages, launching nothing: a later call with the same signature
        replays at once, like a call after the first (a model warms its usual shapes this
        way at load, before any input exists). A state the function updates is left as it
        is."""
        with self.lock:
            nodes, signature = _signature(args)
            known = self.captures.get(signature)
            if known is None or known[0].generation != table_generation():
                known = self._captured(signature, nodes, args)
            capture, _, _, before = known
            capture.run([n.buffer if n is not None else None for n in nodes] + before,
                        launch=False)

    def _captured(self, signature: tuple, nodes: list, args: tuple) -> tuple:
        """A new capture of ``signature``, kept as the most recently called one (the least
        recently called dropped past ``keep``)."""
        captures = self.captures
        captures.pop(signature, None)
        with collector_paused():
            known = captures[signature] = self._capture(nodes, args)
        while len(captures) > max(self.keep, 1):
            del captures[next(iter(captures))]
        return known

    def _capture(self, nodes: list, args: tuple) -> Any:
        traced_args = [_traced(n) if n is not None else a for n, a in zip(nodes, args)]
        with defer_realize() as updates:
            traced = self.function(*traced_args)
        single = isinstance(traced, Tensor)
        outputs = [traced] if single else list(traced) if isinstance(
            traced, (tuple, list)) else []
        if not outputs or not all(isinstance(o, Tensor) for o in outputs):
            raise InvalidArgument("a fuel.jit function must return a Tensor or a tuple of them")
        # Each updated tensor once: the leaf it was before the call, its value after it.
        effects: dict[int, list] = {}
        for tensor, before, after in updates:
            found = effects.get(id(tensor))
            if found is None:
                effects[id(tensor)] = [tensor, before, after]
            else:
                found[2] = after
        for _, before, _ in effects.values():
            if before.buffer is None:
                raise InvalidArgument("fuel.jit: a state the function updates must be realized "
                                      "before the call (realize the model's parameters)")
        chosen = list(effects.values())
        arguments = [t._node if n is not None else None for n, t in zip(nodes, traced_args)]
        arguments += [before for _, before, _ in chosen]
        # Each state written back into its own storage where the plan allows it (in place).
        inplace = [(len(nodes) + i, len(outputs) + i) for i in range(len(chosen))]
        capture = Capture(arguments, [o._node for o in outputs] + [a for _, _, a in chosen],
                          inplace, self.arena)
        return capture, single, [t for t, _, _ in chosen], [b.buffer for _, b, _ in chosen]


def jit(function: Callable | None = None, *, keep: int = KEPT_CAPTURES,
        arena: HeldArena | None = None) -> JitFunction | Callable[[Callable], JitFunction]:
    """Decorator: capture ``function``'s plan on first call per input signature, replay it on
    later calls; ``keep`` signatures stay captured (the least recently called is dropped).
    ``arena``: a HeldArena shared with other jit functions, whose captures then share their
    intermediates and run one at a time (default: the function's own)."""
    if function is None:
        return lambda inner: JitFunction(inner, keep, arena)
    return JitFunction(function, keep, arena)
