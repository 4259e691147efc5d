"""The kernel suite's case model: Case, Operand, operand layouts, seeded values, tolerances.

``CASES[op](dtypes)`` (``tests.backends.kernel_cases``) returns a list of :class:`Case` for
the binding-table key dtypes ``dtypes`` (inputs in order, then the output). A case holds the
op params, its operands (host data plus the Layout the kernel sees: dense, transposed, offset
and stepped, flipped, or broadcast through stride 0) and a NumPy reference computing the
expected output from the operands' logical arrays. An empty list means "no case for these
dtypes", which the coverage test reports as a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.layout import Layout, contiguous_strides

Reference = Callable[[list, object], np.ndarray]
BFLOAT16 = dt.bfloat16.numpy


@dataclass
class Operand:
    """Host data uploaded as one Storage, and the Layout through which the kernel reads it."""

    base: np.ndarray
    layout: Layout
    kind: str = "dense"
    dtype: DType | None = None  # a block-quantized type: ``base`` holds its blocks (uint8)

    @property
    def array(self) -> np.ndarray:
        """The logical array the kernel sees (a quantized operand's blocks, as stored)."""
        if self.dtype is not None:
            return self.base
        itemsize = self.base.itemsize
        if self.layout.numel == 0:
            return np.empty(self.layout.shape, self.base.dtype)
        return np.lib.stride_tricks.as_strided(
            raw(self.base)[self.layout.offset:], self.layout.shape,
            tuple(s * itemsize for s in self.layout.strides), writeable=False).view(
            self.base.dtype)


def raw(array: np.ndarray) -> np.ndarray:
    """``array``'s bytes as unsigned integers of its item size: as_strided takes any dtype
    this way (it cannot rebuild ml_dtypes' float8 and 4-bit dtypes from their type string).
    Object arrays (strings) stay as they are: their items are references."""
    if array.dtype == object:
        return array
    return array.view(np.dtype(f"u{array.itemsize}"))


@dataclass
class Case:
    """One kernel invocation and its expected output."""

    params: object
    operands: list[Operand]
    reference: Reference
    label: str = ""
    rtol: float | None = None
    atol: float | None = None
    inplace: bool = False  # the output is the first operand's own storage (slice assignment)
    extra: dict = field(default_factory=dict)

    def expected(self) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(self.reference([o.array for o in self.operands], self.params))

    @property
    def description(self) -> str:
        shapes = ", ".join(f"{o.kind}{tuple(o.layout.shape)}" for o in self.operands)
        return f"{self.label} [{shapes}] params={self.params}"


# ----------------------------------------------------------------------------- operands

KINDS = ("dense", "transposed", "stepped", "flipped")


def operand(array: np.ndarray, kind: str = "dense") -> Operand:
    """``array`` laid out as ``kind``: dense, transposed (reversed dims in memory), stepped
    (offset 3, every other element), flipped (negative stride on dim 0)."""
    array = np.asarray(array)
    shape = array.shape
    if kind == "transposed" and array.ndim >= 2:
        order = tuple(reversed(range(array.ndim)))
        stored = np.ascontiguousarray(array.transpose(order))
        return Operand(stored.reshape(-1), Layout.contiguous(stored.shape).permute(order), kind)
    if kind == "stepped" and array.size:
        strides = tuple(2 * s for s in contiguous_strides(shape))
        base = np.zeros(3 + 2 * array.size, array.dtype)
        result = Operand(base, Layout(shape, strides, 3), kind)
        np.lib.stride_tricks.as_strided(raw(base)[3:], shape, tuple(s * array.itemsize
                                                                    for s in strides))[...] = raw(
            array)
        return result
    if kind == "flipped" and array.ndim >= 1 and array.shape[0] > 1:
        stored = np.ascontiguousarray(np.flip(array, 0))
        strides = list(contiguous_strides(shape))
        offset = (shape[0] - 1) * strides[0]
        strides[0] = -strides[0]
        return Operand(stored.reshape(-1), Layout(shape, tuple(strides), offset), kind)
    return Operand(np.ascontiguousarray(array).reshape(-1), Layout.contiguous(shape), "dense")


def broadcast(array: np.ndarray, shape: tuple[int, ...]) -> Operand:
    """``array`` (shape broadcastable to ``shape``) viewed as ``shape`` with stride-0 dims."""
    array = np.ascontiguousarray(array)
    layout = Layout.contiguous(array.shape).broadcast_to(tuple(shape))
    return Operand(array.reshape(-1), layout, "broadcast")


# ----------------------------------------------------------------------------- values

WORDS = ("", "a", "b,c", "Monday", "monday", "x y  z", "中文", "tab\tsep", "a,b,,c", " lead")


def rng_for(*key) -> np.random.Generator:
    """A generator seeded by ``key`` (the same in every process)."""
    seed = 0
    for character in "|".join(str(k) for k in key).encode():
        seed = (seed * 131 + character) % (2**32)
    return np.random.default_rng(seed)


def values(dtype: DType, shape, rng: np.random.Generator, low: float = -3.0,
           high: float = 3.0, special: bool = False) -> np.ndarray:
    """Random values of ``dtype``; integers in [-50, 50] (unsigned [0, 100]); ``special``
    puts NaN, inf and -inf first in float arrays; strings are words from a small set (with
    the empty string and non-ASCII ones), so equal pairs occur."""
    if dtype is dt.string:
        return rng.choice(np.array(WORDS, object), size=shape)
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.is_integer:
        info = ml_dtypes.iinfo(dtype.numpy)
        lo = max(info.min, int(low) if low > -50 else -50)
        hi = min(info.max, int(high) if high < 50 else 50 if info.min < 0 else 100)
        return rng.integers(lo, hi + 1, size=shape).astype(dtype.numpy)
    data = rng.uniform(low, high, size=shape)
    if special and data.size >= 3:
        flat = data.reshape(-1)
        flat[:3] = (np.nan, np.inf, -np.inf)
    return data.astype(dtype.numpy)


def is_float(array: np.ndarray) -> bool:
    return array.dtype.kind == "f" or array.dtype == BFLOAT16


def compute(array: np.ndarray) -> np.ndarray:
    """Floats in float64 for references; integers and bools as they are (wrapping)."""
    return array.astype(np.float64) if is_float(array) else array


def tolerance(dtype: DType, loose: bool = False) -> tuple[float, float]:
    """(rtol, atol) for comparing outputs of ``dtype``; ``loose`` for accumulations."""
    table = {
        "float16": (4e-3, 2e-3), "bfloat16": (3e-2, 2e-2),
        "float32": (2e-6, 1e-6) if not loose else (1e-4, 1e-4),
        "float64": (1e-12, 1e-12) if not loose else (1e-9, 1e-9),
    }
    found = table.get(dtype.name, (0.0, 0.0))
    if loose and dtype.name in ("float16", "bfloat16"):
        return found[0] * 4, found[1] * 8
    return found
