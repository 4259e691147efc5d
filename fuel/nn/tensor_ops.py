"""Sorting, scans, scatter, einsum, det and bit reinterpretation, with torch's names:
``argsort``, ``topk``, ``cumprod``, ``scatter``, ``scatter_reduce``, ``einsum``, ``det``, ..."""

from __future__ import annotations

from fuel.frontend.build import at_user_line, make, normalize_dim, operand_nodes
from fuel.frontend.elementwise import binary, unary
from fuel.frontend.shape import gather, index_operand, narrow
from fuel.ir import dtype as dt
from fuel.ir.errors import DTypeError, InvalidArgument, ShapeError
from fuel.ir.ops import NO_PARAMS, AxisParams, CastParams, OpKind
from fuel.ir.params import EinsumParams, ScatterParams, SortParams
from fuel.ir.rules import parse_einsum
from fuel.tensor import Tensor

__all__ = [
    "argsort", "bitcast", "cumprod", "det", "einsum", "scatter", "scatter_nd", "scatter_reduce",
    "sort", "topk", "trunc", "trunc_divide",
]


@at_user_line
def det(x: Tensor) -> Tensor:
    """Determinants of the square matrices in the last two dims (torch.linalg.det)."""
    if not x.dtype.is_floating:
        x = x.float()
    return make(OpKind.DET, (x._node,), NO_PARAMS)


@at_user_line
def bitcast(x: Tensor, dtype) -> Tensor:
    """The same bits read as ``dtype`` of the same size (torch's ``Tensor.view(dtype)``)."""
    return make(OpKind.BITCAST, (x._node,), CastParams(dt.to_dtype(dtype)))


@at_user_line
def trunc_divide(a, b) -> Tensor:
    """Division rounded toward zero (``torch.div(a, b, rounding_mode='trunc')``); integer
    operands stay integers (division by zero gives 0), floats are divided and truncated."""
    (left, right), dtype = operand_nodes([a, b])
    if dtype.is_floating:
        return trunc(binary(OpKind.DIV, Tensor(left), Tensor(right)))
    return binary(OpKind.INT_DIV, Tensor(left), Tensor(right))


@at_user_line
def trunc(x: Tensor) -> Tensor:
    """Round toward zero (torch.trunc); integers are returned as they are."""
    if not x.dtype.is_floating:
        return x
    return (x < 0).where(unary(OpKind.CEIL, x), unary(OpKind.FLOOR, x))


@at_user_line
def argsort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """Positions that sort ``x`` along ``dim``; always stable (ties keep their order)."""
    if x.ndim == 0:
        return x.long() * 0
    return make(OpKind.ARGSORT, (x._node,), SortParams(normalize_dim(dim, x.ndim),
                                                         bool(descending)))


@at_user_line
def sort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = True):
    """(values, indices) of a stable sort along ``dim``."""
    indices = argsort(x, dim, descending)
    return (gather(x, dim, indices) if x.ndim else x), indices


@at_user_line
def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):  # noqa: A002
    """(values, indices) of the ``k`` largest (or smallest) entries along ``dim``; equal
    values come in ascending index order."""
    axis = normalize_dim(dim, x.ndim)
    if not 0 <= k <= x.shape[axis]:
        raise InvalidArgument(f"topk k={k} is out of range for dim {dim} of size "
                              f"{x.shape[axis]}")
    indices = narrow(argsort(x, axis, descending=largest), axis, 0, int(k))
    return gather(x, axis, indices), indices


@at_user_line
def cumprod(x: Tensor, dim: int) -> Tensor:
    """Running product along ``dim``."""
    if x.dtype.is_bool:
        raise DTypeError("cumprod does not take bool tensors; cast first")
    return make(OpKind.CUMPROD, (x._node,), AxisParams(normalize_dim(dim, x.ndim)))


_TORCH_REDUCE = {"sum": "add", "prod": "mul", "amax": "max", "amin": "min",
                 "add": "add", "multiply": "mul"}


@at_user_line
def scatter(x: Tensor, dim: int, index: Tensor, src, reduce: str | None = None) -> Tensor:
    """A copy of ``x`` with ``src`` written at ``index`` along ``dim`` (torch.scatter);
    ``reduce`` "add" or "multiply" combines instead of overwriting."""
    reduction = "none" if reduce is None else _TORCH_REDUCE.get(reduce)
    if reduction is None:
        raise InvalidArgument(f"scatter reduce must be 'add' or 'multiply', got {reduce!r}")
    return _scatter_elements(x, dim, index, src, reduction)


@at_user_line
def scatter_reduce(x: Tensor, dim: int, index: Tensor, src: Tensor, reduce: str,
                   include_self: bool = True) -> Tensor:
    """torch.scatter_reduce with ``reduce`` in sum, prod, amax, amin (include_self only)."""
    if not include_self:
        raise InvalidArgument("scatter_reduce supports include_self=True only")
    reduction = _TORCH_REDUCE.get(reduce)
    if reduction is None:
        raise InvalidArgument(f"scatter_reduce reduce must be sum, prod, amax or amin, got "
                              f"{reduce!r}")
    return _scatter_elements(x, dim, index, src, reduction)


def _scatter_elements(x: Tensor, dim: int, index: Tensor, src, reduction: str) -> Tensor:
    axis = normalize_dim(dim, x.ndim)
    index_node = index_operand("scatter", index)
    if not isinstance(src, Tensor):
        src = Tensor(operand_nodes([x, src])[0][1]).expand(*index.shape)
    if src.shape != index.shape:
        src = narrow_to(src, index.shape)
    return make(OpKind.SCATTER_ELEMENTS, (x._node, index_node, src.to(x.dtype)._node),
                ScatterParams(axis, reduction))


def narrow_to(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """The leading corner of ``x`` of ``shape`` (torch's scatter reads src that way)."""
    if len(shape) != x.ndim or any(s > n for s, n in zip(shape, x.shape)):
        raise ShapeError(f"src of shape {x.shape} does not cover index shape {shape}")
    for axis, size in enumerate(shape):
        x = narrow(x, axis, 0, size)
    return x


@at_user_line
def scatter_nd(x: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none") -> Tensor:
    """A copy of ``x`` with ``updates`` written at the index tuples in ``indices[..., :]``
    (ONNX ScatterND); ``reduction`` none, add, mul, max or min."""
    index_node = index_operand("scatter_nd", indices)
    return make(OpKind.SCATTER_ND, (x._node, index_node, updates.to(x.dtype)._node),
                ScatterParams(0, reduction))


@at_user_line
def einsum(equation: str, *operands: Tensor) -> Tensor:
    """Einstein summation over one or more operands with an explicit or implicit output
    (``"ij,jk->ik"``, ``"ii"``); more than two operands are contracted pairwise."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    equation = explicit_equation(expand_ellipsis(equation, [t.ndim for t in operands]))
    terms, result = parse_einsum(equation)
    nodes, _ = operand_nodes(list(operands))
    tensors = [Tensor(n) for n in nodes]
    if len(terms) != len(tensors):
        raise ShapeError(f"einsum {equation!r} takes {len(terms)} operands, got {len(tensors)}")
    while len(tensors) > 2:
        later = set("".join(terms[2:]) + result)
        keep = "".join(dict.fromkeys(c for c in terms[0] + terms[1] if c in later))
        pair = make(OpKind.EINSUM, (tensors[0]._node, tensors[1]._node),
                    EinsumParams(f"{terms[0]},{terms[1]}->{keep}"))
        tensors = [pair] + tensors[2:]
        terms = [keep] + terms[2:]
    text = ",".join(terms) + "->" + result
    return make(OpKind.EINSUM, tuple(t._node for t in tensors), EinsumParams(text))


def explicit_equation(equation: str) -> str:
    """An implicit equation (no ``->``) gets NumPy's output: the letters used once, sorted."""
    text = equation.replace(" ", "")
    if "->" in text:
        return text
    letters = text.replace(",", "")
    once = sorted(c for c in set(letters) if letters.count(c) == 1)
    return f"{text}->{''.join(once)}"



def expand_ellipsis(equation: str, ranks: list[int]) -> str:
    """Replace ``...`` by unused capital letters covering the broadcast dims (right-aligned)."""
    text = equation.replace(" ", "")
    if "..." not in text:
        return text
    left, arrow, right = text.partition("->")
    terms = left.split(",")
    spare = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c not in text]
    widths = [rank - (len(term) - 3) if "..." in term else 0 for term, rank in zip(terms, ranks)]
    width = max(widths, default=0)
    letters = "".join(spare[:width])
    terms = [term.replace("...", letters[width - w:]) for term, w in zip(terms, widths)]
    if arrow:
        return ",".join(terms) + "->" + right.replace("...", letters)
    joined = ",".join(terms)
    plain = joined.replace(",", "")
    once = sorted(c for c in set(plain) if c not in letters and plain.count(c) == 1)
    return joined + "->" + letters + "".join(once)
