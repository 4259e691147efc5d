"""Contraction, placement and reduction decompositions on the primitive-only backend against
the CPU kernels."""

import numpy as np
import pytest

import fuel
from fuel.nn import tensor_ops
from fuel.nn.conv import conv_transpose_nd
from tests.backends.primitive_backend import (
    DEVICE,
    primitive_backend,
)


@pytest.fixture(scope="module", autouse=True)
def backend():
    yield primitive_backend()


def _same(function, *arrays, exact=False):
    cpu = function(*(fuel.from_numpy(a) for a in arrays)).numpy()
    primitive = function(*(fuel.from_numpy(a).to(DEVICE) for a in arrays)).numpy()
    assert primitive.dtype == cpu.dtype and primitive.shape == cpu.shape
    if exact:
        np.testing.assert_array_equal(primitive, cpu)
    else:
        np.testing.assert_allclose(primitive, cpu, rtol=1e-5, atol=1e-5)


def _random(shape, seed=0, dtype=np.float32):
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dtype)


@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bki", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]), ("ij->", [(3, 4)]), ("ij,kj->jik", [(2, 3), (4, 3)]),
    ("abc,cd->db", [(2, 3, 4), (4, 5)]), ("i,i->", [(6,), (6,)]),
    ("iij,jk->ik", [(3, 3, 2), (2, 4)]),
])
def test_einsum(equation, shapes):
    arrays = [_random(shape, seed) for seed, shape in enumerate(shapes)]
    _same(lambda *xs: tensor_ops.einsum(equation, *xs), *arrays)
    _same(lambda *xs: tensor_ops.einsum(equation, *xs), *(a.astype(np.int32) for a in arrays),
          exact=True)


@pytest.mark.parametrize("strides, pads, dilations, groups, output_padding", [
    ((1, 1), (0, 0, 0, 0), (1, 1), 1, (0, 0)), ((2, 3), (1, 0, 2, 1), (1, 2), 2, (1, 0)),
    ((2, 2), (3, 3, 3, 3), (1, 1), 1, (0, 1)),
])
def test_conv_transpose(strides, pads, dilations, groups, output_padding):
    x, w = _random((2, 4, 5, 4)), _random((4, 3, 3, 2), 1)
    _same(lambda a, b: conv_transpose_nd(a, b, None, strides, pads[:2], pads[2:], dilations,
                                         groups, output_padding), x, w)


@pytest.mark.parametrize("reduction", [None, "add", "multiply"])
def test_scatter_elements(reduction):
    data = _random((4, 5)).astype(np.int32)
    index = np.array([[0, 1, 3], [2, 2, 0], [0, 1, 3]])
    updates = _random((3, 3), 1).astype(np.int32)
    for dim in (0, 1):
        _same(lambda d, i, u, dim=dim: tensor_ops.scatter(d, dim, i, u, reduction),
              data, index, updates, exact=True)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd(reduction):
    data = _random((4, 3, 2))
    indices = np.array([[[1, 0]], [[3, 2]], [[1, 0]]])
    updates = _random((3, 1, 2), 1)
    _same(lambda d, i, u: tensor_ops.scatter_nd(d, i, u, reduction), data, indices, updates)
    _same(lambda d, i, u: tensor_ops.scatter_nd(d, i[:, :, :1], u.reshape(3, 1, 1, 2)
                                                .expand(3, 1, 3, 2), reduction),
          data, indices, updates)


def test_index_copy_in_place_writes_the_target():
    target = fuel.zeros(3, 5, device=DEVICE).contiguous().realize()
    source = fuel.from_numpy(_random((3, 2))).to(DEVICE)
    target.index_copy_(1, fuel.tensor([4, 1], device=DEVICE), source)
    expected = np.zeros((3, 5), np.float32)
    expected[:, [4, 1]] = source.numpy()
    np.testing.assert_array_equal(target.numpy(), expected)


@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_argsort_prod_cumprod_min_argmin_all_any(dtype):
    x = _random((3, 6), 2).astype(dtype)
    x[0, :3] = x[0, 3:]  # ties
    if dtype is np.float32:
        x[1, 2] = np.nan
    for descending in (False, True):
        _same(lambda a, descending=descending: tensor_ops.argsort(a, 1, descending), x,
              exact=True)
        _same(lambda a, descending=descending: tensor_ops.argsort(a, 0, descending), x,
              exact=True)
    small = (x[:, :4] % 3 if dtype is np.int16 else np.round(x[:, :4] / 3)).astype(dtype)
    _same(lambda a: a.prod(1), small)
    _same(lambda a: a.prod(), small)
    _same(lambda a: tensor_ops.cumprod(a, 1), small)
    _same(lambda a: a.amin(1) if hasattr(a, "amin") else a.min(1).values, x, exact=True)
    _same(lambda a: a.argmin(0), x, exact=True)
    _same(lambda a: a.all(1), x, exact=True)
    _same(lambda a: a.any(0), (x > 2).astype(dtype), exact=True)


def test_det_with_pivoting_and_a_singular_matrix():
    x = _random((3, 4, 4), 5)
    x[1, 0, 0] = 0.0  # the first pivot must come from another row
    x[2, 3] = x[2, 1]  # singular
    cpu = np.linalg.det(x.astype(np.float64))
    got = tensor_ops.det(fuel.from_numpy(x).to(DEVICE)).numpy()
    np.testing.assert_allclose(got, cpu, rtol=1e-4, atol=1e-4)
