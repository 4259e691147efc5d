"""``fuel.sum(x, 1)``, ``fuel.reshape(x, ...)``, ...: torch's functional spellings of the
Tensor methods that take options. The plain elementwise ones are generated from the op
registry (``fuel/frontend/generated.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from fuel.frontend.build import at_user_line
from fuel.frontend.elementwise import clamp as _clamp
from fuel.frontend.elementwise import tensor_operand
from fuel.frontend.elementwise import where as _where
from fuel.frontend.reduce import ValuesIndices
from fuel.tensor import Tensor, as_tensor

# A dim argument: one dim, several, or None for all of them.
Dims = int | Sequence[int] | None

__all__ = [
    "all", "amax", "amin", "any", "argmax", "argmin", "clamp", "cumsum", "flatten", "flip",
    "log_softmax", "masked_fill", "max", "mean", "min", "permute", "prod", "reshape", "squeeze",
    "std", "sum", "transpose", "tril", "triu", "unsqueeze", "var", "where",
]


@at_user_line
def sum(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A001 - torch's name
    """Sum over ``dim`` (all dims when None)."""
    return tensor_operand(x, "sum").sum(dim, keepdim)


@at_user_line
def mean(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    """Mean over ``dim`` (all dims when None)."""
    return tensor_operand(x, "mean").mean(dim, keepdim)


@at_user_line
def prod(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    """Product over ``dim`` (all dims when None)."""
    return tensor_operand(x, "prod").prod(dim, keepdim)


@at_user_line
def amax(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    """Maximum over ``dim`` (all dims when None)."""
    return tensor_operand(x, "amax").amax(dim, keepdim)


@at_user_line
def amin(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    """Minimum over ``dim`` (all dims when None)."""
    return tensor_operand(x, "amin").amin(dim, keepdim)


@at_user_line
def max(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor | ValuesIndices:  # noqa: A001
    """torch.max: of all elements, elementwise with a tensor, or (values, indices) over dim."""
    return tensor_operand(x, "max").max(dim, keepdim)


@at_user_line
def min(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor | ValuesIndices:  # noqa: A001
    """torch.min: of all elements, elementwise with a tensor, or (values, indices) over dim."""
    return tensor_operand(x, "min").min(dim, keepdim)


@at_user_line
def argmax(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    """Position of the first maximum."""
    return tensor_operand(x, "argmax").argmax(dim, keepdim)


@at_user_line
def argmin(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:
    """Position of the first minimum."""
    return tensor_operand(x, "argmin").argmin(dim, keepdim)


@at_user_line
def var(x: Tensor, dim: Dims = None, correction: float = 1, keepdim: bool = False,
        unbiased: bool | None = None) -> Tensor:
    """Variance with Bessel's ``correction``."""
    return tensor_operand(x, "var").var(dim, correction, keepdim, unbiased)


@at_user_line
def std(x: Tensor, dim: Dims = None, correction: float = 1, keepdim: bool = False,
        unbiased: bool | None = None) -> Tensor:
    """Standard deviation with Bessel's ``correction``."""
    return tensor_operand(x, "std").std(dim, correction, keepdim, unbiased)


@at_user_line
def all(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A001 - torch's name
    """Whether every element is true."""
    return tensor_operand(x, "all").all(dim, keepdim)


@at_user_line
def any(x: Tensor, dim: Dims = None, keepdim: bool = False) -> Tensor:  # noqa: A001 - torch's name
    """Whether any element is true."""
    return tensor_operand(x, "any").any(dim, keepdim)


@at_user_line
def cumsum(x: Tensor, dim: int) -> Tensor:
    """Running sum along ``dim``."""
    return tensor_operand(x, "cumsum").cumsum(dim)


@at_user_line
def reshape(x: Tensor, *shape: int | Sequence[int]) -> Tensor:
    """``x`` under a new shape."""
    return tensor_operand(x, "reshape").reshape(*shape)


@at_user_line
def permute(x: Tensor, *dims: int | Sequence[int]) -> Tensor:
    """``x`` with its dims reordered."""
    return tensor_operand(x, "permute").permute(*dims)


@at_user_line
def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    """``x`` with two dims swapped."""
    return tensor_operand(x, "transpose").transpose(dim0, dim1)


@at_user_line
def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """``x`` with dims ``start_dim`` through ``end_dim`` merged."""
    return tensor_operand(x, "flatten").flatten(start_dim, end_dim)


@at_user_line
def squeeze(x: Tensor, dim: Dims = None) -> Tensor:
    """``x`` without size-1 dims."""
    return tensor_operand(x, "squeeze").squeeze(dim)


@at_user_line
def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """``x`` with a new size-1 dim."""
    return tensor_operand(x, "unsqueeze").unsqueeze(dim)


@at_user_line
def flip(x: Tensor, *dims: int | Sequence[int]) -> Tensor:
    """``x`` reversed along ``dims``."""
    return tensor_operand(x, "flip").flip(*dims)


@at_user_line
def tril(x: Tensor, diagonal: int = 0) -> Tensor:
    """``x`` zeroed above ``diagonal``."""
    return tensor_operand(x, "tril").tril(diagonal)


@at_user_line
def triu(x: Tensor, diagonal: int = 0) -> Tensor:
    """``x`` zeroed below ``diagonal``."""
    return tensor_operand(x, "triu").triu(diagonal)


@at_user_line
def clamp(x: Tensor, min: object = None, max: object = None) -> Tensor:  # noqa: A002 - torch's names
    """``x`` limited to ``[min, max]``."""
    return as_tensor(_clamp(tensor_operand(x, "clamp"), min, max))


@at_user_line
def masked_fill(x: Tensor, mask: Tensor, value: object) -> Tensor:
    """``value`` where ``mask`` holds, else ``x``."""
    return tensor_operand(x, "masked_fill").masked_fill(mask, value)


@at_user_line
def log_softmax(x: Tensor, dim: int, dtype: object = None) -> Tensor:
    """log(softmax(x)) along ``dim``."""
    return tensor_operand(x, "log_softmax").log_softmax(dim, dtype)


@at_user_line
def where(condition: object, a: object, b: object) -> Tensor:
    """``a`` where ``condition`` holds, else ``b`` (broadcast together)."""
    return as_tensor(_where(condition, a, b))
