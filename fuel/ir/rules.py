"""Shape and dtype rules of the ops: each takes (params, input shapes, input dtypes) and returns
the output (shape, dtype), or raises ShapeError / DTypeError / InvalidArgument naming what is
wrong. Operand constraints (integer indices, bool masks) are declared in the op records and
checked before a rule runs. Pure metadata: the records in ``fuel.ir.ops`` name one rule each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from fuel.ir import dtype as dt
from fuel.ir.dtype import DType
from fuel.ir.errors import DTypeError, InvalidArgument, ShapeError
from fuel.ir.params import (
    GRID_SAMPLE_MODES,
    GRID_SAMPLE_PADDINGS,
    SCATTER_REDUCTIONS,
    AxisParams,
    ConvParams,
    EinsumParams,
    GridSampleParams,
    PoolParams,
    ReduceParams,
    ScatterParams,
    SortParams,
)

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


def same_as_input(params, shapes, dtypes):
    return shapes[0], dtypes[0]


def predicate(params, shapes, dtypes):
    return shapes[0], dt.bool_


def unary_float(params, shapes, dtypes):
    if not dtypes[0].is_floating:
        raise DTypeError(f"needs a floating-point input, got {dtypes[0].name}")
    return shapes[0], dtypes[0]


def binary(params, shapes, dtypes):
    if dtypes[0] is not dtypes[1]:
        raise DTypeError(f"operands must share a dtype, got {dtypes[0].name} and {dtypes[1].name}")
    return broadcast_shapes(*shapes), dtypes[0]


def compare(params, shapes, dtypes):
    return binary(params, shapes, dtypes)[0], dt.bool_


def bitwise(params, shapes, dtypes):
    if dtypes[0].is_floating:
        raise DTypeError(f"bitwise ops need integer or bool operands, got {dtypes[0].name}")
    return binary(params, shapes, dtypes)


def where_rule(params, shapes, dtypes):
    if dtypes[1] is not dtypes[2]:
        raise DTypeError(f"where() branches must share a dtype: {dtypes[1].name}, {dtypes[2].name}")
    return broadcast_shapes(*shapes), dtypes[1]


def cast_rule(params, shapes, dtypes):
    return shapes[0], params.dtype


def copy_rule(params, shapes, dtypes):
    return shapes[0], dtypes[0]


def generator(params, shapes, dtypes):
    shape = params.shape if hasattr(params, "shape") else (params.count,)
    return tuple(shape), params.dtype


def _reduced_shape(shape: Shape, params: ReduceParams) -> Shape:
    if params.keepdim:
        return tuple(1 if axis in params.dims else s for axis, s in enumerate(shape))
    return tuple(s for axis, s in enumerate(shape) if axis not in params.dims)


def reduce(params, shapes, dtypes):
    return _reduced_shape(shapes[0], params), dtypes[0]


def reduce_accumulate(params, shapes, dtypes):
    out = dt.int64 if not dtypes[0].is_floating else dtypes[0]
    return _reduced_shape(shapes[0], params), out


def reduce_mean(params, shapes, dtypes):
    if not dtypes[0].is_floating:
        raise DTypeError(f"mean() needs a floating-point input, got {dtypes[0].name}")
    return reduce(params, shapes, dtypes)


def reduce_index(params, shapes, dtypes):
    return _reduced_shape(shapes[0], params), dt.int64


def reduce_predicate(params, shapes, dtypes):
    return _reduced_shape(shapes[0], params), dt.bool_


def cumsum(params, shapes, dtypes):
    return shapes[0], (dtypes[0] if dtypes[0].is_floating else dt.int64)


def matmul(params, shapes, dtypes):
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


def norm(params, shapes, dtypes):
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


def gather(params, shapes, dtypes):
    source, index = shapes
    if len(source) != len(index):
        raise ShapeError(f"gather: index {index} must have as many dims as input {source}")
    for axis, (s, i) in enumerate(zip(source, index)):
        if axis != params.dim and i > s:
            raise ShapeError(f"gather: index {index} exceeds input {source} in dim {axis}")
    return index, dtypes[0]


def index_select(params, shapes, dtypes):
    source, index = shapes
    if len(index) != 1:
        raise ShapeError(f"index_select takes a 1-D index, got shape {index}")
    return source[: params.dim] + (index[0],) + source[params.dim + 1:], dtypes[0]


def cat_rule(params, shapes, dtypes):
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


def triangle(params, shapes, dtypes):
    if len(shapes[0]) < 2:
        raise ShapeError(f"tril/triu need 2+ dims, got {shapes[0]}")
    return shapes[0], dtypes[0]


def pad_rule(params, shapes, dtypes):
    shape = tuple(s + a + b for s, (a, b) in zip(shapes[0], params.widths))
    return shape, dtypes[0]


def slice_assign(params, shapes, dtypes):
    target, value = shapes
    if dtypes[0] is not dtypes[1]:
        raise DTypeError(f"assigned value must be {dtypes[0].name}, got {dtypes[1].name}")
    from fuel.ir.layout import Layout

    region = Layout.contiguous(target).slice(params.starts, params.stops, params.steps).shape
    if tuple(value) != region:
        raise ShapeError(f"assigned value of shape {value} does not fit the region {region}")
    return target, dtypes[0]


def index_copy(params, shapes, dtypes):
    target, index, source = shapes
    if dtypes[0] is not dtypes[2]:
        raise DTypeError(f"index_copy source must be {dtypes[0].name}, got {dtypes[2].name}")
    expected = target[: params.dim] + tuple(index) + target[params.dim + 1:]
    if len(index) != 1 or tuple(source) != expected:
        raise ShapeError(f"index_copy: source {source} must be {expected} for a 1-D index "
                         f"{index} into {target} along dim {params.dim}")
    return target, dtypes[0]


def view_reshape(params, shapes, dtypes):
    return params.shape, dtypes[0]


def view_permute(params, shapes, dtypes):
    return tuple(shapes[0][d] for d in params.dims), dtypes[0]


def view_slice(params, shapes, dtypes):
    from fuel.ir.layout import Layout

    return Layout.contiguous(shapes[0]).slice(params.starts, params.stops, params.steps).shape, \
        dtypes[0]




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
    if any(p < 0 for p in params.pads_begin + params.pads_end):
        raise InvalidArgument(f"{what}: pads must be non-negative, got "
                              f"{params.pads_begin + params.pads_end}")
    groups = getattr(params, "groups", 1)
    if groups < 1:
        raise InvalidArgument(f"{what}: groups must be positive, got {groups}")


def conv(params: ConvParams, shapes, dtypes):
    x, w = shapes
    if dtypes[0] is not dtypes[1]:
        raise DTypeError(f"conv operands must share a dtype: {dtypes[0].name}, {dtypes[1].name}")
    if len(x) < 3 or len(w) != len(x):
        raise ShapeError(f"conv needs input (N, C, ...) and weight (M, C/groups, ...) of the "
                         f"same rank, got {x} and {w}")
    rank = len(x) - 2
    _spatial_check(params, rank, "conv")
    if any(size < 1 for size in w[2:]):
        raise ShapeError(f"conv: the kernel {w} has an empty spatial dim")
    if x[1] != w[1] * params.groups or w[0] % params.groups:
        raise ShapeError(f"conv: input channels {x[1]} and weight {w} do not fit "
                         f"{params.groups} groups")
    spatial = tuple(
        conv_output_size(x[2 + i], w[2 + i], params.strides[i], params.pads_begin[i],
                         params.pads_end[i], params.dilations[i])
        for i in range(rank)
    )
    return (x[0], w[0]) + spatial, dtypes[0]


def qlinear_conv(params, shapes, dtypes):
    """QLINEAR_CONV: (x uint8/int8, w int8, bias int32 (M,), multiplier float32 (M,)) ->
    conv's shape, int8 or uint8 (``params.y_signed``)."""

    if len(shapes) != 4:
        raise ShapeError(f"qlinear_conv takes 4 operands, got {len(shapes)}")
    expected = ((dt.uint8, dt.int8), (dt.int8,), (dt.int32,), (dt.float32,))
    for name, dtype, allowed in zip(("x", "weight", "bias", "multiplier"), dtypes, expected):
        if dtype not in allowed:
            raise DTypeError(f"qlinear_conv: {name} must be {' or '.join(a.name for a in allowed)}"
                             f", got {dtype.name}")
    shape, _ = conv(params.conv, shapes[:2], (dtypes[0], dtypes[0]))
    for name, operand in (("bias", shapes[2]), ("multiplier", shapes[3])):
        if tuple(operand) != (shape[1],):
            raise ShapeError(f"qlinear_conv: {name} must have shape ({shape[1]},), got {operand}")
    return shape, dt.int8 if params.y_signed else dt.uint8


def qlinear_lookup(params, shapes, dtypes):
    """QLINEAR_LOOKUP: (x uint8/int8, table (256,) uint8/int8) -> x's shape, table's dtype."""
    if len(shapes) != 2:
        raise ShapeError(f"qlinear_lookup takes 2 operands, got {len(shapes)}")
    for name, dtype in zip(("x", "table"), dtypes):
        if dtype not in (dt.uint8, dt.int8):
            raise DTypeError(f"qlinear_lookup: {name} must be uint8 or int8, got {dtype.name}")
    if tuple(shapes[1]) != (256,):
        raise ShapeError(f"qlinear_lookup: the table must have shape (256,), got {shapes[1]}")
    return tuple(shapes[0]), dtypes[1]


def qlinear_binary(params, shapes, dtypes):
    """QLINEAR_BINARY: (a, b) of one 8-bit dtype, broadcast -> their dtype."""
    if len(shapes) != 2:
        raise ShapeError(f"qlinear_binary takes 2 operands, got {len(shapes)}")
    if dtypes[0] not in (dt.uint8, dt.int8) or dtypes[1] is not dtypes[0]:
        raise DTypeError(f"qlinear_binary: operands must both be uint8 or both int8, got "
                         f"{dtypes[0].name} and {dtypes[1].name}")
    return broadcast_shapes(*shapes), dtypes[0]


def qlinear_quantize(params, shapes, dtypes):
    """QLINEAR_QUANTIZE: (x float32,) -> x's shape, the params' target (uint8 or int8)."""
    if len(shapes) != 1:
        raise ShapeError(f"qlinear_quantize takes 1 operand, got {len(shapes)}")
    if dtypes[0] is not dt.float32:
        raise DTypeError(f"qlinear_quantize: x must be float32, got {dtypes[0].name}")
    if params.target not in (dt.uint8, dt.int8):
        raise DTypeError(f"qlinear_quantize: the target must be uint8 or int8, got "
                         f"{getattr(params.target, 'name', params.target)}")
    return tuple(shapes[0]), params.target


def qlinear_dequantize(params, shapes, dtypes):
    """QLINEAR_DEQUANTIZE: (x uint8/int8,) -> x's shape, float32."""
    if len(shapes) != 1:
        raise ShapeError(f"qlinear_dequantize takes 1 operand, got {len(shapes)}")
    if dtypes[0] not in (dt.uint8, dt.int8):
        raise DTypeError(f"qlinear_dequantize: x must be uint8 or int8, got {dtypes[0].name}")
    return tuple(shapes[0]), dt.float32


def conv_fused(params, shapes, dtypes):
    """CONV_FUSED: (x, w, bias[, residual][, slope]) -> conv's shape."""
    expected = 3 + params.residual + (params.activation == "prelu")
    if len(shapes) != expected:
        raise ShapeError(f"conv_fused takes {expected} operands, got {len(shapes)}")
    if params.input_scale:
        raise ShapeError("conv_fused takes no input scale (conv_blocked's)")
    shape, dtype = conv(params.conv, shapes[:2], dtypes[:2])
    if any(d is not dtype for d in dtypes):
        raise DTypeError(f"conv_fused operands must share a dtype: "
                         f"{', '.join(d.name for d in dtypes)}")
    if tuple(shapes[2]) != (shape[1],):
        raise ShapeError(f"bias must have shape ({shape[1]},), got {shapes[2]}")
    if params.residual and tuple(shapes[3]) != shape:
        raise ShapeError(f"residual must have the output's shape {shape}, "
                         f"got {shapes[3]}")
    if params.activation == "prelu" and tuple(shapes[-1]) != (shape[1],):
        raise ShapeError(f"prelu slope must have shape ({shape[1]},), "
                         f"got {shapes[-1]}")
    return shape, dtype


BLOCK = 16  # CONV_BLOCKED's channels a block (NCHW16c)


def whole_block_groups(groups: int, channels: int, outputs: int) -> bool:
    """Whether a grouped convolution's groups are whole blocks of BLOCK channels in and out
    (CONV_BLOCKED's grouped form)."""
    return groups > 1 and channels % (groups * BLOCK) == 0 and outputs % (groups * BLOCK) == 0


def _entry(conv, weight: tuple) -> bool:
    """A depthwise convolution a planar stem may be: 1x1, stride 1, no padding (a chain's
    entry scaling and shifting each channel on its way into the blocks)."""
    return (tuple(weight[2:]) == (1, 1) and all(s == 1 for s in conv.strides)
            and not any(conv.pads_begin) and not any(conv.pads_end))


def conv_blocked(params, shapes, dtypes):
    """CONV_BLOCKED: (x (N, C/16, H, W, 16), w (M, C, KH, KW), depthwise (C, 1, KH, KW)
    with groups C, or grouped (M, C/groups, KH, KW) with C/groups and M/groups multiples of
    16, bias (M,)[, residual][, input scale (N, C)]) -> (N, M/16, OH, OW, 16): conv_fused's
    on the planar shapes, with channels in blocks; a stem (one group, or depthwise 1x1 with
    stride 1 and no padding: a chain's entry with a channel affine) takes x planar
    (N, C, H, W); ``input_scale`` (one group, blocked x): x times scale[n, c] first."""
    residual = params.residual
    expected = 3 + residual + params.input_scale
    if len(shapes) != expected:
        raise ShapeError(f"conv_blocked takes {expected} operands, got {len(shapes)}")
    x = tuple(shapes[0])
    stem = len(x) == 4  # a chain's first link on a planar value (a stem)
    if not (stem or (len(x) == 5 and x[4] == BLOCK)) or len(shapes[1]) != 4:
        raise ShapeError(f"conv_blocked needs x (N, C/{BLOCK}, H, W, {BLOCK}) or a planar "
                         f"stem's (N, C, H, W), and a 2-d weight, got {x} and {shapes[1:2]}")
    planar = x if stem else (x[0], x[1] * BLOCK, x[2], x[3])
    groups = params.conv.groups
    depthwise = groups == planar[1] == shapes[1][0] and shapes[1][1] == 1 and (
        not stem or _entry(params.conv, shapes[1]))
    grouped = not stem and whole_block_groups(groups, planar[1], shapes[1][0])
    if (groups != 1 and not depthwise and not grouped) or params.activation == "prelu":
        raise ShapeError("conv_blocked takes one group, a depthwise weight (groups == "
                         f"channels) or groups of whole blocks of {BLOCK} channels in and "
                         "out, and no prelu")
    if params.input_scale and (stem or groups != 1 or tuple(shapes[-1]) != planar[:2]
                               or dtypes[-1] is not dtypes[0]):
        raise ShapeError(f"conv_blocked's input scale must be {planar[:2]} for one group on "
                         f"blocked channels, got {tuple(shapes[-1])}")
    shape, dtype = conv_fused(replace(params, residual=False, input_scale=False),
                              [planar, *shapes[1:3]], dtypes[:3])
    if shape[1] % BLOCK:
        raise ShapeError(f"conv_blocked: {shape[1]} output channels are not blocks of {BLOCK}")
    blocked = (shape[0], shape[1] // BLOCK, shape[2], shape[3], BLOCK)
    if residual and (tuple(shapes[3]) != blocked or dtypes[3] is not dtype):
        raise ShapeError(f"residual must have the output's blocked shape {blocked}, "
                         f"got {shapes[3]}")
    return blocked, dtype


def conv_blocked_cat(params, shapes, dtypes):
    """CONV_BLOCKED_CAT: per part (x, weight, bias) conv_blocked's output, the parts' joined
    along dim 1 (their channel blocks); every part's batch, height and width alike."""
    parts = params.parts
    if len(parts) < 2 or len(shapes) != 3 * len(parts):
        raise ShapeError(f"conv_blocked_cat takes 3 operands for each of at least 2 parts, "
                         f"got {len(shapes)} for {len(parts)}")
    if any(part.residual for part in parts):
        raise ShapeError("conv_blocked_cat's parts take no residual")
    outs = [conv_blocked(part, shapes[3 * k:3 * k + 3], dtypes[3 * k:3 * k + 3])
            for k, part in enumerate(parts)]
    (first, dtype) = outs[0]
    for shape, other in outs[1:]:
        if shape[0] != first[0] or shape[2:] != first[2:] or other is not dtype:
            raise ShapeError(f"conv_blocked_cat's parts must differ only in their channel "
                             f"blocks, got {first} and {shape}")
    return (first[0], sum(shape[1] for shape, _ in outs), *first[2:]), dtype


def conv_transpose(params: ConvParams, shapes, dtypes):
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


def pool(params: PoolParams, shapes, dtypes):
    x = shapes[0]
    rank = len(params.kernel)
    if len(x) < rank + 1:
        raise ShapeError(f"pooling a {rank}-d window needs at least {rank + 1} dims, got {x}")
    _spatial_check(params, rank, "pool")
    if any(size < 1 for size in params.kernel):
        raise InvalidArgument(f"pool: kernel sizes must be positive, got {params.kernel}")
    lead = len(x) - rank
    spatial = tuple(
        conv_output_size(x[lead + i], params.kernel[i], params.strides[i], params.pads_begin[i],
                         params.pads_end[i], params.dilations[i], params.ceil_mode)
        for i in range(rank)
    )
    return tuple(x[:lead]) + spatial, dtypes[0]


def pool_indices(params, shapes, dtypes):
    return pool(params, shapes, dtypes)[0], dt.int64


def argsort(params: SortParams, shapes, dtypes):
    if not 0 <= params.dim < max(len(shapes[0]), 1):
        raise InvalidArgument(f"argsort dim {params.dim} is out of range for {shapes[0]}")
    return shapes[0], dt.int64


def cumprod(params: AxisParams, shapes, dtypes):
    if dtypes[0].is_bool:
        raise DTypeError("cumprod does not take bool input")
    return shapes[0], dtypes[0]


def _scatter_common(params: ScatterParams, dtypes) -> None:
    if params.reduction not in SCATTER_REDUCTIONS:
        raise InvalidArgument(f"scatter reduction must be one of {SCATTER_REDUCTIONS}, "
                              f"got {params.reduction!r}")
    if dtypes[0] is not dtypes[2]:
        raise DTypeError(f"scatter updates must be {dtypes[0].name}, got {dtypes[2].name}")


def scatter_elements(params: ScatterParams, shapes, dtypes):
    data, index, updates = shapes
    _scatter_common(params, dtypes)
    if tuple(index) != tuple(updates) or len(index) != len(data):
        raise ShapeError(f"scatter_elements: indices {index} and updates {updates} must share "
                         f"a shape with as many dims as data {data}")
    if not 0 <= params.dim < max(len(data), 1):
        raise InvalidArgument(f"scatter dim {params.dim} is out of range for {data}")
    return data, dtypes[0]


def scatter_nd(params: ScatterParams, shapes, dtypes):
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


def einsum(params: EinsumParams, shapes, dtypes):
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


def grid_sample(params: GridSampleParams, shapes, dtypes):
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


def det(params, shapes, dtypes):
    x = shapes[0]
    if len(x) < 2 or x[-1] != x[-2]:
        raise ShapeError(f"det needs square matrices in the last two dims, got {x}")
    if not dtypes[0].is_floating:
        raise DTypeError(f"det needs a floating-point input, got {dtypes[0].name}")
    return tuple(x[:-2]), dtypes[0]


def bitcast(params, shapes, dtypes):
    if dtypes[0].itemsize != params.dtype.itemsize:
        raise DTypeError(f"bitcast needs types of one size, got {dtypes[0].name} "
                         f"({dtypes[0].itemsize} bytes) and {params.dtype.name} "
                         f"({params.dtype.itemsize} bytes)")
    return shapes[0], params.dtype


def integer_binary(params, shapes, dtypes):
    if not dtypes[0].is_integer:
        raise DTypeError(f"needs integer operands, got {dtypes[0].name}")
    return binary(params, shapes, dtypes)


def numeric_binary(params, shapes, dtypes):
    if dtypes[0].is_bool:
        raise DTypeError("needs numeric operands, got bool")
    return binary(params, shapes, dtypes)




# ------------------------------------------------------------------ block-quantized weights
def quantized_rows(shape, dtype, role: str) -> None:
    """A quantized operand has 1+ dims and a last dim of whole blocks; ShapeError otherwise."""
    if not shape:
        raise ShapeError(f"the {role} ({dtype.name}) needs at least one dim, got a scalar")
    if shape[-1] % dtype.block_size:
        raise ShapeError(f"the {role}'s last dim ({shape[-1]}) is not a whole number of "
                         f"{dtype.name} blocks of {dtype.block_size}")


def dequantize(params, shapes, dtypes):
    quantized_rows(shapes[0], dtypes[0], "dequantized tensor")
    return shapes[0], dt.float32


def quantized_matmul(params, shapes, dtypes):
    x, weight = shapes
    if len(weight) != 2:
        raise ShapeError(f"quantized_matmul's weight must be (n, k), got shape {weight}")
    quantized_rows(weight, dtypes[1], "weight")
    if not x or x[-1] != weight[1]:
        raise ShapeError(f"quantized_matmul of {x} by a weight of {weight}: the input's last "
                         f"dim must be the weight's k ({weight[1]})")
    return x[:-1] + (weight[0],), dt.float32


# round_int16_blocks' block along the last dim and its largest code (ops.ACTIVATION_BLOCK and
# ops.ACTIVATION_CODE_MAX are these constants).
ACTIVATION_BLOCK = 32
ACTIVATION_CODE_MAX = 32767
ACTIVATION_CODE_MAX_INT8 = 127  # round_int8_blocks' largest code (the serving precision)


def int16_blocks(params, shapes, dtypes):
    x = shapes[0]
    if not x or x[-1] % ACTIVATION_BLOCK:
        raise ShapeError(f"round_int16_blocks needs a last dim that is a multiple of "
                         f"{ACTIVATION_BLOCK}, got shape {x}")
    return x, dt.float32


def int8_blocks(params, shapes, dtypes):
    x = shapes[0]
    if not x or x[-1] % ACTIVATION_BLOCK:
        raise ShapeError(f"round_int8_blocks needs a last dim that is a multiple of "
                         f"{ACTIVATION_BLOCK}, got shape {x}")
    return x, dt.float32


def quantized_embedding(params, shapes, dtypes):
    table, index = shapes
    if len(table) != 2:
        raise ShapeError(f"quantized_embedding's table must be (rows, k), got shape {table}")
    if len(index) != 1:
        raise ShapeError(f"quantized_embedding takes a 1-D index, got shape {index}")
    quantized_rows(table, dtypes[0], "table")
    return (index[0], table[1]), dt.float32


def paged_attention(params, shapes, dtypes):
    """q (T, heads, d); pools (blocks, block_size, kv_heads, d); table (T, M); lengths (T,)."""
    q, keys, values, table, lengths = shapes
    if len(q) != 3:
        raise ShapeError(f"paged_attention's q must be (rows, heads, head_dim), got {q}")
    if len(keys) != 4 or keys != values:
        raise ShapeError(f"paged_attention's key and value pools must share one shape "
                         f"(blocks, block_size, kv_heads, head_dim), got {keys} and {values}")
    rows, heads, dim = q
    if keys[3] != dim or keys[2] < 1 or heads % keys[2]:
        raise ShapeError(f"paged_attention: q {q} does not match pools {keys} (head_dim must "
                         f"agree and heads be a multiple of kv_heads)")
    if len(table) != 2 or table[0] != rows or lengths != (rows,):
        raise ShapeError(f"paged_attention needs a (rows, M) block table and (rows,) lengths "
                         f"for {rows} rows, got {table} and {lengths}")
    return q, dtypes[0]
