"""Naive NumPy references (explicit loops, float64) for the kernel suite: convolution,
transposed convolution, pooling, scatter and grid sampling. Slow and obviously correct."""

from __future__ import annotations

import itertools
import math

import numpy as np


def conv(x, w, strides, begin, end, dilations, groups):
    """Cross-correlation from the definition, one output element at a time."""
    n, channels = x.shape[:2]
    out_channels = w.shape[0]
    kernel = w.shape[2:]
    spatial = x.shape[2:]
    sizes = [(spatial[i] + begin[i] + end[i] - (kernel[i] - 1) * dilations[i] - 1)
             // strides[i] + 1 for i in range(len(kernel))]
    out = np.zeros((n, out_channels) + tuple(sizes))
    per_group_in = channels // groups
    per_group_out = out_channels // groups
    for b, m in itertools.product(range(n), range(out_channels)):
        g = m // per_group_out
        for position in itertools.product(*(range(s) for s in sizes)):
            total = 0.0
            for c in range(per_group_in):
                for tap in itertools.product(*(range(k) for k in kernel)):
                    source = [position[i] * strides[i] - begin[i] + tap[i] * dilations[i]
                              for i in range(len(kernel))]
                    if all(0 <= s < size for s, size in zip(source, spatial)):
                        total += x[(b, g * per_group_in + c) + tuple(source)] * \
                            w[(m, c) + tap]
            out[(b, m) + position] = total
    return out


def conv_transpose(x, w, strides, begin, end, dilations, groups, output_padding):
    """Transposed convolution by scattering every input element through the kernel."""
    n, channels = x.shape[:2]
    per_group_in = channels // groups
    per_group_out = w.shape[1]
    kernel = w.shape[2:]
    spatial = x.shape[2:]
    full = [strides[i] * (spatial[i] - 1) + (kernel[i] - 1) * dilations[i] + 1
            + output_padding[i] for i in range(len(kernel))]
    result = np.zeros((n, per_group_out * groups) + tuple(full))
    for b, c in itertools.product(range(n), range(channels)):
        g = c // per_group_in
        for position in itertools.product(*(range(s) for s in spatial)):
            for m in range(per_group_out):
                for tap in itertools.product(*(range(k) for k in kernel)):
                    target = tuple(position[i] * strides[i] + tap[i] * dilations[i]
                                   for i in range(len(kernel)))
                    result[(b, g * per_group_out + m) + target] += \
                        x[(b, c) + position] * w[(c, m) + tap]
    crop = tuple(slice(begin[i], full[i] - end[i]) for i in range(len(kernel)))
    return result[(slice(None), slice(None)) + crop]


def pool_size(size, kernel, stride, begin, end, dilation, ceil_mode):
    span = (kernel - 1) * dilation + 1
    room = size + begin + end - span
    if not ceil_mode:
        return room // stride + 1
    count = math.ceil(room / stride) + 1
    if (count - 1) * stride >= size + begin:
        count -= 1
    return count


def pool(x, params, kind):
    """max / avg / indices pooling over the trailing dims, window by window."""
    rank = len(params.kernel)
    lead, spatial = x.shape[:x.ndim - rank], x.shape[x.ndim - rank:]
    sizes = [pool_size(spatial[i], params.kernel[i], params.strides[i], params.pads_begin[i],
                       params.pads_end[i], params.dilations[i], params.ceil_mode)
             for i in range(rank)]
    out = np.zeros(tuple(lead) + tuple(sizes))
    for head in itertools.product(*(range(s) for s in lead)):
        plane = x[head]
        for position in itertools.product(*(range(s) for s in sizes)):
            values, flat, padded = [], [], 0
            for tap in itertools.product(*(range(k) for k in params.kernel)):
                source = [position[i] * params.strides[i] - params.pads_begin[i]
                          + tap[i] * params.dilations[i] for i in range(rank)]
                inside = all(0 <= s < n for s, n in zip(source, spatial))
                in_explicit = all(-params.pads_begin[i] <= source[i]
                                  < spatial[i] + params.pads_end[i] for i in range(rank))
                if inside:
                    values.append(plane[tuple(source)])
                    flat.append(_flat_position(source, spatial, params.storage_order))
                elif in_explicit:
                    padded += 1
            out[head + position] = _pool_value(kind, values, flat, padded, params)
    return out


def _flat_position(source, spatial, storage_order):
    if storage_order == 1:
        source, spatial = list(reversed(source)), list(reversed(spatial))
    position = 0
    for s, n in zip(source, spatial):
        position = position * n + s
    return position


def _pool_value(kind, values, flat, padded, params):
    if kind == "max":
        return max(values)
    if kind == "indices":
        return flat[int(np.argmax(values))]
    total = float(np.sum(values))
    if not params.divide:
        return total
    return total / (len(values) + (padded if params.count_include_pad else 0))


def scatter_elements(data, index, updates, dim, reduction):
    out = np.array(data, copy=True)
    for position in itertools.product(*(range(s) for s in index.shape)):
        target = list(position)
        target[dim] = int(index[position]) % data.shape[dim]
        _combine(out, tuple(target), updates[position], reduction)
    return out


def scatter_nd(data, index, updates, reduction):
    out = np.array(data, copy=True)
    depth = index.shape[-1]
    for position in itertools.product(*(range(s) for s in index.shape[:-1])):
        target = tuple(int(index[position + (k,)]) % data.shape[k] for k in range(depth))
        _combine(out, target, updates[position], reduction)
    return out


def _combine(out, target, value, reduction):
    if reduction == "none":
        out[target] = value
    elif reduction == "add":
        out[target] = out[target] + value
    elif reduction == "mul":
        out[target] = out[target] * value
    elif reduction == "max":
        out[target] = np.maximum(out[target], value)
    else:
        out[target] = np.minimum(out[target], value)


def _reflect(x, low, high):
    span = high - low
    while x < low or x > high:
        x = 2 * low - x if x < low else 2 * high - x
    return x if span > 0 else low


def _cubic(t, a=-0.75):
    t = abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    if t < 2:
        return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a
    return 0.0


def grid_sample_2d(x, grid, mode, padding, align_corners):
    """ONNX GridSample on (N, C, H, W) one output point at a time."""
    n, channels, height, width = x.shape
    out = np.zeros((n, channels) + grid.shape[1:3])
    for b, i, j in itertools.product(range(n), range(grid.shape[1]), range(grid.shape[2])):
        gx, gy = grid[b, i, j]
        coords = []
        for g, size in ((gy, height), (gx, width)):
            if align_corners:
                value, low, high = (g + 1) / 2 * (size - 1), 0.0, size - 1.0
            else:
                value, low, high = ((g + 1) * size - 1) / 2, -0.5, size - 0.5
            if mode == "nearest":
                value = float(np.rint(value))
            if value < low or value > high:
                if padding == "border":
                    value = min(max(value, 0), size - 1)
                elif padding == "reflection":
                    value = _reflect(value, low, high)
            coords.append((value, size, low, high))
        out[b, :, i, j] = _interpolate(x[b], coords, mode, padding)
    return out


def _interpolate(plane, coords, mode, padding):
    taps_per_dim = []
    for value, _, _, _ in coords:
        if mode == "nearest":
            taps_per_dim.append([(int(value), 1.0)])
            continue
        base = math.floor(value)
        t = value - base
        if mode == "linear":
            taps_per_dim.append([(base, 1 - t), (base + 1, t)])
        else:
            taps_per_dim.append([(base + k - 1, _cubic(t + 1 - k)) for k in range(4)])
    total = np.zeros(plane.shape[0])
    for combination in itertools.product(*taps_per_dim):
        weight, index, valid = 1.0, [], True
        for (position, w), (_, size, low, high) in zip(combination, coords):
            if padding == "zeros" and not 0 <= position < size:
                valid = False
            elif padding == "reflection":
                position = int(_reflect(float(position), low, high))
            index.append(min(max(position, 0), size - 1))
            weight *= w
        if valid:
            total += weight * plane[:, index[0], index[1]]
    return total
