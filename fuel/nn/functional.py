"""torch.nn.functional's inference ops, built from fuel's graph ops."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

from fuel.frontend.attention import paged_attention
from fuel.frontend.build import at_user_line, make
from fuel.frontend.elementwise import gelu, where
from fuel.frontend.factories import random_uniform
from fuel.frontend.generated import (  # the registry's functional names
    hardswish,
    mish,
    relu,
    sigmoid,
    silu,
    softplus,
    tanh,
)
from fuel.frontend.shape import cat, chunk, gather, index_select, split, stack
from fuel.frontend.shape import pad as _pad
from fuel.frontend.structured import layer_norm, log_softmax, matmul, rms_norm, softmax
from fuel.frontend.tape import is_grad_enabled
from fuel.ir.errors import DTypeError, InvalidArgument, ShapeError
from fuel.ir.ops import NO_PARAMS, OpKind, PermuteParams, ShapeParams, check_operand
from fuel.tensor import Tensor, as_tensor

__all__ = [
    "cat", "chunk", "dropout", "embedding", "gather", "gelu", "hardswish", "index_select",
    "layer_norm", "linear", "log_softmax", "matmul", "mish", "pad", "paged_attention", "relu",
    "rms_norm",
    "scaled_dot_product_attention", "sigmoid", "silu", "softmax", "softplus", "split", "stack",
    "tanh",
]


_TRANSPOSED = PermuteParams((1, 0))


@at_user_line
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x @ weight.T + bias, with ``weight`` of shape (out_features, in_features)."""
    if weight.ndim != 2:
        raise ShapeError(f"linear weight must be 2-D (out, in), got {weight.shape}")
    transposed = make(OpKind.PERMUTE, (weight._node,), _TRANSPOSED)  # weight.t()
    left, right = x._node, transposed._node
    if len(left.shape) == 2 and left.dtype is right.dtype and left.dtype.is_floating and \
            left.shape[1] == right.shape[0]:
        # A matrix of the weight's dtype: the nodes matmul and ``+`` build, built directly.
        result = cast(Tensor, make(OpKind.MATMUL, (left, right), None))
        if bias is None:
            return result
        node = bias._node
        shape = result._node.shape
        if node.dtype is left.dtype and node.shape == shape[1:]:
            return cast(Tensor, make(OpKind.ADD, (result._node, make(
                OpKind.EXPAND, (node,), ShapeParams(shape))._node), NO_PARAMS))
        return result + bias
    result = matmul(x, transposed)
    return result + bias if bias is not None else result


@at_user_line
def embedding(input: Tensor, weight: Tensor,  # noqa: A002 - torch's name
              padding_idx: int | None = None) -> Tensor:
    """Rows of ``weight`` picked by the integer ``input`` (any shape); as torch, the row
    ``padding_idx`` gets no gradient (its value is still read)."""
    check_operand("embedding: the indices", "index", input.dtype)
    flat = input.reshape(-1)
    rows = index_select(weight, 0, flat)
    if padding_idx is not None:
        count = weight.shape[0]
        if not -count <= padding_idx < count:
            raise InvalidArgument(f"embedding: padding_idx {padding_idx} is outside the "
                                  f"table's {count} rows")
        if weight.requires_grad and is_grad_enabled():
            # The padding row's picks pass their value but not their gradient.
            kept = (flat != padding_idx % count).unsqueeze(1)
            rows = where(kept, rows, rows.detach())
    return rows.reshape(input.shape + (weight.shape[1],))


@at_user_line
def dropout(x: Tensor, p: float = 0.5, training: bool = False) -> Tensor:
    """Identity at inference; in training zero each element with probability ``p`` and rescale."""
    if not 0.0 <= p <= 1.0:
        raise InvalidArgument(f"dropout probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0
    keep = as_tensor(random_uniform(x.shape, x.device)) >= p
    return as_tensor(where(keep, x * (1.0 / (1.0 - p)), 0.0))


@at_user_line
def pad(x: Tensor, pad: Sequence[int], mode: str = "constant",
        value: float | None = 0) -> Tensor:  # noqa: A002
    """Constant padding, widths in torch's order (last dim first)."""
    if mode != "constant":
        raise InvalidArgument(f"pad mode {mode!r} is not supported; use 'constant'")
    return as_tensor(_pad(x, pad, value if value is not None else 0))


@at_user_line
def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """softmax(q k^T * scale + mask) v; a bool mask keeps True positions (torch)."""
    if query.shape[-1] != key.shape[-1]:
        raise ShapeError(f"query {query.shape} and key {key.shape} differ in the last dim")
    if enable_gqa and query.ndim >= 3 and key.shape[-3] != query.shape[-3]:
        repeat = query.shape[-3] // key.shape[-3]
        key = _repeat_heads(key, repeat)
        value = _repeat_heads(value, repeat)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = matmul(query, key.transpose(-2, -1)) * scale
    length, source = query.shape[-2], key.shape[-2]
    if is_causal:
        from fuel.frontend.factories import ones

        allowed = ones(length, source, dtype="bool", device=query.device).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype.is_bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        elif not attn_mask.dtype.is_floating:  # torch: a bool mask or an additive float one
            raise DTypeError(f"scaled_dot_product_attention: attn_mask must be bool or "
                             f"floating, got {attn_mask.dtype.name}")
        else:
            scores = scores + attn_mask
    weights = softmax(scores, -1)
    weights = dropout(weights, dropout_p, training=dropout_p > 0)
    return matmul(weights, value)


def _repeat_heads(x: Tensor, repeat: int) -> Tensor:
    """(..., h, s, d) -> (..., h * repeat, s, d) by repeating each head (grouped-query)."""
    lead, heads, length, width = x.shape[:-3], x.shape[-3], x.shape[-2], x.shape[-1]
    expanded = x.unsqueeze(-3).expand(*lead, heads, repeat, length, width)
    return expanded.reshape(*lead, heads * repeat, length, width)


from fuel.nn.conv import *  # noqa: E402, F401, F403 - convolution and pooling
from fuel.nn.losses import *  # noqa: E402, F401, F403 - cross_entropy, mse_loss, ...
from fuel.nn.sampling import *  # noqa: E402, F401, F403 - grid_sample
from fuel.nn.tensor_ops import *  # noqa: E402, F401, F403 - sort, scatter, einsum, det
