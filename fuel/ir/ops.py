"""OpKind (kernel op families), their frozen params, and shape/dtype inference rules.

Metadata only: no execution here. The front end asks ``infer`` for every node it builds, so a
shape or dtype error surfaces when the op is built, not when it runs.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.errors import DTypeError, ShapeError
from fuel.ir.params import (  # noqa: F401 - params are part of the op metadata API
    NO_PARAMS,
    ArangeParams,
    AxisParams,
    CastParams,
    CopyParams,
    DiagonalParams,
    FullParams,
    GeluParams,
    IndexCopyParams,
    NoParams,
    NormParams,
    PadParams,
    PermuteParams,
    ReduceParams,
    ShapeParams,
    SliceAssignParams,
    SliceParams,
)


class OpKind(enum.Enum):
    """Every op family the graph can hold; kernels are registered per OpKind."""

    # leaves and movement
    LOAD = "load"
    COPY = "copy"
    CONTIGUOUS = "contiguous"
    CAST = "cast"
    # views (no kernel)
    RESHAPE = "reshape"
    PERMUTE = "permute"
    EXPAND = "expand"
    SLICE = "slice"
    # generators
    FULL = "full"
    ARANGE = "arange"
    # unary elementwise
    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    RECIPROCAL = "reciprocal"
    SQUARE = "square"
    SIN = "sin"
    COS = "cos"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    RELU = "relu"
    GELU = "gelu"
    GELU_TANH = "gelu_tanh"
    SILU = "silu"
    ERF = "erf"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    SIGN = "sign"
    LOGICAL_NOT = "logical_not"
    BITWISE_NOT = "bitwise_not"
    ISNAN = "isnan"
    # binary elementwise
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    REMAINDER = "remainder"
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
    WHERE = "where"
    # reductions and scans
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
    # structured
    MATMUL = "matmul"
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
    # ops added for ONNX (params and inference in fuel/ir/ops_nn.py)
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    FMOD = "fmod"
    INT_DIV = "int_div"
    BITSHIFT_LEFT = "bitshift_left"
    BITSHIFT_RIGHT = "bitshift_right"
    CONV = "conv"
    CONV_TRANSPOSE = "conv_transpose"
    MAX_POOL = "max_pool"
    MAX_POOL_INDICES = "max_pool_indices"
    AVG_POOL = "avg_pool"
    ARGSORT = "argsort"
    CUMPROD = "cumprod"
    SCATTER_ELEMENTS = "scatter_elements"
    SCATTER_ND = "scatter_nd"
    EINSUM = "einsum"
    GRID_SAMPLE = "grid_sample"
    DET = "det"
    BITCAST = "bitcast"

    def __repr__(self) -> str:
        return f"OpKind.{self.name}"


UNARY_FLOAT_OPS = frozenset({
    OpKind.EXP, OpKind.LOG, OpKind.SQRT, OpKind.RSQRT, OpKind.RECIPROCAL, OpKind.SIN,
    OpKind.COS, OpKind.TANH, OpKind.SIGMOID, OpKind.GELU, OpKind.GELU_TANH, OpKind.SILU,
    OpKind.ERF,
})
UNARY_NUMERIC_OPS = frozenset({
    OpKind.NEG, OpKind.ABS, OpKind.SQUARE, OpKind.RELU, OpKind.FLOOR, OpKind.CEIL,
    OpKind.ROUND, OpKind.SIGN,
})
UNARY_PREDICATE_OPS = frozenset({OpKind.LOGICAL_NOT, OpKind.ISNAN})
UNARY_OPS = UNARY_FLOAT_OPS | UNARY_NUMERIC_OPS | UNARY_PREDICATE_OPS | {OpKind.BITWISE_NOT}
ARITHMETIC_OPS = frozenset({
    OpKind.ADD, OpKind.SUB, OpKind.MUL, OpKind.DIV, OpKind.REMAINDER, OpKind.POW,
    OpKind.MAXIMUM, OpKind.MINIMUM,
})
COMPARE_OPS = frozenset({OpKind.EQ, OpKind.NE, OpKind.LT, OpKind.LE, OpKind.GT, OpKind.GE})
LOGICAL_OPS = frozenset({OpKind.LOGICAL_AND, OpKind.LOGICAL_OR, OpKind.LOGICAL_XOR})
BITWISE_OPS = frozenset({OpKind.BITWISE_AND, OpKind.BITWISE_OR, OpKind.BITWISE_XOR})
BINARY_OPS = ARITHMETIC_OPS | COMPARE_OPS | LOGICAL_OPS | BITWISE_OPS
REDUCE_OPS = frozenset({
    OpKind.SUM, OpKind.PROD, OpKind.MAX, OpKind.MIN, OpKind.MEAN, OpKind.ARGMAX, OpKind.ARGMIN,
    OpKind.ALL, OpKind.ANY,
})
VIEW_OPS = frozenset({OpKind.RESHAPE, OpKind.PERMUTE, OpKind.EXPAND, OpKind.SLICE})



# ----------------------------------------------------------------------------- inference

Shape = tuple[int, ...]
InferRule = Callable[[object, tuple[Shape, ...], tuple[DType, ...]], tuple[Shape, DType]]


def broadcast_shapes(*shapes: Shape) -> Shape:
    """NumPy broadcasting of several shapes; raises ShapeError naming them."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(ndim):
        size = 1
        for shape in shapes:
            own = shape[axis - ndim + len(shape)] if axis - ndim + len(shape) >= 0 else 1
            if own != 1:
                if size not in (1, own):
                    listed = " and ".join(str(tuple(s)) for s in shapes)
                    raise ShapeError(f"shapes {listed} cannot be broadcast together")
                size = own
        result.append(size)
    return tuple(result)


def _same(params, shapes, dtypes):
    return shapes[0], dtypes[0]


def _predicate(params, shapes, dtypes):
    return shapes[0], dt.bool_


def _unary_float(params, shapes, dtypes):
    if not dtypes[0].is_floating:
        raise DTypeError(f"needs a floating-point input, got {dtypes[0].name}")
    return shapes[0], dtypes[0]


def _binary(params, shapes, dtypes):
    if dtypes[0] is not dtypes[1]:
        raise DTypeError(f"operands must share a dtype, got {dtypes[0].name} and {dtypes[1].name}")
    return broadcast_shapes(*shapes), dtypes[0]


def _compare(params, shapes, dtypes):
    return _binary(params, shapes, dtypes)[0], dt.bool_


def _bitwise(params, shapes, dtypes):
    if dtypes[0].is_floating:
        raise DTypeError(f"bitwise ops need integer or bool operands, got {dtypes[0].name}")
    return _binary(params, shapes, dtypes)


def _where(params, shapes, dtypes):
    if not dtypes[0].is_bool:
        raise DTypeError(f"where() needs a bool condition, got {dtypes[0].name}")
    if dtypes[1] is not dtypes[2]:
        raise DTypeError(f"where() branches must share a dtype: {dtypes[1].name}, {dtypes[2].name}")
    return broadcast_shapes(*shapes), dtypes[1]


def _cast(params, shapes, dtypes):
    return shapes[0], params.dtype


def _copy(params, shapes, dtypes):
    return shapes[0], dtypes[0]


def _generator(params, shapes, dtypes):
    shape = params.shape if hasattr(params, "shape") else (params.count,)
    return tuple(shape), params.dtype


def _reduced_shape(shape: Shape, params: ReduceParams) -> Shape:
    if params.keepdim:
        return tuple(1 if axis in params.dims else s for axis, s in enumerate(shape))
    return tuple(s for axis, s in enumerate(shape) if axis not in params.dims)


def _reduce(params, shapes, dtypes):
    return _reduced_shape(shapes[0], params), dtypes[0]


def _reduce_accumulate(params, shapes, dtypes):
    out = dt.int64 if not dtypes[0].is_floating else dtypes[0]
    return _reduced_shape(shapes[0], params), out


def _reduce_mean(params, shapes, dtypes):
    if not dtypes[0].is_floating:
        raise DTypeError(f"mean() needs a floating-point input, got {dtypes[0].name}")
    return _reduce(params, shapes, dtypes)


def _reduce_index(params, shapes, dtypes):
    return _reduced_shape(shapes[0], params), dt.int64


def _reduce_predicate(params, shapes, dtypes):
    return _reduced_shape(shapes[0], params), dt.bool_


def _cumsum(params, shapes, dtypes):
    return shapes[0], (dtypes[0] if dtypes[0].is_floating else dt.int64)


def _matmul(params, shapes, dtypes):
    a, b = shapes
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul kernel operands need 2+ dims, got {a} and {b}")
    if a[-1] != b[-2]:
        raise ShapeError(f"matmul: {a} @ {b}: inner sizes {a[-1]} and {b[-2]} differ")
    if dtypes[0] is not dtypes[1]:
        raise DTypeError(f"matmul operands must share a dtype: {dtypes[0].name}, {dtypes[1].name}")
    if dtypes[0].is_bool:
        raise DTypeError("matmul does not take bool operands")
    batch = broadcast_shapes(a[:-2], b[:-2])
    return batch + (a[-2], b[-1]), dtypes[0]


def _norm(params, shapes, dtypes):
    x = shapes[0]
    if not dtypes[0].is_floating:
        raise DTypeError(f"normalization needs a floating-point input, got {dtypes[0].name}")
    for extra in shapes[1:]:
        if tuple(extra) != tuple(x[len(x) - params.axes:]):
            raise ShapeError(
                f"normalization weight/bias shape {extra} must equal the normalized shape "
                f"{x[len(x) - params.axes:]}"
            )
    return x, dtypes[0]


def _gather(params, shapes, dtypes):
    source, index = shapes
    if dtypes[1] not in (dt.int32, dt.int64):
        raise DTypeError(f"gather index must be int32 or int64, got {dtypes[1].name}")
    if len(source) != len(index):
        raise ShapeError(f"gather: index {index} must have as many dims as input {source}")
    for axis, (s, i) in enumerate(zip(source, index)):
        if axis != params.dim and i > s:
            raise ShapeError(f"gather: index {index} exceeds input {source} in dim {axis}")
    return index, dtypes[0]


def _index_select(params, shapes, dtypes):
    source, index = shapes
    if dtypes[1] not in (dt.int32, dt.int64):
        raise DTypeError(f"index must be int32 or int64, got {dtypes[1].name}")
    if len(index) != 1:
        raise ShapeError(f"index_select takes a 1-D index, got shape {index}")
    return source[: params.dim] + (index[0],) + source[params.dim + 1:], dtypes[0]


def _cat(params, shapes, dtypes):
    first = shapes[0]
    total = 0
    for shape, dtype in zip(shapes, dtypes):
        if dtype is not dtypes[0]:
            raise DTypeError("cat operands must share a dtype")
        if len(shape) != len(first) or any(
            a != b for axis, (a, b) in enumerate(zip(shape, first)) if axis != params.dim
        ):
            raise ShapeError(f"cat along dim {params.dim}: shapes {first} and {shape} differ")
        total += shape[params.dim]
    return first[: params.dim] + (total,) + first[params.dim + 1:], dtypes[0]


def _triangle(params, shapes, dtypes):
    if len(shapes[0]) < 2:
        raise ShapeError(f"tril/triu need 2+ dims, got {shapes[0]}")
    return shapes[0], dtypes[0]


def _pad(params, shapes, dtypes):
    shape = tuple(s + a + b for s, (a, b) in zip(shapes[0], params.widths))
    return shape, dtypes[0]


def _slice_assign(params, shapes, dtypes):
    target, value = shapes
    if dtypes[0] is not dtypes[1]:
        raise DTypeError(f"assigned value must be {dtypes[0].name}, got {dtypes[1].name}")
    from fuel.ir.layout import Layout

    region = Layout.contiguous(target).slice(params.starts, params.stops, params.steps).shape
    if tuple(value) != region:
        raise ShapeError(f"assigned value of shape {value} does not fit the region {region}")
    return target, dtypes[0]


def _index_copy(params, shapes, dtypes):
    target, index, source = shapes
    if dtypes[1] not in (dt.int32, dt.int64):
        raise DTypeError(f"index_copy index must be int32 or int64, got {dtypes[1].name}")
    if dtypes[0] is not dtypes[2]:
        raise DTypeError(f"index_copy source must be {dtypes[0].name}, got {dtypes[2].name}")
    expected = target[: params.dim] + tuple(index) + target[params.dim + 1:]
    if len(index) != 1 or tuple(source) != expected:
        raise ShapeError(f"index_copy: source {source} must be {expected} for a 1-D index "
                         f"{index} into {target} along dim {params.dim}")
    return target, dtypes[0]


def _view_reshape(params, shapes, dtypes):
    return params.shape, dtypes[0]


def _view_permute(params, shapes, dtypes):
    return tuple(shapes[0][d] for d in params.dims), dtypes[0]


def _view_slice(params, shapes, dtypes):
    from fuel.ir.layout import Layout

    return Layout.contiguous(shapes[0]).slice(params.starts, params.stops, params.steps).shape, \
        dtypes[0]


INFER_RULES: dict[OpKind, InferRule] = {
    OpKind.LOAD: _same,
    OpKind.COPY: _copy,
    OpKind.CONTIGUOUS: _same,
    OpKind.CAST: _cast,
    OpKind.RESHAPE: _view_reshape,
    OpKind.PERMUTE: _view_permute,
    OpKind.EXPAND: _view_reshape,
    OpKind.SLICE: _view_slice,
    OpKind.FULL: _generator,
    OpKind.ARANGE: _generator,
    **{op: _unary_float for op in UNARY_FLOAT_OPS},
    **{op: _same for op in UNARY_NUMERIC_OPS},
    **{op: _predicate for op in UNARY_PREDICATE_OPS},
    OpKind.BITWISE_NOT: _same,
    **{op: _binary for op in ARITHMETIC_OPS},
    **{op: _compare for op in COMPARE_OPS | LOGICAL_OPS},
    **{op: _bitwise for op in BITWISE_OPS},
    OpKind.WHERE: _where,
    OpKind.SUM: _reduce_accumulate,
    OpKind.PROD: _reduce_accumulate,
    OpKind.MAX: _reduce,
    OpKind.MIN: _reduce,
    OpKind.MEAN: _reduce_mean,
    OpKind.ARGMAX: _reduce_index,
    OpKind.ARGMIN: _reduce_index,
    OpKind.ALL: _reduce_predicate,
    OpKind.ANY: _reduce_predicate,
    OpKind.CUMSUM: _cumsum,
    OpKind.MATMUL: _matmul,
    OpKind.SOFTMAX: _unary_float,
    OpKind.LOG_SOFTMAX: _unary_float,
    OpKind.LAYER_NORM: _norm,
    OpKind.RMS_NORM: _norm,
    OpKind.GATHER: _gather,
    OpKind.INDEX_SELECT: _index_select,
    OpKind.CAT: _cat,
    OpKind.TRIL: _triangle,
    OpKind.TRIU: _triangle,
    OpKind.PAD: _pad,
    OpKind.SLICE_ASSIGN: _slice_assign,
    OpKind.INDEX_COPY: _index_copy,
}

_INFER_CACHE: dict[tuple, tuple[Shape, DType]] = {}


def infer(op: OpKind, params, shapes: tuple[Shape, ...], dtypes: tuple[DType, ...]):
    """(shape, dtype) of ``op`` applied to operands; cached per (op, params, shapes, dtypes)."""
    key = (op, params, shapes, dtypes)
    try:
        return _INFER_CACHE[key]
    except KeyError:
        pass
    except TypeError:  # unhashable params: compute without caching
        return INFER_RULES[op](params, shapes, dtypes)
    result = INFER_RULES[op](params, shapes, dtypes)
    if len(_INFER_CACHE) > 65536:
        _INFER_CACHE.clear()
    _INFER_CACHE[key] = result
    return result


def lookup_dtypes(op: OpKind, input_dtypes: tuple[DType, ...], output: DType):
    """The binding-table key dtypes: inputs in order then the output (CAT keys on one input)."""
    if op is OpKind.CAT:
        return (input_dtypes[0], output)
    return input_dtypes + (output,)


from fuel.ir import ops_nn  # noqa: E402, F401 - registers the ONNX ops' inference rules
