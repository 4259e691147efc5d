"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss."""

from __future__ import annotations

from fuel.frontend.shape import gather
from fuel.frontend.structured import log_softmax
from fuel.ir import dtype as dt
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError
from fuel.onnx.ops.common import Tensor, cast, where


def negative_log_likelihood(log_prob: Tensor, target: Tensor, weight: Tensor | None,
                            reduction: str, ignore_index) -> Tensor:
    """ONNX's NLL over (N, C, d...) log-probabilities and (N, d...) integer targets."""
    if log_prob.ndim < 2 or target.shape != (log_prob.shape[0],) + log_prob.shape[2:]:
        raise OnnxError(f"input {log_prob.shape} and target {target.shape} do not fit "
                        "(N, C, d...) and (N, d...)")
    classes = log_prob.shape[1]
    target = cast(target, dt.int64)
    valid = target != ignore_index if ignore_index is not None else None
    safe = where(valid, target, 0, dtype=dt.int64) if valid is not None else target
    picked = gather(log_prob, 1, safe.unsqueeze(1)).squeeze(1)
    loss = -picked
    weights = None
    if weight is not None:
        clipped = safe.clamp(0, classes - 1)
        weights = weight.index_select(0, clipped.reshape((-1,))).reshape(target.shape)
        if valid is not None:
            weights = where(valid, weights, 0, dtype=weights.dtype)
    elif valid is not None:
        weights = cast(valid, log_prob.dtype)
    if weights is not None:
        loss = loss * weights
    elif valid is not None:
        loss = where(valid, loss, 0, dtype=loss.dtype)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction != "mean":
        raise OnnxError(f"reduction must be none, sum or mean, got {reduction!r}")
    if weights is not None:
        return loss.sum() / weights.sum()
    return loss.mean()


@onnx_op("NegativeLogLikelihoodLoss")
def nll_loss(ctx: NodeContext) -> Tensor:
    return negative_log_likelihood(ctx.input(0), ctx.input(1), ctx.optional(2),
                                   ctx.attr("reduction", "mean"), ctx.attr("ignore_index"))


@onnx_op("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy_loss(ctx: NodeContext) -> list[Tensor]:
    scores = ctx.input(0)
    log_prob = log_softmax(scores, 1)
    loss = negative_log_likelihood(log_prob, ctx.input(1), ctx.optional(2),
                                   ctx.attr("reduction", "mean"), ctx.attr("ignore_index"))
    return [cast(loss, scores.dtype), log_prob]
