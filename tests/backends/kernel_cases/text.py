"""Kernel-suite cases of the string ops and ONNX's model ops (LabelEncoder, TfIdfVectorizer,
TreeEnsemble), with references written row by row in plain Python."""

from __future__ import annotations

import re

import numpy as np

from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind
from fuel.ir.params import (
    LabelEncodeParams,
    PatternParams,
    StringNormalizeParams,
    StringSplitParams,
    TfIdfParams,
    TreeEnsembleParams,
)
from tests.backends.kernel_cases.base import WORDS, Case, broadcast, operand, rng_for, values

K = OpKind
LAYOUTS = ("dense", "transposed", "stepped", "flipped")


def _per_item(function, out_dtype=object):
    def reference(arrays, params):
        flat = [function(item, params) for item in arrays[0].reshape(-1)]
        return np.array(flat, out_dtype).reshape(arrays[0].shape)

    return reference


def string_concat_cases(dtypes):
    rng = rng_for("string_concat")

    def reference(arrays, params):
        a, b = np.broadcast_arrays(*arrays)
        return np.array([x + y for x, y in zip(a.reshape(-1), b.reshape(-1))],
                        object).reshape(a.shape)

    cases = [Case(None, [operand(values(dt.string, (3, 4), rng), kind),
                         operand(values(dt.string, (3, 4), rng), kind)], reference,
                  f"concat#{kind}") for kind in LAYOUTS]
    cases.append(Case(None, [operand(values(dt.string, (3, 4), rng)),
                             broadcast(values(dt.string, (1, 4), rng), (3, 4))], reference,
                      "concat#broadcast"))
    return cases


def string_split_cases(dtypes):
    rng = rng_for("string_split")
    count = dtypes[-1] is dt.int64
    settings = [(",", None), (None, None), (",", 1), (None, 1)]

    def parts(text, params):
        pieces = text.split(params.delimiter, -1 if params.maxsplit is None else params.maxsplit)
        return pieces

    def reference(arrays, params):
        rows = [parts(text, params) for text in arrays[0].reshape(-1)]
        if params.count:
            return np.array([len(r) for r in rows], np.int64).reshape(arrays[0].shape)
        padded = [r + [""] * (params.width - len(r)) for r in rows]
        return np.array(padded, object).reshape(arrays[0].shape + (params.width,))

    cases = []
    for i, ((delimiter, maxsplit), kind) in enumerate(zip(settings, LAYOUTS)):
        data = values(dt.string, (2, 5), rng)
        width = max(len(parts(t, StringSplitParams(delimiter, maxsplit, 0)))
                    for t in data.reshape(-1))
        cases.append(Case(StringSplitParams(delimiter, maxsplit, width, count),
                          [operand(data, kind)], reference, f"split#{i}"))
    return cases


def string_normalize_cases(dtypes):
    rng = rng_for("string_normalize")
    settings = [("LOWER", ("monday",), False), ("UPPER", ("Monday",), True),
                ("NONE", (), False), ("UPPER", tuple(WORDS), False)]

    def kept(texts, params):
        if params.case_sensitive:
            return [t for t in texts if t not in params.stopwords]
        return [t for t in texts if t.lower() not in {w.lower() for w in params.stopwords}]

    def reference(arrays, params):
        remaining = kept(list(arrays[0].reshape(-1)), params) or [""]
        if params.case_change == "LOWER":
            remaining = [t.lower() for t in remaining]
        elif params.case_change == "UPPER":
            remaining = [t.upper() for t in remaining]
        return np.array(remaining, object).reshape(arrays[0].shape[:-1] + (-1,))

    cases = []
    for i, ((change, stopwords, sensitive), shape) in enumerate(
            zip(settings, [(8,), (1, 6), (5,), (1, 4)])):
        data = values(dt.string, shape, rng)
        params = StringNormalizeParams(change, stopwords, sensitive, 0)
        params = StringNormalizeParams(change, stopwords, sensitive,
                                       len(kept(list(data.reshape(-1)), params)))
        cases.append(Case(params, [operand(data, "flipped" if i == 2 else "dense")],
                          reference, f"normalize#{i}"))
    return cases


def full_match_cases(dtypes):
    rng = rng_for("full_match")
    patterns = [r"[a-z]+", r".*,.*", r"\w*", r"(M|m)onday|"]
    return [Case(PatternParams(pattern), [operand(values(dt.string, (3, 4), rng), kind)],
                 _per_item(lambda t, p: re.fullmatch(p.pattern, t) is not None, bool),
                 f"full_match#{i}")
            for i, (pattern, kind) in enumerate(zip(patterns, LAYOUTS))]


def _labels(dtype, count: int, rng) -> list:
    if dtype is dt.string:
        return list(WORDS[:count])
    if dtype.is_floating:
        return [float(v) for v in np.arange(count) * 0.5 - 1.0]
    return [int(v) for v in np.arange(count) * 3 - 5]


def label_encode_cases(dtypes):
    source, target = dtypes
    rng = rng_for("label_encode", dtypes)
    keys = _labels(source, 6, rng)
    mapped = list(reversed(_labels(target, 6, rng)))
    default = "_Unused" if target is dt.string else (-0.0 if target.is_floating else -1)
    params = LabelEncodeParams(tuple(keys), tuple(mapped), default, target)
    pool = keys + _labels(source, 9, rng)[6:] if source is not dt.string else list(WORDS)

    def reference(arrays, params):
        table = dict(zip(params.keys, params.values))
        return _per_item(lambda v, p: table.get(v.item() if hasattr(v, "item") else v,
                                                p.default), target.numpy)(arrays, params)

    cases = []
    for i, kind in enumerate(LAYOUTS):
        data = np.array(rng.choice(np.array(pool, object), size=(3, 4)).tolist(),
                        object if source is dt.string else source.numpy)
        cases.append(Case(params, [operand(data, kind)], reference, f"label_encode#{i}"))
    return cases


def tfidf_cases(dtypes):
    source = dtypes[0]
    rng = rng_for("tfidf", dtypes)
    tokens = list(WORDS[:6]) if source is dt.string else [2, 3, 4, 5, 6, 7]
    # unigrams tokens[0..3], bigrams (t1, t2), (t2, t4), (t0, t0)
    pool = tuple(tokens[:4] + [tokens[1], tokens[2], tokens[2], tokens[4], tokens[0],
                               tokens[0]])
    settings = [("TF", 1, 2, 0), ("TF", 2, 2, 3), ("IDF", 1, 2, 2), ("TFIDF", 1, 1, 0)]

    def reference(arrays, params):
        grams = [tuple(pool[i:i + 1]) for i in range(4)] + [
            tuple(pool[i:i + 2]) for i in range(4, 10, 2)]
        rows = arrays[0].reshape(-1, arrays[0].shape[-1])
        result = np.zeros((rows.shape[0], params.width), np.float32)
        for r, row in enumerate(rows):
            row = list(row)
            for g, gram in enumerate(grams):
                if not params.min_gram <= len(gram) <= params.max_gram:
                    continue
                gaps = range(1, params.max_skip + 2) if len(gram) > 1 else [1]
                hits = sum(1 for gap in gaps for start in range(len(row))
                           if start + (len(gram) - 1) * gap < len(row)
                           and all(row[start + k * gap] == gram[k] for k in range(len(gram))))
                weight = params.weights[g] if params.weights else 1.0
                value = {"TF": hits, "IDF": float(hits > 0) * weight,
                         "TFIDF": hits * weight}[params.mode]
                result[r, params.ngram_indexes[g]] = value
        return result.reshape(arrays[0].shape[:-1] + (params.width,))

    cases = []
    for i, ((mode, low, high, skip), kind) in enumerate(zip(settings, LAYOUTS)):
        weights = None if mode == "TF" else tuple(float(w) for w in np.arange(7) * 0.5 + 0.25)
        params = TfIdfParams(mode, low, high, skip, (0, 4), (6, 5, 4, 3, 2, 1, 0), pool,
                             weights, 7)
        shape = (3, 9) if i != 3 else (9,)
        data = np.array(rng.choice(np.array(tokens, object), size=shape).tolist(),
                        object if source is dt.string else source.numpy)
        cases.append(Case(params, [operand(data, kind)], reference, f"tfidf#{i}"))
    return cases


def _tree_params(aggregate: int, post_transform: int) -> TreeEnsembleParams:
    # tree 0: x0 <= 0.5 ? (x1 in {1, 2} ? leaf 0 : leaf 1) : leaf 2
    # tree 1: x2 > -0.25 ? leaf 3 : (x0 != 1.0 ? leaf 4 : leaf 5)
    return TreeEnsembleParams(
        n_targets=2, tree_roots=(0, 2), features=(0, 1, 2, 0), modes=(0, 6, 3, 5),
        splits=(0.5, 0.0, -0.25, 1.0), true_ids=(1, 0, 3, 4), true_leafs=(0, 1, 1, 1),
        false_ids=(2, 1, 3, 5), false_leafs=(1, 1, 0, 1), missing_tracks_true=(1, 0, 0, 0),
        leaf_targets=(0, 1, 1, 0, 1, 0), leaf_weights=(1.5, -2.0, 0.25, 3.0, -1.0, 0.5),
        membership_values=(1.0, 2.0, float("nan")), aggregate=aggregate,
        post_transform=post_transform)


def _walk(row, params, node) -> int:
    while True:
        value = float(row[params.features[node]])
        split = params.splits[node]
        mode = params.modes[node]
        if mode == 6:
            taken = value in {1.0, 2.0}
        else:  # NaN compares false, except != (as Python and the ONNX reference)
            taken = [value <= split, value < split, value >= split, value > split,
                     value == split, value != split][mode]
        taken = taken or (bool(params.missing_tracks_true[node]) and np.isnan(value))
        leaf = params.true_leafs[node] if taken else params.false_leafs[node]
        node = params.true_ids[node] if taken else params.false_ids[node]
        if leaf:
            return node


def tree_ensemble_cases(dtypes):
    dtype = dtypes[0]
    rng = rng_for("tree_ensemble", dtypes)

    def reference(arrays, params):
        rows = arrays[0].astype(np.float64)
        result = np.zeros((rows.shape[0], params.n_targets))
        for r, row in enumerate(rows):
            per_target = {}
            for root in params.tree_roots:
                leaf = _walk(row, params, root)
                per_target.setdefault(params.leaf_targets[leaf], []).append(
                    params.leaf_weights[leaf])
            for target, weights in per_target.items():
                result[r, target] = {0: sum(weights) / len(params.tree_roots),
                                     1: sum(weights), 2: min(weights),
                                     3: max(weights)}[params.aggregate]
        if params.post_transform == 2:
            result = 1 / (1 + np.exp(-result))
        elif params.post_transform == 1:
            result = np.exp(result - result.max(1, keepdims=True))
            result = result / result.sum(1, keepdims=True)
        return result

    cases = []
    for i, ((aggregate, post), kind) in enumerate(zip([(1, 0), (0, 2), (3, 0), (1, 1)],
                                                      LAYOUTS)):
        data = rng.choice(np.array([0.0, 0.5, 1.0, 2.0, -1.0, np.nan, 0.3]), size=(7, 3))
        cases.append(Case(_tree_params(aggregate, post), [operand(data.astype(dtype.numpy),
                                                                  kind)],
                          reference, f"tree_ensemble#{i}", rtol=2e-3 if dtype is dt.float16
                          else None, atol=2e-3 if dtype is dt.float16 else None))
    return cases


CASES = {
    K.STRING_CONCAT: string_concat_cases,
    K.STRING_SPLIT: string_split_cases,
    K.STRING_NORMALIZE: string_normalize_cases,
    K.FULL_MATCH: full_match_cases,
    K.LABEL_ENCODE: label_encode_cases,
    K.TFIDF: tfidf_cases,
    K.TREE_ENSEMBLE: tree_ensemble_cases,
}
