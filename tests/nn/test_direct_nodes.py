"""The layers' direct node building (F.linear's matmul and bias, cross_entropy's mean NLL,
fuel.tensor's NumPy path) builds exactly the graph of the general path: equal structural
keys and equal values."""

import ml_dtypes
import numpy as np
import pytest

import fuel
import fuel.nn.functional as F
from fuel.nn import losses


def _rand(*shape, seed=0):
    return fuel.tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_linear_builds_the_nodes_of_matmul_and_add():
    x, w, b = _rand(5, 4), _rand(3, 4, seed=1), _rand(3, seed=2)
    direct = F.linear(x, w, b)
    general = fuel.matmul(x, w.t()) + b
    assert direct._node.key == general._node.key
    np.testing.assert_array_equal(direct.numpy(), general.numpy())
    assert F.linear(x, w)._node.key == fuel.matmul(x, w.t())._node.key
    batched = _rand(2, 5, 4, seed=3)  # not a matrix: the general path
    np.testing.assert_allclose(F.linear(batched, w, b).numpy(),
                               batched.numpy() @ w.numpy().T + b.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_cross_entropy_builds_the_nodes_of_the_general_path(monkeypatch, ignore_index):
    logits = _rand(6, 4)
    target = fuel.tensor(np.array([0, 2, 1, 3, 2, 0]))
    direct = F.cross_entropy(logits, target, ignore_index=ignore_index)
    monkeypatch.setattr(losses, "_mean_nll", lambda *args: None)
    general = F.cross_entropy(logits, target, ignore_index=ignore_index)
    assert direct._node.key == general._node.key
    assert direct.item() == general.item()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.uint8,
                                   np.bool_, np.float16, ml_dtypes.bfloat16])
def test_tensor_from_an_array_copies_it(dtype):
    array = np.arange(12).reshape(3, 4).astype(dtype)
    tensor = fuel.tensor(array)
    expected = array.copy()
    array[...] = array[0, 1]
    assert tensor.shape == (3, 4) and tensor.dtype.numpy == expected.dtype
    np.testing.assert_array_equal(tensor.numpy(), expected)
    strided = fuel.tensor(expected.T)
    np.testing.assert_array_equal(strided.numpy(), expected.T)


def test_conv_and_flatten_layers_build_the_nodes_of_the_functional_path():
    import fuel.nn as nn

    fuel.manual_seed(0)
    x = _rand(2, 3, 6, 6)
    for layer in (nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 3, stride=2, bias=False),
                  nn.Conv2d(3, 6, (3, 1), padding=(1, 0), groups=3)):
        direct = layer(x)
        general = F.conv2d(x, layer.weight, layer.bias, layer.stride, layer.padding,
                           layer.dilation, layer.groups)
        assert direct._node.key == general._node.key
        np.testing.assert_array_equal(direct.numpy(), general.numpy())
    layer.padding = (0, 0)  # changed after construction: the layer follows
    assert layer(x).shape == (2, 6, 4, 6)
    assert nn.Flatten()(x)._node.key == x.flatten(1)._node.key
    assert nn.Flatten()(x).shape == (2, 108)


def test_max_pool_params_kept_per_arguments():
    x = _rand(2, 3, 8, 8)
    first = F.max_pool2d(x, 2)
    again = F.max_pool2d(x, 2)  # the kept params
    assert again._node.key == first._node.key and again.shape == (2, 3, 4, 4)
    other = F.max_pool2d(x, 3, stride=1, padding=1)
    assert other.shape == (2, 3, 8, 8) and other._node.key != first._node.key
    values, indices = F.max_pool2d(x, 2, return_indices=True)
    np.testing.assert_array_equal(values.numpy(), first.numpy())
    assert F.max_pool2d(x, [2, 2]).shape == (2, 3, 4, 4)  # a list: not kept, still right
