"""The front-end functions of the ops added for ONNX against torch (the oracle)."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
import fuel.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional
RNG = np.random.default_rng(7)


def _pair(shape, dtype=np.float32):
    data = RNG.standard_normal(shape).astype(dtype)
    return fuel.tensor(data), torch.tensor(data)


def _close(ours, theirs, rtol=1e-5, atol=1e-5):
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("rank, stride, padding, dilation, groups", [
    (1, 2, 1, 1, 1), (2, 1, "same", 2, 2), (2, (2, 1), (0, 2), (1, 2), 1), (3, 1, 1, 1, 2)])
def test_conv(rank, stride, padding, dilation, groups):
    x, tx = _pair((2, 4) + (7,) * rank)
    w, tw = _pair((6, 4 // groups) + (3,) * rank)
    b, tb = _pair((6,))
    ours = getattr(F, f"conv{rank}d")(x, w, b, stride, padding, dilation, groups)
    theirs = getattr(TF, f"conv{rank}d")(tx, tw, tb, stride, padding, dilation, groups)
    _close(ours, theirs, atol=1e-4)


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_conv_transpose(rank):
    x, tx = _pair((2, 4) + (4,) * rank)
    w, tw = _pair((4, 3) + (3,) * rank)
    ours = getattr(F, f"conv_transpose{rank}d")(x, w, None, 2, 1, 1, 2, 1)
    theirs = getattr(TF, f"conv_transpose{rank}d")(tx, tw, None, 2, 1, 1, 2, 1)
    _close(ours, theirs, atol=1e-4)


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_pools(ceil_mode):
    x, tx = _pair((2, 3, 9, 8))
    values, indices = F.max_pool2d(x, 3, 2, 1, 1, ceil_mode, return_indices=True)
    t_values, t_indices = TF.max_pool2d(tx, 3, 2, 1, 1, ceil_mode, return_indices=True)
    _close(values, t_values)
    np.testing.assert_array_equal(indices.numpy(), t_indices.numpy())
    for include in (False, True):
        _close(F.avg_pool2d(x, 3, 2, 1, ceil_mode, include),
               TF.avg_pool2d(tx, 3, 2, 1, ceil_mode, include))
    _close(F.max_pool1d(x.reshape((2, 3, 72)), 4), TF.max_pool1d(tx.reshape(2, 3, 72), 4))


@pytest.mark.parametrize("mode, padding, align", [
    ("bilinear", "zeros", False), ("bilinear", "reflection", True), ("nearest", "border", False),
    ("bicubic", "zeros", True), ("bicubic", "reflection", False)])
def test_grid_sample(mode, padding, align):
    x, tx = _pair((2, 3, 5, 6))
    grid = RNG.uniform(-1.2, 1.2, (2, 4, 3, 2)).astype(np.float32)
    ours = F.grid_sample(x, fuel.tensor(grid), mode, padding, align)
    _close(ours, TF.grid_sample(tx, torch.tensor(grid), mode, padding, align), atol=1e-5)


def test_sort_topk_cumprod():
    data = RNG.integers(0, 4, (4, 9)).astype(np.float32)  # many ties: the order is stable
    x, tx = fuel.tensor(data), torch.tensor(data)
    values, indices = F.sort(x, 1, descending=True)
    t_values, t_indices = torch.sort(tx, stable=True, dim=1, descending=True)
    _close(values, t_values)
    np.testing.assert_array_equal(indices.numpy(), t_indices.numpy())
    top, top_index = F.topk(x, 3, 1, largest=False)
    t_top, _ = torch.topk(tx, 3, 1, largest=False)
    _close(top, t_top)
    np.testing.assert_array_equal(np.take_along_axis(data, top_index.numpy(), 1), t_top.numpy())
    _close(F.cumprod(x + 0.5, 1), torch.cumprod(tx + 0.5, 1), rtol=1e-5)


def test_scatter_and_scatter_reduce():
    x, tx = _pair((4, 5))
    index = RNG.integers(0, 4, (3, 5))
    src, tsrc = _pair((3, 5))
    for reduce in ("sum", "prod", "amax", "amin"):
        ours = F.scatter_reduce(x, 0, fuel.tensor(index), src, reduce)
        theirs = tx.scatter_reduce(0, torch.tensor(index), tsrc, reduce)
        _close(ours, theirs)
    unique = np.stack([RNG.permutation(4)[:3] for _ in range(5)], 1)
    _close(F.scatter(x, 0, fuel.tensor(unique), src),
           tx.scatter(0, torch.tensor(unique), tsrc))


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)]),
    ("ii->i", [(4, 4)]), ("...ij,...jk", [(2, 3, 4), (2, 4, 2)]),
    ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 5)])])
def test_einsum(equation, shapes):
    pairs = [_pair(s) for s in shapes]
    _close(F.einsum(equation, *[p[0] for p in pairs]),
           torch.einsum(equation, *[p[1] for p in pairs]), atol=1e-5)


def test_math_and_integer_ops():
    x, tx = _pair((3, 4))
    small = fuel.tensor(np.clip(x.numpy(), -0.9, 0.9))
    t_small = torch.tensor(small.numpy())
    for name in ("tan", "atan", "sinh", "cosh", "asinh"):
        _close(getattr(fuel, name)(x), getattr(torch, name)(tx), rtol=1e-5)
    for name in ("asin", "acos", "atanh"):
        _close(getattr(fuel, name)(small), getattr(torch, name)(t_small), rtol=1e-5)
    _close(fuel.acosh(x.abs() + 1), torch.acosh(tx.abs() + 1), rtol=1e-5)
    _close(F.det(fuel.tensor(x.numpy()[:3, :3])), torch.linalg.det(tx[:3, :3]), rtol=1e-5)
    a = RNG.integers(-50, 50, 12).astype(np.int32)
    b = np.where((c := RNG.integers(-7, 7, 12).astype(np.int32)) == 0, 3, c)
    fa, fb, ta, tb = fuel.tensor(a), fuel.tensor(b), torch.tensor(a), torch.tensor(b)
    np.testing.assert_array_equal(fuel.fmod(fa, fb).numpy(), torch.fmod(ta, tb).numpy())
    np.testing.assert_array_equal(F.trunc_divide(fa, fb).numpy(),
                                  torch.div(ta, tb, rounding_mode="trunc").numpy())
    shifts = fuel.tensor(np.abs(b) % 8)
    np.testing.assert_array_equal(fuel.bitwise_left_shift(fa, shifts).numpy(),
                                  torch.bitwise_left_shift(ta, torch.tensor(np.abs(b) % 8)))
    np.testing.assert_array_equal(fuel.bitwise_right_shift(fa, shifts).numpy(),
                                  torch.bitwise_right_shift(ta, torch.tensor(np.abs(b) % 8)))
    bits = F.bitcast(fuel.tensor(np.array([1.0, -2.0], np.float32)), "int32")
    np.testing.assert_array_equal(bits.numpy(), torch.tensor([1.0, -2.0]).view(torch.int32))
