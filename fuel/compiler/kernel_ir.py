"""The kernel IR: one loop nest over an output shape, as data.

A ``LoopKernel`` reads its inputs through strided ``Load``s (a broadcast is stride 0, a permute
is permuted strides, a slice is an offset and strides), computes a DAG of scalar ``Value``s
named with the op registry's elementwise op names, and writes each ``Store``. Renderers
(``fuel.compiler.render_c``) turn it into a language. Composite ops are lowered through the
scalar ``expression`` their registry record declares. Pure data: this module imports only
``fuel.ir`` and nothing here executes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import NamedTuple

from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.expression import Expression
from fuel.ir.layout import contiguous_strides
from fuel.ir.ops import OPS, OpKind
from fuel.ir.params import exact_constant


@dataclass(frozen=True, slots=True)
class Load:
    """One input buffer read at ``offset + sum(index[d] * strides[d])`` (elements)."""

    dtype: DType
    strides: tuple[int, ...]
    offset: int = 0


class Value(NamedTuple):
    """One scalar of the DAG: ``load`` (of ``loads[load]``), ``constant`` or an op name
    (an elementwise OpKind value, ``cast`` or ``where``) applied to earlier values ``args``.
    A named tuple: made, hashed and compared in C (a fused group makes one per node)."""

    op: str
    dtype: DType
    args: tuple[int, ...] = ()
    load: int = -1
    constant: float | int | bool = 0


# Value(op, dtype, args) without the named tuple's Python-level __new__ (all fields given).
_new_value = functools.partial(tuple.__new__, Value)


@dataclass(frozen=True, slots=True)
class Store:
    """Write value ``value`` (already of the output dtype): one element per loop point, or one
    per row (``per_row``) in a kernel with a reduction. Densely (in loop order; per row, in
    row order), or through ``strides`` over the loop shape (elements; per-element stores of
    row kernels only: a row op writing along a dim that is not the output's last)."""

    value: int
    dtype: DType
    per_row: bool = False
    strides: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class LoopKernel:
    """A loop nest over ``shape``: loads, a value DAG in topological order, stores.
    With ``reduced`` > 0 the last ``reduced`` dims of ``shape`` are the row (reduced axes are
    moved there, their strides with them; the other dims index the rows). A value whose op is
    in ``REDUCE_OPS`` folds its argument over the row (``REDUCTIONS``) and is one scalar per
    row; so is every value that depends only on such values and on loads constant along the
    row. A ``SCAN_OPS`` value folds the row in order and is, per element, the fold so far.
    ``name`` is what profiles and plans show (``fused(sub,exp,div)``); ``nodes`` the graph
    ops it covers, in order. Hashable: it is a plan's and the compile cache's key."""

    name: str
    shape: tuple[int, ...]
    loads: tuple[Load, ...]
    values: tuple[Value, ...]
    stores: tuple[Store, ...]
    nodes: tuple[str, ...] = ()
    reduced: int = 0  # how many trailing dims of shape form the row REDUCE_OPS values fold

    @property
    def row_shape(self) -> tuple[int, ...]:
        """The row's dims (empty without a reduction)."""
        return self.shape[len(self.shape) - self.reduced:] if self.reduced else ()

    @property
    def rows_shape(self) -> tuple[int, ...]:
        """The dims that index the rows (the whole shape without a reduction)."""
        return self.shape[:len(self.shape) - self.reduced]

    def __str__(self) -> str:
        return f"{self.name}{list(self.shape)}"


@dataclass(slots=True)
class KernelBuilder:
    """Builds a LoopKernel's value DAG, sharing equal values (common subexpressions)."""

    shape: tuple[int, ...]
    loads: list[Load] = field(default_factory=list)
    values: list[Value] = field(default_factory=list)
    index: dict[Value, int] = field(default_factory=dict)

    def value(self, value: Value) -> int:
        """The index of ``value`` (added when new)."""
        found = self.index.get(value)
        if found is None:
            found = self.index[value] = len(self.values)
            self.values.append(value)
        return found

    def load(self, load: Load) -> int:
        """A value reading a new input through ``load`` (inputs and loads correspond)."""
        self.loads.append(load)
        return self.value(Value("load", load.dtype, load=len(self.loads) - 1))

    def constant(self, number: float | int | bool, dtype: DType) -> int:
        return self.value(Value("constant", dtype, constant=exact_constant(number)))

    def apply(self, op: OpKind, args: tuple[int, ...], dtype: DType) -> int:
        """``op`` on ``args`` (a tuple) giving ``dtype``; a composite op is lowered through its
        registry expression, computed in ``dtype``."""
        expression = OPS[op].expression
        if expression is None:
            if op is OpKind.CAST:
                return self.cast(args[0], dtype)
            value = _new_value((op._value_, dtype, args, -1, 0))  # value(), inline
            found = self.index.get(value)
            if found is None:
                found = self.index[value] = len(self.values)
                self.values.append(value)
            return found
        return self.expression(expression, args, dtype)

    def fold(self, op: str, argument: int, dtype: DType) -> int:
        """A ``REDUCE_OPS`` or ``SCAN_OPS`` value folding ``argument`` over the row, giving
        ``dtype`` (sums and products fold in their output dtype: the argument is cast)."""
        if reduction(op).indexed:
            return self.value(Value(op, dtype, (argument,)))
        if op in ("all", "any"):
            argument = self.cast(argument, dt.bool_)
        elif op in ("sum", "prod", "mean", "cumsum"):
            argument = self.cast(argument, dtype)
        return self.value(Value(op, dtype, (argument,)))

    def cast(self, value: int, dtype: DType) -> int:
        if self.values[value].dtype is dtype:
            return value
        return self.value(Value("cast", dtype, (value,)))

    def expression(self, expression: Expression, operands: tuple[int, ...], dtype: DType) -> int:
        """Lower a registry scalar expression over ``operands`` (values) in ``dtype``; a half
        type's in float32, rounded once at the end (as the NumPy kernels compute them)."""
        if dtype in HALF_DTYPES:
            return self.cast(self.expression(expression, operands, dt.float32), dtype)
        lowered: dict[int, int] = {}
        for node in expression.walk():
            if node.operand is not None:
                result = self.cast(operands[node.operand], dtype)
            elif node.constant is not None:
                result = self.constant(node.constant, dtype)
            else:
                op = OpKind(node.op)
                args = tuple(lowered[id(a)] for a in node.args)
                result_dtype = dt.bool_ if op in PREDICATE_OPS else dtype
                result = self.apply(op, args, result_dtype)
            lowered[id(node)] = result
        return lowered[id(expression)]

    def build(self, name: str, stores: list[Store], nodes: tuple[str, ...] = (),
              reduced: int = 0) -> LoopKernel:
        return LoopKernel(name, self.shape, tuple(self.loads), tuple(self.values),
                          tuple(stores), nodes, reduced)


@dataclass(frozen=True, slots=True)
class Reduction:
    """How a reduction (or a scan) folds a row, for every renderer: the accumulator's
    ``identity`` (``zero``, ``one``, ``lowest``/``highest``: the dtype's -inf/+inf or integer
    bounds), its ``combine`` (``add``, ``mul``, ``and``, ``or``, ``max``, ``min``), whether a
    NaN element wins and stays (``keeps_nan``: NumPy's max/min/argmax/argmin; sums propagate
    NaN by arithmetic), whether it folds (value, index) pairs and gives the index (``indexed``:
    ties to the first index) and whether the fold is divided by the row's length (``divides``:
    mean). Renderers spell these; none decides them."""

    identity: str
    combine: str
    keeps_nan: bool = False
    indexed: bool = False
    divides: bool = False


# The reductions a row folds into one value per row, and the scans (folds in row order, one
# value per element: the running sum). all and any fold truth values.
REDUCTIONS: dict[str, Reduction] = {
    "sum": Reduction("zero", "add"),
    "mean": Reduction("zero", "add", divides=True),
    "prod": Reduction("one", "mul"),
    "max": Reduction("lowest", "max", keeps_nan=True),
    "min": Reduction("highest", "min", keeps_nan=True),
    "all": Reduction("one", "and"),
    "any": Reduction("zero", "or"),
    "argmax": Reduction("zero", "max", keeps_nan=True, indexed=True),
    "argmin": Reduction("zero", "min", keeps_nan=True, indexed=True),
}
SCANS: dict[str, Reduction] = {"cumsum": Reduction("zero", "add")}
REDUCE_OPS = frozenset(REDUCTIONS)
SCAN_OPS = frozenset(SCANS)


def reduction(op: str) -> Reduction:
    """The fold of reduction or scan ``op``."""
    found = REDUCTIONS.get(op) or SCANS.get(op)
    if found is None:
        raise ValueError(f"{op!r} is not a reduction or a scan of the kernel IR")
    return found


# Storage-only float types: renderers compute them in float32.
HALF_DTYPES = frozenset({dt.float16, dt.bfloat16})
PREDICATE_OPS = frozenset({OpKind.EQ, OpKind.NE, OpKind.LT, OpKind.LE, OpKind.GT, OpKind.GE,
                           OpKind.LOGICAL_AND, OpKind.LOGICAL_OR, OpKind.LOGICAL_XOR,
                           OpKind.LOGICAL_NOT, OpKind.ISNAN})


def collapse(shape: tuple[int, ...], strides: list[tuple[int, ...]]
             ) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Merge adjacent dims that every operand walks as one (and drop size-1 dims): the
    smallest loop nest over the same elements. ``strides`` holds each operand's strides,
    the dense output's included. At least one dim always remains."""
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    sizes: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for d in dims:
        if sizes and all(s[d] * shape[d] == m[-1] for s, m in zip(strides, merged)):
            sizes[-1] *= shape[d]
            for s, m in zip(strides, merged):
                m[-1] = s[d]
            continue
        sizes.append(shape[d])
        for s, m in zip(strides, merged):
            m.append(s[d])
    if not sizes:
        return (1,), [(0,) for _ in strides]
    return tuple(sizes), [tuple(m) for m in merged]


def store_strides(kernel: LoopKernel, position: int) -> tuple[int, ...]:
    """A store's strides over the loop shape (dense: in loop order; per row, in row order)."""
    store = kernel.stores[position]
    if store.strides is not None:
        return store.strides
    if store.per_row:
        return contiguous_strides(kernel.rows_shape) + (0,) * kernel.reduced
    return contiguous_strides(kernel.shape)


def has_scan(kernel: LoopKernel) -> bool:
    """Whether a value of ``kernel`` is a scan (its row must be folded in order)."""
    return any(value.op in SCAN_OPS for value in kernel.values)


def row_values(kernel: LoopKernel) -> list[bool]:
    """For each value of a kernel with a reduction, whether it is one scalar per row (a
    reduction, or computed only from reductions, constants and loads constant along the row)."""
    per_row: list[bool] = []
    first = len(kernel.shape) - kernel.reduced
    for value in kernel.values:
        if value.op == "load":
            per_row.append(not any(kernel.loads[value.load].strides[first:]))
        elif value.op in REDUCE_OPS:
            per_row.append(True)
        elif value.op in SCAN_OPS:
            per_row.append(False)
        else:
            per_row.append(all(per_row[a] for a in value.args))
    return per_row


def stride_pattern(strides: tuple[int, ...]) -> str:
    """How an operand walks a loop's innermost dim or a row (its strides there): ``broadcast``
    (all zero), ``dense`` (one dim, stride 1), ``strided`` (one dim) or ``decoded`` (several
    dims, the index decoded into them). The one classification every renderer reads."""
    if not any(strides):
        return "broadcast"
    if len(strides) > 1:
        return "decoded"
    return "dense" if strides[0] == 1 else "strided"


class RowSchedule(NamedTuple):
    """How a kernel with a row is walked, computed once for every renderer: the rows (the dims
    before the row, collapsed: one work item, or one work-group, per row) and the row
    (collapsed, except a single row dim, kept as it is), each operand's strides over both and
    its row's ``stride_pattern``; ``rows`` and ``length`` are their element counts."""

    outer_sizes: tuple[int, ...]
    row_sizes: tuple[int, ...]
    outer_strides: list[tuple[int, ...]]
    row_strides: list[tuple[int, ...]]
    patterns: list[str]
    rows: int
    length: int


def row_schedule(shape: tuple[int, ...], reduced: int, operands: list[tuple[int, ...]]
                 ) -> RowSchedule:
    """The ``RowSchedule`` of a loop over ``shape`` whose last ``reduced`` dims are the row,
    with ``operands``' strides over ``shape``."""
    split = len(shape) - reduced
    outer_sizes, outer_strides = collapse(shape[:split], [s[:split] for s in operands])
    if reduced == 1:
        row_sizes, row_strides = (shape[-1],), [(s[-1],) for s in operands]
    else:
        row_sizes, row_strides = collapse(shape[split:], [s[split:] for s in operands])
    rows = length = 1
    for size in outer_sizes:
        rows *= size
    for size in row_sizes:
        length *= size
    return RowSchedule(outer_sizes, row_sizes, outer_strides, row_strides,
                       [stride_pattern(row) for row in row_strides], rows, length)


def kernel_row_schedule(kernel: LoopKernel) -> RowSchedule:
    """The ``RowSchedule`` of ``kernel`` over its loads, then its stores."""
    operands = [load.strides for load in kernel.loads]
    operands += [store_strides(kernel, k) for k in range(len(kernel.stores))]
    return row_schedule(kernel.shape, kernel.reduced, operands)
