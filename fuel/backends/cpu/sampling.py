"""NumPy kernel for grid sampling (N-d; nearest, linear or cubic; zeros, border or reflection
padding)."""

from __future__ import annotations

import itertools

import numpy as np

from fuel.backends.cpu.arrays import STRIDED, compute, kernel_list, output, view
from fuel.ir import dtype as dt
from fuel.ir.ops import OpKind

KERNELS = kernel_list()
CUBIC_A = -0.75


def reflect(x: np.ndarray, low: float, high: float) -> np.ndarray:
    """Fold coordinates outside [low, high] back in, mirroring at the borders repeatedly."""
    span = high - low
    if span <= 0:
        return np.full_like(x, low)
    below, above = x < low, x > high
    distance = np.where(below, low - x, x - high)
    turns = np.floor(distance / span)
    rest = distance - turns * span
    even = turns % 2 == 0
    from_low = np.where(even, low + rest, high - rest)
    from_high = np.where(even, high - rest, low + rest)
    return np.where(below, from_low, np.where(above, from_high, x))


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    a = CUBIC_A

    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def _taps(x: np.ndarray, mode: str):
    """Per-dim (integer positions, weights) of the interpolation taps around ``x``."""
    if mode == "nearest":
        return [(x.astype(np.int64), np.ones_like(x))]
    base = np.floor(x)
    t = x - base
    base = base.astype(np.int64)
    if mode == "linear":
        return [(base, 1 - t), (base + 1, t)]
    return [(base + k - 1, w) for k, w in enumerate(_cubic_weights(t))]


def _fetch_positions(index: np.ndarray, size: int, padding: str, low: float, high: float):
    """(clamped positions, validity mask) of integer taps under a padding mode."""
    if padding == "zeros":
        valid = (index >= 0) & (index < size)
        return np.clip(index, 0, size - 1), valid
    if padding == "border":
        return np.clip(index, 0, size - 1), None
    folded = reflect(index.astype(np.float64), low, high).astype(np.int64)
    return np.clip(folded, 0, size - 1), None


@KERNELS.kernel(OpKind.GRID_SAMPLE, [(d, d, d) for d in dt.FLOAT_DTYPES], STRIDED)
def grid_sample(inputs, outputs, layouts, params):
    x = compute(view(inputs[0], layouts[0])).astype(np.float64)
    grid = compute(view(inputs[1], layouts[1])).astype(np.float64)
    out = output(outputs[0], layouts[-1])
    n, channels = x.shape[:2]
    dims = x.shape[2:]
    rank = len(dims)
    positions = grid.reshape(n, -1, rank)[..., ::-1]  # grid lists the last dim first
    count = positions.shape[1]
    coords, borders = [], []
    for k, size in enumerate(dims):
        normalized = positions[..., k]
        if params.align_corners:
            value, low, high = (normalized + 1) / 2 * (size - 1), 0.0, size - 1.0
        else:
            value, low, high = ((normalized + 1) * size - 1) / 2, -0.5, size - 0.5
        if params.mode == "nearest":
            value = np.rint(value)
        outside = (value < low) | (value > high)
        if params.padding_mode == "border":
            value = np.where(outside, np.clip(value, 0, size - 1), value)
        elif params.padding_mode == "reflection":
            value = np.where(outside, reflect(value, low, high), value)
        coords.append(value)
        borders.append((low, high))
    flat = x.reshape(n, channels, -1)
    strides = [int(np.prod(dims[k + 1:])) for k in range(rank)]
    result = np.zeros((n, channels, count), dtype=np.float64)
    per_dim = [_taps(c, params.mode) for c in coords]
    for combination in itertools.product(*per_dim):
        index = np.zeros((n, count), dtype=np.int64)
        weight = np.ones((n, count), dtype=np.float64)
        valid = np.ones((n, count), dtype=bool)
        for k, (position, w) in enumerate(combination):
            clamped, ok = _fetch_positions(position, dims[k], params.padding_mode,
                                           *borders[k])
            index += clamped * strides[k]
            weight = weight * w
            if ok is not None:
                valid &= ok
        values = np.take_along_axis(flat, index[:, None, :], axis=2)
        result += np.where(valid[:, None, :], values * weight[:, None, :], 0.0)
    out[...] = result.reshape(out.shape)
