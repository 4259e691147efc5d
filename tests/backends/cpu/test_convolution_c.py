"""The float32 convolution siblings (fuel/backends/cpu/convolution_c.py) against a NumPy
reference over random shapes: 1-d, 2-d and 3-d, strides, dilations, asymmetric padding,
groups (dense, grouped, depthwise), odd sizes, several K blocks and partial register tiles,
with and without the fused epilogue. Every sibling of the key runs every case (a form handed
a shape it is not made for runs the general form), and each form meets the shapes it
accepts."""

from __future__ import annotations

import numpy as np
import pytest

from fuel.backends import find_backend
from fuel.backends.cpu import c_library, convolution_c
from fuel.dispatch.kernel import global_table
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind
from fuel.ir.params import CONV_ACTIVATIONS, ConvEpilogueParams, ConvParams
from tests.backends.kernel_cases.convolution import epilogue_reference

CPU = find_backend(BackendId.CPU)


def reference(x, w, params: ConvParams) -> np.ndarray:
    """Cross-correlation in float64 through sliding windows (no fuel code)."""
    rank = x.ndim - 2
    widths = [(0, 0), (0, 0)] + list(zip(params.pads_begin, params.pads_end))
    padded = np.pad(x.astype(np.float64), widths)
    spans = [(k - 1) * d + 1 for k, d in zip(w.shape[2:], params.dilations)]
    windows = np.lib.stride_tricks.sliding_window_view(padded, spans, axis=range(2, 2 + rank))
    index = (slice(None),) * 2 + tuple(slice(None, None, s) for s in params.strides)
    index += tuple(slice(None, None, d) for d in params.dilations)
    windows = windows[index]  # (N, C, O..., K...)
    n, channels = x.shape[:2]
    groups = params.groups
    grouped = windows.reshape((n, groups, channels // groups) + windows.shape[2:])
    weight = w.astype(np.float64).reshape((groups, w.shape[0] // groups) + w.shape[1:])
    letters = "pqr"[:rank]
    kernel = "uvw"[:rank]
    out = np.einsum(f"ngc{letters}{kernel},gmc{kernel}->ngm{letters}", grouped, weight)
    return out.reshape((n, w.shape[0]) + out.shape[3:])


def random_plan(rng: np.random.Generator, rank: int) -> tuple:
    """(x shape, w shape, ConvParams) with a valid output."""
    while True:
        kind = rng.choice(["dense", "grouped", "depthwise", "pointwise"])
        groups = 1
        channels = int(rng.integers(1, 40))
        out_channels = int(rng.integers(1, 40))
        if kind == "grouped":
            groups = int(rng.integers(2, 4))
            channels, out_channels = channels * groups, out_channels * groups
        elif kind == "depthwise":
            groups = channels = out_channels = int(rng.integers(1, 24))
        kernel = [1] * rank if kind == "pointwise" else [int(k) for k in rng.integers(1, 6, rank)]
        sizes = [int(s) for s in rng.integers(1, 30 if rank < 3 else 9, rank)]
        strides = [1] * rank if kind == "pointwise" else [int(s) for s in rng.integers(1, 4, rank)]
        dilations = [int(d) for d in rng.integers(1, 3, rank)]
        begin = [0] * rank if kind == "pointwise" else [int(p) for p in rng.integers(0, 3, rank)]
        end = [0] * rank if kind == "pointwise" else [int(p) for p in rng.integers(0, 3, rank)]
        outs = [(s + b + e - (k - 1) * d - 1) // st + 1 for s, k, st, b, e, d in
                zip(sizes, kernel, strides, begin, end, dilations)]
        if min(outs) >= 1:
            batch = int(rng.integers(1, 3))
            return ((batch, channels, *sizes), (out_channels, channels // groups, *kernel),
                    ConvParams(tuple(strides), tuple(begin), tuple(end), tuple(dilations),
                               groups))


def _run(entry, arrays, out_shape, params, launches: int = 1) -> np.ndarray:
    """The output of ``entry``'s kernel, prepared once and launched ``launches`` times."""
    device = CPU.devices()[0]
    storages = [CPU.upload(device, a) for a in arrays]
    layouts = [Layout.contiguous(a.shape) for a in arrays]
    out_layout = Layout.contiguous(out_shape)
    output = CPU.allocate(device, dt.float32, out_layout.numel)
    launch = entry.kernel.prepare(storages, [output], layouts + [out_layout], params)
    for _ in range(launches):
        launch()
    return np.asarray(CPU.download(output, out_layout))


def _siblings(op: OpKind, arity: int):
    entries = global_table().lookup_alternatives(op, (dt.float32,) * (arity + 1), BackendId.CPU)
    return [e for e in entries if isinstance(e.kernel, convolution_c.CConvolution)]


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_every_sibling_matches_the_reference(rank):
    rng = np.random.default_rng(100 + rank)
    siblings = _siblings(OpKind.CONV, 2)
    assert [e.kernel.form for e in siblings] == list(convolution_c.FORMS)
    met = set()
    for _ in range(30 if rank < 3 else 6):
        xs, ws, params = random_plan(rng, rank)
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        expected = reference(x, w, params)
        layouts = [Layout.contiguous(xs), Layout.contiguous(ws), Layout.contiguous(
            expected.shape)]
        for entry in siblings:
            actual = _run(entry, [x, w], expected.shape, params)
            scale = max(1.0, float(np.abs(expected).max()))
            np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4 * scale,
                                       err_msg=f"{entry.kernel.__name__} on {xs} * {ws} "
                                               f"{params}")
            if entry.kernel.accepts(layouts, params):
                met.add(entry.kernel.form)
    if rank < 3:  # winograd's, lanes' and direct's shapes are rare here: their own tests
        # (direct's in test_convolution_layouts.py)
        assert met | {"winograd", "lanes", "direct"} == set(convolution_c.FORMS), \
            f"forms met: {met}"


WINOGRAD_CASES = [  # (N, C, H, W, M, pads (top, left, bottom, right), threads)
    (1, 16, 56, 56, 16, (1, 1, 1, 1), "1"), (2, 5, 9, 7, 11, (1, 1, 1, 1), "1"),
    (1, 300, 7, 9, 13, (0, 2, 1, 0), "2"), (2, 24, 17, 33, 40, (2, 0, 0, 1), "3"),
    (1, 8, 3, 3, 9, (0, 0, 0, 0), "2"), (1, 33, 30, 2, 70, (1, 1, 1, 1), "1"),
    (3, 16, 14, 14, 24, (1, 1, 1, 1), "2")]


@pytest.mark.parametrize("case", WINOGRAD_CASES)
def test_winograd_matches_the_reference(monkeypatch, case):
    """winograd.c's F(2x2, 3x3): odd sizes (a one-column last tile), pads, channels over a K
    block, output channels off the register tile, batches, threads, every epilogue part."""
    n, c, h, w, m, pads, threads = case
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(c * m + h)
    conv = ConvParams((1, 1), pads[:2], pads[2:], (1, 1), 1)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    y = reference(x, weight, conv)
    geometry = convolution_c.Geometry.of(x.shape, weight.shape, y.shape, conv)
    assert convolution_c.accepts("winograd", geometry)
    entry = next(e for e in _siblings(OpKind.CONV, 2) if e.kernel.form == "winograd")
    scale = max(1.0, float(np.abs(y).max()))
    np.testing.assert_allclose(_run(entry, [x, weight], y.shape, conv), y, rtol=1e-4,
                               atol=1e-4 * scale)
    bias = rng.standard_normal(m).astype(np.float32)
    extra = rng.standard_normal(y.shape).astype(np.float32)
    params = ConvEpilogueParams(conv, "silu", 0.0, 0.0, True)
    expected = epilogue_reference(y, params, bias.astype(np.float64),
                                  extra.astype(np.float64), None)
    fused = next(e for e in _siblings(OpKind.CONV_FUSED, 4) if e.kernel.form == "winograd")
    np.testing.assert_allclose(_run(fused, [x, weight, bias, extra], y.shape, params),
                               expected, rtol=1e-4, atol=1e-4 * scale)
    # constant weights: transformed once when the launch is prepared, then launched twice
    constant = ConvEpilogueParams(conv, "silu", 0.0, 0.0, True, constant_weights=True)
    np.testing.assert_allclose(_run(fused, [x, weight, bias, extra], y.shape, constant,
                                    launches=2), expected, rtol=1e-4, atol=1e-4 * scale)


LANES_CASES = [  # (N, C, H, W, M, KH, KW, pads (top, left, bottom, right), threads[, strides,
    #               dilations])
    (1, 64, 7, 7, 64, 3, 3, (1, 1, 1, 1), "1"), (2, 37, 5, 9, 50, 3, 3, (1, 2, 0, 1), "2"),
    (1, 300, 13, 13, 33, 1, 1, (0, 0, 0, 0), "2"), (3, 9, 11, 17, 70, 3, 5, (2, 0, 1, 2), "3"),
    (1, 520, 7, 7, 40, 1, 1, (1, 1, 1, 1), "2"), (1, 16, 1, 12, 96, 1, 3, (0, 1, 0, 1), "1"),
    (1, 40, 14, 13, 64, 3, 3, (1, 1, 1, 1), "2", (2, 2), (1, 1)),
    (2, 7, 12, 11, 33, 3, 2, (2, 1, 0, 2), "1", (3, 2), (2, 3)),
    (1, 70, 15, 13, 64, 1, 1, (0, 0, 1, 0), "2", (2, 3), (1, 1)),
    (1, 300, 9, 9, 48, 1, 1, (0, 0, 0, 0), "2"), (2, 20, 8, 8, 13, 3, 3, (1, 1, 1, 1), "1"),
    # pointwise with LANES_COPY_BLOCKS (8) blocks or more: its planes interleaved (a last
    # group of 300 % 16 channels, a last block of 10)
    (1, 300, 9, 9, 234, 1, 1, (0, 0, 0, 0), "2"), (2, 260, 6, 5, 256, 1, 1, (0, 0, 0, 0), "1"),
    # rows of 27 positions: pieces of 14 and 13 (the widest tiles), full and half blocks
    (1, 36, 14, 27, 40, 3, 3, (1, 1, 1, 1), "1"),
    # grouped: 16 channels a group (regnet's), groups of 8, 24 and 40 channels across the
    # 16-channel interleave, 48 outputs a group (a full and a half block), a strided one and
    # a pointwise one read as stored
    (1, 64, 7, 7, 64, 3, 3, (1, 1, 1, 1), "2", (1, 1), (1, 1), 4),
    (2, 48, 9, 8, 48, 3, 3, (1, 1, 1, 1), "1", (1, 1), (1, 1), 6),
    (1, 48, 11, 10, 96, 3, 3, (1, 0, 1, 2), "2", (2, 2), (1, 1), 2),
    (1, 120, 6, 7, 30, 3, 3, (1, 1, 1, 1), "2", (1, 1), (2, 1), 3),
    (1, 64, 8, 8, 32, 1, 1, (0, 0, 0, 0), "1", (1, 1), (1, 1), 2),
    # padded rows of 44 columns: three 16-column steps of the interleaving copy, the edges
    # masked; a grouped stride-2 one over a 37-column input
    (1, 20, 9, 40, 16, 5, 5, (2, 2, 2, 2), "1"),
    (1, 32, 23, 37, 32, 3, 3, (1, 1, 1, 1), "2", (2, 2), (1, 1), 2),
    # inputs of a MiB or more an image read by several blocks: units of row parts (a
    # pointwise one as one line of positions, a padded 3x3 one by rows)
    (1, 368, 27, 27, 72, 1, 1, (0, 0, 0, 0), "2"),
    (1, 360, 27, 27, 40, 3, 3, (1, 1, 1, 1), "1")]


@pytest.mark.parametrize("case", LANES_CASES)
def test_lanes_matches_the_reference(monkeypatch, case):
    """conv_lanes.h: output rows cut into pieces of 1 to 14 positions, K over a K block,
    groups (each its own blocks of output channels),
    output channels off the 32-channel blocks (a last block of at most 16: one vector),
    pads, strides, dilations, batches, threads (row parts), a strided 1x1 (only the
    positions it reads copied), a pointwise one read as stored and one interleaved, every
    epilogue part; constant weights (transposed once) and
    weights from a feed."""
    n, c, h, w, m, kh, kw, pads, threads, strides, dilations, groups = (
        *case, *((1, 1), (1, 1), 1)[len(case) - 9:])
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(c * m + h)
    conv = ConvParams(strides, pads[:2], pads[2:], dilations, groups)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    weight = (rng.standard_normal((m, c // groups, kh, kw))
              / np.sqrt(c // groups * kh * kw)).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    y = reference(x, weight, conv)
    assert convolution_c.accepts("lanes", convolution_c.Geometry.of(x.shape, weight.shape,
                                                                     y.shape, conv))
    extra = rng.standard_normal(y.shape).astype(np.float32)
    expected = np.maximum(y + bias[None, :, None, None] + extra, 0.0)
    scale = max(1.0, float(np.abs(expected).max()))
    fused = next(e for e in _siblings(OpKind.CONV_FUSED, 4) if e.kernel.form == "lanes")
    for constant in (True, False):
        params = ConvEpilogueParams(conv, "relu", 0.0, 0.0, True, constant_weights=constant)
        np.testing.assert_allclose(_run(fused, [x, weight, bias, extra], y.shape, params,
                                        launches=2), expected, rtol=1e-4, atol=1e-4 * scale)


@pytest.mark.parametrize("form, kernel", [("lanes", 1), ("winograd", 3)])
def test_constant_weights_are_rearranged_once_per_storage(form, kernel):
    """A launcher prepared again for the same constant weight storage (a new output each
    call: a model's output), also at another batch, reuses the rearranged copy; other
    weights of the same shape get their own; each launch matches the reference."""
    if form == "lanes" and not convolution_c.avx512():
        pytest.skip("the lanes form needs conv.c's AVX-512 build")
    if form == "winograd" and convolution_c.library(convolution_c.WINOGRAD) is None:
        pytest.skip("no winograd library here")
    device = CPU.devices()[0]
    rng = np.random.default_rng(7 + kernel)
    c, m, side = 64, 64, 7 if form == "lanes" else 16
    pad = kernel // 2
    conv = ConvParams((1, 1), (pad, pad), (pad, pad), (1, 1), 1)
    params = ConvEpilogueParams(conv, "", 0.0, 0.0, False, constant_weights=True)
    fused = next(e for e in _siblings(OpKind.CONV_FUSED, 3) if e.kernel.form == form)
    weights = [(rng.standard_normal((m, c, kernel, kernel)) / 8).astype(np.float32)
               for _ in range(2)]
    bias = np.zeros(m, np.float32)
    stored = [CPU.upload(device, w) for w in weights]
    seen = []
    for which, batch in ((0, 1), (0, 2), (1, 1), (0, 1)):
        layouts = [Layout.contiguous((batch, c, side, side)),
                   Layout.contiguous(weights[0].shape), Layout.contiguous((m,))]
        out_layout = Layout.contiguous((batch, m, side, side))
        x = rng.standard_normal((batch, c, side, side)).astype(np.float32)
        output = CPU.allocate(device, dt.float32, out_layout.numel)
        fused.kernel.prepare([CPU.upload(device, x), stored[which], CPU.upload(device, bias)],
                             [output], layouts + [out_layout], params)()
        y = reference(x, weights[which], conv)
        np.testing.assert_allclose(np.asarray(CPU.download(output, out_layout)), y, rtol=1e-4,
                                   atol=1e-4 * max(1.0, float(np.abs(y).max())))
        kept = c_library._kept[stored[which]]
        assert len(kept) == 1
        seen.append(next(iter(kept.values())))
    assert seen[0] is seen[1] is seen[3] and seen[2] is not seen[0]


def test_the_rule_picks_winograd_for_large_planes():
    wide = convolution_c.Geometry(1, 64, 56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1, 1)
    small = convolution_c.Geometry(1, 512, 7, 7, 512, 3, 3, 7, 7, 1, 1, 1, 1, 1, 1, 1)
    strided = convolution_c.Geometry(1, 64, 56, 56, 64, 3, 3, 28, 28, 2, 2, 1, 1, 1, 1, 1)
    assert convolution_c.choose_form(wide) == "winograd"
    assert convolution_c.choose_form(small) == "gemm"
    lanes = "lanes" if convolution_c.avx512() else "gemm"
    assert convolution_c.choose_form(small, constant=True) == lanes
    squeeze = convolution_c.Geometry(1, 64, 13, 13, 256, 3, 3, 13, 13, 1, 1, 1, 1, 1, 1, 1)
    assert convolution_c.choose_form(squeeze) == "gemm"
    # a 13x13 map (fewer than WINOGRAD_PLANE positions): lanes, at any channel count
    assert convolution_c.choose_form(squeeze, constant=True) == (
        "lanes" if convolution_c.avx512() else "winograd")
    even = convolution_c.Geometry(1, 16, 64, 64, 16, 3, 3, 64, 64, 1, 1, 1, 1, 1, 1, 1)
    assert convolution_c.choose_form(even, constant=True) == "gemm"  # 16 in and out
    assert convolution_c.choose_form(
        convolution_c.Geometry(1, 32, 64, 64, 16, 3, 3, 64, 64, 1, 1, 1, 1, 1, 1, 1)) == "winograd"
    classifier = convolution_c.Geometry(1, 512, 13, 13, 1000, 1, 1, 13, 13, 1, 1, 1, 1, 0, 0, 1)
    assert convolution_c.choose_form(classifier, constant=True) == "gemm"  # 1000: not 16k
    squeeze27 = convolution_c.Geometry(1, 256, 27, 27, 32, 1, 1, 27, 27, 1, 1, 1, 1, 0, 0, 1)
    assert convolution_c.choose_form(squeeze27, constant=True) == "gemm"  # a pointwise 27x27
    middle = convolution_c.Geometry(1, 256, 14, 14, 256, 3, 3, 14, 14, 1, 1, 1, 1, 1, 1, 1)
    assert convolution_c.choose_form(middle, constant=True) == "winograd"
    dense = convolution_c.Geometry(1, 128, 14, 14, 32, 3, 3, 14, 14, 1, 1, 1, 1, 1, 1, 1)
    assert convolution_c.choose_form(dense) == "winograd"
    assert convolution_c.choose_form(dense, constant=True) == (
        "lanes" if convolution_c.avx512() else "winograd")
    shallow = convolution_c.Geometry(1, 256, 13, 13, 48, 1, 1, 13, 13, 1, 1, 1, 1, 0, 0, 1)
    assert convolution_c.choose_form(shallow, constant=True) == lanes  # a last block of 16
    odd = convolution_c.Geometry(1, 256, 13, 13, 40, 1, 1, 13, 13, 1, 1, 1, 1, 0, 0, 1)
    assert convolution_c.choose_form(odd, constant=True) == "gemm"
    expand = convolution_c.Geometry(1, 32, 27, 27, 128, 3, 3, 27, 27, 1, 1, 1, 1, 1, 1, 1)
    assert convolution_c.choose_form(expand) == "gemm"
    assert convolution_c.choose_form(expand, constant=True) == lanes
    fire = convolution_c.Geometry(1, 16, 55, 55, 64, 3, 3, 55, 55, 1, 1, 1, 1, 1, 1, 1)
    assert fire.wide and convolution_c.choose_form(fire, constant=True) == "gemm"
    narrow = convolution_c.Geometry(1, 16, 20, 20, 64, 3, 3, 20, 20, 1, 1, 1, 1, 1, 1, 1)
    assert not narrow.wide and convolution_c.choose_form(narrow, constant=True) == "winograd"
    assert convolution_c.choose_form(strided) == "gemm"
    assert not convolution_c.accepts("winograd", strided)


def test_the_auto_form_offers_the_team_and_one_thread(monkeypatch):
    """The judge's variants of ``auto``: the rule's form on the default team and on one
    thread, each matching the reference."""
    monkeypatch.setenv("FUEL_THREADS", "2")
    rng = np.random.default_rng(3)
    conv = ConvParams((1, 1), (1, 1), (1, 1), (1, 1), 1)
    x = rng.standard_normal((1, 32, 40, 40)).astype(np.float32)
    weight = rng.standard_normal((32, 32, 3, 3)).astype(np.float32)
    y = reference(x, weight, conv)
    auto = _siblings(OpKind.CONV, 2)[0].kernel
    layouts = [Layout.contiguous(a.shape) for a in (x, weight, y)]
    variants = auto.variants(layouts, conv, CPU.devices()[0])
    assert [v.name for v in variants] == ["auto/2t", "auto/1t"]
    device = CPU.devices()[0]
    storages = [CPU.upload(device, a) for a in (x, weight)]
    for variant in variants:
        output = CPU.allocate(device, dt.float32, y.size)
        variant.prepare(storages, [output], layouts, conv)()
        np.testing.assert_allclose(np.asarray(CPU.download(output, layouts[-1])), y,
                                   rtol=1e-4, atol=1e-4 * float(np.abs(y).max()))
    tiny = [Layout.contiguous(s) for s in ((1, 2, 3, 3), (2, 2, 1, 1), (1, 2, 3, 3))]
    assert auto.variants(tiny, ConvParams((1, 1), (0, 0), (0, 0), (1, 1), 1), device) == ()


def test_fused_siblings_match_the_reference_for_every_activation():
    rng = np.random.default_rng(7)
    for index, activation in enumerate(CONV_ACTIVATIONS):
        xs, ws, conv = random_plan(rng, 2)
        residual = bool(index % 2)
        params = ConvEpilogueParams(conv, activation, -0.5 if activation == "clip" else 0.2,
                                    1.5 if activation == "clip" else 0.5, residual)
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        y = reference(x, w, conv)
        bias = rng.standard_normal(ws[0]).astype(np.float32)
        arrays = [x, w, bias]
        extra = rng.standard_normal(y.shape).astype(np.float32)
        if residual:
            arrays.append(extra)
        slope = rng.standard_normal(ws[0]).astype(np.float32)
        if activation == "prelu":
            arrays.append(slope)
        expected = epilogue_reference(y, params, bias.astype(np.float64),
                                      extra.astype(np.float64) if residual else None,
                                      slope.astype(np.float64))
        for entry in _siblings(OpKind.CONV_FUSED, len(arrays)):
            actual = _run(entry, arrays, y.shape, params)
            scale = max(1.0, float(np.abs(expected).max()))
            np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4 * scale,
                                       err_msg=f"{entry.kernel.__name__} {activation} on "
                                               f"{xs} * {ws} {conv}")


@pytest.mark.parametrize("threads", ["1", "2"])
def test_one_position_convolutions_match_the_reference(monkeypatch, threads):
    """conv.c's one-output-position form (a squeeze-excite's 1x1 map): 16 channels a unit,
    a partial last block, K not a multiple of 16, two images, a 1x1 map and kernels whose
    window covers a larger map or reaches into the padding; every activation, with and
    without a residual."""
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(1 + int(threads))
    cases = ((2, 37, (1, 1), 53, (1, 1), (0, 0)), (1, 144, (1, 1), 576, (1, 1), (0, 0)),
             (1, 5, (2, 2), 20, (2, 2), (0, 0)), (2, 6, (1, 1), 17, (3, 3), (1, 1)))
    for index, activation in enumerate(CONV_ACTIVATIONS):
        n, c, size, m, kernel, pads = cases[index % len(cases)]
        conv = ConvParams((1, 1), pads, pads, (1, 1), 1)
        residual = bool(index % 2)
        params = ConvEpilogueParams(conv, activation, -0.5 if activation == "clip" else 0.2,
                                    1.5 if activation == "clip" else 0.5, residual)
        x = rng.standard_normal((n, c) + size).astype(np.float32)
        w = rng.standard_normal((m, c) + kernel).astype(np.float32)
        y = reference(x, w, conv)
        assert y.shape[2:] == (1, 1)
        bias = rng.standard_normal(m).astype(np.float32)
        extra = rng.standard_normal(y.shape).astype(np.float32)
        slope = rng.standard_normal(m).astype(np.float32)
        arrays = [x, w, bias] + ([extra] if residual else []) + (
            [slope] if activation == "prelu" else [])
        expected = epilogue_reference(y, params, bias.astype(np.float64),
                                      extra.astype(np.float64) if residual else None,
                                      slope.astype(np.float64))
        entry = next(e for e in _siblings(OpKind.CONV_FUSED, len(arrays))
                     if e.kernel.form == "gemm")
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(_run(entry, arrays, y.shape, params), expected, rtol=1e-4,
                                   atol=1e-4 * scale, err_msg=f"{activation} {x.shape} {w.shape}")


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_epilogues_match_the_reference(stride):
    """depthwise.c applies bias, residual, relu and clip on its accumulators (the last chunk
    of a row masked) and the other activations on the rows: every activation, rows wider
    than one 16-column chunk and narrower, a 5x5 filter."""
    rng = np.random.default_rng(stride)
    for index, activation in enumerate(CONV_ACTIVATIONS):
        width = (37, 7)[index % 2]
        kernel = (3, 5)[index % 2]
        conv = ConvParams((stride, stride), (1, 2), (kernel // 2, 0), (1, 1), 6)
        residual = index % 3 == 0
        params = ConvEpilogueParams(conv, activation, -0.5 if activation == "clip" else 0.2,
                                    1.5 if activation == "clip" else 0.5, residual)
        x = rng.standard_normal((2, 6, 11, width)).astype(np.float32)
        w = rng.standard_normal((6, 1, kernel, kernel)).astype(np.float32)
        y = reference(x, w, conv)
        bias = rng.standard_normal(6).astype(np.float32)
        arrays = [x, w, bias]
        extra = rng.standard_normal(y.shape).astype(np.float32)
        if residual:
            arrays.append(extra)
        slope = rng.standard_normal(6).astype(np.float32)
        if activation == "prelu":
            arrays.append(slope)
        expected = epilogue_reference(y, params, bias.astype(np.float64),
                                      extra.astype(np.float64) if residual else None,
                                      slope.astype(np.float64))
        entry = next(e for e in _siblings(OpKind.CONV_FUSED, len(arrays))
                     if e.kernel.form == "depthwise")
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(_run(entry, arrays, y.shape, params), expected, rtol=1e-4,
                                   atol=1e-4 * scale, err_msg=f"{activation} {x.shape}")


@pytest.mark.parametrize("threads", ["1", "2"])
def test_narrow_depthwise_matches_the_reference(monkeypatch, threads):
    """Planes at most 8 columns wide outside the flat and phase layouts (stride 1 without
    "same" padding, stride 3) run with 16 channels in the vector lanes: 40 channels (two
    blocks and a partial one), 2 images, a residual and clip; stride 1 "same" and stride 2
    narrow planes (the flat and phase layouts) too."""
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(40)
    for stride, size, pads in ((1, 7, ((1, 2), (2, 1))), (2, 13, ((1, 2), (2, 1))),
                               (1, 4, ((1, 2), (2, 1))), (1, 9, ((0, 0), (0, 0))),
                               (3, 19, ((1, 0), (0, 2))), (1, 6, ((0, 1), (1, 0)))):
        conv = ConvParams((stride, stride), pads[0], pads[1], (1, 1), 40)
        params = ConvEpilogueParams(conv, "clip", -0.5, 1.5, True)
        x = rng.standard_normal((2, 40, size, size)).astype(np.float32)
        w = rng.standard_normal((40, 1, 3, 4)).astype(np.float32)
        y = reference(x, w, conv)
        assert y.shape[-1] <= 8
        bias = rng.standard_normal(40).astype(np.float32)
        extra = rng.standard_normal(y.shape).astype(np.float32)
        expected = epilogue_reference(y, params, bias.astype(np.float64),
                                      extra.astype(np.float64), None)
        entry = next(e for e in _siblings(OpKind.CONV_FUSED, 4) if e.kernel.form == "depthwise")
        np.testing.assert_allclose(_run(entry, [x, w, bias, extra], y.shape, params),
                                   expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))


@pytest.mark.parametrize("threads", ["1", "2"])
def test_depthwise_row_strips_match_the_reference(monkeypatch, threads):
    """The row-strip form (depthwise_rows.h: square 3x3, 5x5 and 7x7 filters, stride 1 or 2,
    any padding): output heights that are not whole strips, widths of one, two and partial
    16-column chunks, rows and columns whose taps fall in the padding on either side, a
    residual and each of three activations, 2 images."""
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(7)
    cases = ((3, 1, 9, 37, ((1, 1), (1, 1))), (3, 2, 23, 40, ((0, 1), (1, 0))),
             (5, 1, 14, 14, ((2, 2), (2, 2))), (5, 2, 29, 35, ((1, 4), (3, 0))),
             (7, 1, 12, 21, ((3, 0), (1, 3))), (7, 2, 17, 50, ((3, 3), (3, 3))),
             (3, 2, 6, 5, ((1, 1), (1, 1))), (5, 1, 3, 18, ((2, 2), (2, 2))))
    for index, (kernel, stride, height, width, pads) in enumerate(cases):
        channels = 3 + index
        conv = ConvParams((stride, stride), pads[0], pads[1], (1, 1), channels)
        activation = ("relu", "clip", "hard_swish")[index % 3]
        params = ConvEpilogueParams(conv, activation, 0.0 if activation != "clip" else -0.5,
                                    1.5, True)
        x = rng.standard_normal((2, channels, height, width)).astype(np.float32)
        w = rng.standard_normal((channels, 1, kernel, kernel)).astype(np.float32)
        y = reference(x, w, conv)
        bias = rng.standard_normal(channels).astype(np.float32)
        extra = rng.standard_normal(y.shape).astype(np.float32)
        expected = epilogue_reference(y, params, bias.astype(np.float64),
                                      extra.astype(np.float64), None)
        entry = next(e for e in _siblings(OpKind.CONV_FUSED, 4) if e.kernel.form == "depthwise")
        np.testing.assert_allclose(_run(entry, [x, w, bias, extra], y.shape, params),
                                   expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()),
                                   err_msg=f"{kernel}x{kernel} stride {stride} {x.shape} {pads}")


def test_gemm_tail_columns_and_wide_tile_match_the_reference():
    """conv_gemm.h's last columns of a block as dot products (a 7x7 map's 49th position, a
    14x14 map's last 4) and its 8 x 48 tile (a full panel and the half panel after it): 3x3
    and 1x1 kernels over two K blocks (K 360), a partial sliver (20 output channels), a
    residual and relu."""
    rng = np.random.default_rng(49)
    for size, kernel in ((7, 3), (7, 1), (14, 1), (14, 3)):
        channels = 40 if kernel == 3 else 300
        pad = kernel // 2
        conv = ConvParams((1, 1), (pad, pad), (pad, pad), (1, 1), 1)
        params = ConvEpilogueParams(conv, "relu", 0.0, 0.0, True)
        x = rng.standard_normal((1, channels, size, size)).astype(np.float32)
        w = rng.standard_normal((20, channels, kernel, kernel)).astype(np.float32)
        y = reference(x, w, conv)
        bias = rng.standard_normal(20).astype(np.float32)
        extra = rng.standard_normal(y.shape).astype(np.float32)
        expected = epilogue_reference(y, params, bias.astype(np.float64),
                                      extra.astype(np.float64), None)
        entry = next(e for e in _siblings(OpKind.CONV_FUSED, 4) if e.kernel.form == "gemm")
        np.testing.assert_allclose(_run(entry, [x, w, bias, extra], y.shape, params), expected,
                                   rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()),
                                   err_msg=f"{kernel}x{kernel} at {size}x{size}")


@pytest.mark.parametrize("threads", ["1", "2"])
def test_gemm_wide_form_matches_the_reference(monkeypatch, threads):
    """conv.c's wide form (the gemm form's launches with output rows of at least 24
    positions and at least 64 patch rows, 16 for one image (a 3-channel stem), not 1x1):
    the input copied into its stride phases
    of the padded plane, 8 x 48 tiles over wide rows whose surplus columns are not stored,
    runs of several output rows in one tile; strides 1-3 (unequal along the axes),
    dilations, asymmetric padding, groups, a partial sliver, two images, a 1-d shape, a
    residual and an activation."""
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(24 + int(threads))
    entry = next(e for e in _siblings(OpKind.CONV_FUSED, 4) if e.kernel.form == "gemm")
    for n, c, size, m, kernel, strides, dilations, begin, end, groups in (
            (1, 3, (57, 61), 16, (7, 7), (2, 2), (1, 1), (3, 3), (3, 3), 1),
            (2, 8, (30, 27), 20, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
            (1, 10, (40, 75), 12, (3, 5), (2, 3), (1, 1), (0, 2), (1, 0), 2),
            (1, 8, (33, 52), 9, (3, 3), (1, 1), (2, 2), (2, 1), (0, 3), 1),
            (1, 64, (26, 26), 24, (2, 2), (1, 1), (1, 1), (0, 0), (1, 1), 4),
            (1, 14, (1, 80), 10, (1, 5), (1, 2), (1, 3), (0, 4), (0, 1), 1),
            (1, 3, (61, 58), 19, (3, 3), (2, 2), (1, 1), (0, 1), (0, 0), 1)):
        conv = ConvParams(strides, begin, end, dilations, groups)
        params = ConvEpilogueParams(conv, "silu", 0.0, 0.0, True)
        x = rng.standard_normal((n, c) + size).astype(np.float32)
        weight = rng.standard_normal((m, c // groups) + kernel).astype(np.float32)
        y = reference(x, weight, conv)
        geometry = convolution_c.Geometry.of(x.shape, weight.shape, y.shape, conv)
        depth = c // groups * geometry.kh * geometry.kw
        assert geometry.wide and geometry.ow >= 24 and geometry.kh * geometry.kw > 1
        assert depth >= (16 if n == 1 and groups == 1 else 64)
        bias = rng.standard_normal(m).astype(np.float32)
        extra = rng.standard_normal(y.shape).astype(np.float32)
        expected = epilogue_reference(y, params, bias.astype(np.float64),
                                      extra.astype(np.float64), None)
        np.testing.assert_allclose(_run(entry, [x, weight, bias, extra], y.shape, params),
                                   expected, rtol=1e-4,
                                   atol=1e-4 * float(np.abs(expected).max()),
                                   err_msg=f"{(n, c, size, m, kernel, strides, dilations)}")


def test_the_rule_picks_depthwise_and_gemm():
    depthwise = convolution_c.Geometry(1, 8, 9, 9, 8, 3, 3, 9, 9, 1, 1, 1, 1, 1, 1, 8)
    dense = convolution_c.Geometry(1, 32, 9, 9, 16, 3, 3, 9, 9, 1, 1, 1, 1, 1, 1, 1)
    assert convolution_c.choose_form(depthwise) == "depthwise"
    assert convolution_c.choose_form(dense) == "gemm"
    assert convolution_c.choose_form(None) is None


@pytest.mark.parametrize("groups", [1, 2, 40])
def test_threaded_launches_match_the_reference(monkeypatch, groups):
    """Launches over PARALLEL_WORK split over threads (GEMM units, depthwise planes)."""
    monkeypatch.setenv("FUEL_THREADS", "3")
    rng = np.random.default_rng(groups)
    params = ConvParams((1, 2), (1, 0), (2, 1), (1, 1), groups)
    x = rng.standard_normal((2, 40, 67, 81)).astype(np.float32)
    w = rng.standard_normal((40, 40 // groups, 3, 3)).astype(np.float32)
    expected = reference(x, w, params)
    for entry in _siblings(OpKind.CONV, 2):
        actual = _run(entry, [x, w], expected.shape, params)
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-3,
                                   err_msg=entry.kernel.__name__)


@pytest.mark.parametrize("threads", ["2", "3"])
def test_gemm_team_splits_match_the_reference(monkeypatch, threads):
    """conv.c's split of one image's GEMM over the team: column blocks at whole panels (a
    28x28 plane, a 20x20 one whose even split falls inside a panel), output-channel blocks
    where a thread's share of the plane is narrow (14x14, 7x7, 9x5), partial slivers, 1x1 and
    3x3 kernels, one and two images; pointwise launches to at most 16 channels, whose whole
    panels are read unpacked (micro_strided), a partial panel after them."""
    monkeypatch.setenv("FUEL_THREADS", threads)
    rng = np.random.default_rng(int(threads))
    entry = next(e for e in _siblings(OpKind.CONV_FUSED, 4) if e.kernel.form == "gemm")
    for n, c, h, w, m, kernel in ((1, 40, 28, 28, 70, 3), (1, 24, 20, 20, 36, 3),
                                  (1, 64, 14, 14, 100, 1), (1, 96, 7, 7, 52, 3),
                                  (2, 48, 14, 14, 44, 3), (1, 70, 9, 5, 90, 3),
                                  (1, 300, 13, 13, 260, 1), (1, 300, 23, 23, 13, 1),
                                  (2, 100, 30, 30, 16, 1), (1, 20, 9, 9, 5, 1)):
        pad = kernel // 2
        conv = ConvParams((1, 1), (pad, pad), (pad, pad), (1, 1), 1)
        params = ConvEpilogueParams(conv, "relu", 0.0, 0.0, True)
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        weight = rng.standard_normal((m, c, kernel, kernel)).astype(np.float32)
        y = reference(x, weight, conv)
        bias = rng.standard_normal(m).astype(np.float32)
        extra = rng.standard_normal(y.shape).astype(np.float32)
        expected = epilogue_reference(y, params, bias.astype(np.float64),
                                      extra.astype(np.float64), None)
        np.testing.assert_allclose(_run(entry, [x, weight, bias, extra], y.shape, params),
                                   expected, rtol=1e-4,
                                   atol=1e-4 * float(np.abs(expected).max()),
                                   err_msg=f"{(n, c, h, w, m, kernel)}")


@pytest.mark.parametrize("rank", [1, 2])
def test_transposed_convolution_matches_the_reference(rank):
    from tests.backends.kernel_cases import references

    rng = np.random.default_rng(rank)
    entry = global_table().lookup_alternatives(OpKind.CONV_TRANSPOSE, (dt.float32,) * 3,
                                               BackendId.CPU)[0]
    assert isinstance(entry.kernel, convolution_c.CConvTranspose)
    for _ in range(6):
        groups = int(rng.integers(1, 3))
        channels, per_out = int(rng.integers(1, 6)) * groups, int(rng.integers(1, 9))
        kernel = tuple(int(k) for k in rng.integers(1, 4, rank))
        sizes = tuple(int(s) for s in rng.integers(1, 8, rank))
        strides = tuple(int(s) for s in rng.integers(1, 4, rank))
        dilations = tuple(int(d) for d in rng.integers(1, 3, rank))
        begin = tuple(int(p) for p in rng.integers(0, 2, rank))
        end = tuple(int(p) for p in rng.integers(0, 2, rank))
        padding = tuple(int(rng.integers(0, s)) for s in strides)
        params = ConvParams(strides, begin, end, dilations, groups, padding)
        x = rng.standard_normal((2, channels) + sizes).astype(np.float32)
        w = rng.standard_normal((channels, per_out) + kernel).astype(np.float32)
        expected = references.conv_transpose(x.astype(np.float64), w.astype(np.float64),
                                              strides, begin, end, dilations, groups, padding)
        if min(expected.shape) == 0:
            continue
        actual = _run(entry, [x, w], expected.shape, params)
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4,
                                   err_msg=f"{x.shape} * {w.shape} {params}")


@pytest.mark.parametrize("x_shape, w_shape, strides, begin, end, dilations, groups, padding", [
    ((2, 32, 40, 37), (32, 16, 2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 1, (0, 0)),
    ((1, 24, 33, 30), (24, 5, 3, 3), (3, 3), (1, 0), (0, 1), (1, 1), 1, (2, 1)),
    ((2, 16, 21, 26), (16, 6, 2, 1), (3, 2), (0, 1), (1, 0), (1, 1), 2, (1, 0)),
    ((1, 16, 30, 29), (16, 3, 1, 2), (2, 3), (0, 0), (0, 0), (2, 2), 1, (0, 0)),
    ((2, 20, 35, 31), (20, 7, 3, 3), (2, 2), (1, 1), (1, 0), (1, 1), 2, (1, 0)),
    ((3, 64, 300), (64, 8, 4), (4,), (0,), (0,), (1,), 1, (0,)),
])
def test_transposed_convolution_forms_on_two_threads(monkeypatch, x_shape, w_shape, strides,
                                                     begin, end, dilations, groups, padding):
    """conv.c's transposed form, split over two threads, against the reference: taps that
    never share an output (kernel at most the stride: stored from each unit's buffer, the
    output zeroed first where they leave gaps) and taps that do (col2im, its channels
    split); odd sizes, groups, pads, output padding and dilations."""
    from tests.backends.kernel_cases import references

    monkeypatch.setenv("FUEL_THREADS", "2")
    rng = np.random.default_rng(sum(x_shape))
    entry = global_table().lookup_alternatives(OpKind.CONV_TRANSPOSE, (dt.float32,) * 3,
                                               BackendId.CPU)[0]
    params = ConvParams(strides, begin, end, dilations, groups, padding)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    expected = references.conv_transpose(x.astype(np.float64), w.astype(np.float64), strides,
                                          begin, end, dilations, groups, padding)
    for _ in range(2):  # a second launch finds the buffers of the first
        actual = _run(entry, [x, w], expected.shape, params, launches=2)
        np.testing.assert_allclose(actual, expected, rtol=1e-4,
                                   atol=1e-4 * float(np.abs(expected).max()))


@pytest.mark.parametrize("shape", [(2, 3, 21, 37), (1, 48, 55, 57)])
@pytest.mark.parametrize("stride, pad, ceil", [(1, 1, False), (2, 1, False), (2, 0, True),
                                               (3, 1, True)])
def test_pooling_matches_the_reference(monkeypatch, stride, pad, ceil, shape):
    """conv.c's max pool (NaN propagates, padding never wins) and average pool (with and
    without the padding counted), 2-d, against sliding windows; the larger shape over
    PARALLEL_POOL, split over two threads."""
    from fuel.nn.conv import avg_pool_nd, max_pool_nd

    monkeypatch.setenv("FUEL_THREADS", "2")
    rng = np.random.default_rng(stride)
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 1, 4, 5] = np.nan
    import fuel

    got = max_pool_nd(fuel.tensor(x), (3, 3), (stride,) * 2, (pad,) * 2, (pad,) * 2,
                      (1, 1), ceil).numpy()
    out = [(s + 2 * pad - 3 + (stride - 1 if ceil else 0)) // stride + 1 for s in x.shape[2:]]
    extra = [max(0, (o - 1) * stride + 3 - s - 2 * pad) for o, s in zip(out, x.shape[2:])]
    widths = ((0, 0), (0, 0), (pad, pad + extra[0]), (pad, pad + extra[1]))
    windows = np.lib.stride_tricks.sliding_window_view(
        np.pad(x, widths, constant_values=-np.inf), (3, 3), axis=(2, 3))[
        :, :, ::stride, ::stride][:, :, :out[0], :out[1]]
    np.testing.assert_array_equal(got, windows.max(axis=(-1, -2)))
    for include in (False, True):
        got = avg_pool_nd(fuel.tensor(x), (3, 3), (stride,) * 2, (pad,) * 2, (pad,) * 2,
                          (1, 1), ceil, include).numpy()
        ones = np.pad(np.ones(x.shape[2:]), pad if include else 0, constant_values=1)
        ones = np.pad(ones, ((0 if include else pad, extra[0] + (0 if include else pad)),
                             (0 if include else pad, extra[1] + (0 if include else pad))))
        counts = np.lib.stride_tricks.sliding_window_view(ones, (3, 3))[
            ::stride, ::stride][:out[0], :out[1]].sum(axis=(-1, -2))
        sums = np.lib.stride_tricks.sliding_window_view(
            np.pad(x.astype(np.float64), widths), (3, 3), axis=(2, 3))[
            :, :, ::stride, ::stride][:, :, :out[0], :out[1]].sum(axis=(-1, -2))
        np.testing.assert_allclose(got, sums / counts, rtol=1e-5, atol=1e-6)


def test_concurrent_launches_share_the_work_pool(monkeypatch):
    """run_units serves one job at a time: convolutions launched from several Python threads
    at once (each threaded, across the gemm, winograd and depthwise libraries) all match the
    reference, again and again."""
    import threading

    monkeypatch.setenv("FUEL_THREADS", "2")
    rng = np.random.default_rng(11)
    cases = []
    for groups, kernel in ((1, 3), (1, 1), (48, 3)):  # each over PARALLEL_WORK
        conv = ConvParams((1, 1), (kernel // 2,) * 2, (kernel // 2,) * 2, (1, 1), groups)
        x = rng.standard_normal((1, 48, 48, 48)).astype(np.float32)
        w = rng.standard_normal((48, 48 // groups, kernel, kernel)).astype(np.float32)
        cases.append((x, w, conv, reference(x, w, conv)))
    auto = _siblings(OpKind.CONV, 2)[0]
    failures = []

    def work(index: int) -> None:
        x, w, conv, expected = cases[index % len(cases)]
        for _ in range(20):
            actual = _run(auto, [x, w], expected.shape, conv)
            if not np.allclose(actual, expected, rtol=1e-4, atol=1e-3):
                failures.append(index)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


def test_the_rule_runs_grouped_convolutions_on_lanes():
    """A grouped (not depthwise) convolution with constant weights runs lanes on any plane;
    weights from a feed stay gemm, and a depthwise one stays depthwise."""
    lanes = "lanes" if convolution_c.avx512() else "gemm"
    for geometry in (convolution_c.Geometry(1, 400, 7, 7, 400, 3, 3, 7, 7, 1, 1, 1, 1, 1, 1, 25),
                     convolution_c.Geometry(1, 128, 56, 56, 128, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1,
                                            32)):
        assert convolution_c.accepts("lanes", geometry)
        assert convolution_c.choose_form(geometry, constant=True) == lanes
        assert convolution_c.choose_form(geometry) == "gemm"
    depthwise = convolution_c.Geometry(1, 64, 28, 28, 64, 3, 3, 28, 28, 1, 1, 1, 1, 1, 1, 64)
    assert not convolution_c.accepts("lanes", depthwise)
    assert convolution_c.choose_form(depthwise, constant=True) == "depthwise"
    dense = convolution_c.Geometry(1, 64, 56, 56, 64, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1, 1)
    assert not convolution_c.accepts("lanes", dense)  # a dense one only to LANES_PLANE
