"""TensorBase: the handle every front-end function builds on.

The front end's functions take and return tensors, and ``fuel.tensor.Tensor`` is made of the
front end's method mixins: to keep imports one-way, the functions name ``TensorBase`` and build
results with ``wrap``, which makes an instance of the one concrete subclass, ``Tensor``
(``fuel/tensor.py`` names it in ``TensorBase.concrete`` once, where it is defined).

A user's subclass of ``fuel.Tensor`` changes nothing else: op results are plain
``fuel.Tensor`` (of plain tensors and of subclass instances alike; fuel has no
``__torch_function__``-style dispatch to carry a subclass through ops). Wrap a result in the
subclass to keep it: ``Mine(result._node)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fuel.graph.node import Node


class TensorBase:
    """A handle on a lazy graph Node; ``fuel.tensor.Tensor`` is its concrete class."""

    __slots__ = ("_node", "__weakref__")
    concrete: type[TensorBase]  # set by fuel/tensor.py to fuel.tensor.Tensor, never a subclass

    def __init__(self, node: Node) -> None:
        self._node = node


_new_object = object.__new__


def wrap(node: Node) -> TensorBase:
    """A ``fuel.Tensor`` holding ``node`` (whatever subclasses of it a user defines): made
    without a Python ``__init__`` call (``TensorBase.__init__`` only sets ``_node``)."""
    result = _new_object(TensorBase.concrete)
    result._node = node
    return result
