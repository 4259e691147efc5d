"""Model.run replays: the graph built once per shape signature, its plan captured, then re-run
on new feeds without converting a node or building a graph (the engine behind fuel.jit).

A build is replayable only when nothing in it depends on the feeds' values: no host read of a
value computed from a feed (shape subgraphs over initializers and shapes are fine: shapes are in
the signature), no sequence or optional values, no random ops, only tensor outputs computed by
the graph. Anything else runs the plain path on every call. A call with the very arrays of
the last replay replays again without building a signature (``ModelReplay.again``).
"""

from __future__ import annotations

import operator

import numpy as np

from fuel.backends import get_backend
from fuel.dispatch import op_profile
from fuel.dispatch.kernel import table_generation
from fuel.ir.device import CPU, parse_device
from fuel.ir.errors import InvalidArgument
from fuel.ir.ops import definition
from fuel.runtime.jit import Capture
from fuel.tensor import Tensor


def feed_signature(specs: list, feeds: dict, device) -> tuple | None:
    """(device, then each input's dtype and shape) when every input is a tensor fed exactly
    once as an array; None when the call cannot replay (the plain path checks it)."""
    if len(feeds) != len(specs):
        return None
    signature: list = [str(parse_device(device))]  # (parse_device caches names)
    for spec in specs:
        value = feeds.get(spec.name)
        if spec.kind != "tensor" or value is None or not isinstance(value, np.ndarray):
            return None
        signature.append((value.dtype, value.shape))
    return tuple(signature)


def host_arrays(capture: Capture, storages: list) -> list[np.ndarray]:
    """A run's output storages as read-only host arrays (a CPU output's is a view of its
    storage: the plan writes that storage again only once the caller has dropped it)."""
    arrays = []
    for storage, (layout, _) in zip(storages, capture.output_layouts):
        values = storage.backend.download(storage, layout).view()
        values.setflags(write=False)  # (half the cost of ``flags.writeable`` when cold)
        arrays.append(values)
    return arrays


# Captures a model keeps (each holds its intermediate buffers): past this many feed
# signatures, the least recently run one is dropped and captured again if it comes back, so
# a model fed many shapes holds a bounded amount of memory.
KEPT_CAPTURES = 16


class ModelReplay:
    """One Model's captures, by feed signature (None: that signature runs the plain path), the
    ``kept`` most recently run ones."""

    def __init__(self, names: list[str] | None = None, kept: int = KEPT_CAPTURES) -> None:
        self.captures: dict[tuple, Capture | None] = {}
        self.names = names or []  # the model's tensor inputs, in order (``again``'s feeds)
        self.kept = kept
        self.replays = 0
        # The last replay's arrays and the storages over them: (device, arrays, storages), or
        # None.
        self.fed: tuple | None = None
        # The last replay, where it ran on ``fed``: (the device as passed, its signature, its
        # capture), or None.
        self.last: tuple | None = None

    def again(self, feeds: dict, device) -> list[np.ndarray] | None:
        """The outputs of a replay of the last one's very arrays (the same objects, of the
        same shapes and dtypes, for the same device argument): its capture run on the same
        storages, without building or looking up a signature; None otherwise. The common
        loop of a caller refilling its input buffers pays no more per call than it must
        (every line a call runs after a large model's kernels costs cache misses)."""
        last = self.last
        if last is None or op_profile._enabled or op_profile._trace:
            return None
        known, signature, capture = last
        _, arrays, storages = self.fed
        if device is not known or len(feeds) != len(arrays):
            return None
        for name, array, (dtype, shape) in zip(self.names, arrays, signature[1:]):
            value = feeds.get(name)
            if value is not array or value.shape != shape or value.dtype != dtype:
                return None
        if capture.generation != table_generation():  # kernels changed: the signature path
            return None
        outputs = capture.run(storages)
        self.replays += 1
        return host_arrays(capture, outputs)

    def run(self, signature: tuple, arrays: list[np.ndarray], device) -> list[np.ndarray] | None:
        """The outputs of a replay (read-only host arrays, as ``Tensor.numpy`` gives them),
        or None when ``signature`` has no usable capture. The hot path of every call after
        the first: it builds no node or tensor (after a large model's run the interpreter's
        caches are cold, and each object it touches costs a miss)."""
        captures = self.captures
        capture = captures.get(signature)
        if capture is None:
            return None
        if next(reversed(captures)) != signature:  # the most recently run last
            del captures[signature]
            captures[signature] = capture
        if capture.generation != table_generation():  # kernels changed: build and capture anew
            del captures[signature]
            self.fed = self.last = None  # (storages of the backend then)
            return None
        passed = device
        device = parse_device(device)
        fed = self.fed
        if fed is not None and fed[0] is device and len(fed[1]) == len(arrays) and \
                all(map(operator.is_, fed[1], arrays)):
            storages = fed[2]  # the same arrays again: the storages over them
        else:
            upload = get_backend(device).upload
            storages = [upload(device, array) for array in arrays]  # (made contiguous there)
            # Kept for a call with these same arrays where each storage is the caller's array
            # itself (a CPU array as it was: contiguous, of its dtype), not a copy. A bound
            # plan runs a leaf it finds again as it is (a feed's values are never baked into
            # a launcher: only constants' are), so its new values are read.
            self.fed = (device, arrays, storages) if device == CPU and all(
                array.flags.c_contiguous and storage.buffer.dtype == array.dtype
                for array, storage in zip(arrays, storages)) else None
        self.last = None
        with op_profile.phase("onnx.replay"):
            outputs = capture.run(storages)
        if self.fed is not None and self.fed[2] is storages:
            self.last = (passed, signature, capture)
        self.replays += 1
        return host_arrays(capture, outputs)

    def capture(self, signature: tuple, feed_tensors: list[Tensor], values: dict,
                host_decided: bool) -> list[np.ndarray] | None:
        """Capture a fresh build's plan and run it once; None (remembered) when the build is
        not replayable, and the caller realizes it the plain way."""
        outputs = list(values.values())
        if host_decided or not all(isinstance(value, Tensor) for value in outputs):
            self.captures[signature] = None
            return None
        try:
            capture = Capture([t._node for t in feed_tensors], [t._node for t in outputs])
        except InvalidArgument:  # an output that is a feed, an initializer or another output
            self.captures[signature] = None
            return None
        if any(definition(step.compiled.op).random for step in capture.steps):
            self.captures[signature] = None
            return None
        capture.reuse_outputs = True  # outputs the caller dropped are written again
        self.last = None
        self.captures[signature] = capture
        self._trim()
        results = capture.run([t._node.buffer for t in feed_tensors])
        return host_arrays(capture, results)


    def _trim(self) -> None:
        """Drop the least recently run captures past ``kept`` (markers of signatures that
        cannot replay cost nothing and stay)."""
        held = [signature for signature, capture in self.captures.items()
                if capture is not None]
        for signature in held[:max(0, len(held) - self.kept)]:
            del self.captures[signature]


def depends_on(node, sources: set[int]) -> bool:
    """Whether the graph behind ``node`` reaches a node whose id is in ``sources``."""
    seen: set[int] = set()
    stack = [node]
    while stack:
        current = stack.pop()
        if id(current) in sources:
            return True
        if id(current) in seen:
            continue
        seen.add(id(current))
        stack.extend(current.inputs)
    return False
