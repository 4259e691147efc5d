import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fuel
from fuel.ir import dtype as dt
from tests.frontend.helpers import FLOATS, INTS, arrays, check, reference_input

dims_and_shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple).flatmap(
    lambda shape: st.tuples(
        st.just(shape),
        st.one_of(
            st.none(),
            st.integers(-len(shape), len(shape) - 1),
            st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape),
                     unique=True).map(tuple),
        ),
        st.booleans(),
    )
)

REDUCTIONS = {
    "sum": np.sum, "amax": np.max, "amin": np.min, "prod": np.prod, "all": np.all,
    "any": np.any,
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("d", [dt.bool_, dt.int32, dt.int64, dt.uint8, dt.float16, dt.float32,
                               dt.float64])
@settings(max_examples=8, deadline=None)
@given(case=dims_and_shapes, seed=st.integers(0, 100))
def test_reductions_match_numpy(name, d, case, seed):
    shape, dim, keepdim = case
    if name == "prod" and d.is_floating:
        a = arrays(d, shape, 0.5, 1.5, seed)
    else:
        a = arrays(d, shape, seed=seed)
    if d.is_bool and name in ("amax", "amin", "prod", "sum"):
        a = a.astype(bool)
    result = getattr(fuel.from_numpy(a), name)(dim=dim, keepdim=keepdim)
    axis = dim if dim is None or isinstance(dim, int) else tuple(dim)
    kwargs = {}
    if name in ("sum", "prod") and not d.is_floating:
        kwargs["dtype"] = np.int64
    expected = REDUCTIONS[name](reference_input(a), axis=axis, keepdims=keepdim, **kwargs)
    if name in ("sum", "prod", "amax", "amin") and d.is_floating:
        expected = np.asarray(expected).astype(a.dtype)
    check(result, np.asarray(expected))


@pytest.mark.parametrize("d", FLOATS)
@settings(max_examples=10, deadline=None)
@given(case=dims_and_shapes, seed=st.integers(0, 100))
def test_mean_var_std_match_numpy(d, case, seed):
    shape, dim, keepdim = case
    a = arrays(d, shape, seed=seed)
    x = fuel.from_numpy(a)
    axis = dim if dim is None or isinstance(dim, int) else tuple(dim)
    ra = reference_input(a).astype(np.float64)
    check(x.mean(dim, keepdim), np.mean(ra, axis=axis, keepdims=keepdim))
    count = ra.size if axis is None else int(np.prod([ra.shape[k] for k in np.atleast_1d(axis)]))
    if count > 1:
        check(x.var(dim, keepdim=keepdim), np.var(ra, axis=axis, ddof=1, keepdims=keepdim))
        check(x.std(dim, correction=0, keepdim=keepdim),
              np.std(ra, axis=axis, ddof=0, keepdims=keepdim))


@pytest.mark.parametrize("d", INTS + FLOATS)
def test_argmax_argmin_and_max_with_dim(d):
    a = arrays(d, (4, 5, 3), seed=11)
    x = fuel.from_numpy(a)
    for dim in (None, 0, 1, -1):
        check(x.argmax(dim), np.argmax(a, axis=dim))
        check(x.argmin(dim), np.argmin(a, axis=dim))
    values, indices = x.max(dim=1)
    check(values, np.max(a, axis=1))
    check(indices, np.argmax(a, axis=1))
    values, indices = x.min(1, keepdim=True)
    check(values, np.min(a, axis=1, keepdims=True))
    check(indices, np.argmin(a, axis=1, keepdims=True))
    check(x.max(), np.max(a))
    check(x.argmax(1, keepdim=True), np.argmax(a, axis=1, keepdims=True))


@pytest.mark.parametrize("d", [dt.bool_, dt.int32, dt.float16, dt.float32])
def test_cumsum_matches_numpy(d):
    a = arrays(d, (3, 5), seed=12)
    for dim in (0, 1, -1):
        expected = np.cumsum(reference_input(a), axis=dim,
                             dtype=np.int64 if not d.is_floating else None)
        if d.is_floating:
            expected = expected.astype(a.dtype)
        check(fuel.from_numpy(a).cumsum(dim), expected)


def test_integer_sum_accumulates_in_int64_and_mean_of_int_is_an_error():
    x = fuel.tensor([100, 100, 100], dtype=fuel.int8)
    assert x.sum().dtype is fuel.int64 and x.sum().item() == 300
    with pytest.raises(fuel.DTypeError, match="mean"):
        x.mean()


def test_reduction_of_empty_dim_errors_clearly():
    with pytest.raises(fuel.InvalidArgument, match="size 0"):
        fuel.zeros(3, 0).max(dim=1)
    assert fuel.zeros(3, 0).sum(dim=1).numpy().tolist() == [0, 0, 0]
