"""CONV_BLOCKED (convolution on NCHW16c channels, conv.c's lanes form launched blocked) and
the blocking copies at a chain's ends, against the float64 reference."""

from __future__ import annotations

import numpy as np
import pytest

import fuel
from fuel.backends.cpu import convolution_blocked
from fuel.dispatch.kernel import global_table
from fuel.frontend.build import make
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind
from fuel.ir.params import ConvEpilogueParams, ConvParams
from tests.backends.cpu.test_convolution_c import CPU, _run, reference
from tests.backends.kernel_cases.convolution import epilogue_reference

needs_blocked = pytest.mark.skipif(not convolution_blocked.available(),
                                   reason="conv.c's blocked launch needs AVX-512")


def blocked(a: np.ndarray) -> np.ndarray:
    n, c, h, w = a.shape
    return np.ascontiguousarray(a.reshape(n, c // 16, 16, h, w).transpose(0, 1, 3, 4, 2))


def planar(a: np.ndarray) -> np.ndarray:
    n, blocks, h, w, _ = a.shape
    return np.ascontiguousarray(a.transpose(0, 1, 4, 2, 3).reshape(n, blocks * 16, h, w))


CASES = [  # (N, C, H, W, M, K, stride, pad, dilation, threads)
    (1, 64, 7, 7, 64, 3, 1, 1, 1, "2"),      # 49 positions: pieces of 13 and 12
    (2, 16, 9, 11, 48, 3, 2, 1, 1, "1"),     # a last block of 16 (one vector), stride 2
    (1, 64, 14, 14, 32, 1, 1, 0, 1, "2"),    # pointwise: the blocked input read in place
    (1, 48, 10, 9, 16, 1, 2, 0, 1, "2"),     # strided pointwise: the positions it reads
    (1, 16, 5, 6, 64, 5, 1, 2, 2, "1"),      # dilated 5x5, padded past the input
    (3, 32, 13, 13, 80, 3, 1, 1, 1, "2"),    # a batch, 80 = two blocks and a half
    (1, 272, 6, 5, 32, 3, 1, 0, 1, "2"),     # K over two K blocks, unpadded
    (1, 32, 30, 29, 32, 3, 1, 1, 1, "2"),    # rows of 29: pieces of 14 and 15 -> 10+10+9
    # inputs of a MiB or more an image, read by several blocks: units of row parts
    (2, 256, 32, 33, 80, 1, 1, 0, 1, "2"),   # pointwise, three blocks, a batch
    (1, 128, 46, 45, 48, 3, 1, 1, 1, "1"),   # 3x3 read as stored, edges, one thread
]

GROUPED = [  # groups of whole blocks in and out: (N, C, H, W, M, K, stride, pad, dilation,
    # threads, groups)
    (1, 32, 14, 14, 32, 3, 2, 1, 1, "2", 2),   # regnet_x's: groups of 16, stride 2
    (2, 64, 9, 7, 64, 3, 1, 1, 1, "1", 4),     # four groups, a batch
    (1, 96, 7, 7, 96, 3, 1, 1, 1, "2", 2),     # groups of 48: a block of 32 and one of 16
    (1, 32, 10, 10, 64, 1, 1, 0, 1, "2", 2),   # pointwise, 16 in and 32 out a group
]


STEMS = [  # a planar image in (conv_direct.c's strided stem storing blocked channels)
    (1, 3, 224, 224, 16, 3, 2, 1, 1, "2"),   # mobilenet_v3's: interior and edge tiles
    (2, 3, 37, 41, 32, 3, 2, 1, 1, "1"),     # two blocks, rows ending in partial tiles
    (1, 1, 30, 29, 16, 7, 2, 3, 1, "2"),     # one channel, 7x7
    (1, 4, 33, 35, 16, 4, 4, 0, 1, "2"),     # stride 4, unpadded
    (1, 3, 40, 40, 16, 3, 3, 40, 2, "1"),    # dilated, a pad wider than a tile's reach
]


def _fallback(arrays, out_shape, params) -> np.ndarray:
    """convolution_blocked's NumPy launch (no AVX-512, or a layout it does not take)."""
    device = CPU.devices()[0]
    layouts = [Layout.contiguous(a.shape) for a in arrays] + [Layout.contiguous(out_shape)]
    result = CPU.allocate(device, dt.float32, layouts[-1].numel)
    convolution_blocked.planar([CPU.upload(device, a) for a in arrays], [result], layouts,
                               params)
    return planar(np.asarray(CPU.download(result, layouts[-1])))


def _check(arrays, out_shape, params, expected, fallback: bool) -> None:
    """The C launch (prepared once, launched twice) and, with ``fallback``, the NumPy one
    against ``expected`` (planar)."""
    entry = global_table().lookup_alternatives(OpKind.CONV_BLOCKED, (dt.float32,) * 5,
                                               BackendId.CPU)[0]
    got = planar(_run(entry, arrays, out_shape, params, launches=2))
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * scale)
    if fallback:
        np.testing.assert_allclose(_fallback(arrays, out_shape, params), expected, rtol=1e-4,
                                   atol=1e-4 * scale)


@needs_blocked
@pytest.mark.parametrize("case", CASES + STEMS + GROUPED)
@pytest.mark.parametrize("activation", ["relu", "clip", "silu", "hard_swish", ""])
def test_blocked_launch_matches_the_reference(monkeypatch, case, activation):
    """Every position, channel block and epilogue part of a blocked launch, constant
    weights (transposed once) or not, a residual or none; a stem's (fewer than 16 channels
    in) reads its image planar and stores a position's 16 channels as one vector, and its
    NumPy fallback does the same, as does a grouped launch's."""
    n, c, h, w, m, k, stride, pad, dilation, threads = case[:10]
    groups = case[10] if len(case) > 10 else 1
    stem = c < 16
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(c * m + h)
    conv = ConvParams((stride, stride), (pad, pad), (pad, pad), (dilation, dilation), groups)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    cg = c // groups
    weight = (rng.standard_normal((m, cg, k, k)) / np.sqrt(cg * k * k)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    y = reference(x, weight, conv)
    extra = rng.standard_normal(y.shape).astype(np.float32)
    out_shape = (y.shape[0], m // 16, y.shape[2], y.shape[3], 16)
    if stem:
        assert make(OpKind.CONV_BLOCKED, tuple(fuel.from_numpy(a)._node for a in (x, weight,
                                                                                  bias)),
                    ConvEpilogueParams(conv)).shape == out_shape
    for residual, constant in ((True, True), (False, False)):
        params = ConvEpilogueParams(conv, activation, -0.5, 0.75, residual, constant)
        expected = epilogue_reference(y, params, bias, extra if residual else None, None)
        arrays = [x if stem else blocked(x), weight, bias] + (
            [blocked(extra)] if residual else [])
        _check(arrays, out_shape, params, expected, fallback=stem or groups > 1)


@needs_blocked
@pytest.mark.parametrize("case", [case for case in CASES if case[1] >= 16])
def test_an_input_scale_scales_each_images_weights(monkeypatch, case):
    """``input_scale``: the launch of x times scale[n, c] (a squeeze-excite's multiply
    folded in) is the reference convolution of the scaled input, every image with its own
    scale (each unit's weights scaled by its image's), constant weights or not, with a
    residual or none, over one K block or two; the NumPy fallback the same."""
    n, c, h, w, m, k, stride, pad, dilation, threads = case
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(c * m + h + 1)
    conv = ConvParams((stride, stride), (pad, pad), (pad, pad), (dilation, dilation), 1)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    scale = rng.uniform(0.0, 2.0, (n, c)).astype(np.float32)
    weight = (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    y = reference(x * scale[:, :, None, None], weight, conv)
    extra = rng.standard_normal(y.shape).astype(np.float32)
    out_shape = (y.shape[0], m // 16, y.shape[2], y.shape[3], 16)
    for residual, constant in ((True, True), (False, False)):
        params = ConvEpilogueParams(conv, "silu", 0.0, 0.0, residual, constant,
                                    input_scale=True)
        expected = epilogue_reference(y, params, bias, extra if residual else None, None)
        arrays = [blocked(x), weight, bias] + ([blocked(extra)] if residual else []) + [scale]
        _check(arrays, out_shape, params, expected, fallback=True)
        node = make(OpKind.CONV_BLOCKED, tuple(fuel.from_numpy(a)._node for a in arrays), params)
        assert node.shape == out_shape
    with pytest.raises(fuel.FuelError, match="input scale"):  # one scale per image and channel
        make(OpKind.CONV_BLOCKED, tuple(fuel.from_numpy(a)._node for a in
                                        (blocked(x), weight, bias, scale[:, :c // 2])),
             ConvEpilogueParams(conv, input_scale=True))


@needs_blocked
@pytest.mark.parametrize("seed", range(12))
def test_blocked_input_read_as_stored_skips_the_padding(monkeypatch, seed):
    """A blocked input is read in place (no padded copy): every tap in the padding is
    skipped, per row (top and bottom) and per edge position (left and right, one at a time),
    over random shapes: pads unequal on the two sides or wider than the kernel's reach,
    rectangular kernels, strides, dilations, planes shorter than the window, grouped (rows
    of at least 14 outputs: narrower ones take the padded copy)."""
    rng = np.random.default_rng(seed)
    groups = int(rng.choice([1, 1, 2]))
    c, m = 16 * groups * int(rng.integers(1, 3)), 16 * int(rng.integers(1, 4)) * groups
    kh, kw = (int(v) for v in rng.integers(1, 6, size=2))
    sh, sw, dh, dw = (int(v) for v in rng.integers(1, 4, size=4))
    begin, end = tuple(int(v) for v in rng.integers(0, 4, size=2)), \
        tuple(int(v) for v in rng.integers(0, 4, size=2))
    h = max(int(rng.integers(1, 20)), (kh - 1) * dh + 1 - begin[0] - end[0])
    w = 13 * sw + (kw - 1) * dw + 1 + int(rng.integers(0, 8))  # rows of at least 14 outputs
    monkeypatch.setenv("FUEL_THREADS", str(1 + seed % 2))
    conv = ConvParams((sh, sw), begin, end, (dh, dw), groups)
    x = rng.standard_normal((2, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((m, c // groups, kh, kw)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    y = reference(x, weight, conv)
    out_shape = (2, m // 16, y.shape[2], y.shape[3], 16)
    params = ConvEpilogueParams(conv, "relu", 0.0, 0.0, False, True)
    expected = epilogue_reference(y, params, bias, None, None)
    _check([blocked(x), weight, bias], out_shape, params, expected, fallback=False)


DEPTHWISE = [  # (N, C, H, W, K, stride, pad, dilation, threads)
    (1, 32, 14, 14, 3, 1, 1, 1, "2"),     # a small plane: its rows copied between zeros
    (2, 48, 9, 23, 3, 2, 1, 1, "2"),      # stride 2, odd width, a batch
    (1, 16, 7, 7, 5, 1, 2, 1, "1"),       # 5x5 over a 7x7 plane: every position a border
    (1, 64, 30, 33, 3, 1, 2, 2, "2"),     # dilated, padded past the taps: interior tiles
    (1, 32, 12, 40, 7, 2, 3, 1, "1"),     # 7x7 stride 2, long rows (several tiles)
    (1, 16, 6, 5, 3, 1, 0, 1, "2"),       # unpadded: rows shorter than a tile
    (1, 16, 40, 12, 3, 1, 1, 1, "2"),     # padded copies, two strips of rows a plane
]


@needs_blocked
@pytest.mark.parametrize("case", DEPTHWISE)
@pytest.mark.parametrize("activation", ["clip", "silu", "hard_swish", ""])
def test_blocked_depthwise_matches_the_reference(monkeypatch, case, activation):
    """depthwise.c's blocked form (groups == C == M): every position and block, bias,
    residual and activation as it stores; the NumPy fallback the same."""
    n, c, h, w, k, stride, pad, dilation, threads = case
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(c + h * w)
    conv = ConvParams((stride, stride), (pad, pad), (pad, pad), (dilation, dilation), c)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = (rng.standard_normal((c, 1, k, k)) / k).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float32)
    y = reference(x, weight, conv)
    extra = rng.standard_normal(y.shape).astype(np.float32)
    out_shape = (y.shape[0], c // 16, y.shape[2], y.shape[3], 16)
    for residual in (True, False):
        params = ConvEpilogueParams(conv, activation, -0.5, 0.75, residual, True)
        expected = epilogue_reference(y, params, bias, extra if residual else None, None)
        arrays = [blocked(x), weight, bias] + ([blocked(extra)] if residual else [])
        _check(arrays, out_shape, params, expected, fallback=True)



ENTRIES = [  # a planar value into the blocks, scaled and shifted: (N, C, H, W, threads)
    (1, 64, 56, 56, "2"),   # densenet's: pieces of 1024 positions, a last one of 64
    (2, 48, 7, 9, "1"),     # 63 positions: a last step of 15 (masked loads), a batch
    (3, 16, 1, 1, "2"),     # one position an image, one block
    (1, 32, 33, 35, "2"),   # 1155 positions: a piece and a part of one
]


@needs_blocked
@pytest.mark.parametrize("case", ENTRIES)
@pytest.mark.parametrize("activation", ["relu", "clip", "silu", ""])
def test_an_entry_scales_shifts_and_activates_each_channel(monkeypatch, case, activation):
    """A chain's entry (a depthwise 1x1 launch on a planar input): each channel's scale
    (the weight), shift (the bias) and activation applied as the value is blocked, against
    the reference convolution (two sets of scales, one of them larger); the NumPy fallback
    the same; a depthwise 3x3 or strided one on a planar input is refused."""
    n, c, h, w, threads = case
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(c + h * w)
    conv = ConvParams((1, 1), (0, 0), (0, 0), (1, 1), c)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    out_shape = (n, c // 16, h, w, 16)
    params = ConvEpilogueParams(conv, activation, -0.5, 0.75)
    for seed in (1, 2):
        weight = rng.standard_normal((c, 1, 1, 1)).astype(np.float32) * seed
        bias = rng.standard_normal(c).astype(np.float32)
        expected = epilogue_reference(reference(x, weight, conv), params, bias, None, None)
        _check([x, weight, bias], out_shape, params, expected, fallback=True)
    node = make(OpKind.CONV_BLOCKED, tuple(fuel.from_numpy(a)._node for a in (x, weight, bias)),
                params)
    assert node.shape == out_shape
    for kernel, stride in ((3, 1), (1, 2)):
        wide = ConvParams((stride, stride), (kernel // 2,) * 2, (kernel // 2,) * 2, (1, 1), c)
        with pytest.raises(fuel.FuelError, match="depthwise"):
            make(OpKind.CONV_BLOCKED, (fuel.from_numpy(x)._node, fuel.from_numpy(
                np.ones((c, 1, kernel, kernel), np.float32))._node, fuel.from_numpy(bias)._node),
                ConvEpilogueParams(wide))


JOINED = [  # (N, C, H, W, threads, parts: (M, K, stride, pad, activation) each)
    (1, 16, 13, 13, "2", ((64, 1, 1, 0, "relu"), (64, 3, 1, 1, "relu"))),  # a fire's expands
    (3, 32, 9, 11, "2", ((48, 3, 1, 1, "clip"), (16, 1, 1, 0, ""), (32, 5, 1, 2, "silu"))),
    (2, 16, 12, 10, "1", ((32, 3, 2, 1, ""), (16, 1, 2, 0, "relu"))),  # strided, a batch
]


@pytest.mark.parametrize("case", JOINED)
@pytest.mark.parametrize("constant", [True, False])
def test_joined_parts_store_into_their_blocks_of_one_output(monkeypatch, case, constant):
    """CONV_BLOCKED_CAT: each part's launch writes its channel blocks into its slice of the
    output, every image's (the output's image stride is the parts' channels together), as
    the concat of the parts' reference convolutions; its NumPy launch does the same."""
    from fuel.ir.params import ConvPartsParams

    n, c, h, w, threads, parts = case
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(c + h)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    arrays, params, expected = [], [], []
    for m, k, stride, pad, activation in parts:
        conv = ConvParams((stride, stride), (pad, pad), (pad, pad), (1, 1), 1)
        weight = (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
        bias = rng.standard_normal(m).astype(np.float32)
        part = ConvEpilogueParams(conv, activation, -0.5, 0.75, False, constant)
        expected.append(epilogue_reference(reference(x, weight, conv), part, bias, None, None))
        arrays += [blocked(x), weight, bias]
        params.append(part)
    expected = np.concatenate(expected, axis=1)
    params = ConvPartsParams(tuple(params))
    nodes = tuple(fuel.from_numpy(a)._node for a in arrays)
    out_shape = (n, expected.shape[1] // 16, *expected.shape[2:], 16)
    assert make(OpKind.CONV_BLOCKED_CAT, nodes, params).shape == out_shape
    entry = global_table().lookup_alternatives(OpKind.CONV_BLOCKED_CAT,
                                               (dt.float32,) * (len(arrays) + 1),
                                               BackendId.CPU)[0]
    got = planar(_run(entry, arrays, out_shape, params, launches=2))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    device = CPU.devices()[0]
    layouts = [Layout.contiguous(a.shape) for a in arrays] + [Layout.contiguous(out_shape)]
    result = CPU.allocate(device, dt.float32, layouts[-1].numel)
    convolution_blocked.concat_planar([CPU.upload(device, a) for a in arrays], [result],
                                      layouts, params)
    np.testing.assert_allclose(planar(np.asarray(CPU.download(result, layouts[-1]))),
                               expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(fuel.FuelError, match="differ only in their channel blocks"):
        narrower = fuel.from_numpy(blocked(x[..., :-2]))._node  # the first part's alone
        make(OpKind.CONV_BLOCKED_CAT, (narrower, *nodes[1:]), params)

@pytest.mark.parametrize("shape", [(1, 32, 7, 9), (2, 16, 1, 17), (1, 48, 13, 13)])
def test_blocking_copies_match_numpy(shape):
    """The permuted copies that enter and leave a chain (conv.c's 16 x 16 transposes where
    it is built with AVX-512), masked tails of 1 to 15 positions."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    n, c, h, w = shape
    value = fuel.from_numpy(x).reshape(n, c // 16, 16, h, w).permute(0, 1, 3, 4, 2)
    into = value.contiguous()
    np.testing.assert_array_equal(into.numpy(), blocked(x))
    back = into.permute(0, 1, 4, 2, 3).contiguous().reshape(n, c, h, w)
    np.testing.assert_array_equal(back.numpy(), x)


def test_blocked_rule_and_shapes():
    """The shape rule takes blocked operands only; the link rule's bounds."""
    x = fuel.from_numpy(np.zeros((1, 2, 5, 5, 16), np.float32))._node
    w = fuel.from_numpy(np.zeros((48, 32, 3, 3), np.float32))._node
    b = fuel.from_numpy(np.zeros(48, np.float32))._node
    conv = ConvParams((1, 1), (1, 1), (1, 1), (1, 1), 1)
    node = make(OpKind.CONV_BLOCKED, (x, w, b), ConvEpilogueParams(conv))
    assert node.shape == (1, 3, 5, 5, 16)
    bad = fuel.from_numpy(np.zeros((40, 32, 3, 3), np.float32))._node
    with pytest.raises(fuel.FuelError, match="blocks of 16"):
        make(OpKind.CONV_BLOCKED, (x, bad, fuel.from_numpy(np.zeros(40, np.float32))._node),
             ConvEpilogueParams(conv))
    depthwise = ConvParams((1, 1), (1, 1), (1, 1), (1, 1), 32)
    w = fuel.from_numpy(np.zeros((32, 1, 3, 3), np.float32))._node
    b = fuel.from_numpy(np.zeros(32, np.float32))._node
    node = make(OpKind.CONV_BLOCKED, (x, w, b), ConvEpilogueParams(depthwise))
    assert node.shape == (1, 2, 5, 5, 16)
    grouped = ConvParams((1, 1), (1, 1), (1, 1), (1, 1), 2)  # groups of one block each
    w = fuel.from_numpy(np.zeros((32, 16, 3, 3), np.float32))._node
    assert make(OpKind.CONV_BLOCKED, (x, w, b), ConvEpilogueParams(grouped)).shape == \
        (1, 2, 5, 5, 16)
    halves = ConvParams((1, 1), (1, 1), (1, 1), (1, 1), 4)  # groups of 8 channels
    w = fuel.from_numpy(np.zeros((32, 8, 3, 3), np.float32))._node
    with pytest.raises(fuel.FuelError, match="groups of whole blocks"):
        make(OpKind.CONV_BLOCKED, (x, w, b), ConvEpilogueParams(halves))
    worth = convolution_blocked.worth_blocking
    assert worth((1, 64, 56, 56), (64, 64, 3, 3), (1, 64, 56, 56), conv)
    assert not worth((1, 64, 128, 128), (64, 64, 3, 3), (1, 64, 128, 128), conv)
    assert not worth((1, 16, 56, 56), (16, 16, 3, 3), (1, 16, 56, 56), conv)
    pointwise = ConvParams((1, 1), (0, 0), (0, 0), (1, 1), 1)  # one block out: a pointwise link
    assert worth((8, 128, 55, 55), (16, 128, 1, 1), (8, 16, 55, 55), pointwise)
    assert worth((8, 16, 55, 55), (64, 16, 3, 3), (8, 64, 55, 55), conv)


@pytest.mark.parametrize("op", [OpKind.MAX_POOL, OpKind.AVG_POOL])
@pytest.mark.parametrize("window", [  # (H, K, stride, pads, dilation, ceil, count pad)
    (13, 3, 2, 0, 0, 1, True, False), (14, 3, 2, 1, 1, 1, False, False),
    (9, 2, 2, 0, 1, 1, False, True), (10, 3, 1, 1, 1, 2, False, True),
    (7, 7, 1, 0, 0, 1, False, False)])
def test_blocked_pools_match_planar_pools(op, window):
    """A 2-d window over (N, C/16, H, W, 16) (pool.c's blocked form) pools as the planar
    window does, a NaN winning its max windows."""
    from fuel.ir.params import PoolParams

    h, k, stride, begin, end, dilation, ceil, count = window
    x = np.random.default_rng(h).standard_normal((2, 32, h, h + 1)).astype(np.float32)
    x[0, 3, 2, 2] = np.nan
    params = PoolParams((k, k), (stride, stride), (begin, begin), (end, end),
                        (dilation, dilation), ceil, count)
    expected = make(op, (fuel.from_numpy(x)._node,), params).numpy()
    windows = PoolParams((k, k, 1), (stride, stride, 1), (begin, begin, 0), (end, end, 0),
                         (dilation, dilation, 1), ceil, count)
    got = make(op, (fuel.from_numpy(blocked(x))._node,), windows).numpy()
    np.testing.assert_allclose(planar(got), expected, rtol=1e-6, atol=1e-6, equal_nan=True)



@pytest.mark.parametrize("op", [OpKind.MAX_POOL, OpKind.AVG_POOL])
@pytest.mark.parametrize("plane", [(1, 1), (3, 5), (7, 7), (112, 111)])
def test_blocked_whole_plane_pools_match_planar_pools(op, plane):
    """A window over the whole unpadded plane (GlobalAveragePool, GlobalMaxPool: pool.c's
    in-order reduction, four accumulators and a tail) pools as the planar window does, a
    NaN winning its max."""
    from fuel.ir.params import PoolParams

    h, w = plane
    x = np.random.default_rng(h * w).standard_normal((2, 32, h, w)).astype(np.float32)
    x[1, 17, h // 2, w - 1] = np.nan
    params = PoolParams((h, w), (1, 1), (0, 0), (0, 0), (1, 1), False, False)
    expected = make(op, (fuel.from_numpy(x)._node,), params).numpy()
    windows = PoolParams((h, w, 1), (1, 1, 1), (0, 0, 0), (0, 0, 0), (1, 1, 1), False, False)
    got = make(op, (fuel.from_numpy(blocked(x))._node,), windows).numpy()
    np.testing.assert_allclose(planar(got), expected, rtol=2e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("op", [OpKind.MAX_POOL, OpKind.AVG_POOL])
@pytest.mark.parametrize("stride", [1, 2, 3])
def test_blocked_pools_over_rows_wider_than_one_pass(op, stride):
    """Rows wider than pool.c's BLOCKED_COLUMNS are pooled in several passes, each window
    whole, as the planar window pools them."""
    from fuel.backends.cpu.convolution_c import BLOCKED_COLUMNS
    from fuel.ir.params import PoolParams

    width = 2 * BLOCKED_COLUMNS + 37
    x = np.random.default_rng(stride).standard_normal((1, 16, 4, width)).astype(np.float32)
    x[0, 5, 1, BLOCKED_COLUMNS] = np.nan
    params = PoolParams((3, 5), (stride, stride), (1, 2), (1, 2), (1, 1), True, False)
    expected = make(op, (fuel.from_numpy(x)._node,), params).numpy()
    windows = PoolParams((3, 5, 1), (stride, stride, 1), (1, 2, 0), (1, 2, 0), (1, 1, 1),
                         True, False)
    got = make(op, (fuel.from_numpy(blocked(x))._node,), windows).numpy()
    np.testing.assert_allclose(planar(got), expected, rtol=1e-6, atol=1e-6, equal_nan=True)

@needs_blocked
def test_weights_from_a_feed_are_read_on_every_launch():
    """Weights that are not constant (a feed's) are transposed at each launch of a prepared
    blocked launcher, not once when it is prepared."""
    from fuel.backends import find_backend
    from fuel.ir.layout import Layout

    cpu = find_backend(BackendId.CPU)
    device = cpu.devices()[0]
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 32, 6, 6)).astype(np.float32)
    weight = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
    bias = np.zeros(32, np.float32)
    arrays = [blocked(x), weight.copy(), bias]  # the upload may share the array
    storages = [cpu.upload(device, a) for a in arrays]
    out_layout = Layout.contiguous((1, 2, 6, 6, 16))
    output = cpu.allocate(device, dt.float32, out_layout.numel)
    conv = ConvParams((1, 1), (1, 1), (1, 1), (1, 1), 1)
    params = ConvEpilogueParams(conv, "", 0.0, 0.0, False, constant_weights=False)
    entry = global_table().lookup_alternatives(OpKind.CONV_BLOCKED, (dt.float32,) * 4,
                                               BackendId.CPU)[0]
    launch = entry.kernel.prepare(storages, [output],
                                  [Layout.contiguous(a.shape) for a in arrays] + [out_layout],
                                  params)
    for scale in (1.0, -2.0):
        storages[1].buffer[...] = (scale * weight).reshape(-1)
        launch()
        got = planar(np.asarray(cpu.download(output, out_layout)))
        expected = reference(x, scale * weight, conv)
        np.testing.assert_allclose(got, expected, rtol=1e-4,
                                   atol=1e-4 * np.abs(expected).max())
