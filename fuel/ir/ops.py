"""The op registry: every op fuel knows, declared once.

Each ``OpDefinition`` states an op's params class, its shape/dtype rule and operand dtype
constraints (checked when the op is built), its dtype coverage, its flags, its front-end names
and, for composite elementwise ops, its scalar expression. Everything that lists ops reads
this table: the front end (generated methods and functions), the coverage every backend
registers against, the planner's in-place and view sets, decompositions, the kernel suite.
Metadata only: nothing here executes.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from fuel.ir import dtype as dt
from fuel.ir import rules, rules_text
from fuel.ir.dtype import DType
from fuel.ir.errors import DTypeError
from fuel.ir.expression import E, Expression, X
from fuel.ir.limits import ELEMENT_LIMIT_FLOOR, check_limit
from fuel.ir.params import (  # noqa: F401 - params are part of the op metadata API
    NO_PARAMS,
    ArangeParams,
    AxisParams,
    CastParams,
    ConvEpilogueParams,
    ConvParams,
    ConvPartsParams,
    CopyParams,
    DiagonalParams,
    EinsumParams,
    FullParams,
    GridSampleParams,
    IndexCopyParams,
    LabelEncodeParams,
    NoParams,
    NormParams,
    PadParams,
    PatternParams,
    PermuteParams,
    PoolParams,
    QLinearBinaryParams,
    QLinearConvParams,
    QuantizeParams,
    ReduceParams,
    ScatterParams,
    ShapeParams,
    SliceAssignParams,
    SliceParams,
    SortParams,
    StringNormalizeParams,
    StringSplitParams,
    TfIdfParams,
    TreeEnsembleParams,
)
from fuel.ir.rules import broadcast_shapes  # noqa: F401 - part of the op metadata API


class OpKind(enum.Enum):
    """Every op the graph can hold; kernels are registered per OpKind. Declared with its
    record below: add a member here and its ``define`` call in the same file."""

    # Members are singletons compared by identity: hash them by identity too, in C (Enum's
    # own __hash__ is a Python call on every dict and set lookup of the host path).
    __hash__ = object.__hash__

    LOAD = "load"
    COPY = "copy"
    CONTIGUOUS = "contiguous"
    CAST = "cast"
    BITCAST = "bitcast"
    RESHAPE = "reshape"
    PERMUTE = "permute"
    EXPAND = "expand"
    SLICE = "slice"
    FULL = "full"
    ARANGE = "arange"
    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    EXPM1 = "expm1"
    LOG = "log"
    LOG1P = "log1p"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIPROCAL = "reciprocal"
    SQUARE = "square"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    TANH = "tanh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    SIGMOID = "sigmoid"
    RELU = "relu"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"
    SILU = "silu"
    HARDSWISH = "hardswish"
    SOFTPLUS = "softplus"
    MISH = "mish"
    ERF = "erf"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    SIGN = "sign"
    LOGICAL_NOT = "logical_not"
    BITWISE_NOT = "bitwise_not"
    ISNAN = "isnan"
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    REMAINDER = "remainder"
    FMOD = "fmod"
    INT_DIV = "int_div"
    POW = "pow"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    LOGICAL_AND = "logical_and"
    LOGICAL_OR = "logical_or"
    LOGICAL_XOR = "logical_xor"
    BITWISE_AND = "bitwise_and"
    BITWISE_OR = "bitwise_or"
    BITWISE_XOR = "bitwise_xor"
    BITSHIFT_LEFT = "bitshift_left"
    BITSHIFT_RIGHT = "bitshift_right"
    WHERE = "where"
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    MEAN = "mean"
    ARGMAX = "argmax"
    ARGMIN = "argmin"
    ALL = "all"
    ANY = "any"
    CUMSUM = "cumsum"
    CUMPROD = "cumprod"
    MATMUL = "matmul"
    EINSUM = "einsum"
    DET = "det"
    SOFTMAX = "softmax"
    LOG_SOFTMAX = "log_softmax"
    LAYER_NORM = "layer_norm"
    RMS_NORM = "rms_norm"
    GATHER = "gather"
    INDEX_SELECT = "index_select"
    CAT = "cat"
    TRIL = "tril"
    TRIU = "triu"
    PAD = "pad"
    SLICE_ASSIGN = "slice_assign"
    INDEX_COPY = "index_copy"
    SCATTER_ELEMENTS = "scatter_elements"
    SCATTER_ND = "scatter_nd"
    ARGSORT = "argsort"
    CONV = "conv"
    CONV_TRANSPOSE = "conv_transpose"
    CONV_FUSED = "conv_fused"
    CONV_BLOCKED = "conv_blocked"
    CONV_BLOCKED_CAT = "conv_blocked_cat"
    QLINEAR_CONV = "qlinear_conv"
    QLINEAR_LOOKUP = "qlinear_lookup"
    QLINEAR_BINARY = "qlinear_binary"
    QLINEAR_QUANTIZE = "qlinear_quantize"
    QLINEAR_DEQUANTIZE = "qlinear_dequantize"
    MAX_POOL = "max_pool"
    MAX_POOL_INDICES = "max_pool_indices"
    AVG_POOL = "avg_pool"
    GRID_SAMPLE = "grid_sample"
    STRING_CONCAT = "string_concat"
    STRING_SPLIT = "string_split"
    STRING_NORMALIZE = "string_normalize"
    FULL_MATCH = "full_match"
    LABEL_ENCODE = "label_encode"
    TFIDF = "tfidf"
    TREE_ENSEMBLE = "tree_ensemble"
    DEQUANTIZE = "dequantize"
    QUANTIZED_MATMUL = "quantized_matmul"
    QUANTIZED_EMBEDDING = "quantized_embedding"
    ROUND_INT16_BLOCKS = "round_int16_blocks"
    QUANTIZED_MATMUL_INT8 = "quantized_matmul_int8"
    ROUND_INT8_BLOCKS = "round_int8_blocks"
    PAGED_ATTENTION = "paged_attention"
    FUSED = "fused"

    def __repr__(self) -> str:
        return f"OpKind.{self.name}"


Shape = tuple[int, ...]
InferRule = Callable[[object, tuple[Shape, ...], tuple[DType, ...]], tuple[Shape, DType]]

# Operand dtype constraints, checked for every op when it is built.
OPERAND_CONSTRAINTS: dict[str, tuple[tuple[DType, ...], str]] = {
    "index": ((dt.int32, dt.int64), "int32 or int64"),
    "mask": ((dt.bool_,), "bool"),
    "quantized": (dt.QUANTIZED_DTYPES, "a block-quantized type ("
                  + ", ".join(d.name for d in dt.QUANTIZED_DTYPES) + ")"),
    "activation": ((dt.float32,), "float32"),
}


@dataclass(frozen=True, slots=True)
class OpDefinition:
    """One op, declared once: what it computes, what it accepts, how users call it."""

    kind: OpKind
    family: str
    rule: InferRule
    params: type | None = None
    operands: tuple[str, ...] = ()
    coverage: tuple[tuple[DType, ...], ...] = ()
    view: bool = False
    inplace: bool = False
    accumulating: bool = False
    random: bool = False
    primitive: bool = False
    float_only: bool = False
    host_only: bool = False
    method: str | None = None
    function: str | None = None
    functional: str | None = None
    expression: Expression | None = None
    doc: str = ""

    @property
    def name(self) -> str:
        return self.kind.value


OPS: dict[OpKind, OpDefinition] = {}


def define(kind: OpKind, family: str, rule: InferRule, **fields) -> OpDefinition:
    """Declare ``kind``; every OpKind member is declared exactly once (checked at import)."""
    if kind in OPS:
        raise ValueError(f"{kind!r} is declared twice")
    record = OpDefinition(kind, family, rule, **fields)
    OPS[kind] = record
    return record


def definition(kind: OpKind) -> OpDefinition:
    """The record of ``kind``."""
    return OPS[kind]


def combos(dtypes, arity: int, out: DType | None = None) -> tuple[tuple[DType, ...], ...]:
    """Dtype keys ``(T,) * arity + (out or T,)`` for every T in ``dtypes``."""
    return tuple((d,) * arity + ((out or d),) for d in dtypes)


BITWISE_DTYPES = (dt.bool_,) + dt.INTEGER_DTYPES
FLOATS = combos(dt.FLOAT_DTYPES, 1)
NUMERICS = combos(dt.NUMERIC_DTYPES, 1)

def _names(name: str, functional: bool = False) -> dict:
    return {"method": name, "function": name, "functional": name if functional else None}


def _unary(kind: OpKind, doc: str, coverage=FLOATS, functional: bool = False,
           expression: Expression | None = None, **fields) -> None:
    floating = coverage is FLOATS
    rule = rules.unary_float if floating else fields.pop("rule", rules.same_as_input)
    names = fields.pop("names", _names(kind.value, functional))
    define(kind, "unary", rule, params=NoParams, coverage=coverage, float_only=floating,
           primitive=expression is None, expression=expression, doc=doc, **names, **fields)


def _binary(kind: OpKind, doc: str, coverage, rule=rules.binary, names=None, **fields) -> None:
    define(kind, "binary", rule, params=NoParams, coverage=coverage, primitive=True, doc=doc,
           **(names if names is not None else _names(kind.value)), **fields)


# ------------------------------------------------------------------ leaves, movement, views
define(OpKind.LOAD, "leaf", rules.same_as_input, doc="A realized leaf: data already in a buffer.")
_STRING = dt.string
define(OpKind.COPY, "movement", rules.copy_rule, params=CopyParams, primitive=True,
       coverage=combos(dt.KNOWN_DTYPES, 1), doc="Copy to another device (runs at its source).")
define(OpKind.CONTIGUOUS, "movement", rules.same_as_input, params=NoParams, primitive=True,
       coverage=combos(dt.NAMED_DTYPES, 1), doc="A dense copy of a strided view.")
define(OpKind.CAST, "movement", rules.cast_rule, params=CastParams, primitive=True,
       coverage=tuple((a, b) for a in dt.KNOWN_DTYPES for b in dt.KNOWN_DTYPES),
       doc="Convert to another dtype (``saturate``: float8 targets clamp to their range).")
define(OpKind.BITCAST, "movement", rules.bitcast, params=CastParams, primitive=True,
       doc="The same bits read as another dtype of the same size.")
define(OpKind.RESHAPE, "view", rules.view_reshape, params=ShapeParams, view=True,
       doc="The same elements under a new shape.")
define(OpKind.PERMUTE, "view", rules.view_permute, params=PermuteParams, view=True,
       doc="Reorder the dims.")
define(OpKind.EXPAND, "view", rules.view_reshape, params=ShapeParams, view=True,
       doc="Broadcast size-1 dims as stride 0.")
define(OpKind.SLICE, "view", rules.view_slice, params=SliceParams, view=True,
       doc="A strided window.")
define(OpKind.FULL, "generator", rules.generator, params=FullParams, primitive=True,
       doc="A tensor filled with one value.")
define(OpKind.ARANGE, "generator", rules.generator, params=ArangeParams, primitive=True,
       doc="Evenly spaced values.")

# ------------------------------------------------------------------ unary elementwise
_unary(OpKind.EXP, "e to the x.")
_unary(OpKind.EXPM1, "exp(x) - 1, accurate near 0.")
_unary(OpKind.LOG, "Natural logarithm.")
_unary(OpKind.LOG1P, "log(1 + x), accurate near 0.")
_unary(OpKind.SQRT, "Square root.")
_unary(OpKind.RSQRT, "1 / sqrt(x).", expression=1.0 / E.sqrt(X))
_unary(OpKind.RECIPROCAL, "1 / x.", expression=1.0 / X)
_unary(OpKind.SIN, "Sine.")
_unary(OpKind.COS, "Cosine.")
_unary(OpKind.TAN, "Tangent.")
_unary(OpKind.ASIN, "Arcsine.")
_unary(OpKind.ACOS, "Arccosine.")
_unary(OpKind.ATAN, "Arctangent.")
_unary(OpKind.SINH, "Hyperbolic sine.")
_unary(OpKind.COSH, "Hyperbolic cosine.")
_unary(OpKind.TANH, "Hyperbolic tangent.", functional=True)
_unary(OpKind.ASINH, "Inverse hyperbolic sine.")
_unary(OpKind.ACOSH, "Inverse hyperbolic cosine.")
_unary(OpKind.ATANH, "Inverse hyperbolic tangent.")
_unary(OpKind.ERF, "The error function.")
_unary(OpKind.SIGMOID, "1 / (1 + exp(-x)).", functional=True,
       expression=1.0 / (1.0 + E.exp(-X)))
_unary(OpKind.SILU, "x * sigmoid(x).", functional=True, expression=X / (1.0 + E.exp(-X)))
_unary(OpKind.GELU, "x * Phi(x), the exact (erf) form.", names={},
       expression=0.5 * X * (1.0 + E.erf(X * 0.7071067811865476)))
_unary(OpKind.GELU_TANH, "GELU's tanh approximation.", names={},
       expression=0.5 * X * (1.0 + E.tanh(0.7978845608028654 * (X + 0.044715 * X * X * X))))
_unary(OpKind.HARDSWISH, "x * relu6(x + 3) / 6.", functional=True,
       expression=X * E.minimum(E.maximum(X + 3.0, 0.0), 6.0) / 6.0)
_SOFTPLUS = E.where(E.gt(X, 20.0), X, E.log1p(E.exp(X)))
_unary(OpKind.SOFTPLUS, "log(1 + exp(x)), and x itself above 20 (torch's threshold).",
       functional=True, expression=_SOFTPLUS)
_unary(OpKind.MISH, "x * tanh(softplus(x)).", functional=True, expression=X * E.tanh(_SOFTPLUS))
_unary(OpKind.NEG, "-x.", coverage=NUMERICS)
_unary(OpKind.ABS, "|x|.", coverage=NUMERICS)
_unary(OpKind.SQUARE, "x * x.", coverage=NUMERICS, expression=X * X)
_unary(OpKind.RELU, "max(x, 0).", coverage=NUMERICS, functional=True,
       expression=E.maximum(X, 0.0))
_unary(OpKind.FLOOR, "Round down (integers unchanged).", coverage=NUMERICS)
_unary(OpKind.CEIL, "Round up (integers unchanged).", coverage=NUMERICS)
_unary(OpKind.ROUND, "Round half to even (integers unchanged).", coverage=NUMERICS)
_unary(OpKind.SIGN, "-1, 0 or 1.", coverage=NUMERICS)
_unary(OpKind.LOGICAL_NOT, "not x, as bool.", coverage=combos(dt.ALL_DTYPES, 1, dt.bool_),
       rule=rules.predicate)
_unary(OpKind.ISNAN, "Whether x is NaN.", coverage=combos(dt.ALL_DTYPES, 1, dt.bool_),
       rule=rules.predicate)
_unary(OpKind.BITWISE_NOT, "Bitwise inversion.", coverage=combos(BITWISE_DTYPES, 1))

# ------------------------------------------------------------------ binary elementwise
_ARITHMETIC = combos(dt.NUMERIC_DTYPES, 2)
_LOGICAL = combos(dt.ALL_DTYPES, 2, dt.bool_)
_COMPARISON = combos(dt.KNOWN_DTYPES, 2, dt.bool_)
_binary(OpKind.ADD, "a + b.", _ARITHMETIC)
_binary(OpKind.SUB, "a - b.", _ARITHMETIC)
_binary(OpKind.MUL, "a * b.", _ARITHMETIC)
_binary(OpKind.DIV, "a / b (true division).", combos(dt.FLOAT_DTYPES, 2))
_binary(OpKind.REMAINDER, "Python's remainder: the sign of the divisor.", _ARITHMETIC)
_binary(OpKind.FMOD, "C's fmod: the sign of the dividend.", _ARITHMETIC,
        rule=rules.numeric_binary)
_binary(OpKind.INT_DIV, "Integer division truncating toward zero.",
        combos(dt.INTEGER_DTYPES, 2), rule=rules.integer_binary, names={})
_binary(OpKind.POW, "a ** b.", _ARITHMETIC)
_binary(OpKind.MAXIMUM, "Elementwise maximum (NaN propagates).", _ARITHMETIC)
_binary(OpKind.MINIMUM, "Elementwise minimum (NaN propagates).", _ARITHMETIC)
_binary(OpKind.EQ, "a == b.", _COMPARISON + ((_STRING, _STRING, dt.bool_),), rule=rules.compare)
_binary(OpKind.NE, "a != b.", _COMPARISON + ((_STRING, _STRING, dt.bool_),), rule=rules.compare)
for _kind, _doc in ((OpKind.LT, "a < b."), (OpKind.LE, "a <= b."), (OpKind.GT, "a > b."),
                    (OpKind.GE, "a >= b.")):
    _binary(_kind, _doc, _COMPARISON, rule=rules.compare)
for _kind, _doc in ((OpKind.LOGICAL_AND, "a and b."), (OpKind.LOGICAL_OR, "a or b."),
                    (OpKind.LOGICAL_XOR, "a xor b.")):
    _binary(_kind, _doc, _LOGICAL, rule=rules.compare)
for _kind, _doc in ((OpKind.BITWISE_AND, "a & b."), (OpKind.BITWISE_OR, "a | b."),
                    (OpKind.BITWISE_XOR, "a ^ b.")):
    _binary(_kind, _doc, combos(BITWISE_DTYPES, 2), rule=rules.bitwise)
_binary(OpKind.BITSHIFT_LEFT, "a << b (0 past the width).", combos(dt.INTEGER_DTYPES, 2),
        rule=rules.integer_binary, names=_names("bitwise_left_shift"))
_binary(OpKind.BITSHIFT_RIGHT, "a >> b (arithmetic for signed).", combos(dt.INTEGER_DTYPES, 2),
        rule=rules.integer_binary, names=_names("bitwise_right_shift"))
define(OpKind.WHERE, "select", rules.where_rule, params=NoParams, operands=("mask",),
       coverage=tuple((dt.bool_, d, d, d) for d in dt.KNOWN_DTYPES), primitive=True,
       doc="a where the condition holds, else b.")

# ------------------------------------------------------------------ reductions and scans
_REDUCE = {"params": ReduceParams}
define(OpKind.SUM, "reduce", rules.reduce_accumulate, accumulating=True, primitive=True,
       doc="Sum over dims (integers in int64).", **_REDUCE)
define(OpKind.PROD, "reduce", rules.reduce_accumulate, accumulating=True,
       doc="Product over dims (integers in int64).", **_REDUCE)
define(OpKind.MAX, "reduce", rules.reduce, primitive=True, doc="Maximum over dims.", **_REDUCE)
define(OpKind.MIN, "reduce", rules.reduce, doc="Minimum over dims.", **_REDUCE)
define(OpKind.MEAN, "reduce", rules.reduce_mean, accumulating=True, doc="Mean over dims.",
       **_REDUCE)
define(OpKind.ARGMAX, "reduce", rules.reduce_index, primitive=True,
       doc="Position of the first maximum.", **_REDUCE)
define(OpKind.ARGMIN, "reduce", rules.reduce_index, doc="Position of the first minimum.",
       **_REDUCE)
define(OpKind.ALL, "reduce", rules.reduce_predicate, doc="Whether every element is true.",
       **_REDUCE)
define(OpKind.ANY, "reduce", rules.reduce_predicate, doc="Whether any element is true.",
       **_REDUCE)
define(OpKind.CUMSUM, "scan", rules.cumsum, params=AxisParams, accumulating=True,
       primitive=True, doc="Running sum along a dim.")
define(OpKind.CUMPROD, "scan", rules.cumprod, params=AxisParams, accumulating=True,
       doc="Running product along a dim.")

# ------------------------------------------------------------------ linear algebra, rows
define(OpKind.MATMUL, "contraction", rules.matmul, params=NoParams, primitive=True,
       doc="Batched matrix product.")
define(OpKind.EINSUM, "contraction", rules.einsum, params=EinsumParams,
       doc="An explicit einsum over one or two operands.")
define(OpKind.DET, "contraction", rules.det, params=NoParams,
       doc="Determinants of square matrices.")
define(OpKind.SOFTMAX, "row", rules.unary_float, params=AxisParams,
       doc="exp(x) / sum(exp(x)) along a dim, computed stably.")
define(OpKind.LOG_SOFTMAX, "row", rules.unary_float, params=AxisParams,
       doc="log(softmax(x)) along a dim, computed stably.")
define(OpKind.LAYER_NORM, "row", rules.norm, params=NormParams,
       doc="(x - mean) / sqrt(var + eps) * weight + bias over the trailing dims.")
define(OpKind.RMS_NORM, "row", rules.norm, params=NormParams,
       doc="x / sqrt(mean(x^2) + eps) * weight over the trailing dims.")

# ------------------------------------------------------------------ indexing and placement
define(OpKind.GATHER, "index", rules.gather, params=AxisParams, operands=("any", "index"),
       doc="Values at index positions along a dim.")
define(OpKind.INDEX_SELECT, "index", rules.index_select, params=AxisParams,
       operands=("any", "index"), primitive=True, doc="Slices picked by a 1-D index.")
define(OpKind.CAT, "placement", rules.cat_rule, params=AxisParams, primitive=True,
       doc="Join tensors along a dim.")
define(OpKind.TRIL, "placement", rules.triangle, params=DiagonalParams,
       doc="Zero above a diagonal.")
define(OpKind.TRIU, "placement", rules.triangle, params=DiagonalParams,
       doc="Zero below a diagonal.")
define(OpKind.PAD, "placement", rules.pad_rule, params=PadParams, doc="Constant padding.")
define(OpKind.SLICE_ASSIGN, "placement", rules.slice_assign, params=SliceAssignParams,
       primitive=True, inplace=True, doc="Write a value into a strided region.")
define(OpKind.INDEX_COPY, "placement", rules.index_copy, params=IndexCopyParams,
       operands=("any", "index"), inplace=True,
       doc="Write slices at index positions along a dim.")
define(OpKind.SCATTER_ELEMENTS, "placement", rules.scatter_elements, params=ScatterParams,
       operands=("any", "index"), doc="Write (or reduce) values at index positions.")
define(OpKind.SCATTER_ND, "placement", rules.scatter_nd, params=ScatterParams,
       operands=("any", "index"), doc="Write (or reduce) slices at n-d index positions.")
define(OpKind.ARGSORT, "sort", rules.argsort, params=SortParams,
       doc="Stable sort positions along a dim.")

# ------------------------------------------------------------------ windows
define(OpKind.CONV, "window", rules.conv, params=ConvParams, doc="N-d convolution.")
define(OpKind.CONV_TRANSPOSE, "window", rules.conv_transpose, params=ConvParams,
       doc="N-d transposed convolution.")
define(OpKind.CONV_FUSED, "window", rules.conv_fused, params=ConvEpilogueParams,
       doc="Convolution with its epilogue (bias, residual, activation) in its output loop.")
define(OpKind.CONV_BLOCKED, "window", rules.conv_blocked, params=ConvEpilogueParams,
       doc="CONV_FUSED of a 2-d convolution on blocked channels (NCHW16c: x (N, C/16, H, W, "
           "16), residual and output (N, M/16, OH, OW, 16); C and M multiples of 16, one "
           "group, depthwise or groups of whole blocks; a stem's x planar (N, C, H, W), as is "
           "a chain's entry's, a depthwise 1x1 scaling and shifting each channel; with "
           "input_scale, x times a last (N, C) operand first), as a chain of convolutions "
           "keeps its values between them.")
define(OpKind.CONV_BLOCKED_CAT, "window", rules.conv_blocked_cat, params=ConvPartsParams,
       doc="CONV_BLOCKED of several parts (x, weight, bias each) joined along their channel "
           "blocks: each part stores its output channels into its blocks of one output, as a "
           "chain's channel concat of convolutions (squeezenet's fire modules) needs no copy.")
define(OpKind.QLINEAR_CONV, "window", rules.qlinear_conv, params=QLinearConvParams,
       doc="8-bit convolution summed in int32 and re-quantized (onnxruntime's QLinearConv).")
define(OpKind.QLINEAR_LOOKUP, "quantized", rules.qlinear_lookup, params=NoParams,
       doc="An 8-bit tensor mapped through a 256-entry table indexed by its bytes (a quantized "
           "elementwise chain of one input, tabulated).")
define(OpKind.QLINEAR_BINARY, "quantized", rules.qlinear_binary, params=QLinearBinaryParams,
       doc="onnxruntime's QLinearAdd / QLinearMul of two broadcast 8-bit tensors.")
define(OpKind.QLINEAR_QUANTIZE, "quantized", rules.qlinear_quantize, params=QuantizeParams,
       doc="float32 to 8-bit with one scale and zero point (ONNX QuantizeLinear per tensor).")
define(OpKind.QLINEAR_DEQUANTIZE, "quantized", rules.qlinear_dequantize, params=QuantizeParams,
       doc="8-bit to float32 with one scale and zero point (ONNX DequantizeLinear per tensor).")
define(OpKind.MAX_POOL, "window", rules.pool, params=PoolParams, doc="Max pooling.")
define(OpKind.MAX_POOL_INDICES, "window", rules.pool_indices, params=PoolParams,
       doc="Positions of max pooling's maxima.")
define(OpKind.AVG_POOL, "window", rules.pool, params=PoolParams, doc="Average pooling.")
# Primitive until it has a decomposition (an interpolating gather per grid point).
define(OpKind.GRID_SAMPLE, "window", rules.grid_sample, params=GridSampleParams, primitive=True,
       doc="Sample an input at grid positions.")

# ------------------------------------------------------------------ strings and ML models
# ONNX's string ops and its ai.onnx.ml models: ``host_only``, kernels on the CPU's host arrays
# and no decomposition (string is a CPU-only dtype; the models are table-driven walks).
define(OpKind.STRING_CONCAT, "text", rules_text.string_concat, params=NoParams,
       coverage=((_STRING, _STRING, _STRING),), host_only=True,
       doc="Concatenate strings, broadcasting.")
define(OpKind.STRING_SPLIT, "text", rules_text.string_split, params=StringSplitParams,
       coverage=((_STRING, _STRING), (_STRING, dt.int64)),
       host_only=True,
       doc="Substrings between delimiters (padded with \"\"), or their count.")
define(OpKind.STRING_NORMALIZE, "text", rules_text.string_normalize,
       params=StringNormalizeParams, coverage=((_STRING, _STRING),),
       host_only=True,
       doc="Drop stopwords and change case.")
define(OpKind.FULL_MATCH, "text", rules_text.full_match, params=PatternParams,
       coverage=((_STRING, dt.bool_),), host_only=True,
       doc="Whether a regular expression matches the whole string.")
_LABELS = (_STRING, dt.int64, dt.int32, dt.int16, dt.float32, dt.float64)
define(OpKind.LABEL_ENCODE, "model", rules_text.label_encode, params=LabelEncodeParams,
       coverage=tuple((a, b) for a in _LABELS for b in _LABELS),
       host_only=True,
       doc="Map keys to values through a table, with a default.")
define(OpKind.TFIDF, "model", rules_text.tfidf, params=TfIdfParams,
       coverage=((dt.int32, dt.float32), (dt.int64, dt.float32), (_STRING, dt.float32)),
       host_only=True,
       doc="Count (or weight) the pool's n-grams, with skips, per row.")
define(OpKind.TREE_ENSEMBLE, "model", rules_text.tree_ensemble, params=TreeEnsembleParams,
       coverage=combos((dt.float16, dt.float32, dt.float64), 1),
       host_only=True,
       doc="Sum (or average, min, max) the leaf weights a tree ensemble reaches per target.")

# ------------------------------------------------------------------ block-quantized weights
# A quantized operand's last dim is a whole number of blocks (rules.quantized_rows).
define(OpKind.DEQUANTIZE, "quantized", rules.dequantize, params=NoParams,
       operands=("quantized",), primitive=True, function="dequantize",
       doc="A block-quantized tensor's values as float32 (same shape).")
# quantized_matmul's numerics, the same on every backend and for every row count: for weights in
# ACTIVATION_ROUNDED_FORMATS (every block format, K and IQ4 formats included; not the float
# weights f16_blocks/bf16_blocks) the activations are first rounded to 16-bit blocks of 32
# (round_int16_blocks: codes up to ACTIVATION_CODE_MAX, the scale kept in float32, so each value
# is off by at most max|x| / 65534 of its block), then multiplied; for the other formats they
# are multiplied as they are. Kernels may sum in any order (integer dots included). llama.cpp
# rounds to 8 bits (q8_0/q8_1, max|x| / 254): on SmolLM2 that flipped 2-6 of 192 teacher-forced
# top-1 tokens against the float32 path, 16 bits none (bench/agreement.py), and the integer
# dots cost about the same (16-bit codes by madd where 8-bit ones took maddubs).
ACTIVATION_BLOCK = rules.ACTIVATION_BLOCK
ACTIVATION_CODE_MAX = rules.ACTIVATION_CODE_MAX
ACTIVATION_ROUNDED_FORMATS: frozenset[DType] = frozenset(
    d for d in dt.QUANTIZED_DTYPES if d not in (dt.f16_blocks, dt.bf16_blocks))
define(OpKind.QUANTIZED_MATMUL, "quantized", rules.quantized_matmul, params=NoParams,
       operands=("activation", "quantized"), function="quantized_matmul",
       doc="x @ dequantize(weight).T: float32 (..., k) by a quantized (n, k) weight -> (..., n); "
           "x = round_int16_blocks(x) first for the block formats (not f16/bf16 blocks).")
define(OpKind.ROUND_INT16_BLOCKS, "quantized", rules.int16_blocks, params=NoParams,
       operands=("activation",), function="round_int16_blocks",
       doc="x rounded per block of 32 along its last dim to 16-bit codes: d = max|x| / "
           "32767, d * round_half_even(x * (1 / d)) (0 where d is 0), float32 steps.")
# The serving precision (``fuel serve --activations int8``, the default there; in-process
# generation keeps the 16-bit rule above): quantized_matmul_int8 rounds the activations to
# 8-bit codes per block of 32 (round_int8_blocks: d = max|x| / ACTIVATION_CODE_MAX_INT8 = 127,
# llama.cpp's q8_0 rule with the scale kept in float32, so each value is off by at most
# max|x| / 254 of its block), then multiplies, for the same formats (ACTIVATION_ROUNDED_FORMATS;
# f16/bf16 blocks are multiplied as they are). Why a second rule: a batched step's integer dots
# bound its time (the weights are read once for all rows), and 8-bit codes take vpdpbusd (64
# multiply-adds an instruction) where 16-bit ones took vpdpwssd (32). On the CPU q4_0, q4_1 and
# q8_0 have integer kernels (quantized_int8.c); every other format and backend runs the
# decomposition (round_int8_blocks, dequantize, matmul), exact to the rule.
ACTIVATION_CODE_MAX_INT8 = rules.ACTIVATION_CODE_MAX_INT8
define(OpKind.QUANTIZED_MATMUL_INT8, "quantized", rules.quantized_matmul, params=NoParams,
       operands=("activation", "quantized"), function="quantized_matmul_int8",
       doc="x @ dequantize(weight).T with x = round_int8_blocks(x) first for the block formats "
           "(not f16/bf16 blocks): quantized_matmul at the serving precision.")
define(OpKind.ROUND_INT8_BLOCKS, "quantized", rules.int8_blocks, params=NoParams,
       operands=("activation",), function="round_int8_blocks",
       doc="x rounded per block of 32 along its last dim to 8-bit codes: d = max|x| / 127, "
           "d * round_half_even(x * (1 / d)) (0 where d is 0), float32 steps.")
define(OpKind.QUANTIZED_EMBEDDING, "quantized", rules.quantized_embedding, params=NoParams,
       operands=("quantized", "index"), function="quantized_embedding",
       doc="Rows of a quantized (rows, k) table picked by a 1-D index, as float32.")

# ------------------------------------------------------------------ attention
define(OpKind.PAGED_ATTENTION, "attention", rules.paged_attention, params=NoParams,
       operands=("activation", "activation", "activation", "index", "index"),
       functional="paged_attention",
       doc="Attention of each query row over its own keys in a paged pool: q (T, heads, d) "
           "(pre-scaled); key and value pools (blocks, block_size, kv_heads, d); block_table "
           "(T, M); lengths (T,) in 1..M*block_size. Row t's position p lies in block "
           "block_table[t, p // block_size] at offset p % block_size; head h reads kv head "
           "h // (heads / kv_heads); out[t, h] = softmax(q[t, h] . k[p] over p < lengths[t]) "
           "@ v -> (T, heads, d).")

# ------------------------------------------------------------------ planner-made
define(OpKind.FUSED, "fused", rules.same_as_input,
       doc="A group of nodes the planner runs as one generated kernel (fuel.compiler); its "
           "params are the group's LoopKernel. Never built by the front end.")

_missing = [kind for kind in OpKind if kind not in OPS]
if _missing:  # pragma: no cover - a declaration error, caught by any import
    raise ValueError(f"ops without a record: {_missing}")


# ------------------------------------------------------------------ sets read from the records
def kinds(predicate: Callable[[OpDefinition], bool]) -> frozenset[OpKind]:
    """Every op whose record satisfies ``predicate``."""
    return frozenset(kind for kind, record in OPS.items() if predicate(record))


VIEW_OPS = kinds(lambda r: r.view)
INPLACE_OPS = kinds(lambda r: r.inplace)
UNARY_OPS = kinds(lambda r: r.family == "unary")
BINARY_OPS = kinds(lambda r: r.family == "binary")
ELEMENTWISE_OPS = UNARY_OPS | BINARY_OPS | {OpKind.WHERE}
UNARY_FLOAT_OPS = kinds(lambda r: r.family == "unary" and r.float_only)
REDUCE_OPS = kinds(lambda r: r.family == "reduce")
PRIMITIVE_OPS = kinds(lambda r: r.primitive)
HOST_ONLY_OPS = kinds(lambda r: r.host_only)
COMPARE_OPS = frozenset({OpKind.EQ, OpKind.NE, OpKind.LT, OpKind.LE, OpKind.GT, OpKind.GE})
LOGICAL_OPS = frozenset({OpKind.LOGICAL_AND, OpKind.LOGICAL_OR, OpKind.LOGICAL_XOR})


# ------------------------------------------------------------------ inference
_INFER_CACHE: dict[tuple, tuple[Shape, DType, int]] = {}


def check_operand(role: str, constraint: str, dtype: DType) -> None:
    """DTypeError unless ``dtype`` meets the registry's ``constraint`` (``index``, ``mask``,
    ...): the front end checks a user's operand with it before any implicit conversion, so
    ``x.gather(1, float_index)`` is refused as torch refuses it, naming ``role``."""
    allowed, text = OPERAND_CONSTRAINTS[constraint]
    if dtype not in allowed:
        raise DTypeError(f"{role} must be {text}, got {dtype.name}")


def _check_operands(record: OpDefinition, dtypes: tuple[DType, ...]) -> None:
    for position, (constraint, dtype) in enumerate(zip(record.operands, dtypes)):
        if constraint in OPERAND_CONSTRAINTS:
            check_operand(f"operand {position} ({constraint})", constraint, dtype)


def _infer(op: OpKind, params, shapes: tuple[Shape, ...], dtypes: tuple[DType, ...]):
    record = OPS[op]
    if record.operands:
        _check_operands(record, dtypes)
    shape, dtype = record.rule(params, shapes, dtypes)
    count = 1
    for size in shape:
        count *= size
    if count > ELEMENT_LIMIT_FLOOR:  # absurd sizes (a 2^40 dim) refused before allocating
        check_limit("elements", count, f"the element count of {record.name}'s result "
                                       f"(shape {shape})")
    return shape, dtype


def infer(op: OpKind, params, shapes: tuple[Shape, ...], dtypes: tuple[DType, ...]):
    """(shape, dtype) of ``op`` applied to operands; cached per (op, params, shapes, dtypes)."""
    return infer_keyed(op, params, shapes, dtypes)[:2]


def infer_keyed(op: OpKind, params, shapes: tuple[Shape, ...], dtypes: tuple[DType, ...]):
    """(shape, dtype, structure hash of (op, params, dtype, shape)), cached like ``infer``:
    a node's structural key starts from the hash, computed once per op record and operands."""
    key = (op, params, shapes, dtypes)
    try:
        return _INFER_CACHE[key]
    except KeyError:
        pass
    except TypeError:  # unhashable params: compute without caching; the node keys by identity
        return _infer(op, params, shapes, dtypes) + (None,)
    shape, dtype = _infer(op, params, shapes, dtypes)
    result = (shape, dtype, hash((op, params, dtype, shape)))
    if len(_INFER_CACHE) > 65536:
        _INFER_CACHE.clear()
    _INFER_CACHE[key] = result
    return result


def lookup_dtypes(op: OpKind, input_dtypes: tuple[DType, ...], output: DType):
    """The binding-table key dtypes: inputs in order then the output (CAT keys on one input)."""
    if op is OpKind.CAT:
        return (input_dtypes[0], output)
    return input_dtypes + (output,)


