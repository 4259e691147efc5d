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
