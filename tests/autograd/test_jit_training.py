"""A whole training step (forward, backward, AdamW update) captured by fuel.jit replays without
building a graph and leaves the same parameters after 10 steps as the eager loop."""

import numpy as np
import pytest

import fuel
import fuel.nn as nn
import fuel.nn.functional as F
import fuel.optim as optim
from fuel.frontend import build


def _model(seed: int = 0):
    fuel.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 4))


def _batches(count: int):
    rng = np.random.default_rng(2)
    return [(rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 4, 8))
            for _ in range(count)]


def _step(model, opt):
    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


@pytest.mark.parametrize("make", [lambda p: optim.AdamW(p, lr=0.01),
                                  lambda p: optim.SGD(p, lr=0.1, momentum=0.9)])
def test_captured_step_matches_the_eager_loop(make, monkeypatch):
    eager_model, jit_model = _model(), _model()
    eager_opt, jit_opt = make(eager_model.parameters()), make(jit_model.parameters())
    eager_sched = optim.lr_scheduler.StepLR(eager_opt, 4, 0.5)
    jit_sched = optim.lr_scheduler.StepLR(jit_opt, 4, 0.5)  # the rate changes between replays
    eager_step, jitted = _step(eager_model, eager_opt), fuel.jit(_step(jit_model, jit_opt))
    built = []
    original = build.Node
    eager_losses, jit_losses = [], []
    storages = None
    for index, (x, y) in enumerate(_batches(10)):
        eager_losses.append(eager_step(fuel.tensor(x), fuel.tensor(y)).item())
        eager_sched.step()
        xs, ys = fuel.tensor(x), fuel.tensor(y)
        if index > 0:  # a replay builds no graph node (only the leaves over its outputs)
            monkeypatch.setattr(build, "Node", lambda *a, **k: built.append(a[0]) or original(
                *a, **k))
        jit_losses.append(jitted(xs, ys).item())
        monkeypatch.setattr(build, "Node", original)
        jit_sched.step()
        if index == 0:
            storages = [p._node.buffer for p in jit_model.parameters()]
    assert jitted.replays == 9
    # Replays update the parameters and the optimizer's state in place: the same storages,
    # and the capture allocates only the loss per call.
    assert all(p._node.buffer is s for p, s in zip(jit_model.parameters(), storages))
    (capture, _, effects, _), = jitted.captures.values()
    assert len(capture.inplace) == len(effects) and len(capture.outputs) == 1
    assert not [op for op in built if op is not fuel.OpKind.LOAD]
    np.testing.assert_allclose(jit_losses, eager_losses, rtol=1e-5)
    for (name, p), q in zip(jit_model.named_parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
        assert p.is_leaf and p.requires_grad


def test_a_state_read_after_its_update_is_not_written_in_place():
    """A state whose old value a later step still reads gets a storage of its own, not its
    old one; the results stay the eager ones."""
    from fuel.frontend.backward import assign

    start = np.arange(9, dtype=np.float32).reshape(3, 3) / 10
    states = {name: [fuel.tensor(start.copy()), fuel.tensor(start.T.copy())]
              for name in ("jit", "eager")}

    def step(x, w, v):
        old = w
        assign([(w, w * 2.0 + x), (v, v @ v + old)])  # v's update reads w's old value
        return w.sum()  # w's new value: planned first, before v's update

    def run(x, name):
        with fuel.no_grad():
            return step(x, *states[name])

    jitted = fuel.jit(lambda x: run(x, "jit"))
    for i in range(3):
        x = fuel.tensor(np.full((3, 3), i, np.float32))
        np.testing.assert_allclose(jitted(x).item(), run(x, "eager").item(), rtol=1e-6)
        for got, want in zip(states["jit"], states["eager"]):
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    (capture, _, effects, _), = jitted.captures.values()
    assert effects[0] is states["jit"][0]
    assert (1, 1) not in capture.inplace  # w's pair: argument 1 (after x), output 1
