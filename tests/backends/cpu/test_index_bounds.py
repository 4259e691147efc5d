"""Every CPU kernel that indexes with data refuses an out-of-range index: a KernelIndexError
(a KernelError and an IndexOutOfRange) naming the node, its op and the user's line, eager and
in a fuel.jit replay (the C index_copy through its status word, the quantized embedding and
the NumPy kernels by their checks before any access)."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
import fuel.nn.functional as F
from fuel.ir.errors import KernelError, KernelIndexError

X = np.arange(12, dtype=np.float32).reshape(3, 4)


def _quantized_table():
    from fuel.frontend.quantized import from_quantized

    gguf = pytest.importorskip("gguf")
    values = np.random.default_rng(0).normal(size=(3, 32)).astype(np.float32)
    blocks = gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q8_0)
    return from_quantized(blocks, "q8_0", (3, 32))


CALLS = {
    "gather": (lambda x, i: x.gather(1, i.reshape(1, 1)), "gather"),
    "index_select": (lambda x, i: x.index_select(0, i), "index_select"),
    "index_copy": (lambda x, i: x.index_copy(0, i, fuel.ones(1, 4)), "index_copy"),
    "scatter": (lambda x, i: F.scatter(x, 1, i.reshape(1, 1), fuel.ones(1, 1)),
                "scatter_elements"),
    "scatter_nd": (lambda x, i: F.scatter_nd(x, i.reshape(1, 1), fuel.ones(1, 4)),
                   "scatter_nd"),
    "embedding": (lambda x, i: F.embedding(i, x), "index_select"),
    "quantized_embedding": (lambda x, i: fuel.quantized_embedding(_quantized_table(), i),
                            "quantized_embedding"),
}


@pytest.mark.parametrize("bad", [7, -9, 2**40])
@pytest.mark.parametrize("name", sorted(CALLS))
def test_out_of_range_index_is_a_kernel_error_naming_the_node(name, bad):
    call, op = CALLS[name]
    index = fuel.tensor(np.array([bad], np.int64))
    result = call(fuel.tensor(X), index)
    with pytest.raises(KernelIndexError) as info:
        result.numpy()
    message = str(info.value)
    assert isinstance(info.value, KernelError)
    assert f"({op} " in message and "test_index_bounds.py" in message, message
    assert str(bad) in message, message


@pytest.mark.parametrize("name", sorted(CALLS))
def test_out_of_range_index_in_a_replay(name):
    call, op = CALLS[name]
    step = fuel.jit(lambda x, i: call(x, i))
    good = np.array([1], np.int64)
    first = step(fuel.tensor(X), fuel.tensor(good)).numpy()
    np.testing.assert_array_equal(step(fuel.tensor(X), fuel.tensor(good)).numpy(), first)
    with pytest.raises(KernelIndexError, match=rf"\({op} .*out of range"):
        step(fuel.tensor(X), fuel.tensor(np.array([9], np.int64))).numpy()


def test_refused_in_place_write_is_an_error_at_realize():
    target = fuel.from_numpy(X.copy())
    target.realize()
    target.index_copy_(0, fuel.tensor(np.array([0, 5], np.int64)), fuel.full((2, 4), -1.0))
    with pytest.raises(KernelIndexError):
        target.realize()
