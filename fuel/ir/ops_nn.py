"""Params and shape/dtype inference of the ops added for ONNX (convolution, pooling, sorting,
scatter, einsum, the inverse trigonometric and integer ops). They register into INFER_RULES.
"""

from __future__ import annotations

from dataclasses import dataclass

from fuel.ir import dtype as dt
from fuel.ir.errors import DTypeError, InvalidArgument, ShapeError
from fuel.ir.ops import (
    INFER_RULES,
    AxisParams,
    OpKind,
    _binary,
    _unary_float,
)

NN_UNARY_FLOAT_OPS = frozenset({
    OpKind.TAN, OpKind.ASIN, OpKind.ACOS, OpKind.ATAN, OpKind.SINH, OpKind.COSH,
    OpKind.ASINH, OpKind.ACOSH, OpKind.ATANH,
})
NN_INTEGER_BINARY_OPS = frozenset({
    OpKind.INT_DIV, OpKind.BITSHIFT_LEFT, OpKind.BITSHIFT_RIGHT,
})
POOL_OPS = frozenset({OpKind.MAX_POOL, OpKind.MAX_POOL_INDICES, OpKind.AVG_POOL})


# ----------------------------------------------------------------------------- params


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


# ----------------------------------------------------------------------------- inference


def conv_output_size(size: int, kernel: int, stride: int, begin: int, end: int,
                     dilation: int, ceil_mode: bool = False) -> int:
    """Output length of a sliding window (the ceil rule drops a window that would start in
    the trailing padding)."""
    span = (kernel - 1) * dilation + 1
    room = size + begin + end - span
    if room < 0:
        return 0
    if not ceil_mode:
        return room // stride + 1
    count = -(-room // stride) + 1
    if (count - 1) * stride >= size + begin:
        count -= 1
    return count


def _spatial_check(params, rank: int, what: str) -> None:
    fields = [params.strides, params.pads_begin, params.pads_end, params.dilations]
    if any(len(f) != rank for f in fields):
        raise ShapeError(f"{what}: strides/pads/dilations must have {rank} entries "
                         f"(one per spatial dim)")
    if any(s <= 0 for s in params.strides) or any(d <= 0 for d in params.dilations):
        raise InvalidArgument(f"{what}: strides and dilations must be positive")


def _conv(params: ConvParams, shapes, dtypes):
    x, w = shapes
    if dtypes[0] is not dtypes[1]:
        raise DTypeError(f"conv operands must share a dtype: {dtypes[0].name}, {dtypes[1].name}")
    if len(x) < 3 or len(w) != len(x):
        raise ShapeError(f"conv needs input (N, C, ...) and weight (M, C/groups, ...) of the "
                         f"same rank, got {x} and {w}")
    rank = len(x) - 2
    _spatial_check(params, rank, "conv")
    if x[1] != w[1] * params.groups or w[0] % params.groups:
        raise ShapeError(f"conv: input channels {x[1]} and weight {w} do not fit "
                         f"{params.groups} groups")
    spatial = tuple(
        conv_output_size(x[2 + i], w[2 + i], params.strides[i], params.pads_begin[i],
                         params.pads_end[i], params.dilations[i])
        for i in range(rank)
    )
    return (x[0], w[0]) + spatial, dtypes[0]


def _conv_transpose(params: ConvParams, shapes, dtypes):
    x, w = shapes
    if dtypes[0] is not dtypes[1]:
        raise DTypeError("conv_transpose operands must share a dtype")
    if len(x) < 3 or len(w) != len(x):
        raise ShapeError(f"conv_transpose needs input (N, C, ...) and weight "
                         f"(C, M/groups, ...) of the same rank, got {x} and {w}")
    rank = len(x) - 2
    _spatial_check(params, rank, "conv_transpose")
    if x[1] != w[0] or w[0] % params.groups:
        raise ShapeError(f"conv_transpose: input channels {x[1]} and weight {w} do not fit "
                         f"{params.groups} groups")
    padding = params.output_padding or (0,) * rank
    spatial = []
    for i in range(rank):
        size = (params.strides[i] * (x[2 + i] - 1) + padding[i]
                + (w[2 + i] - 1) * params.dilations[i] + 1
                - params.pads_begin[i] - params.pads_end[i])
        if size < 0:
            raise ShapeError(f"conv_transpose: padding leaves a negative output size in dim "
                             f"{2 + i}")
        spatial.append(size)
    return (x[0], w[1] * params.groups) + tuple(spatial), dtypes[0]


def _pool(params: PoolParams, shapes, dtypes):
    x = shapes[0]
    rank = len(params.kernel)
    if len(x) < rank + 1:
        raise ShapeError(f"pooling a {rank}-d window needs at least {rank + 1} dims, got {x}")
    _spatial_check(params, rank, "pool")
    lead = len(x) - rank
    spatial = tuple(
        conv_output_size(x[lead + i], params.kernel[i], params.strides[i], params.pads_begin[i],
                         params.pads_end[i], params.dilations[i], params.ceil_mode)
        for i in range(rank)
    )
    return tuple(x[:lead]) + spatial, dtypes[0]


def _pool_indices(params, shapes, dtypes):
    return _pool(params, shapes, dtypes)[0], dt.int64


def _argsort(params: SortParams, shapes, dtypes):
    if not 0 <= params.dim < max(len(shapes[0]), 1):
        raise InvalidArgument(f"argsort dim {params.dim} is out of range for {shapes[0]}")
    return shapes[0], dt.int64


def _cumprod(params: AxisParams, shapes, dtypes):
    if dtypes[0].is_bool:
        raise DTypeError("cumprod does not take bool input")
    return shapes[0], dtypes[0]


def _scatter_common(params: ScatterParams, dtypes) -> None:
    if params.reduction not in SCATTER_REDUCTIONS:
        raise InvalidArgument(f"scatter reduction must be one of {SCATTER_REDUCTIONS}, "
                              f"got {params.reduction!r}")
    if dtypes[1] not in (dt.int32, dt.int64):
        raise DTypeError(f"scatter indices must be int32 or int64, got {dtypes[1].name}")
    if dtypes[0] is not dtypes[2]:
        raise DTypeError(f"scatter updates must be {dtypes[0].name}, got {dtypes[2].name}")


def _scatter_elements(params: ScatterParams, shapes, dtypes):
    data, index, updates = shapes
    _scatter_common(params, dtypes)
    if tuple(index) != tuple(updates) or len(index) != len(data):
        raise ShapeError(f"scatter_elements: indices {index} and updates {updates} must share "
                         f"a shape with as many dims as data {data}")
    if not 0 <= params.dim < max(len(data), 1):
        raise InvalidArgument(f"scatter dim {params.dim} is out of range for {data}")
    return data, dtypes[0]


def _scatter_nd(params: ScatterParams, shapes, dtypes):
    data, index, updates = shapes
    _scatter_common(params, dtypes)
    if not index or index[-1] > len(data):
        raise ShapeError(f"scatter_nd: indices {index} need a last dim of at most {len(data)}")
    expected = tuple(index[:-1]) + tuple(data[index[-1]:])
    if tuple(updates) != expected:
        raise ShapeError(f"scatter_nd: updates must have shape {expected}, got {updates}")
    return data, dtypes[0]


def parse_einsum(equation: str) -> tuple[list[str], str]:
    """Operand subscripts and the output subscripts of an explicit einsum equation."""
    text = equation.replace(" ", "")
    if "->" not in text:
        raise InvalidArgument(f"einsum equation {equation!r} must be explicit (contain '->')")
    left, output = text.split("->")
    terms = left.split(",")
    for term in terms + [output]:
        if not all(c.isalpha() for c in term):
            raise InvalidArgument(f"einsum equation {equation!r}: only letters are allowed "
                                  "(expand '...' first)")
    return terms, output


def _einsum(params: EinsumParams, shapes, dtypes):
    terms, output = parse_einsum(params.equation)
    if len(terms) != len(shapes):
        raise ShapeError(f"einsum {params.equation!r} takes {len(terms)} operands, got "
                         f"{len(shapes)}")
    sizes: dict[str, int] = {}
    for term, shape, dtype in zip(terms, shapes, dtypes):
        if dtype is not dtypes[0]:
            raise DTypeError("einsum operands must share a dtype")
        if len(term) != len(shape):
            raise ShapeError(f"einsum term {term!r} does not match operand shape {shape}")
        for letter, size in zip(term, shape):
            known = sizes.setdefault(letter, size)
            if known != size:
                raise ShapeError(f"einsum index {letter!r} has sizes {known} and {size}")
    if len(set(output)) != len(output) or any(c not in sizes for c in output):
        raise ShapeError(f"einsum output {output!r} must name distinct input indices")
    if dtypes[0].is_bool:
        raise DTypeError("einsum does not take bool operands")
    return tuple(sizes[c] for c in output), dtypes[0]


def _grid_sample(params: GridSampleParams, shapes, dtypes):
    x, grid = shapes
    if params.mode not in GRID_SAMPLE_MODES or params.padding_mode not in GRID_SAMPLE_PADDINGS:
        raise InvalidArgument(f"grid_sample mode {params.mode!r} / padding "
                              f"{params.padding_mode!r} is not one of {GRID_SAMPLE_MODES} / "
                              f"{GRID_SAMPLE_PADDINGS}")
    if len(x) < 3 or len(grid) != len(x) or grid[-1] != len(x) - 2 or grid[0] != x[0]:
        raise ShapeError(f"grid_sample needs input (N, C, D1..Dr) and grid (N, O1..Or, r), got "
                         f"{x} and {grid}")
    if not dtypes[0].is_floating or dtypes[1] is not dtypes[0]:
        raise DTypeError(f"grid_sample needs floating input and grid of one dtype, got "
                         f"{dtypes[0].name} and {dtypes[1].name}")
    return (x[0], x[1]) + tuple(grid[1:-1]), dtypes[0]


def _det(params, shapes, dtypes):
    x = shapes[0]
    if len(x) < 2 or x[-1] != x[-2]:
        raise ShapeError(f"det needs square matrices in the last two dims, got {x}")
    if not dtypes[0].is_floating:
        raise DTypeError(f"det needs a floating-point input, got {dtypes[0].name}")
    return tuple(x[:-2]), dtypes[0]


def _bitcast(params, shapes, dtypes):
    if dtypes[0].itemsize != params.dtype.itemsize:
        raise DTypeError(f"bitcast needs types of one size, got {dtypes[0].name} "
                         f"({dtypes[0].itemsize} bytes) and {params.dtype.name} "
                         f"({params.dtype.itemsize} bytes)")
    return shapes[0], params.dtype


def _integer_binary(params, shapes, dtypes):
    if not dtypes[0].is_integer:
        raise DTypeError(f"needs integer operands, got {dtypes[0].name}")
    return _binary(params, shapes, dtypes)


def _numeric_binary(params, shapes, dtypes):
    if dtypes[0].is_bool:
        raise DTypeError("needs numeric operands, got bool")
    return _binary(params, shapes, dtypes)


INFER_RULES.update({
    **{op: _unary_float for op in NN_UNARY_FLOAT_OPS},
    **{op: _integer_binary for op in NN_INTEGER_BINARY_OPS},
    OpKind.FMOD: _numeric_binary,
    OpKind.CONV: _conv,
    OpKind.CONV_TRANSPOSE: _conv_transpose,
    OpKind.MAX_POOL: _pool,
    OpKind.MAX_POOL_INDICES: _pool_indices,
    OpKind.AVG_POOL: _pool,
    OpKind.ARGSORT: _argsort,
    OpKind.CUMPROD: _cumprod,
    OpKind.SCATTER_ELEMENTS: _scatter_elements,
    OpKind.SCATTER_ND: _scatter_nd,
    OpKind.EINSUM: _einsum,
    OpKind.GRID_SAMPLE: _grid_sample,
    OpKind.DET: _det,
    OpKind.BITCAST: _bitcast,
})
