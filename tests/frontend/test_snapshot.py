"""NodeSnapshot (``Tensor.node_snapshot``): restoring points tensors back at the nodes they had,
undoing the rebinding of in-place ops but not writes a realize already made."""

import numpy as np
import pytest

import fuel
from fuel.frontend.snapshot import NodeSnapshot

ZEROS = np.zeros((4, 3), np.float32)
ROWS = np.arange(6, dtype=np.float32).reshape(2, 3) + 1


def _write_rows(x):
    x.index_copy_(0, fuel.from_numpy(np.array([1, 3], np.int64)), fuel.from_numpy(ROWS))


def test_restore_undoes_the_rebinding_of_in_place_ops():
    x = fuel.from_numpy(ZEROS.copy())
    snapshot = x.node_snapshot()
    _write_rows(x)
    x[0] = 7.0
    assert not x.is_realized  # the in-place ops made x a lazy node
    snapshot.restore()
    assert x.is_realized
    np.testing.assert_array_equal(x.numpy(), ZEROS)


def test_the_context_manager_restores_every_tensor_also_on_an_error():
    a, b = fuel.from_numpy(ZEROS.copy()), fuel.from_numpy(ZEROS.copy() + 2)
    nodes = [a._node, b._node]
    with pytest.raises(ValueError, match="halfway"), NodeSnapshot([a, b]) as snapshot:
        assert len(snapshot) == 2
        _write_rows(a)
        b[1] = 5.0
        raise ValueError("halfway")
    assert [a._node, b._node] == nodes
    np.testing.assert_array_equal(b.numpy(), ZEROS + 2)


def test_writes_a_realize_made_in_place_stay():
    x = fuel.from_numpy(ZEROS.copy())
    storage = x._node.buffer
    expected = ZEROS.copy()
    expected[[1, 3]] = ROWS
    with x.node_snapshot():
        _write_rows(x)
        fuel.realize(x)
        assert x._node.buffer is storage  # written into the leaf's own storage
    assert x.is_realized and x._node.buffer is storage
    np.testing.assert_array_equal(x.numpy(), expected)


def test_a_snapshot_takes_only_tensors():
    with pytest.raises(fuel.InvalidArgument, match="takes tensors"):
        NodeSnapshot([fuel.from_numpy(ZEROS), ZEROS])
