"""The Tensor API generated from the op registry: fresh, visible, and right against torch."""

import numpy as np
import pytest
import torch

import fuel
from fuel.frontend import generate
from fuel.frontend.generated import GeneratedMethods

NEW_METHODS = ["log1p", "expm1", "hardswish", "softplus", "mish", "erf", "tan", "atan"]
TORCH_FUNCTIONAL = {"hardswish", "softplus", "mish"}


def test_generated_module_is_fresh():
    assert generate.TARGET.read_text() == generate.render(), (
        "fuel/frontend/generated.py is stale: run `python -m fuel.frontend.generate`")


def test_methods_are_declared_in_class_bodies():
    for name in NEW_METHODS:
        assert name in vars(GeneratedMethods), name
    assert "sum" in vars(fuel.frontend.reduce.ReduceMethods)
    assert "__getitem__" in vars(fuel.frontend.shape.ShapeMethods)


def _inputs(name: str) -> np.ndarray:
    values = np.linspace(-25.0, 25.0, 301)
    if name == "log1p":
        values = np.concatenate([np.abs(values), [1e-7, 1e-3]])
    if name in ("tan", "expm1"):
        values = values / 20.0
    return values


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", NEW_METHODS)
def test_new_unary_ops_match_torch(name, dtype):
    data = _inputs(name).astype(dtype)
    x, t = fuel.tensor(data), torch.tensor(data)
    expected = (getattr(torch.nn.functional, name)(t) if name in TORCH_FUNCTIONAL
                else getattr(torch, name)(t)).numpy()
    tolerance = dict(rtol=2e-6, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12,
                                                                            atol=1e-12)
    np.testing.assert_allclose(getattr(x, name)().numpy(), expected, **tolerance)
    np.testing.assert_allclose(getattr(fuel, name)(x).numpy(), expected, **tolerance)
    if name in TORCH_FUNCTIONAL:
        function = getattr(fuel.nn.functional, name)
        np.testing.assert_allclose(function(x).numpy(), expected, **tolerance)


def test_new_ops_promote_integers_like_torch():
    data = np.arange(-3, 4)
    got = fuel.tensor(data).atan()
    assert got.dtype is fuel.float32
    np.testing.assert_allclose(got.numpy(), torch.tensor(data).atan().numpy(), rtol=1e-6)


def test_functions_reject_non_tensors():
    with pytest.raises(fuel.InvalidArgument, match=r"fuel.mish\(\) takes a Tensor"):
        fuel.mish([1.0, 2.0])


def test_view_refuses_what_torch_refuses():
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x, t = fuel.tensor(data), torch.tensor(data)
    transposed, t_transposed = x.transpose(0, 2), t.transpose(0, 2)
    with pytest.raises(RuntimeError):
        t_transposed.view(24)
    with pytest.raises(fuel.ShapeError, match=r"use \.reshape"):
        transposed.view(24)
    np.testing.assert_array_equal(transposed.reshape(24).numpy(), t_transposed.reshape(24))
    # What torch's view allows, fuel's does too: splitting or merging contiguous runs.
    np.testing.assert_array_equal(transposed.view(4, 3, 2).numpy(), t_transposed.view(4, 3, 2))
    np.testing.assert_array_equal(x.permute(1, 0, 2).view(3, 2, 2, 2).numpy(),
                                  t.permute(1, 0, 2).view(3, 2, 2, 2))
    lazy = (x + 1).transpose(1, 2)
    with pytest.raises(fuel.ShapeError):
        lazy.view(2, 12)
    np.testing.assert_array_equal((x + 1).view(6, 4).numpy(), (t + 1).view(6, 4))
