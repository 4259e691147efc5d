"""Frozen params dataclasses of the op families (metadata only, hashable: plan-cache keys).

Floats are keyed by their bits, here and only here: ``bits_key`` turns a params object or a
constant into a hashable key in which a float is its IEEE bit pattern (-0.0 is not 0.0, a NaN
matches only the same NaN). The params classes holding floats compare and hash through it
(``bits_keyed``), and a kernel IR constant is a ``BitsFloat``; so every cache keyed on params
or constants (the front end's constants, the node structure hash and the plan cache built on
it, the inference and compile memos, the renderers' caches) tells them apart.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from fuel.ir.dtype import DType

_pack_double = struct.Struct("<d").pack


class _Tag:
    """A private marker heading a key that is not the value itself (no value holds one);
    unpickled as the module's own (a params object's stored key stays comparable)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        return self.name


_FLOAT, _COMPLEX, _NUMPY, _PARAMS = (_Tag("_FLOAT"), _Tag("_COMPLEX"), _Tag("_NUMPY"),
                                     _Tag("_PARAMS"))


# Types whose values are their own keys (no float inside): the common params fields.
_PLAIN = frozenset({int, bool, str, type(None), DType})


def bits_key(value) -> object:
    """A hashable key of ``value`` in which floats count by their bits: Python floats (and
    NumPy float64, a float) by their IEEE double bits, complex numbers by both parts', other
    NumPy scalars by dtype and bytes, tuples element by element and the params dataclasses
    field by field. Anything else is its own key (an unhashable value stays unhashable, for
    the caller's ``TypeError`` path). Equal keys mean interchangeable values: ``-0.0`` and
    ``0.0`` differ, a NaN equals only a NaN of the same payload."""
    kind = value.__class__
    if kind is float:
        return (_FLOAT, _pack_double(value))
    if kind in _PLAIN:
        return value
    if kind is tuple:
        for item in value:
            if item.__class__ not in _PLAIN:  # a float (or a nested tuple) in it
                return tuple([bits_key(item) for item in value])
        return value  # ints, strings, dtypes: their own keys
    if kind.__dict__.get("__bits_fields__") is not None:  # a bits_keyed params object
        return value._bits_key
    if isinstance(value, float):
        return (_FLOAT, _pack_double(value))
    if isinstance(value, tuple):
        return tuple([bits_key(item) for item in value])
    if isinstance(value, complex):
        return (_COMPLEX, _pack_double(value.real), _pack_double(value.imag))
    if isinstance(value, np.generic):
        return (_NUMPY, value.dtype, value.tobytes())
    return value


def bits_keyed(cls):
    """Make a params dataclass compare and hash by ``bits_key`` of its fields, computed once
    into the hidden field ``_bits_key`` (applied to the classes that can hold floats, under
    ``@dataclass(frozen=True, slots=True)``: the others keep the dataclass's own eq and hash,
    equivalent for them)."""
    names = tuple(cls.__annotations__)
    cls.__bits_fields__ = names
    cls.__annotations__ = {**cls.__annotations__, "_bits_key": "object"}
    cls._bits_key = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        key = [_PARAMS, self.__class__]
        for name in names:
            value = getattr(self, name)
            kind = value.__class__
            key.append((_FLOAT, _pack_double(value)) if kind is float
                       else value if kind in _PLAIN else bits_key(value))
        object.__setattr__(self, "_bits_key", tuple(key))

    def __eq__(self, other) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._bits_key == other._bits_key

    def __hash__(self) -> int:
        return hash(self._bits_key)

    cls.__post_init__ = __post_init__
    cls.__eq__ = __eq__
    cls.__hash__ = __hash__
    return cls


class BitsFloat(float):
    """A float equal only to a float of the same bits (hashed by them): the kernel IR's
    float constants, so that equal kernels (and their caches) tell -0.0 from 0.0 and one NaN
    from another. Arithmetic and formatting are a float's."""

    __slots__ = ()

    def __eq__(self, other) -> bool:
        return isinstance(other, float) and _pack_double(self) == _pack_double(other)

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:  # a float's hash (-0.0 shares 0.0's); a NaN's from its bits
        return float.__hash__(self) if float.__eq__(self, self) else hash(_pack_double(self))

    def __reduce__(self):
        return (BitsFloat, (float(self),))


def exact_constant(number):
    """``number`` as the kernel IR keeps a constant: a float as a ``BitsFloat``, anything
    else as it is."""
    if isinstance(number, float) and number.__class__ is not BitsFloat:
        return BitsFloat(number)
    if isinstance(number, np.floating):
        return BitsFloat(float(number))
    return number


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
@bits_keyed
class FullParams:
    shape: tuple[int, ...]
    value: float | int | bool
    dtype: DType


@dataclass(frozen=True, slots=True)
@bits_keyed
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
@bits_keyed
class NormParams:
    """layer_norm / rms_norm over the trailing ``axes`` dims."""

    axes: int
    eps: float


@dataclass(frozen=True, slots=True)
class DiagonalParams:
    diagonal: int = 0


@dataclass(frozen=True, slots=True)
@bits_keyed
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


CONV_ACTIVATIONS = ("", "relu", "clip", "sigmoid", "silu", "hard_sigmoid", "hard_swish",
                    "leaky_relu", "prelu", "tanh")


@dataclass(frozen=True, slots=True)
@bits_keyed
class ConvEpilogueParams:
    """CONV_FUSED: ``conv`` then, in the convolution's output loop, + bias[m] (operand 3),
    + a residual of the output's shape (operand 4, when ``residual``) and ``activation`` (one of
    CONV_ACTIVATIONS; ``alpha``/``beta``: clip's bounds, hard_sigmoid's slope and offset,
    leaky_relu's slope; prelu's per-channel slope is the last operand)."""

    conv: ConvParams
    activation: str = ""
    alpha: float = 0.0
    beta: float = 0.0
    residual: bool = False
    # the weights are a constant (a model's): a kernel may transform them once, when prepared
    constant_weights: bool = False
    # CONV_BLOCKED only: x times a scale per image and input channel (the last operand,
    # (N, C): a squeeze-excite's multiply folded into the convolution that reads it)
    input_scale: bool = False


@dataclass(frozen=True, slots=True)
class ConvPartsParams:
    """CONV_BLOCKED_CAT: one CONV_BLOCKED's params a part (operands 3k, 3k + 1, 3k + 2: its
    x, weight and bias; no residual), the parts' outputs joined along their channel blocks."""

    parts: tuple[ConvEpilogueParams, ...]


@dataclass(frozen=True, slots=True)
class QLinearConvParams:
    """QLINEAR_CONV: ``conv`` of (x - ``x_zero``) (8-bit x; the padding adds 0) and int8
    weights, summed exactly, + the int32 bias[m], as float32 times the float32 multiplier[m],
    rounded half to even, + ``y_zero``, saturated to int8 (``y_signed``) or uint8."""

    conv: ConvParams
    x_zero: int
    y_zero: int
    y_signed: bool
    # the weights are a constant (a model's): a kernel may re-pack them once, when prepared
    constant_weights: bool = False


@dataclass(frozen=True, slots=True)
@bits_keyed
class QLinearBinaryParams:
    """QLINEAR_BINARY: two 8-bit operands (NumPy broadcasting) combined like onnxruntime's
    QLinearAdd (``multiply`` False: a * a_scale / y_scale + b * b_scale / y_scale with the
    zero points folded into one float constant, fused multiply-adds) or QLinearMul (``multiply``
    True: the exact product (a - a_zero)(b - b_zero) times a_scale * b_scale / y_scale, + y_zero),
    rounded half to even and saturated to the operands' dtype."""

    multiply: bool
    a_scale: float
    a_zero: int
    b_scale: float
    b_zero: int
    y_scale: float
    y_zero: int


@dataclass(frozen=True, slots=True)
@bits_keyed
class QuantizeParams:
    """QLINEAR_QUANTIZE / QLINEAR_DEQUANTIZE with one float32 ``scale`` and integer ``zero``
    point per tensor (ONNX QuantizeLinear / DequantizeLinear): x / scale in float32, rounded
    half to even, + zero, saturated to the 8-bit output; (x - zero) in int32 as float32 times
    the scale."""

    scale: float
    zero: int
    target: DType | None = None  # QLINEAR_QUANTIZE's output: uint8 or int8


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
@bits_keyed
class LabelEncodeParams:
    """Map each ``keys[i]`` to ``values[i]`` and anything else to ``default``; ``dtype`` is
    the output's."""

    keys: tuple
    values: tuple
    default: object
    dtype: DType


@dataclass(frozen=True, slots=True)
@bits_keyed
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
@bits_keyed
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
