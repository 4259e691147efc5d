"""CPU kernels of the string ops (ONNX StringConcat, StringSplit, StringNormalizer,
RegexFullMatch) over NumPy object arrays of ``str``."""

from __future__ import annotations

import functools
import re

import numpy as np

from fuel.backends.cpu.arrays import STRIDED, array_kernel, kernel_list
from fuel.ir.ops import OpKind, definition

KERNELS = kernel_list()


def _coverage(op: OpKind):
    return definition(op).coverage


_CONCAT = np.frompyfunc(lambda a, b: a + b, 2, 1)


@KERNELS.kernel(OpKind.STRING_CONCAT, _coverage(OpKind.STRING_CONCAT), STRIDED)
@array_kernel
def string_concat(a, b, out, params):
    out[...] = _CONCAT(a, b)


def split_one(text: str, params) -> list[str]:
    """``text`` split as ONNX StringSplit does (Python's str.split semantics)."""
    limit = -1 if params.maxsplit is None else params.maxsplit
    return text.split(params.delimiter or None, limit)


@KERNELS.kernel(OpKind.STRING_SPLIT, _coverage(OpKind.STRING_SPLIT), STRIDED)
@array_kernel
def string_split(x, out, params):
    flat = x.reshape(-1)
    if params.count:
        out.reshape(-1)[...] = [len(split_one(text, params)) for text in flat]
        return
    rows = out.reshape(flat.size, params.width)
    rows[...] = ""
    for row, text in zip(rows, flat):
        parts = split_one(text, params)
        row[:len(parts)] = parts


@KERNELS.kernel(OpKind.STRING_NORMALIZE, _coverage(OpKind.STRING_NORMALIZE), STRIDED)
@array_kernel
def string_normalize(x, out, params):
    kept = kept_strings(x.reshape(-1), params)
    change = {"LOWER": str.lower, "UPPER": str.upper}.get(params.case_change)
    flat = out.reshape(-1)
    flat[...] = ""
    if kept:
        flat[...] = [change(text) if change else text for text in kept]


def kept_strings(texts, params) -> list[str]:
    """The strings of ``texts`` that are not stopwords (compared casefolded unless
    ``params.case_sensitive``)."""
    if params.case_sensitive:
        stop = set(params.stopwords)
        return [text for text in texts if text not in stop]
    stop = {word.casefold() for word in params.stopwords}
    return [text for text in texts if text.casefold() not in stop]


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)


@KERNELS.kernel(OpKind.FULL_MATCH, _coverage(OpKind.FULL_MATCH), STRIDED)
@array_kernel
def full_match(x, out, params):
    pattern = _compiled(params.pattern)
    out.reshape(-1)[...] = [pattern.fullmatch(text) is not None for text in x.reshape(-1)]
