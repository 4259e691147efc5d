"""Scalar expressions as data: what one element of a composite elementwise op computes.

An op record states, for a composite elementwise op (gelu, silu, softplus, ...), the scalar
expression over its operands in terms of primitive elementwise ops, named as in ``OpKind``
values. The planner expands a node through it when a backend has no kernel of its own, and
the kernel compiler renders it into C, OpenCL C or WGSL. Pure data: nothing here executes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Expression:
    """One node of a scalar expression DAG: an operand of the op (``operand`` set), a constant
    (``constant`` set, in the op's compute dtype), or ``op`` applied to ``args``."""

    op: str | None = None
    args: tuple[Expression, ...] = ()
    operand: int | None = None
    constant: float | None = None

    def __add__(self, other) -> Expression:
        return call("add", self, other)

    def __radd__(self, other) -> Expression:
        return call("add", other, self)

    def __sub__(self, other) -> Expression:
        return call("sub", self, other)

    def __rsub__(self, other) -> Expression:
        return call("sub", other, self)

    def __mul__(self, other) -> Expression:
        return call("mul", self, other)

    def __rmul__(self, other) -> Expression:
        return call("mul", other, self)

    def __truediv__(self, other) -> Expression:
        return call("div", self, other)

    def __rtruediv__(self, other) -> Expression:
        return call("div", other, self)

    def __neg__(self) -> Expression:
        return call("neg", self)

    def ops(self) -> set[str]:
        """The op names this expression applies (its primitive vocabulary)."""
        found: set[str] = set()
        for node in self.walk():
            if node.op is not None:
                found.add(node.op)
        return found

    def walk(self) -> list[Expression]:
        """Every distinct node, inputs before their users (a topological order)."""
        order: list[Expression] = []
        seen: set[int] = set()

        def visit(node: Expression) -> None:
            if id(node) in seen:
                return
            seen.add(id(node))
            for arg in node.args:
                visit(arg)
            order.append(node)

        visit(self)
        return order

    def __str__(self) -> str:
        if self.operand is not None:
            return "xyz"[self.operand] if self.operand < 3 else f"x{self.operand}"
        if self.constant is not None:
            return repr(self.constant)
        return f"{self.op}({', '.join(str(a) for a in self.args)})"


def operand(index: int) -> Expression:
    """The op's ``index``-th input."""
    return Expression(operand=index)


def constant(value: float) -> Expression:
    """A constant, converted to the op's compute dtype where it is used."""
    return Expression(constant=float(value))


def call(op: str, *args) -> Expression:
    """``op`` (an elementwise OpKind value) applied to ``args``; numbers become constants."""
    return Expression(op=op, args=tuple(a if isinstance(a, Expression) else constant(a)
                                        for a in args))


class _Calls:
    """``E.exp(x)`` is ``call("exp", x)``: expressions read like the math they state."""

    def __getattr__(self, name: str):
        return lambda *args: call(name, *args)


E = _Calls()
X = operand(0)
Y = operand(1)
