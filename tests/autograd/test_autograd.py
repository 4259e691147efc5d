"""fuel.autograd's surface against torch: accumulation, graph retention, grad mode, detach,
hooks, retained grads, double backward and the errors a user can cause."""

import numpy as np
import pytest

import fuel

torch = pytest.importorskip("torch")


def _both(values, **kw):
    data = np.asarray(values, dtype=np.float64)
    return fuel.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)


def test_gradients_accumulate_across_backward_calls():
    x, tx = _both([1.0, -2.0, 3.0])
    for _ in range(2):
        (x * x).sum().backward()
        (tx * tx).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    assert x.is_leaf and x.requires_grad and x.grad.is_realized


def test_backward_realizes_the_output_and_grads_in_one_plan():
    x = fuel.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    loss = (x.exp() * 2.0).sum()
    loss.backward()
    assert loss.is_realized and x.grad.is_realized
    np.testing.assert_allclose(loss.item(), 2 * np.exp(np.arange(6.0)).sum())


def test_second_backward_needs_retain_graph():
    x, _ = _both([1.0, 2.0])
    y = (x.sin() * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * (np.sin([1.0, 2.0]) + [1, 2] * np.cos(
        [1.0, 2.0])))
    with pytest.raises(fuel.FuelError, match="second time"):
        y.backward()


def test_no_grad_and_enable_grad():
    x, _ = _both([1.0, 2.0])
    with fuel.no_grad():
        y = x * 2.0
        with fuel.enable_grad():
            z = x * 3.0
    assert not y.requires_grad and z.requires_grad
    assert fuel.is_grad_enabled()

    @fuel.no_grad()
    def doubled(t):
        return t * 2.0

    assert not doubled(x).requires_grad
    with fuel.set_grad_enabled(False):
        assert not (x + 1.0).requires_grad
    assert fuel.is_grad_enabled()


def test_detach_cuts_the_graph():
    x, tx = _both([0.5, 1.5])
    y = x * x
    loss = (y.detach() * x).sum()
    loss.backward()
    (tx * tx).detach().mul(tx).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    assert not y.detach().requires_grad and y.requires_grad and not y.is_leaf


def test_hooks_and_retain_grad():
    x, tx = _both([1.0, 2.0, 3.0])
    seen = []
    handle = x.register_hook(lambda g: seen.append(g.numpy()) or g * 2.0)
    y = x * 3.0
    y.retain_grad()
    y.sum().backward()
    np.testing.assert_allclose(seen[0], [3.0, 3.0, 3.0])
    np.testing.assert_allclose(x.grad.numpy(), [6.0, 6.0, 6.0])
    np.testing.assert_allclose(y.grad.numpy(), [1.0, 1.0, 1.0])
    handle.remove()
    x.grad = None
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 3.0, 3.0])


def test_autograd_grad_and_double_backward():
    x, tx = _both([0.3, -1.2, 2.0])
    (g,) = fuel.autograd.grad((x.tanh() * x ** 3.0).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad((tx.tanh() * tx ** 3).sum(), tx, create_graph=True)
    np.testing.assert_allclose(g.numpy(), tg.detach().numpy(), rtol=1e-12)
    assert x.grad is None  # grad() touches no .grad
    (g * g).sum().backward()
    (tg * tg).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10)


def test_gradient_argument_and_non_scalar_outputs():
    x, tx = _both([[1.0, 2.0], [3.0, 4.0]])
    weights = np.array([[1.0, -1.0], [0.5, 2.0]])
    (x * x).backward(fuel.tensor(weights))
    (tx * tx).backward(torch.tensor(weights))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())
    with pytest.raises(fuel.InvalidArgument, match="scalar output"):
        (x * x).backward()


def test_errors_a_user_can_cause():
    with pytest.raises(fuel.FuelError, match="floating-point"):
        fuel.tensor([1, 2]).requires_grad_()
    with pytest.raises(fuel.FuelError, match="does not require grad"):
        fuel.tensor([1.0]).sum().backward()
    x = fuel.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(fuel.FuelError, match="in-place"):
        x[0] = 5.0
    with fuel.no_grad():
        x[0] = 5.0  # allowed: the leaf keeps requiring grad
    assert x.requires_grad and x.is_leaf
    np.testing.assert_allclose(x.numpy(), [5.0, 2.0])
    q = fuel.from_quantized(np.zeros((1, 34), np.uint8), fuel.q8_0, (1, 32)) \
        if hasattr(fuel, "from_quantized") else None
    if q is not None:
        a = fuel.tensor(np.ones((2, 32), np.float32), requires_grad=True)
        with pytest.raises(fuel.FuelError, match="quantized_matmul is not differentiable"):
            fuel.quantized_matmul(a, q).sum().backward()


def test_gradients_flow_through_a_realized_intermediate():
    x, tx = _both([0.1, 0.2, 0.3])
    h = (x * 4.0).exp().realize()
    (h * x).sum().backward()
    ((tx * 4.0).exp() * tx).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)


# Ops with no gradient rule, no decomposition and not declared non-differentiable: each one's
# output is never floating point (masks, indices, bits, strings) or it has no inputs.
NO_FLOAT_OUTPUT = {
    "load", "full", "arange", "logical_not", "isnan", "bitwise_not", "int_div", "eq", "ne",
    "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "bitwise_and",
    "bitwise_or", "bitwise_xor", "bitshift_left", "bitshift_right", "argmax",
    "string_concat", "string_split", "string_normalize", "full_match",
}


def test_every_op_has_a_gradient_or_says_it_has_none():
    from fuel.graph.decompositions import DECOMPOSITIONS
    from fuel.ir.ops import OPS

    unaccounted = {kind.value for kind in OPS if kind not in fuel.autograd.RULES
                   and kind not in DECOMPOSITIONS and kind not in fuel.autograd.NOT_DIFFERENTIABLE}
    assert unaccounted == NO_FLOAT_OUTPUT


def test_the_backward_graph_is_fused_like_the_forward():
    x = fuel.tensor(np.linspace(-1, 1, 64).reshape(8, 8).astype(np.float32), requires_grad=True)
    loss = ((x * 2.0).tanh() * x.sigmoid()).sum()
    with fuel.profile() as profile:
        loss.backward()
    names = profile.table_text()
    assert "fused(" in names, names
    expected = torch.tensor(x.numpy(), requires_grad=True)
    ((expected * 2.0).tanh() * expected.sigmoid()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), expected.grad.numpy(), rtol=1e-5, atol=1e-6)
