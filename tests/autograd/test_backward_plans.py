"""A backward seen before runs its remembered plan (fuel.frontend.backward_plans): the same
gradients, bit for bit, as the general path, no gradient rule run, and the general path
wherever hooks, retained or accumulated grads, other leaves or another wiring say so."""

import numpy as np
import pytest

import fuel
import fuel.nn as nn
import fuel.nn.functional as F
import fuel.optim as optim
from fuel.frontend import backward as backward_module
from fuel.frontend import backward_plans


class _Pool(nn.Module):
    def forward(self, x):
        return F.max_pool2d(x, 2)


def _model(kind="mlp"):
    layers = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)) if kind == "mlp" else \
        nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(), _Pool(), nn.Flatten(),
                      nn.Linear(12, 3))
    rng = np.random.default_rng(0)
    layers.load_state_dict({name: rng.standard_normal(p.shape).astype(np.float32) * 0.5
                            for name, p in layers.named_parameters()})
    return layers


def _batches(count, kind="mlp"):
    rng = np.random.default_rng(1)
    shape = (5, 6) if kind == "mlp" else (5, 1, 4, 4)
    return [(rng.standard_normal(shape).astype(np.float32), rng.integers(0, 3, 5))
            for _ in range(count)]


def _train(enabled, steps=8, peek=False, kind="mlp"):
    backward_plans.PLANS.clear()
    saved = backward_plans.ENABLED
    backward_plans.ENABLED = enabled
    try:
        model = _model(kind)
        opt = optim.Adam(model.parameters(), lr=1e-2)
        losses, grads = [], []
        for x, y in _batches(steps, kind):
            opt.zero_grad()
            logits = model(fuel.tensor(x))
            if peek:  # an intermediate realized before the backward (its record kept)
                logits.numpy()
            loss = F.cross_entropy(logits, fuel.tensor(y))
            loss.backward()
            grads.append([p.grad.numpy().copy() for p in model.parameters()])
            opt.step()
            losses.append(loss.item())
        return losses, grads, [p.numpy().copy() for p in model.parameters()]
    finally:
        backward_plans.ENABLED = saved


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_remembered_backward_equals_the_general_path_bit_for_bit(kind):
    reference = _train(False, kind=kind)
    replayed = _train(True, kind=kind)
    assert len(backward_plans.PLANS) == 1
    # Its inputs, new tensors each step, were copied into the plan's own storages.
    bound = next(iter(backward_plans.PLANS.values())).plan.replay
    assert bound.reuse_outputs and bound.staged and bound.kept_bytes() > 0
    assert replayed[0] == reference[0]
    for ours, theirs in zip(replayed[1] + [replayed[2]], reference[1] + [reference[2]]):
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b)


def test_remembered_backward_runs_no_gradient_rule(monkeypatch):
    model = _model()
    x, y = _batches(1)[0]
    backward_plans.PLANS.clear()
    for _ in range(2):  # the plan is cached by the first, remembered by the second
        model.zero_grad()
        F.cross_entropy(model(fuel.tensor(x)), fuel.tensor(y)).backward()
    calls = []
    general = backward_module.run_backward
    monkeypatch.setattr(backward_module, "run_backward",
                        lambda *a, **k: calls.append(1) or general(*a, **k))
    model.zero_grad()
    F.cross_entropy(model(fuel.tensor(x)), fuel.tensor(y)).backward()
    assert calls == [] and all(p.grad.is_realized for p in model.parameters())
    model.zero_grad()
    x_leaf = fuel.tensor(x, requires_grad=True)  # another leaf wants a gradient
    F.cross_entropy(model(x_leaf), fuel.tensor(y)).backward()
    assert calls == [1] and x_leaf.grad is not None


def _warm(model, x, y):
    backward_plans.PLANS.clear()
    for _ in range(3):
        model.zero_grad()
        F.cross_entropy(model(fuel.tensor(x)), fuel.tensor(y)).backward()
    assert backward_plans.PLANS


def _grads(model, x, y):
    backward_plans.ENABLED = False
    try:
        model.zero_grad()
        F.cross_entropy(model(fuel.tensor(x)), fuel.tensor(y)).backward()
        return [p.grad.numpy().copy() for p in model.parameters()]
    finally:
        backward_plans.ENABLED = True


def test_hooks_retained_and_accumulated_grads_take_the_general_path():
    model = _model()
    x, y = _batches(1)[0]
    _warm(model, x, y)
    expected = _grads(model, x, y)
    seen = []
    weight = model[0].weight
    handle = weight.register_hook(lambda g: seen.append(g.shape))
    model.zero_grad()
    F.cross_entropy(model(fuel.tensor(x)), fuel.tensor(y)).backward()
    assert seen == [weight.shape]
    handle.remove()
    model.zero_grad()
    hidden = model[0](fuel.tensor(x))
    hidden.retain_grad()
    F.cross_entropy(model[2](model[1](hidden)), fuel.tensor(y)).backward()
    assert hidden.grad is not None and hidden.grad.shape == hidden.shape
    model.zero_grad()
    for _ in range(2):  # no zero_grad between: the second accumulates
        F.cross_entropy(model(fuel.tensor(x)), fuel.tensor(y)).backward()
    for p, e in zip(model.parameters(), expected):
        np.testing.assert_allclose(p.grad.numpy(), 2 * e, rtol=1e-6, atol=1e-7)


def test_retain_graph_and_a_second_pass():
    model = _model()
    x, y = _batches(1)[0]
    _warm(model, x, y)
    expected = _grads(model, x, y)
    model.zero_grad()
    loss = F.cross_entropy(model(fuel.tensor(x)), fuel.tensor(y))
    loss.backward(retain_graph=True)
    for p, e in zip(model.parameters(), expected):
        np.testing.assert_array_equal(p.grad.numpy(), e)
    model.zero_grad()
    loss.backward()  # the graph was kept
    for p, e in zip(model.parameters(), expected):
        np.testing.assert_array_equal(p.grad.numpy(), e)
    model.zero_grad()
    with pytest.raises(fuel.FuelError, match="second time"):
        loss.backward()


def test_a_gradient_the_user_keeps_is_never_overwritten():
    model = _model()
    batches = _batches(6)
    _warm(model, *batches[0])
    kept, views, values = [], [], []
    for x, y in batches[1:]:
        model.zero_grad()
        F.cross_entropy(model(fuel.tensor(x)), fuel.tensor(y)).backward()
        grad = model[2].weight.grad
        values.append(grad.numpy().copy())
        if len(kept) < 2:
            kept.append(grad)  # the tensor kept
        else:
            views.append(grad.numpy())  # or only a NumPy view of its buffer
        del grad
    for tensor, value in zip(kept, values):
        np.testing.assert_array_equal(tensor.numpy(), value)
    for view, value in zip(views, values[2:]):
        np.testing.assert_array_equal(view, value)
    assert len({id(v) for v in values}) == len(values)
    assert not all(np.array_equal(values[0], v) for v in values[1:])


def test_a_dropped_gradient_is_written_again_in_place():
    """zero_grad drops the gradients, so the next step's backward writes them into the same
    buffers (the fused optimizer step in between holds none of them)."""
    model = _model()
    batches = _batches(5)
    _warm(model, *batches[0])
    opt = optim.Adam(model.parameters(), lr=1e-2)
    addresses = []
    for x, y in batches[1:]:
        opt.zero_grad()
        F.cross_entropy(model(fuel.tensor(x)), fuel.tensor(y)).backward()
        addresses.append([p.grad._node.buffer.buffer.ctypes.data for p in model.parameters()])
        opt.step()
    assert all(step == addresses[1] for step in addresses[1:])


def test_a_forward_realized_in_part_replays_the_same():
    reference = _train(False, peek=True)
    replayed = _train(True, peek=True)
    assert len(backward_plans.PLANS) == 1
    assert replayed[0] == reference[0]
    for ours, theirs in zip(replayed[1] + [replayed[2]], reference[1] + [reference[2]]):
        for a, b in zip(ours, theirs):
            np.testing.assert_array_equal(a, b)
