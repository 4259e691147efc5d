import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fuel.ir.layout import Layout


def _as_numpy(base: np.ndarray, layout: Layout) -> np.ndarray:
    itemsize = base.itemsize
    return np.ndarray(layout.shape, base.dtype, buffer=base, offset=layout.offset * itemsize,
                      strides=tuple(s * itemsize for s in layout.strides))


shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


@settings(max_examples=60, deadline=None)
@given(shapes, st.data())
def test_permute_slice_reshape_match_numpy(shape, data):
    base = np.arange(int(np.prod(shape)), dtype=np.int64)
    layout = Layout.contiguous(shape)
    reference = base.reshape(shape)
    order = data.draw(st.permutations(range(len(shape))))
    layout = layout.permute(tuple(order))
    reference = reference.transpose(order)
    slices = []
    for size in layout.shape:
        start = data.draw(st.integers(-size, size - 1))
        step = data.draw(st.sampled_from([1, 2, -1, -2]))
        slices.append(slice(start, None, step))
    bounds = [s.indices(n) for s, n in zip(slices, layout.shape)]
    layout = layout.slice(*[tuple(b[k] for b in bounds) for k in range(3)])
    reference = reference[tuple(slices)]
    np.testing.assert_array_equal(_as_numpy(base, layout), reference)
    if layout.is_contiguous():
        assert reference.flags.c_contiguous
    flat = layout.reshape((reference.size,))
    if flat is not None:
        np.testing.assert_array_equal(_as_numpy(base, flat), reference.reshape(-1))


def test_reshape_of_transpose_needs_copy_but_split_of_dim_does_not():
    layout = Layout.contiguous((4, 6)).permute((1, 0))
    assert layout.reshape((24,)) is None
    split = Layout.contiguous((4, 6)).permute((1, 0)).reshape((2, 3, 4))
    base = np.arange(24)
    np.testing.assert_array_equal(_as_numpy(base, split),
                                  base.reshape(4, 6).T.reshape(2, 3, 4))


def test_broadcast_gives_stride_zero():
    layout = Layout.contiguous((3, 1)).broadcast_to((2, 3, 4))
    assert layout.strides == (0, 1, 0)
    base = np.arange(3)
    np.testing.assert_array_equal(_as_numpy(base, layout),
                                  np.broadcast_to(base.reshape(3, 1), (2, 3, 4)))
