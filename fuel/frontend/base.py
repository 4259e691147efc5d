"""TensorBase: the handle every front-end function builds on.

The front end's functions take and return tensors, and ``fuel.tensor.Tensor`` is made of the
front end's method mixins: to keep imports one-way, the functions name ``TensorBase`` and build
results with ``wrap``, which makes an instance of the one concrete subclass, ``Tensor``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fuel.graph.node import Node


class TensorBase:
    """A handle on a lazy graph Node; ``fuel.tensor.Tensor`` is its concrete class."""

    __slots__ = ("_node", "__weakref__")
    concrete: type[TensorBase]

    def __init__(self, node: Node) -> None:
        self._node = node

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        TensorBase.concrete = cls


def wrap(node: Node) -> TensorBase:
    """A Tensor holding ``node``."""
    return TensorBase.concrete(node)
