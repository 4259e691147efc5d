"""NodeSnapshot: the graph nodes some tensors refer to now, to make them refer to those again.

A tensor is a handle on a graph node. An in-place op (``index_copy_``, ``x[i] = v``) does not
change the node: it points the tensor at a new lazy node that reads the old one. Code that
builds a step over tensors it must leave as they were (a function traced by ``fuel.jit`` that
writes a KV cache in place, whose capture already writes the cache's storages; an eager step
whose realize failed halfway) takes a snapshot first and restores it after::

    snapshot = NodeSnapshot(cache.tensors())      # or tensor.node_snapshot() for one
    try:
        step(cache)
        fuel.realize(*cache.tensors())
    except BaseException:
        snapshot.restore()                        # the cache's tensors are their leaves again
        raise

    with NodeSnapshot(cache.tensors()):           # restored on leaving the block, always
        return step(cache)

Restoring changes only which node each tensor refers to: values a realize already wrote into a
storage stay written.
"""

from __future__ import annotations

from collections.abc import Iterable

from fuel.frontend.base import TensorBase
from fuel.ir.errors import InvalidArgument


class NodeSnapshot:
    """The nodes ``tensors`` refer to at construction; ``restore()`` points each tensor back at
    its node. As a context manager it restores on leaving the block (an error included)."""

    __slots__ = ("_pairs",)

    def __init__(self, tensors: Iterable[TensorBase]) -> None:
        pairs = []
        for tensor in tensors:
            if not isinstance(tensor, TensorBase):
                raise InvalidArgument(f"a node snapshot takes tensors, got "
                                      f"{type(tensor).__name__}")
            pairs.append((tensor, tensor._node))
        self._pairs = tuple(pairs)

    def restore(self) -> None:
        """Point every tensor of the snapshot back at the node it had when it was taken."""
        for tensor, node in self._pairs:
            tensor._node = node

    def __len__(self) -> int:
        return len(self._pairs)

    def __enter__(self) -> NodeSnapshot:
        return self

    def __exit__(self, *exc_info) -> None:
        self.restore()
