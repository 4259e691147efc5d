"""StringConcat, StringSplit, StringNormalizer and RegexFullMatch. StringSplit's and
StringNormalizer's output sizes depend on the strings, which are read on the host."""

from __future__ import annotations

import re

import numpy as np

from fuel.backends.cpu.strings import kept_strings, split_one
from fuel.frontend.build import make
from fuel.ir import dtype as dt
from fuel.ir.params import NO_PARAMS, PatternParams, StringNormalizeParams, StringSplitParams
from fuel.onnx.context import NodeContext, onnx_op
from fuel.onnx.errors import OnnxError, UnsupportedOp
from fuel.onnx.ops.common import OpKind, Tensor


def _strings(ctx: NodeContext, index: int) -> Tensor:
    x = ctx.input(index)
    if x.dtype is not dt.string:
        raise OnnxError(f"input {index} must be a string tensor, got {x.dtype.name}")
    return x


@onnx_op("StringConcat")
def string_concat(ctx: NodeContext) -> Tensor:
    return make(OpKind.STRING_CONCAT, (_strings(ctx, 0)._node, _strings(ctx, 1)._node),
                NO_PARAMS)


@onnx_op("StringSplit")
def string_split(ctx: NodeContext) -> list[Tensor]:
    x = _strings(ctx, 0)
    maxsplit = ctx.attr("maxsplit")
    probe = StringSplitParams(ctx.attr("delimiter") or None, maxsplit, 0)
    texts = np.asarray(ctx.static(0)).reshape(-1)
    width = max((len(split_one(text, probe)) for text in texts), default=0)
    substrings = make(OpKind.STRING_SPLIT, (x._node,),
                      StringSplitParams(probe.delimiter, maxsplit, width))
    counts = make(OpKind.STRING_SPLIT, (x._node,),
                  StringSplitParams(probe.delimiter, maxsplit, width, count=True))
    return [substrings, counts]


@onnx_op("StringNormalizer")
def string_normalizer(ctx: NodeContext) -> Tensor:
    x = _strings(ctx, 0)
    locale = ctx.attr("locale", "")
    if locale and not locale.lower().startswith(("en", "c")):
        raise UnsupportedOp(f"StringNormalizer locale {locale!r} (fuel changes case with "
                            "Python's locale-independent Unicode rules)")
    params = StringNormalizeParams(ctx.attr("case_change_action", "NONE"),
                                   tuple(ctx.attr("stopwords") or ()),
                                   bool(ctx.attr("is_case_sensitive", 0)), 0)
    kept = len(kept_strings(np.asarray(ctx.static(0)).reshape(-1), params))
    return make(OpKind.STRING_NORMALIZE, (x._node,),
                StringNormalizeParams(params.case_change, params.stopwords,
                                      params.case_sensitive, kept))


@onnx_op("RegexFullMatch")
def regex_full_match(ctx: NodeContext) -> Tensor:
    pattern = ctx.attr("pattern")
    if pattern is None:
        raise OnnxError("RegexFullMatch needs a pattern attribute")
    try:
        re.compile(pattern)
    except re.error as error:
        raise UnsupportedOp(f"pattern {pattern!r} is not a regular expression Python's re "
                            f"accepts: {error}") from None
    return make(OpKind.FULL_MATCH, (_strings(ctx, 0)._node,), PatternParams(pattern))
