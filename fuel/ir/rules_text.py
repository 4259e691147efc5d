"""Shape/dtype rules of the string and ML-domain ops (ONNX's StringSplit, StringConcat,
StringNormalizer, RegexFullMatch, LabelEncoder, TfIdfVectorizer, TreeEnsemble)."""

from __future__ import annotations

from fuel.ir import dtype as dt
from fuel.ir.errors import DTypeError, InvalidArgument
from fuel.ir.rules import broadcast_shapes


def _require_strings(dtypes, what: str) -> None:
    for position, dtype in enumerate(dtypes):
        if dtype is not dt.string:
            raise DTypeError(f"{what} takes string operands; operand {position} is {dtype.name}")


def string_concat(params, shapes, dtypes):
    _require_strings(dtypes, "string concatenation")
    return broadcast_shapes(*shapes), dt.string


def string_split(params, shapes, dtypes):
    _require_strings(dtypes, "string split")
    if params.count:
        return shapes[0], dt.int64
    return shapes[0] + (params.width,), dt.string


def string_normalize(params, shapes, dtypes):
    _require_strings(dtypes, "string normalization")
    shape = shapes[0]
    if len(shape) not in (1, 2) or (len(shape) == 2 and shape[0] != 1):
        raise InvalidArgument(f"string normalization takes [C] or [1, C] input, got {shape}")
    if params.case_change not in ("NONE", "LOWER", "UPPER"):
        raise InvalidArgument(f"case change {params.case_change!r} is not NONE, LOWER or UPPER")
    return shape[:-1] + (max(params.kept, 1),), dt.string


def full_match(params, shapes, dtypes):
    _require_strings(dtypes, "regular expression matching")
    return shapes[0], dt.bool_


def label_encode(params, shapes, dtypes):
    if len(params.keys) != len(params.values):
        raise InvalidArgument(f"{len(params.keys)} keys but {len(params.values)} values")
    return shapes[0], params.dtype


def tfidf(params, shapes, dtypes):
    shape = shapes[0]
    if len(shape) not in (1, 2):
        raise InvalidArgument(f"TfIdfVectorizer takes [C] or [N, C] input, got {shape}")
    if params.mode not in ("TF", "IDF", "TFIDF"):
        raise InvalidArgument(f"mode {params.mode!r} is not TF, IDF or TFIDF")
    return shape[:-1] + (params.width,), dt.float32


def tree_ensemble(params, shapes, dtypes):
    shape = shapes[0]
    if len(shape) != 2:
        raise InvalidArgument(f"TreeEnsemble takes [N, F] input, got {shape}")
    if not dtypes[0].is_floating:
        raise DTypeError(f"TreeEnsemble takes a floating-point input, got {dtypes[0].name}")
    return (shape[0], params.n_targets), dtypes[0]
