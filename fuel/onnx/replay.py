"""Model.run replays: the graph built once per shape signature, its plan captured, then re-run
on new feeds without converting a node or building a graph (the engine behind fuel.jit).

A build is replayable only when nothing in it depends on the feeds' values: no host read of a
value computed from a feed (shape subgraphs over initializers and shapes are fine: shapes are in
the signature), no sequence or optional values, no random ops, only tensor outputs computed by
the graph. Anything else runs the plain path on every call.
"""

from __future__ import annotations

import numpy as np

from fuel.backends import get_backend
from fuel.dispatch import op_profile
from fuel.dispatch.kernel import table_generation
from fuel.ir.device import parse_device
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
        values.flags.writeable = False
        arrays.append(values)
    return arrays


# Captures a model keeps (each holds its intermediate buffers): past this many feed
# signatures, the least recently run one is dropped and captured again if it comes back, so
# a model fed many shapes holds a bounded amount of memory.
KEPT_CAPTURES = 16


class ModelReplay:
    """One Model's captures, by feed signature (None: that signature runs the plain path), the
    ``kept`` most recently run ones."""

    def __init__(self, kept: int = KEPT_CAPTURES) -> None:
        self.captures: dict[tuple, Capture | None] = {}
        self.kept = kept
        self.replays = 0

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
            return None
        device = parse_device(device)
        upload = get_backend(device).upload
        storages = [upload(device, array) for array in arrays]  # (made contiguous there)
        with op_profile.phase("onnx.replay"):
            outputs = capture.run(storages)
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
