"""fuel.jit keeps the captures of its most recently called signatures (each holds buffers):
a dropped signature is captured again, with the same results."""

from __future__ import annotations

import numpy as np

import fuel


def test_the_least_recently_called_signature_is_dropped():
    @fuel.jit(keep=2)
    def affine(x):
        return x * 2.0 + 1.0

    def call(size):
        x = np.arange(size, dtype=np.float32)
        np.testing.assert_array_equal(affine(fuel.from_numpy(x)).numpy(), x * 2.0 + 1.0)

    def kept():
        return sorted(signature[0][1][0] for signature in affine.captures)

    call(3), call(4), call(3)  # 3 is the most recently called
    call(5)
    assert kept() == [3, 5]
    replays = affine.replays
    call(4)  # dropped: captured again, not replayed
    assert affine.replays == replays and kept() == [4, 5]
    call(5)
    assert affine.replays == replays + 1


def test_the_default_keeps_many_signatures():
    compiled = fuel.jit(lambda x: x + 1.0)
    for size in range(1, 11):
        compiled(fuel.from_numpy(np.ones(size, np.float32)))
    assert len(compiled.captures) == 10 and compiled.keep >= 10


def test_prepare_launches_nothing_and_the_call_matches():
    def scaled(x: fuel.Tensor, y: fuel.Tensor) -> fuel.Tensor:
        return (x * 2 + y).relu().sum(-1)

    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((3, 5)).astype(np.float32) for _ in range(2))
    step = fuel.jit(scaled)
    with fuel.profile() as profile:
        step.prepare(fuel.from_numpy(np.zeros_like(x)), fuel.from_numpy(np.zeros_like(y)))
    assert profile.ops == [] and profile.launches == []  # nothing was launched
    assert len(step.captures) == 1
    got = step(fuel.from_numpy(x), fuel.from_numpy(y)).numpy()
    np.testing.assert_allclose(got, np.maximum(x * 2 + y, 0).sum(-1), rtol=1e-6)
    assert len(step.captures) == 1 and step.replays == 1  # the prepared capture ran
