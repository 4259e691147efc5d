"""The kernel suite's cases, one module per kernel family (mirroring ``fuel/backends/cpu``).

``CASES[op](dtypes)`` returns the cases of one binding-table key (see ``base``); every module
holds a ``CASES`` dict of its ops, merged here.
"""

from __future__ import annotations

from collections.abc import Callable

from fuel.ir.dtype import DType
from fuel.ir.ops import OpKind
from tests.backends.kernel_cases import (
    attention,
    convolution,
    elementwise,
    indexing,
    pooling,
    qlinear,
    quantized,
    sampling,
    scatter,
    sorting,
    structured,
    text,
)
from tests.backends.kernel_cases.base import Case

FAMILIES = (elementwise, indexing, structured, convolution, pooling, scatter, sorting, sampling,
            text, quantized, attention, qlinear)


def _merge() -> dict[OpKind, Callable[[tuple[DType, ...]], list[Case]]]:
    cases: dict = {}
    for family in FAMILIES:
        overlap = cases.keys() & family.CASES.keys()
        assert not overlap, f"{family.__name__} repeats the cases of {sorted(overlap)}"
        cases.update(family.CASES)
    return cases


CASES = _merge()
