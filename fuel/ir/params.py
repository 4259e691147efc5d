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
    saturate: bool = False  # float8 targets: clamp to the finite range (ONNX Cast's default)
    round_mode: str | None = None  # float8_e8m0fnu: ONNX's "nearest", "up", "down"; None: NumPy's


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


@dataclass(frozen=True, slots=True)
class ConvParams:
    """N-d convolution over the trailing dims: per spatial dim strides, padding before and
    after, dilations; ``groups`` splits channels. CONV_TRANSPOSE adds ``output_padding``."""

    strides: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int = 1
    output_padding: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PoolParams:
    """Max / average pooling windows over the trailing dims. ``count_include_pad`` counts the
    explicit padding in an average's divisor; ``divide=False`` returns window sums;
    ``storage_order`` 1 numbers MAX_POOL_INDICES column-major."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    dilations: tuple[int, ...]
    ceil_mode: bool = False
    count_include_pad: bool = False
    divide: bool = True
    storage_order: int = 0


@dataclass(frozen=True, slots=True)
class SortParams:
    """ARGSORT: stable sort positions along ``dim``; ties keep the lower index first."""

    dim: int
    descending: bool = False


@dataclass(frozen=True, slots=True)
class ScatterParams:
    """SCATTER_ELEMENTS along ``dim`` / SCATTER_ND; ``reduction``: none, add, mul, max, min."""

    dim: int = 0
    reduction: str = "none"


@dataclass(frozen=True, slots=True)
class EinsumParams:
    """An explicit einsum equation (``"ij,jk->ik"``) over one or two operands."""

    equation: str


@dataclass(frozen=True, slots=True)
class GridSampleParams:
    """GRID_SAMPLE: ``mode`` nearest, linear or cubic; ``padding_mode`` zeros, border or
    reflection; ``align_corners`` maps -1 and 1 to the centers of the corner elements."""

    mode: str = "linear"
    padding_mode: str = "zeros"
    align_corners: bool = False


SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")
GRID_SAMPLE_MODES = ("nearest", "linear", "cubic")
GRID_SAMPLE_PADDINGS = ("zeros", "border", "reflection")


# ------------------------------------------------------------------ string and ML-domain ops
@dataclass(frozen=True, slots=True)
class StringSplitParams:
    """Split each string at ``delimiter`` (None: runs of whitespace), at most ``maxsplit``
    times; ``width`` substrings per element (padded with ""), or their count (``count``)."""

    delimiter: str | None
    maxsplit: int | None
    width: int
    count: bool = False


@dataclass(frozen=True, slots=True)
class StringNormalizeParams:
    """Drop ``stopwords`` (compared ignoring case unless ``case_sensitive``), then change case
    (``NONE``, ``LOWER``, ``UPPER``); ``kept`` strings remain (one "" when none would)."""

    case_change: str
    stopwords: tuple[str, ...]
    case_sensitive: bool
    kept: int


@dataclass(frozen=True, slots=True)
class PatternParams:
    """A regular expression that must match the whole string."""

    pattern: str


@dataclass(frozen=True, slots=True)
class LabelEncodeParams:
    """Map each ``keys[i]`` to ``values[i]`` and anything else to ``default``; ``dtype`` is
    the output's."""

    keys: tuple
    values: tuple
    default: object
    dtype: DType


@dataclass(frozen=True, slots=True)
class TfIdfParams:
    """ONNX TfIdfVectorizer: n-grams of ``min_gram``..``max_gram`` tokens, up to
    ``max_skip`` tokens apart, looked up in ``pool`` (n-grams of each length start at
    ``ngram_counts[n - 1]``) and counted at ``ngram_indexes``; ``mode`` TF, IDF or TFIDF."""

    mode: str
    min_gram: int
    max_gram: int
    max_skip: int
    ngram_counts: tuple[int, ...]
    ngram_indexes: tuple[int, ...]
    pool: tuple
    weights: tuple[float, ...] | None
    width: int


@dataclass(frozen=True, slots=True)
class TreeEnsembleParams:
    """ONNX ai.onnx.ml TreeEnsemble: the node arrays as the operator states them
    (``modes``: 0 <=, 1 <, 2 >=, 3 >, 4 ==, 5 !=, 6 member of the next NaN-terminated set of
    ``membership_values``), ``aggregate`` 0 average, 1 sum, 2 min, 3 max, and
    ``post_transform`` 0 none, 1 softmax, 2 logistic, 3 softmax-zero, 4 probit."""

    n_targets: int
    tree_roots: tuple[int, ...]
    features: tuple[int, ...]
    modes: tuple[int, ...]
    splits: tuple[float, ...]
    true_ids: tuple[int, ...]
    true_leafs: tuple[int, ...]
    false_ids: tuple[int, ...]
    false_leafs: tuple[int, ...]
    missing_tracks_true: tuple[int, ...]
    leaf_targets: tuple[int, ...]
    leaf_weights: tuple[float, ...]
    membership_values: tuple[float, ...]
    aggregate: int = 1
    post_transform: int = 0
