"""Realized roots' host buffers come back to the pool when the user's tensor dies, unless a
NumPy view of them is still alive."""

import numpy as np

import fuel
from fuel.memory.pool import empty_cache, memory_stats


def _chain(x, scale: float):
    y = x * scale + 1.0
    y.realize()
    return y


def test_dead_root_buffer_is_reused_by_the_next_realize():
    x = fuel.tensor(np.arange(1 << 16, dtype=np.float32))
    empty_cache()
    y = _chain(x, 2.0)
    before = memory_stats()
    del y
    after_death = memory_stats()
    assert after_death["allocated"] == before["allocated"] - (1 << 18)
    assert after_death["pooled"] == before["pooled"] + (1 << 18)
    z = _chain(x, 3.0)
    after = memory_stats()
    assert after["allocations"] == before["allocations"]  # no fresh buffer
    assert after["reused"] == before["reused"] + 1
    np.testing.assert_array_equal(z.numpy(), np.arange(1 << 16, dtype=np.float32) * 3 + 1)


def test_a_live_view_keeps_the_buffer_out_of_the_pool():
    x = fuel.tensor(np.arange(1 << 16, dtype=np.float32))
    empty_cache()
    y = _chain(x, 2.0)
    node = y._node
    held = node.buffer.backend.download(node.buffer, node.layout)  # a view of the buffer
    expected = np.arange(1 << 16, dtype=np.float32) * 2 + 1
    before = memory_stats()
    del y, node
    after_death = memory_stats()
    assert after_death["pooled"] == before["pooled"]
    z = _chain(x, 5.0)
    assert memory_stats()["allocations"] == before["allocations"] + 1
    np.testing.assert_array_equal(held, expected)  # not overwritten by the next realize
    np.testing.assert_array_equal(z.numpy(), np.arange(1 << 16, dtype=np.float32) * 5 + 1)
