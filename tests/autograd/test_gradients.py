"""Gradient conformance: every differentiable op of the front-end differential suite, its
gradient against torch's on the same samples (float32 rtol 1e-4, float64 rtol 1e-7).

Each case is one expression written once for both libraries (``lib`` is fuel or torch, ``F``
their nn.functional); the gradient checked is that of ``sum(f(x) * r)`` for a random ``r``,
so every element of the vector-Jacobian product is compared, not only a sum.
"""

import numpy as np
import pytest

import fuel
import fuel.nn.functional as FF

torch = pytest.importorskip("torch")
TF = torch.nn.functional

TOLERANCE = {"float32": dict(rtol=1e-4, atol=1e-5), "float64": dict(rtol=1e-7, atol=1e-10)}

POSITIVE, UNIT, ABOVE_ONE = (0.2, 3.0), (-0.9, 0.9), (1.2, 3.0)


def _case(name, fn, shapes, low_high=(-2.0, 2.0), ints=None):
    return pytest.param(fn, shapes, low_high, ints or {}, id=name)


def _op(lib, F, name):
    """``lib.name`` where the library has it (torch), else ``F.name`` (fuel.nn.functional)."""
    return getattr(lib, name, None) or getattr(F, name)


def _unary(name, domain=(-2.0, 2.0), shape=(3, 4)):
    return _case(name, lambda lib, F, x: getattr(x, name)(), [shape], domain)


def _functional(name, domain=(-3.0, 3.0)):
    return _case(name, lambda lib, F, x: getattr(F, name)(x), [(3, 5)], domain)


IDS = np.array([[0, 3, 1], [2, 2, 0]])
ROWS = np.array([2, 0, 2, 1])
GATHER = np.array([[0, 2, 1, 1], [3, 0, 0, 2]])

CASES = [
    *[_unary(n) for n in ("exp", "expm1", "sin", "cos", "atan", "sinh", "cosh", "tanh",
                          "asinh", "erf", "sigmoid", "neg", "abs", "square", "relu", "floor",
                          "ceil", "round", "sign")],
    *[_unary(n, POSITIVE) for n in ("log", "log1p", "sqrt", "rsqrt", "reciprocal")],
    *[_unary(n, UNIT) for n in ("asin", "acos", "atanh", "tan")],
    _unary("acosh", ABOVE_ONE),
    *[_functional(n) for n in ("silu", "hardswish", "softplus", "mish")],
    _case("gelu", lambda lib, F, x: F.gelu(x), [(3, 5)], (-3.0, 3.0)),
    _case("gelu_tanh", lambda lib, F, x: F.gelu(x, approximate="tanh"), [(3, 5)], (-3.0, 3.0)),
    _case("add_broadcast", lambda lib, F, a, b: a + b, [(2, 3, 4), (3, 1)]),
    _case("sub_scalar", lambda lib, F, a, b: 2.0 - a - b * 3.0, [(3, 4), (4,)]),
    _case("mul", lambda lib, F, a, b: a * b, [(2, 3), (2, 1)]),
    _case("div", lambda lib, F, a, b: a / b, [(3, 4), (3, 4)], POSITIVE),
    _case("pow", lambda lib, F, a, b: a ** b, [(3, 4), (3, 4)], POSITIVE),
    _case("pow_scalar", lambda lib, F, a: a ** 3.0, [(5,)]),
    _case("remainder", lambda lib, F, a, b: lib.remainder(a, b), [(6,), (6,)], POSITIVE),
    _case("fmod", lambda lib, F, a, b: lib.fmod(a, b), [(6,), (6,)], POSITIVE),
    _case("maximum", lambda lib, F, a, b: lib.maximum(a, b), [(3, 4), (4,)]),
    _case("minimum", lambda lib, F, a, b: lib.minimum(a, b), [(3, 4), (3, 4)]),
    _case("where", lambda lib, F, a, b: lib.where(a > b, a * 2.0, b), [(3, 4), (3, 4)]),
    _case("clamp", lambda lib, F, a: a.clamp(-0.5, 0.7), [(4, 5)]),
    _case("masked_fill", lambda lib, F, a: a.masked_fill(a > 0.5, 0.0), [(4, 5)]),
    _case("sum", lambda lib, F, x: x.sum(), [(3, 4)]),
    _case("sum_dims", lambda lib, F, x: x.sum((0, 2), keepdim=True), [(2, 3, 4)]),
    _case("mean", lambda lib, F, x: x.mean(-1), [(3, 4)]),
    _case("prod", lambda lib, F, x: x.prod(1), [(3, 4)], POSITIVE),
    _case("amax", lambda lib, F, x: x.amax(1), [(3, 5)]),
    _case("amin", lambda lib, F, x: x.amin((0, 1)), [(3, 5)]),
    _case("max_dim", lambda lib, F, x: x.max(1).values, [(3, 5)]),
    _case("var_std", lambda lib, F, x: x.var(1, keepdim=True) + x.std(0, keepdim=True), [(4, 5)]),
    _case("cumsum", lambda lib, F, x: x.cumsum(1), [(3, 5)]),
    _case("cumprod", lambda lib, F, x: _op(lib, F, "cumprod")(x, 1), [(3, 4)],
          POSITIVE),
    _case("matmul", lambda lib, F, a, b: a @ b, [(3, 4), (4, 5)]),
    _case("matmul_batched", lambda lib, F, a, b: a @ b, [(2, 1, 3, 4), (3, 4, 2)]),
    _case("matmul_vector", lambda lib, F, a, b: a @ b, [(4,), (2, 4, 3)]),
    _case("einsum", lambda lib, F, a, b: _op(lib, F, "einsum")("ij,jk->ik", a, b),
          [(3, 4), (4, 2)]),
    _case("softmax", lambda lib, F, x: F.softmax(x, 1), [(3, 4, 5)]),
    _case("log_softmax", lambda lib, F, x: F.log_softmax(x, -1), [(3, 5)]),
    _case("layer_norm", lambda lib, F, x, w, b: F.layer_norm(x, (5,), w, b, 1e-5),
          [(3, 5), (5,), (5,)]),
    _case("rms_norm", lambda lib, F, x, w: F.rms_norm(x, (5,), w, 1e-6), [(3, 5), (5,)]),
    _case("reshape_permute", lambda lib, F, x: x.reshape(4, 6).t().reshape(2, 12)
          .permute(1, 0).flatten(), [(2, 3, 4)]),
    _case("expand_unsqueeze", lambda lib, F, x: x.unsqueeze(1).expand(3, 4, 5).squeeze(),
          [(3, 5)]),
    _case("slices", lambda lib, F, x: x[1:, ::2] * x[:2, 1::2], [(3, 4)]),
    _case("flip_narrow", lambda lib, F, x: x.flip(1).narrow(0, 1, 2), [(3, 4)]),
    _case("cat", lambda lib, F, a, b: lib.cat([a, b * 2.0], 1), [(2, 3), (2, 2)]),
    _case("stack_split", lambda lib, F, a: lib.stack([a, a * a], 0).split(1, 1)[1], [(2, 3)]),
    _case("tril_triu", lambda lib, F, x: x.tril() + x.triu(1) * 3.0, [(4, 4)]),
    _case("pad", lambda lib, F, x: F.pad(x, (1, 2, 0, 1)), [(2, 3)]),
    _case("gather", lambda lib, F, x, i: x.gather(1, i), [(2, 5), None], ints={1: GATHER[:, :3]}),
    _case("index_select", lambda lib, F, x, i: x.index_select(0, i), [(3, 4), None],
          ints={1: ROWS}),
    _case("embedding", lambda lib, F, i, w: F.embedding(i, w), [None, (4, 6)],
          ints={0: IDS}),
    _case("index_copy", lambda lib, F, x, i, s: x.index_copy(0, i, s), [(5, 3), None, (2, 3)],
          ints={1: np.array([3, 0])}),
    _case("scatter", lambda lib, F, x, i, s: _op(lib, F, "scatter")(x, 1, i, s),
          [(2, 5), None, (2, 3)], ints={1: np.array([[0, 2, 4], [1, 3, 0]])}),
    _case("scatter_add", lambda lib, F, x, i, s: _op(lib, F, "scatter_add")(x, 1, i, s)
          if lib is torch else F.scatter(x, 1, i, s, reduce="add"),
          [(2, 5), None, (2, 3)], ints={1: np.array([[0, 2, 2], [1, 1, 0]])}),
    _case("cast", lambda lib, F, x: (x.to(lib.float16).to(lib.float64) * x).sum(0), [(3, 4)]),
    _case("linear", lambda lib, F, x, w, b: F.linear(x, w, b), [(2, 3, 6), (4, 6), (4,)]),
    _case("attention", lambda lib, F, q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True), [(1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8)]),
    _case("conv1d", lambda lib, F, x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
          [(2, 3, 9), (4, 3, 3), (4,)]),
    _case("conv2d", lambda lib, F, x, w: F.conv2d(x, w, padding=1, dilation=2),
          [(2, 2, 6, 5), (3, 2, 3, 2)]),
    _case("conv2d_stride1", lambda lib, F, x, w, b: F.conv2d(x, w, b, padding=(1, 0)),
          [(2, 3, 5, 6), (4, 3, 3, 2), (4,)]),  # dx as a conv of the flipped weights
    _case("conv2d_groups", lambda lib, F, x, w: F.conv2d(x, w, stride=(2, 1), groups=2),
          [(1, 4, 5, 5), (6, 2, 2, 3)]),
    _case("conv_transpose1d", lambda lib, F, x, w: F.conv_transpose1d(x, w, stride=2),
          [(1, 3, 4), (3, 2, 3)]),
    _case("max_pool2d", lambda lib, F, x: F.max_pool2d(x, 2), [(1, 2, 4, 6)]),
    _case("max_pool2d_overlapping", lambda lib, F, x: F.max_pool2d(x, 3, stride=2, padding=1),
          [(1, 2, 5, 6)]),  # windows that do not tile: through the decomposition
    _case("avg_pool2d", lambda lib, F, x: F.avg_pool2d(x, 2, stride=1), [(1, 2, 4, 5)]),
]


def _namespace(lib):
    return (fuel, FF) if lib == "fuel" else (torch, TF)


def _samples(shapes, low_high, ints, dtype, seed):
    rng = np.random.default_rng(seed)
    arrays = []
    for position, shape in enumerate(shapes):
        if position in ints:
            arrays.append(ints[position])
        else:
            arrays.append(rng.uniform(*low_high, size=shape).astype(dtype))
    return arrays


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn, shapes, low_high, ints", CASES)
def test_gradient_matches_torch(fn, shapes, low_high, ints, dtype):
    arrays = _samples(shapes, low_high, ints, dtype, seed=len(shapes))
    floats = [i for i in range(len(arrays)) if i not in ints]
    t_inputs = [torch.tensor(a, requires_grad=i in floats) for i, a in enumerate(arrays)]
    t_out = fn(torch, TF, *t_inputs)
    cotangent = np.random.default_rng(7).uniform(-1, 1, size=tuple(t_out.shape)).astype(dtype)
    (t_out * torch.tensor(cotangent)).sum().backward()
    f_inputs = [fuel.tensor(a, requires_grad=i in floats) for i, a in enumerate(arrays)]
    f_out = fn(fuel, FF, *f_inputs)
    assert f_out.shape == tuple(t_out.shape)
    (f_out * fuel.tensor(cotangent)).sum().backward()
    for i in floats:
        expected = t_inputs[i].grad.numpy()
        got = f_inputs[i].grad
        assert got is not None, f"no gradient for input {i}"
        np.testing.assert_allclose(got.numpy(), expected, **TOLERANCE[dtype],
                                   err_msg=f"input {i}")


def test_max_pool_gives_a_tied_window_gradient_to_its_first_maximum():
    """torch's max_pool backward: a window whose maximum appears twice (relu's zeros, equal
    pixels) sends its gradient to the first one only."""
    x = np.array([[[[0, 0, 1, 1], [0, 0, 1, 0], [2, 3, 5, 5], [3, 1, 5, 5]]]], np.float32)
    w = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2) + 1
    ours = fuel.tensor(x, requires_grad=True)
    (FF.max_pool2d(ours, 2) * fuel.tensor(w)).sum().backward()
    theirs = torch.tensor(x, requires_grad=True)
    (TF.max_pool2d(theirs, 2) * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(ours.grad.numpy(), theirs.grad.numpy())
