import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fuel
from fuel.ir import dtype as dt
from tests.frontend.helpers import arrays, check

A = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)


def test_views_match_numpy():
    x = fuel.from_numpy(A)
    cases = [
        (x.reshape(6, 4), A.reshape(6, 4)), (x.view(-1), A.reshape(-1)),
        (x.permute(2, 0, 1), A.transpose(2, 0, 1)), (x.transpose(0, 2), A.swapaxes(0, 2)),
        (x[0].t(), A[0].T), (x.mT, A.swapaxes(-1, -2)), (x.T, A.transpose(2, 1, 0)),
        (x[:, :1].expand(2, 3, 4), np.broadcast_to(A[:, :1], (2, 3, 4))),
        (x[0, 0].broadcast_to((3, 4)), np.broadcast_to(A[0, 0], (3, 4))),
        (x.unsqueeze(1), A[:, None]), (x.unsqueeze(-1), A[..., None]),
        (x[:, :1].squeeze(), A[:, :1].squeeze()), (x[:, :1].squeeze(1), A[:, 0]),
        (x.flatten(), A.reshape(-1)), (x.flatten(1), A.reshape(2, 12)),
        (x.flip(0), A[::-1]), (x.flip(0, 2), A[::-1, :, ::-1]),
        (x.permute(2, 1, 0).reshape(4, 6), A.transpose(2, 1, 0).reshape(4, 6)),
    ]
    for got, expected in cases:
        check(got, expected)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_getitem_matches_numpy(data):
    x = fuel.from_numpy(A)
    index = []
    for size in A.shape:
        kind = data.draw(st.sampled_from(["int", "slice", "none", "full"]))
        if kind == "int":
            index.append(data.draw(st.integers(-size, size - 1)))
        elif kind == "slice":
            start = data.draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
            stop = data.draw(st.one_of(st.none(), st.integers(-size - 1, size + 1)))
            step = data.draw(st.sampled_from([None, 1, 2, -1, -2, 3]))
            index.append(slice(start, stop, step))
        elif kind == "none":
            index.append(None)
            index.append(slice(None))
        else:
            index.append(slice(None))
    if data.draw(st.booleans()):
        index = index[:1] + [Ellipsis]
    key = tuple(index)
    check(x[key], A[key])


def test_tensor_and_list_indexing_on_one_dim():
    x = fuel.from_numpy(A)
    check(x[fuel.tensor([1, 0, 1])], A[[1, 0, 1]])
    check(x[:, [2, 0]], A[:, [2, 0]])
    # torch semantics: an int selects (basic indexing), so the tensor dims stay in place
    check(x[1, :, fuel.tensor([[3, 1], [0, 2]])], A[1][:, np.array([[3, 1], [0, 2]])])
    check(x[:, fuel.tensor([-1])], A[:, [-1]])


def test_setitem_writes_in_place_and_keeps_values_elsewhere():
    a = np.zeros((3, 4), np.float32)
    x = fuel.zeros(3, 4).realize()
    storage = x._node.buffer
    x[1] = 5.0
    a[1] = 5.0
    x[:, 1:3] = fuel.ones(3, 2) * 2
    a[:, 1:3] = 2
    x[..., -1] = fuel.arange(3).float()
    a[..., -1] = np.arange(3)
    check(x, a)
    assert x._node.buffer is storage


@pytest.mark.parametrize("d", [dt.bool_, dt.int32, dt.float16, dt.float32])
def test_cat_stack_split_chunk(d):
    a, b = arrays(d, (2, 3), seed=1), arrays(d, (2, 5), seed=2)
    x, y = fuel.from_numpy(a), fuel.from_numpy(b)
    check(fuel.cat([x, y], dim=1), np.concatenate([a, b], axis=1))
    check(fuel.stack([x, x], dim=1), np.stack([a, a], axis=1))
    check(fuel.stack([x, x], dim=-1), np.stack([a, a], axis=-1))
    parts = fuel.cat([x, y], 1).split(3, dim=1)
    assert [p.shape for p in parts] == [(2, 3), (2, 3), (2, 2)]
    for got, expected in zip(parts, np.split(np.concatenate([a, b], 1), [3, 6], axis=1)):
        check(got, expected)
    for got, expected in zip(y.chunk(2, dim=1), np.array_split(b, [3], axis=1)):
        check(got, expected)
    for got, expected in zip(y.split([1, 4], 1), np.split(b, [1], axis=1)):
        check(got, expected)


def test_cat_promotes_mixed_dtypes():
    got = fuel.cat([fuel.tensor([1, 2]), fuel.tensor([0.5])])
    assert got.dtype is fuel.float32
    check(got, np.array([1, 2, 0.5], np.float32))


@pytest.mark.parametrize("d", [dt.int64, dt.float32, dt.bool_])
def test_tril_triu_gather_index_select(d):
    a = arrays(d, (2, 4, 5), seed=3)
    x = fuel.from_numpy(a)
    for k in (-1, 0, 2):
        check(x.tril(k), np.tril(a, k))
        check(x.triu(k), np.triu(a, k))
    index = np.array([[[0, 4, 1, 1, 3]], [[2, 2, 0, 4, 4]]])
    # torch.gather: the index may be smaller than the input in the other dims
    check(x.gather(2, fuel.from_numpy(index)), np.take_along_axis(a[:, :1], index, axis=2))
    check(x.index_select(1, fuel.tensor([3, 0])), np.take(a, [3, 0], axis=1))


def test_pad_contiguous_and_to(default_device):
    x = fuel.from_numpy(A)
    check(fuel.nn.functional.pad(x, (1, 2)), np.pad(A, ((0, 0), (0, 0), (1, 2))))
    check(fuel.nn.functional.pad(x, (0, 1, 2, 0), value=-1.0),
          np.pad(A, ((0, 0), (2, 0), (0, 1)), constant_values=-1))
    check(x.permute(2, 0, 1).contiguous(), np.ascontiguousarray(A.transpose(2, 0, 1)))
    assert x.to(default_device) is x and x.to(fuel.float32) is x
    assert x.to("float16").dtype is fuel.float16


def test_views_share_storage_without_kernels():
    x = fuel.from_numpy(A).realize()
    y = x.permute(2, 1, 0)[1:, ::2].unsqueeze(0)
    rows = y.explain().rows
    assert {r.dispatch for r in rows[1:]} == {"view"}
    y.realize()
    assert y._node.buffer is x._node.buffer
