"""CPU kernels of ONNX's model ops: LabelEncoder, TfIdfVectorizer and TreeEnsemble."""

from __future__ import annotations

import math

import numpy as np

from fuel.backends.cpu.arrays import STRIDED, array_kernel, kernel_list
from fuel.ir.ops import OpKind, definition

KERNELS = kernel_list()


def _key(value):
    """A dict key for a label: NaN keys match NaN inputs (ONNX LabelEncoder)."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value


@KERNELS.kernel(OpKind.LABEL_ENCODE, definition(OpKind.LABEL_ENCODE).coverage, STRIDED)
@array_kernel
def label_encode(x, out, params):
    table = {_key(k): v for k, v in zip(params.keys, params.values)}
    flat = x.reshape(-1).tolist()
    out.reshape(-1)[...] = [table.get(_key(value), params.default) for value in flat]


def ngram_counts(tokens: list, params, lookup: dict) -> np.ndarray:
    """How often each pool n-gram occurs in ``tokens`` (n-grams of ``min_gram``..``max_gram``
    tokens whose neighbours are ``skip + 1`` apart, skip up to ``max_skip``)."""
    counts = np.zeros(params.width, np.float32)
    for length in range(params.min_gram, params.max_gram + 1):
        for skip in range(params.max_skip + 1 if length > 1 else 1):
            step = skip + 1
            for start in range(len(tokens) - (length - 1) * step):
                gram = tuple(tokens[start:start + (length - 1) * step + 1:step])
                index = lookup.get(gram)
                if index is not None:
                    counts[index] += 1
    return counts


def ngram_lookup(params) -> dict:
    """Pool n-gram (a tuple of tokens) -> output position."""
    bounds = list(params.ngram_counts) + [len(params.pool)]
    lookup, gram = {}, 0
    for length, (begin, end) in enumerate(zip(bounds, bounds[1:]), start=1):
        for start in range(begin, end, length):
            lookup[tuple(params.pool[start:start + length])] = params.ngram_indexes[gram]
            gram += 1
    return lookup


@KERNELS.kernel(OpKind.TFIDF, definition(OpKind.TFIDF).coverage, STRIDED)
@array_kernel
def tfidf(x, out, params):
    lookup = ngram_lookup(params)
    rows = x.reshape(-1, x.shape[-1]) if x.ndim else x.reshape(1, -1)
    counts = np.stack([ngram_counts(row.tolist(), params, lookup) for row in rows])
    weights = np.ones(params.width, np.float32)  # the i-th pool n-gram's weight, at its column
    if params.weights is not None:
        weights[list(params.ngram_indexes)] = params.weights
    if params.mode == "IDF":
        counts = (counts > 0).astype(np.float32) * weights
    elif params.mode == "TFIDF":
        counts = counts * weights
    out[...] = counts.reshape(out.shape)


_COMPARE = (np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal)


def _membership_sets(params) -> dict[int, set]:
    """Node id -> its set of values, for the member-of nodes (mode 6) in node order."""
    sets, current = [], set()
    for value in params.membership_values:
        if math.isnan(value):
            sets.append(current)
            current = set()
        else:
            current.add(value)
    members = [node for node, mode in enumerate(params.modes) if mode == 6]
    return dict(zip(members, sets))


def tree_leaves(x: np.ndarray, params, root: int) -> np.ndarray:
    """The leaf index each row of ``x`` reaches from node ``root``, all rows walked at once."""
    sets = _membership_sets(params)
    features = np.asarray(params.features)
    modes = np.asarray(params.modes)
    splits = np.asarray(params.splits, np.float64)
    tracks = np.asarray(params.missing_tracks_true or [0] * len(params.modes), bool)
    position = np.full(x.shape[0], root)
    at_leaf = np.zeros(x.shape[0], bool)
    rows = np.arange(x.shape[0])
    while not at_leaf.all():
        walking = rows[~at_leaf]
        node = position[walking]
        value = x[walking, features[node]].astype(np.float64)
        taken = np.zeros(walking.size, bool)
        for mode in np.unique(modes[node]):
            chosen = modes[node] == mode
            if mode == 6:
                taken[chosen] = [v in sets.get(n, ()) for v, n in
                                 zip(value[chosen], node[chosen])]
            else:
                taken[chosen] = _COMPARE[mode](value[chosen], splits[node[chosen]])
        taken |= np.isnan(value) & tracks[node]
        position[walking] = np.where(taken, np.asarray(params.true_ids)[node],
                                     np.asarray(params.false_ids)[node])
        at_leaf[walking] = np.where(taken, np.asarray(params.true_leafs)[node],
                                    np.asarray(params.false_leafs)[node]).astype(bool)
    return position


def _post_transform(scores: np.ndarray, kind: int) -> np.ndarray:
    """0 none, 1 softmax, 2 logistic, 3 softmax over the nonzero scores (the converter
    refuses 4, probit)."""
    if kind == 1:
        shifted = np.exp(scores - scores.max(axis=1, keepdims=True))
        return shifted / shifted.sum(axis=1, keepdims=True)
    if kind == 2:
        return 1.0 / (1.0 + np.exp(-scores))
    if kind == 3:
        shifted = np.where(scores != 0, np.exp(scores - scores.max(axis=1, keepdims=True)), 0)
        total = shifted.sum(axis=1, keepdims=True)
        return np.divide(shifted, total, out=np.zeros_like(shifted), where=total != 0)
    return scores


@KERNELS.kernel(OpKind.TREE_ENSEMBLE, definition(OpKind.TREE_ENSEMBLE).coverage, STRIDED)
@array_kernel
def tree_ensemble(x, out, params):
    targets = np.asarray(params.leaf_targets)
    weights = np.asarray(params.leaf_weights, np.float64)
    n, count = x.shape[0], params.n_targets
    per_tree = np.stack([tree_leaves(x, params, root) for root in params.tree_roots])
    contributions = np.full((len(params.tree_roots), n, count), np.nan)
    rows = np.arange(n)
    for tree, leaves in enumerate(per_tree):
        contributions[tree, rows, targets[leaves]] = weights[leaves]
    if params.aggregate == 2:
        scores = np.fmin.reduce(contributions, axis=0)
    elif params.aggregate == 3:
        scores = np.fmax.reduce(contributions, axis=0)
    else:
        scores = np.nansum(contributions, axis=0)
        if params.aggregate == 0:
            scores = scores / len(params.tree_roots)
    scores = np.nan_to_num(scores, nan=0.0)
    out[...] = _post_transform(scores, params.post_transform)
