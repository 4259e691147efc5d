"""DECOMPOSITIONS: op -> the function that rewrites one of its nodes into more primitive ones.

A decomposition takes the node and a Builder and returns the node that replaces it (same
shape and dtype), built over the original node's inputs. Each module registers its functions
next to their code with ``@decomposes(OpKind.X)``.
"""

from __future__ import annotations

from collections.abc import Callable

from fuel.graph.decompositions.builder import Builder
from fuel.graph.node import Node
from fuel.ir.ops import OpKind

Decomposition = Callable[[Node, Builder], Node]

DECOMPOSITIONS: dict[OpKind, Decomposition] = {}


def decomposes(*kinds: OpKind):
    """Decorator: register the function as the decomposition of every op in ``kinds``."""

    def register(function: Decomposition) -> Decomposition:
        for kind in kinds:
            if kind in DECOMPOSITIONS:
                raise ValueError(f"{kind!r} has two decompositions")
            DECOMPOSITIONS[kind] = function
        return function

    return register
