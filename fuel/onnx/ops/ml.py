"""The ai.onnx.ml model ops LabelEncoder and TreeEnsemble, and TfIdfVectorizer (ai.onnx)."""

from __future__ import annotations

import numpy as np

from fuel.frontend.build import make
from fuel.ir import dtype as dt
from fuel.ir.params import LabelEncodeParams, TfIdfParams, TreeEnsembleParams
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.common import OpKind, Tensor

ML = "ai.onnx.ml"
# LabelEncoder's typed attributes: suffix -> (dtype, default value when none is given).
_LABEL_KINDS = {"strings": (dt.string, "_Unused"), "int64s": (dt.int64, -1),
                "floats": (dt.float32, -0.0)}
_DEFAULT_ATTRIBUTES = {"strings": "default_string", "int64s": "default_int64",
                       "floats": "default_float"}


def _labels(ctx: NodeContext, side: str) -> tuple[tuple, object, str | None]:
    """(values, dtype, the typed suffix used or None) of LabelEncoder's keys or values."""
    tensor = ctx.attr(f"{side}_tensor")
    if tensor is not None:
        array = np.asarray(tensor)
        return tuple(array.reshape(-1).tolist()), dt.from_numpy(array.dtype), None
    for suffix, (dtype, _) in _LABEL_KINDS.items():
        values = ctx.attr(f"{side}_{suffix}")
        if values is not None:
            return tuple(values), dtype, suffix
    raise OnnxError(f"LabelEncoder has no {side} (keys_*/values_* or {side}_tensor)")


@onnx_op("LabelEncoder", domain=ML)
def label_encoder(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    keys, key_dtype, _ = _labels(ctx, "keys")
    values, value_dtype, suffix = _labels(ctx, "values")
    if x.dtype is not key_dtype:
        raise OnnxError(f"input is {x.dtype.name} but the keys are {key_dtype.name}")
    default_tensor = ctx.attr("default_tensor")
    if default_tensor is not None:
        default = np.asarray(default_tensor).reshape(-1)[0].item()
    elif suffix is not None:
        default = ctx.attr(_DEFAULT_ATTRIBUTES[suffix], _LABEL_KINDS[suffix][1])
    else:
        default = "_Unused" if value_dtype is dt.string else 0
    return make(OpKind.LABEL_ENCODE, (x._node,),
                LabelEncodeParams(keys, values, default, value_dtype))


@onnx_op("TfIdfVectorizer")
def tfidf_vectorizer(ctx: NodeContext) -> Tensor:
    x = ctx.input(0)
    pool = ctx.attr("pool_int64s")
    if pool is None:
        pool = ctx.attr("pool_strings")
    if pool is None:
        raise OnnxError("TfIdfVectorizer needs pool_int64s or pool_strings")
    indexes = tuple(ctx.attr("ngram_indexes") or ())
    weights = ctx.attr("weights")
    params = TfIdfParams(ctx.attr("mode", "TF"), ctx.attr("min_gram_length"),
                         ctx.attr("max_gram_length"), ctx.attr("max_skip_count"),
                         tuple(ctx.attr("ngram_counts") or ()), indexes, tuple(pool),
                         tuple(weights) if weights is not None else None,
                         max(indexes, default=-1) + 1)
    return make(OpKind.TFIDF, (x._node,), params)


def _floats(ctx: NodeContext, name: str) -> tuple[float, ...]:
    value = ctx.attr(name)
    return () if value is None else tuple(float(v) for v in np.asarray(value).reshape(-1))


def _ints(ctx: NodeContext, name: str) -> tuple[int, ...]:
    value = ctx.attr(name)
    return () if value is None else tuple(int(v) for v in np.asarray(value).reshape(-1))


@onnx_op("TreeEnsemble", domain=ML)
def tree_ensemble(ctx: NodeContext) -> Tensor:
    post_transform = ctx.attr("post_transform", 0)
    if post_transform == 4:
        raise UnsupportedOp("TreeEnsemble post_transform PROBIT is not supported")
    params = TreeEnsembleParams(
        ctx.attr("n_targets"), _ints(ctx, "tree_roots"), _ints(ctx, "nodes_featureids"),
        _ints(ctx, "nodes_modes"), _floats(ctx, "nodes_splits"),
        _ints(ctx, "nodes_truenodeids"), _ints(ctx, "nodes_trueleafs"),
        _ints(ctx, "nodes_falsenodeids"), _ints(ctx, "nodes_falseleafs"),
        _ints(ctx, "nodes_missing_value_tracks_true"), _ints(ctx, "leaf_targetids"),
        _floats(ctx, "leaf_weights"), _floats(ctx, "membership_values"),
        ctx.attr("aggregate_function", 1), post_transform)
    return make(OpKind.TREE_ENSEMBLE, (ctx.input(0)._node,), params)
