"""Gradient rules: one vector-Jacobian product per differentiable op, keyed by OpKind.

``@gradient(OpKind.X)`` declares the rule of X once. A rule takes ``(v, g)``: ``v`` the node's
values (``v.x``: its inputs as Tensors, ``v.y``: its output, ``v.params``) and ``g`` the
gradient of the output; it returns one gradient per input (None where an input has none),
each of the input's shape. Rules are written with front-end ops, so the backward pass is
ordinary lazy graph: planned, fused and freed by liveness like the forward, and itself
differentiable (double backward) where its ops are.

An op without a rule differentiates through its decomposition (``fuel/graph/decompositions``:
the composite elementwise ops through their registry expression, layer_norm, pooling,
einsum, ...). ``NOT_DIFFERENTIABLE`` ops, and ops with neither, raise a FuelError naming
the op and the user's line that built it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from fuel.frontend import tape
from fuel.frontend.base import TensorBase, wrap
from fuel.frontend.build import cast, constant, make
from fuel.graph.node import Node
from fuel.ir.errors import FuelError
from fuel.ir.ops import (
    NO_PARAMS,
    AxisParams,
    CopyParams,
    IndexCopyParams,
    OpKind,
    PermuteParams,
    ReduceParams,
    ScatterParams,
    ShapeParams,
    SliceAssignParams,
    SliceParams,
)

Rule = Callable[["Values", TensorBase], tuple]
RULES: dict[OpKind, Rule] = {}
_local_passes = [0]  # decompositions' local backward passes under way (nested)

# Ops whose output has no useful gradient and which say so, rather than differentiating through
# a decomposition whose steps would (random draws, integer-valued maps, quantized codes).
NOT_DIFFERENTIABLE = frozenset({
    OpKind.BITCAST, OpKind.DEQUANTIZE, OpKind.QUANTIZED_MATMUL, OpKind.QUANTIZED_EMBEDDING,
    OpKind.ROUND_INT16_BLOCKS, OpKind.GRID_SAMPLE, OpKind.DET, OpKind.SCATTER_ND,
    OpKind.QUANTIZED_MATMUL_INT8, OpKind.ROUND_INT8_BLOCKS,
    OpKind.TREE_ENSEMBLE, OpKind.TFIDF, OpKind.LABEL_ENCODE, OpKind.FUSED,
})


def gradient(*kinds: OpKind):
    """Decorator: declare the function as the gradient rule of every op in ``kinds``."""

    def register(rule: Rule) -> Rule:
        for kind in kinds:
            if kind in RULES:
                raise ValueError(f"{kind!r} has two gradient rules")
            RULES[kind] = rule
        return rule

    return register


class Values:
    """What a rule reads: the node's inputs and output as Tensors, its params and op."""

    __slots__ = ("node", "inputs", "params")

    def __init__(self, node: Node, inputs: tuple[Node, ...]) -> None:
        self.node = node
        self.inputs = inputs
        self.params = node.params

    @property
    def x(self) -> list[TensorBase]:
        return [wrap(i) for i in self.inputs]

    @property
    def y(self) -> TensorBase:
        return wrap(self.node)

    def needs(self, position: int) -> bool:
        """Whether input ``position`` wants a gradient (it requires grad; inside a
        decomposition's local pass every input may): a rule may skip building the others' (a
        first layer's input gradient)."""
        return _local_passes[0] > 0 or tape.record_of(self.inputs[position]) is not None

    def zeros(self, shape, dtype=None) -> TensorBase:
        node = self.node
        return wrap(constant(0.0 if (dtype or node.dtype).is_floating else 0,
                             dtype or node.dtype, node.device, tuple(shape)))


# ------------------------------------------------------------------ movement and views
@gradient(OpKind.CONTIGUOUS)
def _identity(v: Values, g):
    return (g,)


@gradient(OpKind.COPY)
def _copy(v: Values, g):
    device = v.inputs[0].device
    return (make(OpKind.COPY, (g._node,), CopyParams(device), device=device),)


@gradient(OpKind.CAST)
def _cast(v: Values, g):
    source = v.inputs[0]
    return (wrap(cast(g._node, source.dtype)) if source.dtype.is_floating else None,)


def reshaped(g: TensorBase, shape: tuple[int, ...]) -> TensorBase:
    """``g`` under ``shape`` (same element count): the RESHAPE node built directly, without
    the user-facing method's checks."""
    return g if g.shape == shape else make(OpKind.RESHAPE, (g._node,), ShapeParams(shape))


@gradient(OpKind.RESHAPE)
def _reshape(v: Values, g):
    return (reshaped(g, v.inputs[0].shape),)


@gradient(OpKind.PERMUTE)
def _permute(v: Values, g):
    dims = v.params.dims
    inverse = [0] * len(dims)
    for position, dim in enumerate(dims):
        inverse[dim] = position
    return (g.permute(*inverse),)


def unbroadcast(g: TensorBase, shape: tuple[int, ...]) -> TensorBase:
    """``g`` summed over the dims a broadcast to its shape added or stretched from 1."""
    lead = g.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(lead + i for i, size in enumerate(shape)
                                      if size == 1 and g.shape[lead + i] != 1)
    if dims:
        g = make(OpKind.SUM, (g._node,), ReduceParams(dims, True))
    return reshaped(g, tuple(shape))


@gradient(OpKind.EXPAND)
def _expand(v: Values, g):
    return (unbroadcast(g, v.inputs[0].shape),)


@gradient(OpKind.SLICE)
def _slice(v: Values, g):
    p = v.params
    base = v.zeros(v.inputs[0].shape, g.dtype)
    return (make(OpKind.SLICE_ASSIGN, (base._node, g._node),
                 SliceAssignParams(p.starts, p.stops, p.steps, False)),)


# ------------------------------------------------------------------ unary elementwise
def _unary(kind: OpKind, derivative: Callable[[TensorBase, TensorBase], TensorBase]) -> None:
    """A rule ``g * derivative(x, y)``."""

    def rule(v: Values, g):
        return (g * derivative(v.x[0], v.y),)

    rule.__name__ = f"_{kind.value}"
    gradient(kind)(rule)


_unary(OpKind.EXP, lambda x, y: y)
_unary(OpKind.EXPM1, lambda x, y: y + 1.0)
_unary(OpKind.LOG, lambda x, y: x.reciprocal())
_unary(OpKind.LOG1P, lambda x, y: (x + 1.0).reciprocal())
_unary(OpKind.SQRT, lambda x, y: 0.5 / y)
_unary(OpKind.RSQRT, lambda x, y: -0.5 * y * y * y)
_unary(OpKind.RECIPROCAL, lambda x, y: -(y * y))
_unary(OpKind.SQUARE, lambda x, y: 2.0 * x)
_unary(OpKind.SIN, lambda x, y: x.cos())
_unary(OpKind.COS, lambda x, y: -x.sin())
_unary(OpKind.TAN, lambda x, y: 1.0 + y * y)
_unary(OpKind.ASIN, lambda x, y: (1.0 - x * x).rsqrt())
_unary(OpKind.ACOS, lambda x, y: -(1.0 - x * x).rsqrt())
_unary(OpKind.ATAN, lambda x, y: (1.0 + x * x).reciprocal())
_unary(OpKind.SINH, lambda x, y: x.cosh())
_unary(OpKind.COSH, lambda x, y: x.sinh())
_unary(OpKind.TANH, lambda x, y: 1.0 - y * y)
_unary(OpKind.ASINH, lambda x, y: (x * x + 1.0).rsqrt())
_unary(OpKind.ACOSH, lambda x, y: (x * x - 1.0).rsqrt())
_unary(OpKind.ATANH, lambda x, y: (1.0 - x * x).reciprocal())
_unary(OpKind.ERF, lambda x, y: (2.0 / math.sqrt(math.pi)) * (-(x * x)).exp())
_unary(OpKind.SIGMOID, lambda x, y: y * (1.0 - y))
_unary(OpKind.ABS, lambda x, y: x.sign())


@gradient(OpKind.NEG)
def _neg(v: Values, g):
    return (-g,)


@gradient(OpKind.SILU)
def _silu(v: Values, g):
    x = v.x[0]
    s = x.sigmoid()
    return (g * s * (1.0 + x * (1.0 - s)),)


@gradient(OpKind.GELU)
def _gelu(v: Values, g):
    x = v.x[0]
    cdf = 0.5 * (1.0 + (x * (1.0 / math.sqrt(2.0))).erf())
    pdf = (-0.5 * x * x).exp() * (1.0 / math.sqrt(2.0 * math.pi))
    return (g * (cdf + x * pdf),)


@gradient(OpKind.RELU)
def _relu(v: Values, g):
    y = v.y
    return (wrap(_where(y > 0.0, g, v.zeros(g.shape, g.dtype))),)


@gradient(OpKind.FLOOR, OpKind.CEIL, OpKind.ROUND, OpKind.SIGN)
def _step(v: Values, g):
    """Piecewise constant: zero almost everywhere (torch's convention)."""
    return (v.zeros(g.shape, g.dtype),)


def _where(condition: TensorBase, a: TensorBase, b: TensorBase) -> Node:
    return make(OpKind.WHERE, (condition._node, a._node, b._node), NO_PARAMS)._node


# ------------------------------------------------------------------ binary elementwise
@gradient(OpKind.ADD)
def _add(v: Values, g):
    return (g, g)


@gradient(OpKind.SUB)
def _sub(v: Values, g):
    return (g, -g)


@gradient(OpKind.MUL)
def _mul(v: Values, g):
    a, b = v.x
    return (g * b, g * a)


@gradient(OpKind.DIV)
def _div(v: Values, g):
    a, b = v.x
    return (g / b, -g * a / (b * b))


@gradient(OpKind.REMAINDER)
def _remainder(v: Values, g):
    a, b = v.x
    return (g, -g * (a / b).floor())


@gradient(OpKind.FMOD)
def _fmod(v: Values, g):
    a, b = v.x
    q = a / b
    truncated = wrap(_where(q < 0.0, q.ceil(), q.floor()))
    return (g, -g * truncated)


@gradient(OpKind.POW)
def _pow(v: Values, g):
    a, b = v.x
    da = g * b * a ** (b - 1.0)
    db = g * v.y * a.log()
    zero = v.zeros(g.shape, g.dtype)
    db = wrap(_where((a == 0.0).logical_and(b >= 0.0), zero, db))
    return (da, db)


def _extreme(v: Values, g, larger: bool):
    """maximum/minimum: the gradient goes to the chosen operand, split in half on ties."""
    a, b = v.x
    zero = v.zeros(g.shape, g.dtype)
    half = wrap(_where(a == b, g * 0.5, g))
    a_loses = a < b if larger else a > b
    b_loses = a > b if larger else a < b
    return (wrap(_where(a_loses, zero, half)), wrap(_where(b_loses, zero, half)))


@gradient(OpKind.MAXIMUM)
def _maximum(v: Values, g):
    return _extreme(v, g, True)


@gradient(OpKind.MINIMUM)
def _minimum(v: Values, g):
    return _extreme(v, g, False)


@gradient(OpKind.WHERE)
def _select(v: Values, g):
    condition = v.x[0]
    zero = v.zeros(g.shape, g.dtype)
    return (None, wrap(_where(condition, g, zero)), wrap(_where(condition, zero, g)))


# ------------------------------------------------------------------ reductions and scans
def _kept(g: TensorBase, v: Values) -> TensorBase:
    """``g`` with the reduced dims back as size 1 (the keepdim shape)."""
    params: ReduceParams = v.params
    shape = list(v.inputs[0].shape)
    for dim in params.dims:
        shape[dim] = 1
    return g.reshape(tuple(shape))


@gradient(OpKind.SUM)
def _sum(v: Values, g):
    source = v.inputs[0]
    grad = _kept(g, v).expand(*source.shape)
    return (grad.to(source.dtype) if source.dtype is not grad.dtype else grad,)


@gradient(OpKind.MEAN)
def _mean(v: Values, g):
    source = v.inputs[0]
    count = 1
    for dim in v.params.dims:
        count *= source.shape[dim]
    return ((_kept(g, v) * (1.0 / max(count, 1))).expand(*source.shape),)


def _reduced_extreme(v: Values, g):
    """amax/amin: the gradient shared evenly by the elements equal to the extreme (torch)."""
    x = v.x[0]
    y = _kept(v.y, v)
    chosen = (x == y).to(x.dtype)
    count = chosen.sum(v.params.dims, keepdim=True)
    return (chosen * (_kept(g, v) / count),)


gradient(OpKind.MAX, OpKind.MIN)(_reduced_extreme)


@gradient(OpKind.CUMSUM)
def _cumsum(v: Values, g):
    dim = v.params.dim
    return (g.flip(dim).cumsum(dim).flip(dim).to(v.inputs[0].dtype),)


# ------------------------------------------------------------------ contractions and rows
class Through:
    """A rule's gradient for an ancestor of its input reached through views (the input
    itself then gets none): the source of a broadcast matmul operand."""

    __slots__ = ("node", "grad")

    def __init__(self, node: Node, grad: TensorBase) -> None:
        self.node, self.grad = node, grad


def _broadcast_source(node: Node) -> Node | None:
    """The source of ``node`` when it broadcasts a matrix (or a stack with batch dims of 1)
    over batch dims; None otherwise."""
    if node.op is not OpKind.EXPAND or tape.record_of(node).__class__ is not tape.Record:
        return None
    source = tape.record_of(node).inputs[0]
    if source.shape[-2:] != node.shape[-2:] or any(s != 1 for s in source.shape[:-2]):
        return None
    return source if tape.record_of(source) is not None else None


def _transposed_source(node: Node) -> Node | None:
    """The matrix ``node`` transposes (a recorded 2-D permute), when it requires grad: a
    Linear's ``weight.t()``; None otherwise."""
    record = tape.record_of(node)
    if node.op is not OpKind.PERMUTE or record.__class__ is not tape.Record or \
            node.params.dims != (1, 0) or record.inputs is None:
        return None
    source = record.inputs[0]
    return source if tape.record_of(source) is not None else None


@gradient(OpKind.MATMUL)
def _matmul(v: Values, g):
    a, b = v.x
    batched = g.ndim > 2
    source = _broadcast_source(v.inputs[1]) if batched else v.inputs[1]
    weight = _transposed_source(source) if source is not None else None
    if weight is not None and g.ndim == 2:  # x @ W.t(): W's gradient as g^T x in W's layout
        # (torch's); 2-D, the nodes built directly. A first layer's input wants no gradient:
        # its product is not built.
        return (make(OpKind.MATMUL, (g._node, weight), None) if v.needs(0) else None,
                Through(weight, make(OpKind.MATMUL, (_t(g._node), v.inputs[0]), None)))
    if weight is not None:  # the same over batch dims, their rows folded
        k, n = b.shape[-2:]
        rows_g, rows_a = (g, a) if g.ndim == 2 else (g.reshape(-1, n), a.reshape(-1, k))
        return (g @ wrap(weight) if v.needs(0) else None, Through(weight, rows_g.mT @ rows_a))
    if source is not None and batched:  # x @ W over a batch: one product over the rows
        k, n = b.shape[-2:]
        folded = a.reshape(-1, k).mT @ g.reshape(-1, n)
        return (g @ b.mT, Through(source, folded.reshape(source.shape)))
    source = _broadcast_source(v.inputs[0]) if batched else None
    if source is not None:
        m, k = a.shape[-2:]
        folded = g.mT.reshape(-1, m).mT @ b.mT.reshape(-1, k)  # sum over batch of g b^T
        return (Through(source, folded.reshape(source.shape)), a.mT @ g)
    if g.ndim == 2:
        left, right = v.inputs
        return (make(OpKind.MATMUL, (g._node, _t(right)), None) if v.needs(0) else None,
                make(OpKind.MATMUL, (_t(left), g._node), None) if v.needs(1) else None)
    return (g @ b.mT, a.mT @ g)


_TRANSPOSE = PermuteParams((1, 0))


def _t(node: Node) -> Node:
    """The transpose of a matrix node (a view)."""
    return make(OpKind.PERMUTE, (node,), _TRANSPOSE)._node


@gradient(OpKind.SOFTMAX)
def _softmax(v: Values, g):
    y, dim = v.y, v.params.dim
    return (y * (g - (g * y).sum(dim, keepdim=True)),)


@gradient(OpKind.LOG_SOFTMAX)
def _log_softmax(v: Values, g):
    y, dim = v.y, v.params.dim
    return (g - y.exp() * g.sum(dim, keepdim=True),)


# ------------------------------------------------------------------ indexing and placement
def _scatter_add(v: Values, shape, dim: int, index: TensorBase, g: TensorBase) -> TensorBase:
    """zeros(shape) with ``g`` added at ``index`` along ``dim`` (index of g's shape)."""
    base = v.zeros(shape, g.dtype)
    return make(OpKind.SCATTER_ELEMENTS, (base._node, index._node, g._node),
                ScatterParams(dim, "add"))


def accumulate(total: TensorBase, part: TensorBase) -> TensorBase:
    """``total + part``; two scatter-adds into zeros of one shape along one dim (a table read
    by two embedding lookups) become one scatter-add of both, their indices and updates
    joined: one table-sized buffer instead of three."""
    a, b = total._node, part._node
    if a.op is OpKind.SCATTER_ELEMENTS and b.op is OpKind.SCATTER_ELEMENTS and \
            a.params == b.params and a.params.reduction == "add" and a.shape == b.shape and \
            a.dtype is b.dtype and a.device == b.device and a.inputs and b.inputs:
        zeros = constant(0.0, a.dtype, a.device, a.shape)
        (base_a, index_a, updates_a), (base_b, index_b, updates_b) = a.inputs, b.inputs
        dim = a.params.dim
        rest_a, rest_b = list(index_a.shape), list(index_b.shape)
        del rest_a[dim], rest_b[dim]
        if base_a is zeros and base_b is zeros and rest_a == rest_b and \
                index_a.dtype is index_b.dtype:
            joined = AxisParams(dim)
            index = make(OpKind.CAT, (index_a, index_b), joined)
            updates = make(OpKind.CAT, (updates_a, updates_b), joined)
            return make(OpKind.SCATTER_ELEMENTS, (zeros, index._node, updates._node), a.params)
    return total + part


@gradient(OpKind.GATHER)
def _gather(v: Values, g):
    source, index = v.x
    return (_scatter_add(v, source.shape, v.params.dim, index, g), None)


@gradient(OpKind.INDEX_SELECT)
def _index_select(v: Values, g):
    source, index = v.x
    dim = v.params.dim
    shape = [1] * g.ndim
    shape[dim] = index.shape[0]
    spread = index.reshape(tuple(shape)).expand(*g.shape)
    return (_scatter_add(v, source.shape, dim, spread, g), None)


@gradient(OpKind.CAT)
def _cat(v: Values, g):
    dim = v.params.dim
    grads, start = [], 0
    for source in v.inputs:
        grads.append(g.narrow(dim, start, source.shape[dim]))
        start += source.shape[dim]
    return tuple(grads)


@gradient(OpKind.TRIL, OpKind.TRIU)
def _triangle(v: Values, g):
    return (make(v.node.op, (g._node,), v.params),)


@gradient(OpKind.PAD)
def _pad(v: Values, g):
    shape = v.inputs[0].shape
    starts = tuple(before for before, _ in v.params.widths)
    stops = tuple(start + size for start, size in zip(starts, shape))
    return (make(OpKind.SLICE, (g._node,), SliceParams(starts, stops, (1,) * len(shape))),)


@gradient(OpKind.SLICE_ASSIGN)
def _slice_assign(v: Values, g):
    p = v.params
    value = v.inputs[1]
    base = make(OpKind.SLICE_ASSIGN, (g._node, v.zeros(value.shape, g.dtype)._node),
                SliceAssignParams(p.starts, p.stops, p.steps, False))
    part = make(OpKind.SLICE, (g._node,), SliceParams(p.starts, p.stops, p.steps))
    return (base, part.reshape(value.shape))


@gradient(OpKind.INDEX_COPY)
def _index_copy(v: Values, g):
    source, index, value = v.x
    dim = v.params.dim
    base = make(OpKind.INDEX_COPY, (g._node, index._node, v.zeros(value.shape, g.dtype)._node),
                IndexCopyParams(dim, False))
    return (base, None, g.index_select(dim, index))


@gradient(OpKind.SCATTER_ELEMENTS)
def _scatter_elements(v: Values, g):
    source, index, value = v.x
    p: ScatterParams = v.params
    taken = g.gather(p.dim, index)
    if p.reduction == "add":
        return (g, None, taken)
    if p.reduction != "none":
        raise FuelError(f"scatter_elements with reduction {p.reduction!r} is not "
                        f"differentiable (only 'none' and 'add' are)")
    base = make(OpKind.SCATTER_ELEMENTS,
                (g._node, index._node, v.zeros(index.shape, g.dtype)._node),
                ScatterParams(p.dim, "none"))
    return (base, None, taken)


# ------------------------------------------------------------------ the one entry point
def vjp(node: Node, inputs: tuple[Node, ...], g: TensorBase) -> list:
    """The gradients of ``node``'s ``inputs`` given ``g``, the gradient of its output: its
    rule, else its decomposition's; a FuelError naming the op when it has neither."""
    op = node.op
    rule = RULES.get(op)
    if rule is not None:
        grads = list(rule(Values(node, inputs), g))
    elif op not in NOT_DIFFERENTIABLE and _decomposable(op):
        grads = _through_decomposition(node, inputs, g)
    else:
        file, line = node.site
        raise FuelError(f"{op.value} is not differentiable: no gradient rule for it "
                        f"(created at {file}:{line})")
    for position, (source, grad) in enumerate(zip(inputs, grads)):
        if grad is None:
            continue
        if grad.__class__ is Through:
            source, grad = grad.node, grad.grad
            if grad.dtype is not source.dtype:
                grads[position] = Through(source, wrap(cast(grad._node, source.dtype)))
            continue
        if not source.dtype.is_floating:
            grads[position] = None
            continue
        if grad.dtype is not source.dtype:
            grad = grads[position] = wrap(cast(grad._node, source.dtype))
        if grad.shape != source.shape:  # pragma: no cover - a rule's bug
            raise FuelError(f"the gradient rule of {op.value} gave shape {grad.shape} for an "
                            f"input of shape {source.shape}")
    return grads


def _decomposable(op: OpKind) -> bool:
    from fuel.graph.decompositions import DECOMPOSITIONS

    return op in DECOMPOSITIONS


def _through_decomposition(node: Node, inputs: tuple[Node, ...], g: TensorBase) -> list:
    """Differentiate ``node`` through the primitive nodes its decomposition builds over
    ``inputs``: a local backward pass over that subgraph."""
    from fuel.graph.decompositions import DECOMPOSITIONS, Builder

    proxy = Node(node.op, inputs, node.params, node.dtype, node.shape, node.device, node.site)
    result = DECOMPOSITIONS[node.op](proxy, Builder(proxy))
    boundary = {id(source): position for position, source in enumerate(inputs)}
    order: list[Node] = []
    seen: set[int] = set(boundary)
    stack = [(result, False)]
    while stack:
        current, done = stack.pop()
        if done:
            order.append(current)
            continue
        if id(current) in seen:
            continue
        seen.add(id(current))
        stack.append((current, True))
        stack.extend((source, False) for source in current.inputs if id(source) not in seen)
    # The subgraph's nodes that depend on an input: only they carry gradients.
    reaches = set(boundary)
    for current in order:
        if any(id(source) in reaches for source in current.inputs):
            reaches.add(id(current))
            if tape.MODE.enabled:  # create_graph: the subgraph is recorded like built nodes
                tape.record(current)
    grads = [None] * len(inputs)
    if id(result) in boundary:
        grads[boundary[id(result)]] = g
        return grads
    pending = {id(result): g}
    _local_passes[0] += 1
    try:
        _local_pass(order, pending, reaches, boundary, grads)
    finally:
        _local_passes[0] -= 1
    return grads


def _local_pass(order: list[Node], pending: dict, reaches: set, boundary: dict,
                grads: list) -> None:
    """The reverse walk of a decomposition's subgraph: ``grads`` (per boundary input)
    filled from ``pending`` (the result's gradient)."""
    for current in reversed(order):
        grad = pending.pop(id(current), None)
        if grad is None:
            continue
        for source, part in zip(current.inputs, vjp(current, current.inputs, grad)):
            if part.__class__ is Through:
                source, part = part.node, part.grad
            if part is None or id(source) not in reaches:
                continue
            key = id(source)
            if key in boundary:
                at = boundary[key]
                grads[at] = part if grads[at] is None else grads[at] + part
            else:
                pending[key] = part if key not in pending else pending[key] + part
