"""Frozen params dataclasses of the op families (metadata only, hashable: plan-cache keys)."""

from __future__ import annotations

from dataclasses import dataclass

from fuel.ir.dtype import DType


@dataclass(frozen=True, slots=True)
class NoParams:
    """Ops without parameters."""


NO_PARAMS = NoParams()


@dataclass(frozen=True, slots=True)
class CastParams:
    dtype: DType


@dataclass(frozen=True, slots=True)
class CopyParams:
    device: object  # fuel.ir.device.Device


@dataclass(frozen=True, slots=True)
class ShapeParams:
    """RESHAPE and EXPAND: the target shape."""

    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PermuteParams:
    dims: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SliceParams:
    """Normalized per-dim slices (in range, nonzero step); a negative step flips."""

    starts: tuple[int, ...]
    stops: tuple[int, ...]
    steps: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SliceAssignParams:
    """Write a value into a slice region of a target. ``inplace``: the output is the target's
    own storage (``x[i] = v`` on a realized tensor), so only the region is written."""

    starts: tuple[int, ...]
    stops: tuple[int, ...]
    steps: tuple[int, ...]
    inplace: bool = False


@dataclass(frozen=True, slots=True)
class IndexCopyParams:
    """Copy ``source`` into ``target`` at the positions ``index`` holds along ``dim``.
    ``inplace``: the output is the target's own storage (``x.index_copy_(...)``)."""

    dim: int
    inplace: bool = False


@dataclass(frozen=True, slots=True)
class FullParams:
    shape: tuple[int, ...]
    value: float | int | bool
    dtype: DType


@dataclass(frozen=True, slots=True)
class ArangeParams:
    start: float | int
    step: float | int
    count: int
    dtype: DType


@dataclass(frozen=True, slots=True)
class GeluParams:
    approximate: str = "none"


@dataclass(frozen=True, slots=True)
class ReduceParams:
    """Sorted, non-negative dims (all dims when the user gave None)."""

    dims: tuple[int, ...]
    keepdim: bool = False


@dataclass(frozen=True, slots=True)
class AxisParams:
    """Ops along one non-negative dim: cumsum, softmax, gather, index_select, cat."""

    dim: int


@dataclass(frozen=True, slots=True)
class NormParams:
    """layer_norm / rms_norm over the trailing ``axes`` dims."""

    axes: int
    eps: float


@dataclass(frozen=True, slots=True)
class DiagonalParams:
    diagonal: int = 0


@dataclass(frozen=True, slots=True)
class PadParams:
    """``widths[d] = (before, after)`` for every dim; non-negative."""

    widths: tuple[tuple[int, int], ...]
    value: float | int | bool
