"""Loss functions, torch.nn.functional's names and semantics (reductions 'mean', 'sum',
'none'), built from differentiable front-end ops."""

from __future__ import annotations

from fuel.frontend.build import at_user_line, constant, make
from fuel.frontend.elementwise import where
from fuel.frontend.structured import log_softmax
from fuel.ir import dtype as dt
from fuel.ir.errors import InvalidArgument, ShapeError
from fuel.ir.ops import NO_PARAMS, AxisParams, CastParams, OpKind, ReduceParams, ShapeParams
from fuel.tensor import Tensor

__all__ = ["binary_cross_entropy_with_logits", "contrastive_loss", "cosine_embedding_loss",
           "cosine_similarity", "cross_entropy", "l1_loss", "mse_loss", "nll_loss"]


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise InvalidArgument(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _picked(logp: Tensor, target: Tensor, ignore_index: int, weight: Tensor | None):
    """(-logp at each target, per-sample weight with ignored targets at 0)."""
    if target.dtype.is_floating:
        raise InvalidArgument("class-index targets must be integers; probabilities must have "
                              "the input's shape")
    if logp.ndim < 1 or target.shape != logp.shape[:1] + logp.shape[2:]:
        raise ShapeError(f"target of shape {target.shape} does not fit input {logp.shape} "
                         f"(expected {logp.shape[:1] + logp.shape[2:]})")
    kept = target != ignore_index
    safe = where(kept, target, 0)
    nll = -logp.gather(1, safe.unsqueeze(1)).squeeze(1)
    mask = kept.to(logp.dtype)
    if weight is not None:
        mask = mask * weight.index_select(0, safe.reshape(-1)).reshape(target.shape)
    return nll, mask


def _mean_nll(logp: Tensor, target: Tensor, ignore_index: int) -> Tensor | None:
    """The mean NLL of (N, C) log-probabilities at int64 class indices (N,): the nodes
    ``_picked`` and ``nll_loss``'s mean build, built directly (the common training loss);
    None for any other case."""
    source, index = logp._node, target._node
    if len(source.shape) != 2 or index.dtype is not dt.int64 or \
            index.shape != source.shape[:1] or not isinstance(ignore_index, int) or \
            isinstance(ignore_index, bool) or not source.dtype.is_floating:
        return None
    shape, device = index.shape, index.device
    kept = make(OpKind.NE, (index, constant(ignore_index, dt.int64, device, shape)), NO_PARAMS)
    safe = make(OpKind.WHERE, (kept._node, index, constant(0, dt.int64, device, shape)),
                NO_PARAMS)
    column = make(OpKind.RESHAPE, (safe._node,), ShapeParams(shape + (1,)))
    picked = make(OpKind.GATHER, (source, column._node), AxisParams(1))
    nll = make(OpKind.NEG, (make(OpKind.RESHAPE, (picked._node,), ShapeParams(shape))._node,),
               NO_PARAMS)
    mask = make(OpKind.CAST, (kept._node,), CastParams(source.dtype))
    total = make(OpKind.SUM, (make(OpKind.MUL, (nll._node, mask._node), NO_PARAMS)._node,),
                 _ALL_OF_ROWS)
    return make(OpKind.DIV, (total._node, make(OpKind.SUM, (mask._node,), _ALL_OF_ROWS)._node),
                NO_PARAMS)


_ALL_OF_ROWS = ReduceParams((0,), False)


@at_user_line
def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
             ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of class ``target`` under log-probabilities ``input``
    (N, C) or (N, C, d...); 'mean' divides by the weights of the targets kept."""
    nll, mask = _picked(input, target, ignore_index, weight)
    loss = nll * mask
    if reduction == "mean":
        return loss.sum() / mask.sum()
    return _reduce(loss, reduction)


@at_user_line
def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                  ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """log_softmax over dim 1, then nll_loss; ``target`` class indices (ignore_index kept
    out) or class probabilities of the input's shape; ``label_smoothing`` as torch."""
    if not 0.0 <= label_smoothing <= 1.0:
        raise InvalidArgument(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    class_dim = 1 if input.ndim > 1 else 0
    logp = log_softmax(input, class_dim)
    classes = input.shape[class_dim]
    if target.dtype.is_floating:
        if target.shape != input.shape:
            raise ShapeError(f"probability targets {target.shape} must match input "
                             f"{input.shape}")
        if label_smoothing:
            target = target * (1.0 - label_smoothing) + label_smoothing / classes
        terms = logp * target
        if weight is not None:
            shape = [1] * input.ndim
            shape[class_dim] = classes
            terms = terms * weight.reshape(tuple(shape))
        return _reduce(-terms.sum(class_dim), reduction)
    if input.ndim == 1:
        logp, target = logp.unsqueeze(0), target.unsqueeze(0)
    if weight is None and not label_smoothing and reduction == "mean":
        fast = _mean_nll(logp, target, ignore_index)
        if fast is not None:
            return fast
    nll, mask = _picked(logp, target, ignore_index, weight)
    loss = nll * mask
    if label_smoothing:
        if weight is not None:
            shape = [1] * logp.ndim
            shape[1] = classes
            smooth = -(logp * weight.reshape(tuple(shape))).sum(1)
        else:
            smooth = -logp.sum(1)
        smooth = smooth * (target != ignore_index).to(logp.dtype)
        if reduction == "mean":
            denominator = mask.sum()
            return ((1.0 - label_smoothing) * loss.sum()
                    + label_smoothing / classes * smooth.sum()) / denominator
        loss = (1.0 - label_smoothing) * loss + label_smoothing / classes * smooth
    elif reduction == "mean":
        return loss.sum() / mask.sum()
    result = _reduce(loss, reduction)
    return result.squeeze(0) if input.ndim == 1 and reduction == "none" else result


@at_user_line
def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Mean squared error."""
    diff = input - target
    return _reduce(diff * diff, reduction)


@at_user_line
def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Mean absolute error."""
    return _reduce((input - target).abs(), reduction)


@at_user_line
def binary_cross_entropy_with_logits(input: Tensor, target: Tensor,  # noqa: A002
                                     weight: Tensor | None = None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """Sigmoid + binary cross-entropy in one stable expression (torch's)."""
    softplus_neg = (-input.abs()).exp().log1p() + (-input).relu()
    if pos_weight is not None:
        loss = (1.0 - target) * input + ((pos_weight - 1.0) * target + 1.0) * softplus_neg
    else:
        loss = (1.0 - target) * input + softplus_neg
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@at_user_line
def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim`` (norms floored at eps)."""
    n1 = (x1 * x1).sum(dim, keepdim=True).sqrt().clamp(min=eps)
    n2 = (x2 * x2).sum(dim, keepdim=True).sqrt().clamp(min=eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


@at_user_line
def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0,
                          reduction: str = "mean") -> Tensor:
    """1 - cos for pairs labelled 1, max(0, cos - margin) for pairs labelled -1 (torch)."""
    eps = 1e-12
    product = (input1 * input2).sum(1)
    magnitude = ((input1 * input1).sum(1) + eps) * ((input2 * input2).sum(1) + eps)
    cos = product / magnitude.sqrt()
    positive = where(target == 1, 1.0 - cos, 0.0)
    negative = where(target == -1, (cos - margin).clamp(min=0.0), 0.0)
    return _reduce(positive + negative, reduction)


@at_user_line
def contrastive_loss(anchors: Tensor, positives: Tensor, scale: float = 20.0,
                     symmetric: bool = False) -> Tensor:
    """In-batch contrastive (InfoNCE / multiple-negatives ranking) loss: row i of
    ``anchors`` should match row i of ``positives`` against every other row, scored by
    cosine similarity times ``scale``; ``symmetric`` averages both directions."""
    if anchors.shape != positives.shape or anchors.ndim != 2:
        raise ShapeError(f"contrastive_loss needs two (batch, dim) tensors of one shape, got "
                         f"{anchors.shape} and {positives.shape}")
    from fuel.frontend.factories import arange

    a = anchors / (anchors * anchors).sum(1, keepdim=True).sqrt().clamp(min=1e-8)
    p = positives / (positives * positives).sum(1, keepdim=True).sqrt().clamp(min=1e-8)
    scores = (a @ p.t()) * scale
    labels = arange(anchors.shape[0], device=anchors.device)
    loss = cross_entropy(scores, labels)
    if symmetric:
        loss = (loss + cross_entropy(scores.t(), labels)) * 0.5
    return loss
