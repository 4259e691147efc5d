"""Kernel-suite cases of convolution and transposed convolution (N-d, groups, dilations)."""

from __future__ import annotations

import numpy as np

from fuel.ir.ops import OpKind
from fuel.ir.params import ConvEpilogueParams, ConvParams, ConvPartsParams
from tests.backends.kernel_cases import references as naive
from tests.backends.kernel_cases.base import Case, compute, operand, rng_for, tolerance, values

K = OpKind


def _conv_data(d, shape, rng):
    return values(d, shape, rng, -3, 3) if not d.is_floating else values(d, shape, rng)


CONV_PLANS = [  # input, weight, strides, begin, end, dilations, groups
    ((1, 2, 7), (3, 2, 3), (2,), (1,), (0,), (1,), 1),
    ((2, 4, 6, 5), (6, 2, 3, 2), (1, 2), (1, 0), (2, 1), (2, 1), 2),
    ((1, 2, 4, 3, 3), (2, 2, 2, 2, 2), (1, 1, 2), (0, 1, 0), (1, 0, 1), (1, 1, 1), 1),
]


def conv_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("conv", dtypes)
    rtol, atol = tolerance(d, loose=True)
    cases = []
    for i, (xs, ws, strides, begin, end, dilations, groups) in enumerate(CONV_PLANS):
        params = ConvParams(strides, begin, end, dilations, groups)
        operands = [operand(_conv_data(d, xs, rng), "stepped" if i == 1 else "dense"),
                    operand(_conv_data(d, ws, rng), "transposed" if i == 2 else "dense")]
        cases.append(Case(params, operands, lambda a, p: naive.conv(
            compute(a[0]), compute(a[1]), p.strides, p.pads_begin, p.pads_end, p.dilations,
            p.groups).astype(d.numpy), f"conv#{i}", rtol, atol))
    return cases


def conv_transpose_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("conv_transpose", dtypes)
    rtol, atol = tolerance(d, loose=True)
    plans = [((1, 2, 4), (2, 3, 3), (2,), (1,), (0,), (1,), 1, (1,)),
             ((2, 4, 3, 2), (4, 1, 2, 3), (2, 1), (0, 1), (1, 0), (1, 2), 2, (1, 0))]
    cases = []
    for i, (xs, ws, strides, begin, end, dilations, groups, padding) in enumerate(plans):
        params = ConvParams(strides, begin, end, dilations, groups, padding)
        operands = [operand(_conv_data(d, xs, rng), "flipped" if i else "dense"),
                    operand(_conv_data(d, ws, rng))]
        cases.append(Case(params, operands, lambda a, p: naive.conv_transpose(
            compute(a[0]), compute(a[1]), p.strides, p.pads_begin, p.pads_end, p.dilations,
            p.groups, p.output_padding).astype(d.numpy), f"conv_transpose#{i}", rtol, atol))
    return cases


def epilogue_reference(y, params, bias, residual, slope):
    """CONV_FUSED's epilogue from its definition, in float64."""
    channel = (1, -1) + (1,) * (y.ndim - 2)
    y = y + bias.reshape(channel)
    if residual is not None:
        y = y + residual
    kind, alpha, beta = params.activation, params.alpha, params.beta
    if kind == "relu":
        return np.maximum(y, 0)
    if kind == "clip":
        return np.clip(y, alpha, beta)
    if kind == "sigmoid":
        return 1 / (1 + np.exp(-y))
    if kind == "silu":
        return y / (1 + np.exp(-y))
    if kind == "tanh":
        return np.tanh(y)
    if kind == "hard_sigmoid":
        return np.clip(alpha * y + beta, 0, 1)
    if kind == "hard_swish":
        return y * np.clip(y / 6 + 0.5, 0, 1)
    if kind == "leaky_relu":
        return np.where(y >= 0, y, alpha * y)
    if kind == "prelu":
        return np.where(y >= 0, y, slope.reshape(channel) * y)
    return y


# input, weight, strides, begin, end, dilations, groups, activation, alpha, beta, residual:
# one of each form (depthwise, pointwise, im2col, 1-d, 3-d) and every activation.
FUSED_PLANS = [
    ((2, 4, 9, 10), (4, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 4, "relu", 0.0, 0.0, True),
    ((1, 5, 7, 21), (5, 1, 5, 5), (2, 2), (2, 2), (2, 2), (1, 1), 5, "hard_swish", 0, 0, False),
    ((2, 6, 5, 7), (8, 6, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 1, "clip", 0.0, 6.0, False),
    ((2, 6, 5, 7), (6, 3, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 2, "silu", 0, 0, True),
    ((1, 3, 8, 9), (4, 3, 3, 3), (2, 1), (1, 0), (0, 1), (1, 2), 1, "sigmoid", 0, 0, False),
    ((1, 4, 6, 6), (6, 2, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 2, "hard_sigmoid", 0.2, 0.5,
     True),
    ((2, 3, 11), (4, 3, 3), (2,), (1,), (1,), (1,), 1, "leaky_relu", 0.1, 0.0, False),
    ((1, 4, 6, 5), (4, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, "prelu", 0, 0, True),
    ((1, 2, 4, 3, 3), (2, 2, 2, 2, 2), (1, 1, 1), (0, 1, 0), (1, 0, 1), (1, 1, 1), 1, "tanh",
     0, 0, False),
    ((1, 3, 6, 6), (3, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1, "", 0, 0, False),
]


def conv_fused_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("conv_fused", dtypes)
    rtol, atol = tolerance(d, loose=True)
    cases = []
    for i, plan in enumerate(FUSED_PLANS):
        xs, ws, strides, begin, end, dilations, groups, kind, alpha, beta, residual = plan
        operand_count = 3 + residual + (kind == "prelu")
        if operand_count != len(dtypes) - 1:
            continue
        params = ConvEpilogueParams(ConvParams(strides, begin, end, dilations, groups), kind,
                                    float(alpha), float(beta), residual)
        out_shape = (xs[0], ws[0]) + tuple(
            (size + b + e - (k - 1) * dil - 1) // s + 1 for size, k, s, b, e, dil in
            zip(xs[2:], ws[2:], strides, begin, end, dilations))
        arrays = [_conv_data(d, xs, rng), _conv_data(d, ws, rng), values(d, (ws[0],), rng)]
        if residual:
            arrays.append(values(d, out_shape, rng))
        if kind == "prelu":
            arrays.append(values(d, (ws[0],), rng))
        operands = [operand(a) for a in arrays]

        def reference(a, p):
            a = [compute(v) for v in a]
            y = naive.conv(a[0], a[1], p.conv.strides, p.conv.pads_begin, p.conv.pads_end,
                           p.conv.dilations, p.conv.groups)
            return epilogue_reference(y, p, a[2], a[3] if p.residual else None,
                                      a[-1]).astype(d.numpy)

        cases.append(Case(params, operands, reference, f"conv_fused#{i}", rtol, atol))
    return cases


def _blocked(a: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> (N, C/16, H, W, 16)."""
    n, c, h, w = a.shape
    return np.ascontiguousarray(a.reshape(n, c // 16, 16, h, w).transpose(0, 1, 3, 4, 2))


def _planar(a: np.ndarray) -> np.ndarray:
    n, blocks, h, w, block = a.shape
    return a.transpose(0, 1, 4, 2, 3).reshape(n, blocks * block, h, w)


# blocked conv_fused (NCHW16c): input channels, output channels, size, kernel, stride, pad,
# activation, residual, input scale (two images, each its own: the last operand)
BLOCKED_PLANS = [(32, 48, 7, 3, 1, 1, "relu", True, False),
                 (16, 32, 9, 3, 2, 1, "clip", False, False),
                 (32, 16, 6, 1, 1, 0, "silu", True, False),
                 (48, 32, 8, 1, 2, 0, "", False, False),
                 (32, 48, 7, 3, 1, 1, "relu", True, True),
                 (48, 16, 6, 1, 1, 0, "silu", False, True)]


def conv_blocked_cases(dtypes):
    d = dtypes[0]
    rng = rng_for("conv_blocked", dtypes)
    rtol, atol = tolerance(d, loose=True)
    cases = []
    for i, (c, m, size, k, stride, pad, kind, residual, scaled) in enumerate(BLOCKED_PLANS):
        if 3 + residual + scaled != len(dtypes) - 1:
            continue
        conv = ConvParams((stride, stride), (pad, pad), (pad, pad), (1, 1), 1)
        params = ConvEpilogueParams(conv, kind, 0.0, 6.0, residual, constant_weights=True,
                                    input_scale=scaled)
        out = (size + 2 * pad - k) // stride + 1
        n = 2 if scaled else 1
        arrays = [_blocked(values(d, (n, c, size, size), rng)), values(d, (m, c, k, k), rng),
                  values(d, (m,), rng)]
        if residual:
            arrays.append(_blocked(values(d, (n, m, out, out), rng)))
        if scaled:
            arrays.append(values(d, (n, c), rng))

        def reference(a, p):
            a = [compute(v) for v in a]
            x = _planar(a[0])
            if p.input_scale:
                x = x * a[-1].reshape(*x.shape[:2], 1, 1)
            y = naive.conv(x, a[1], p.conv.strides, p.conv.pads_begin,
                           p.conv.pads_end, p.conv.dilations, 1)
            y = epilogue_reference(y, p, a[2], _planar(a[3]) if p.residual else None, None)
            return _blocked(y).astype(d.numpy)

        cases.append(Case(params, [operand(a) for a in arrays], reference, f"conv_blocked#{i}",
                          rtol, atol))
    if len(dtypes) == 4:  # a chain's entry: planar in, each channel scaled, shifted, activated
        c = 32
        params = ConvEpilogueParams(ConvParams((1, 1), (0, 0), (0, 0), (1, 1), c), "relu")
        arrays = [values(d, (2, c, 9, 7), rng), values(d, (c, 1, 1, 1), rng), values(d, (c,), rng)]

        def entry(a, p):
            a = [compute(v) for v in a]
            y = naive.conv(a[0], a[1], (1, 1), (0, 0), (0, 0), (1, 1), a[0].shape[1])
            return _blocked(epilogue_reference(y, p, a[2], None, None)).astype(d.numpy)

        cases.append(Case(params, [operand(a) for a in arrays], entry, "conv_blocked#entry",
                          rtol, atol))
    return cases



def conv_blocked_cat_cases(dtypes):
    """CONV_BLOCKED_CAT of as many parts as the key has (3 operands each): 1x1 and 3x3
    parts of 16 and 32 channels over one blocked input, a batch of 2, joined by blocks."""
    d = dtypes[0]
    count = (len(dtypes) - 1) // 3
    rng = rng_for("conv_blocked_cat", dtypes)
    rtol, atol = tolerance(d, loose=True)
    x = _blocked(values(d, (2, 16, 7, 7), rng))
    arrays, parts = [], []
    for i in range(count):
        k, m = (1, 16) if i % 2 == 0 else (3, 32)
        conv = ConvParams((1, 1), (k // 2, k // 2), (k // 2, k // 2), (1, 1), 1)
        parts.append(ConvEpilogueParams(conv, "relu" if i % 2 else "", 0.0, 0.0, False, True))
        arrays += [x, values(d, (m, 16, k, k), rng), values(d, (m,), rng)]

    def reference(a, p):
        a = [compute(v) for v in a]
        pieces = []
        for j, part in enumerate(p.parts):
            x, w, b = a[3 * j:3 * j + 3]
            y = naive.conv(_planar(x), w, part.conv.strides, part.conv.pads_begin,
                           part.conv.pads_end, part.conv.dilations, 1)
            pieces.append(_blocked(epilogue_reference(y, part, b, None, None)))
        return np.concatenate(pieces, axis=1).astype(d.numpy)

    return [Case(ConvPartsParams(tuple(parts)), [operand(a) for a in arrays], reference,
                 f"conv_blocked_cat#{count}", rtol, atol)]

CASES = {
    K.CONV: conv_cases,
    K.CONV_FUSED: conv_fused_cases,
    K.CONV_BLOCKED: conv_blocked_cases,
    K.CONV_BLOCKED_CAT: conv_blocked_cat_cases,
    K.CONV_TRANSPOSE: conv_transpose_cases,
}
