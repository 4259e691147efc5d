"""fuel.optim against torch.optim: the same model, weights and batches give the same
parameters after several steps, for every optimizer option; schedulers and clipping too."""

import numpy as np
import pytest

import fuel
import fuel.nn as nn
import fuel.nn.functional as F
import fuel.optim as optim

torch = pytest.importorskip("torch")


def _models():
    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(),
                                    torch.nn.Linear(7, 3))
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    model.load_state_dict({k: v.detach().numpy() for k, v in reference.state_dict().items()})
    return model, reference


def _train(model, reference, make, make_torch, steps=6, schedule=None, clip=None):
    opt, t_opt = make(model.parameters()), make_torch(reference.parameters())
    sched = schedule[0](opt) if schedule else None
    t_sched = schedule[1](t_opt) if schedule else None
    rng = np.random.default_rng(1)
    for _ in range(steps):
        x = rng.standard_normal((8, 5)).astype(np.float32)
        y = rng.integers(0, 3, 8)
        opt.zero_grad()
        loss = F.cross_entropy(model(fuel.tensor(x)), fuel.tensor(y))
        loss.backward()
        t_opt.zero_grad()
        t_loss = torch.nn.functional.cross_entropy(reference(torch.tensor(x)), torch.tensor(y))
        t_loss.backward()
        if clip:
            norm = nn.utils.clip_grad_norm_(model.parameters(), clip)
            t_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), clip)
            np.testing.assert_allclose(norm.item(), t_norm.item(), rtol=1e-5)
        opt.step()
        t_opt.step()
        if sched:
            sched.step()
            t_sched.step()
            assert sched.get_last_lr() == pytest.approx(t_sched.get_last_lr())
        np.testing.assert_allclose(loss.item(), t_loss.item(), rtol=1e-5)
    for (name, p), t in zip(model.named_parameters(), reference.parameters()):
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=2e-5, atol=2e-6,
                                   err_msg=name)
        assert p.is_leaf and p.requires_grad


@pytest.mark.parametrize("kwargs", [dict(lr=0.1), dict(lr=0.1, momentum=0.9),
                                    dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
                                    dict(lr=0.05, momentum=0.5, dampening=0.3)])
def test_sgd(kwargs):
    _train(*_models(), lambda p: optim.SGD(p, **kwargs), lambda p: torch.optim.SGD(p, **kwargs))


@pytest.mark.parametrize("fused", [None, False])  # the in-place C kernel, the lazy graph
@pytest.mark.parametrize("name, kwargs", [
    ("Adam", dict(lr=0.01)), ("Adam", dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    ("AdamW", dict(lr=0.01)), ("AdamW", dict(lr=0.02, betas=(0.8, 0.99), weight_decay=0.3)),
    ("AdamW", dict(lr=0.01, maximize=True, amsgrad=True)),
])
def test_adam(name, kwargs, fused):
    _train(*_models(), lambda p: getattr(optim, name)(p, fused=fused, **kwargs),
           lambda p: getattr(torch.optim, name)(p, **kwargs))


def test_fused_adam_updates_in_place():
    """The eager CPU step writes the parameters and moments into their own storages (one
    kernel, nothing new allocated for them); a fused=False step builds new ones."""
    for fused, kept in ((None, True), (False, False)):
        model, _ = _models()
        opt = optim.AdamW(model.parameters(), lr=0.01, fused=fused)
        for _ in range(2):
            before = [p._node.buffer for p in model.parameters()]
            opt.zero_grad()
            model(fuel.tensor(np.ones((2, 5), np.float32))).sum().backward()
            opt.step()
        after = [p._node.buffer for p in model.parameters()]
        assert all((a is b) == kept for a, b in zip(before, after))


def test_conv_weight_gradients_are_dense_and_updated_in_place():
    """A conv's weight gradient comes in the weight's own dense layout (not a transposed view
    of the backward conv), so the fused step updates every conv parameter in place."""
    fuel.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 6, 3))
    opt = optim.Adam(model.parameters(), lr=0.01)
    x = fuel.tensor(np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32))
    for _ in range(2):
        before = [p._node.buffer for p in model.parameters()]
        opt.zero_grad()
        model(x).sum().backward()
        for p in model.parameters():
            layout = p.grad._node.layout
            assert layout.is_contiguous() and layout.offset == 0, p.shape
        opt.step()
        assert all(p._node.buffer is b for p, b in zip(model.parameters(), before))


def test_schedulers_and_clipping():
    S, T = optim.lr_scheduler, torch.optim.lr_scheduler
    _train(*_models(), lambda p: optim.AdamW(p, lr=0.01), lambda p: torch.optim.AdamW(p, lr=0.01),
           steps=6, clip=0.5, schedule=(lambda o: S.SequentialLR(o, [
               S.LinearLR(o, 0.1, 1.0, 2), S.CosineAnnealingLR(o, 4)], [2]),
               lambda o: T.SequentialLR(o, [T.LinearLR(o, 0.1, 1.0, 2),
                                            T.CosineAnnealingLR(o, 4)], [2])))
    _train(*_models(), lambda p: optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1),
           steps=5, schedule=(lambda o: S.StepLR(o, 2, 0.5), lambda o: T.StepLR(o, 2, 0.5)))


def test_zero_grad_and_errors():
    model, _ = _models()
    opt = optim.SGD(model.parameters(), lr=0.1)
    model(fuel.randn(2, 5)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    opt.zero_grad(set_to_none=False)
    assert all(float(p.grad.abs().sum()) == 0.0 for p in model.parameters())
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    with pytest.raises(fuel.InvalidArgument, match="empty"):
        optim.SGD([], lr=0.1)
    with pytest.raises(fuel.InvalidArgument, match="Nesterov"):
        optim.SGD(model.parameters(), lr=0.1, nesterov=True)


def test_fused_adam_follows_replaced_parameters_and_state():
    """The fused step's prepared call is redone when a parameter, a gradient or the state is
    another storage (load_state_dict mid-training), so the updates still land where torch's
    do."""
    model, reference = _models()
    opt = optim.Adam(model.parameters(), lr=0.01)
    t_opt = torch.optim.Adam(reference.parameters(), lr=0.01)
    rng = np.random.default_rng(2)
    for step in range(8):
        if step == 4:
            weights = {k: rng.standard_normal(v.shape).astype(np.float32)
                       for k, v in reference.state_dict().items()}
            model.load_state_dict(weights)
            reference.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
        if step == 6:
            opt.load_state_dict(opt.state_dict())
        x = rng.standard_normal((8, 5)).astype(np.float32)
        y = rng.integers(0, 3, 8)
        opt.zero_grad()
        F.cross_entropy(model(fuel.tensor(x)), fuel.tensor(y)).backward()
        opt.step()
        t_opt.zero_grad()
        torch.nn.functional.cross_entropy(reference(torch.tensor(x)), torch.tensor(y)).backward()
        t_opt.step()
    for p, t in zip(model.parameters(), reference.parameters()):
        np.testing.assert_allclose(p.numpy(), t.detach().numpy(), rtol=2e-5, atol=2e-6)
