"""CONV_BLOCKED float32: a 2-d convolution on blocked channels (NCHW16c), conv.c's lanes form
launched blocked (conv_lanes.h): the input's 16-channel cells are already the interleaved
planes the planar launch copies its input into (a stride-1 1x1 launch reads them in place, a
padded one copies each row's run beside zero borders), and each tile's 16 channels of one
position are stored as one vector with the bias, residual and activation applied, where the
planar launch transposes them into planes and runs its epilogue in a second pass. A
depthwise one runs depthwise.c's blocked form (depthwise_blocked.h: one vector a position,
one multiply-add a tap).

Without AVX-512 or a C compiler (and for prelu, which the pass never blocks) the launch runs
in NumPy on planar copies, summing in float64.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fuel.backends.cpu import convolution
from fuel.backends.cpu import convolution_c as cc
from fuel.backends.cpu.arrays import output, view
from fuel.backends.cpu.c_library import address
from fuel.backends.cpu.quantized import thread_count
from fuel.backends.cpu.sequences import one_call
from fuel.compiler.foreign import ForeignCall
from fuel.dispatch.kernel import KernelList, Launcher, Variant
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.layout import Layout
from fuel.ir.ops import OpKind
from fuel.ir.params import ConvEpilogueParams, ConvParams, ConvPartsParams
from fuel.ir.rules import BLOCK

LANES_BLOCKED, BLOCK_CHANNELS, UNBLOCK_CHANNELS = 15, 16, 17  # conv.c's forms
DEPTHWISE_BLOCKED = 18  # depthwise.c's (depthwise_blocked.h)
DEPTHWISE_TAPS = 256  # depthwise_blocked.h's DWB_TAPS: the most filter taps it takes
DIRECT_BLOCKED_OUT = 19  # conv_direct.c's: a strided stem storing blocked channels


def geometry(layouts: Sequence[Layout], params: ConvEpilogueParams) -> cc.Geometry:
    """The planar geometry of a blocked launch (a stem's input is planar already)."""
    if len(layouts[0].shape) == 4:
        planar = layouts[0].shape
    else:
        n, blocks, h, w, _ = layouts[0].shape
        planar = (n, blocks * BLOCK, h, w)
    out = layouts[-1].shape
    return cc.Geometry.of(planar, layouts[1].shape, (out[0], out[1] * BLOCK, out[2], out[3]),
                          params.conv)


def available() -> bool:
    """Whether conv.c's blocked launch runs here (conv.c built with AVX-512)."""
    return cc.avx512() and cc.library() is not None


# A chain's link: at least this many output channels where a dense kernel has taps (16->16
# 3x3 at 256x256, two threads, in-process: blocked 1500 us against the planar rule's gemm
# 1226, a half-empty tile), one block for a pointwise or depthwise link; any whole blocks in.
# Measured on whole models (AMD EPYC, two threads, in-process A/B, 30 alternated calls: the
# same model loaded with the earlier bounds, 32 channels in and out, beside these):
# squeezenet1_1 batch 8 0.925-0.944x (its 128->16 squeezes and 16->64 expands at 55x55 join
# the chains), mobilenet_v2 batch 8 0.960-0.966x (a 16->96 1x1 at 112x112 alone ran blocked
# 228 us against the direct form's 172, but in the model its input stays blocked);
# squeezenet1_1 batch 1, mobilenet_v2 batch 1, efficientnet_b0, mnasnet1_0,
# shufflenet_v2_x1_0, densenet121, yolo, unet, regnet_x_400mf and googlenet 0.97-1.01x.
# Where the planar rule runs winograd: at most this many output positions in the batch
# (64->64 3x3: 48x48 and 56x56 even or better, 693 against 717 us, 756 against 768; 60x60
# 1.08x, 64x64 1.3x, 128x128 1.5x: winograd's tiles run more efficiently on larger planes).
LINK_OUTPUTS = 32
LINK_POINTWISE_OUTPUTS = 16
LINK_WINOGRAD_POSITIONS = 3136
# A stem storing blocked channels: at most this many output channels (in-process, two
# threads, the planar stem's store against the blocked one: 3->16 3x3 stride 2 at 224x224,
# batch 8, 769 -> 541 us warm, 1402 -> 916 after a 16 MB flush; batch 1 85-109 -> 72-78;
# 3->32 161-199 -> 152; but 3->64 unpadded 2968-3008 -> 3192-3303).
STEM_OUTPUTS = 32
# A stem whose output a pool reads before a link (squeezenet's, resnet's): the pool then runs
# over blocked channels and the link needs no entry conversion, which outweighs the slower
# store up to this many output channels (in-process, the same model loaded with and without,
# both orders: squeezenet1_1 batch 1 0.970x / 0.954x, batch 8 0.988x / 0.981x; resnet18
# batch 1 0.984x / 0.982x, batch 8 1.00x; resnet50 batch 1 0.993x / 0.998x; light_resnet50
# 0.997x, googlenet 0.984x).
POOLED_STEM_OUTPUTS = 64


def blocked_stem(x: tuple, weight: tuple, out: tuple, params: ConvParams,
                 pooled: bool = False) -> bool:
    """Whether a constant-weight convolution of these planar shapes is a stem that stores
    its output blocked as fast as planar or faster: conv_direct.c's strided stem, at most
    STEM_OUTPUTS channels out in whole blocks (its tiles are a position's 16 channels, stored
    as one vector instead of transposed into 16 planes); ``pooled`` (a pool reads it before a
    link): at most POOLED_STEM_OUTPUTS, whatever the planar rule's form."""
    g = cc.Geometry.of(x, weight, out, params)
    if g is None or g.c >= BLOCK or g.m % BLOCK or g.sw <= 1 or not cc.avx512():
        return False
    if pooled:
        return (g.groups == 1 and not g.pointwise and g.c <= cc.DIRECT_CHANNELS
                and cc.DIRECT_OUTPUTS <= g.m <= POOLED_STEM_OUTPUTS)
    return g.m <= STEM_OUTPUTS and cc.choose_form(g, True) == "direct"


def worth_blocking(x: tuple, weight: tuple, out: tuple, params: ConvParams) -> bool:
    """Whether a constant-weight convolution of these planar shapes runs blocked at least as
    fast as its planar form (the measured bounds above)."""
    g = cc.Geometry.of(x, weight, out, params)
    dense = g is not None and g.groups == 1 and g.kh * g.kw > 1
    if g is None or g.m < (LINK_OUTPUTS if dense else LINK_POINTWISE_OUTPUTS):
        return False
    form = cc.choose_form(g, True)
    return form != "winograd" or g.n * g.oh * g.ow <= LINK_WINOGRAD_POSITIONS


class CBlockedConvolution:
    """CONV_BLOCKED float32 (``auto``: the lanes launch on the rule's team; the judge may
    time it on one thread)."""

    __name__ = __qualname__ = "conv_blocked_lanes_float32"

    @property
    def revision_source(self) -> str:
        return cc.revision_text() + "blocked"

    def variants(self, layouts: Sequence[Layout], params, device) -> tuple[Variant, ...]:
        """The default team and one thread, where the launch is large enough for a team."""
        g = geometry(layouts, params)
        if not available() or cc._threads(g, _form(g, layouts)) == 1:
            return ()
        return (Variant(f"lanes/{thread_count()}t", self.prepare),
                Variant("lanes/1t", lambda *a, **k: self.prepare(*a, threads=1, **k)))

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: ConvEpilogueParams, threads: int | None = None) -> Launcher:
        g = geometry(layouts, params)
        if (not available() or not all(layout.is_contiguous() for layout in layouts)
                or params.activation == "prelu"):
            return lambda: planar(inputs, outputs, layouts, params)
        if layouts[-1].numel == 0:
            return lambda: None
        form = _form(g, layouts)
        threads = cc._threads(g, form) if threads is None else threads
        out = address(outputs[0], layouts[-1])
        if form == "lanes":
            return _lanes(inputs, layouts, params, g, threads, out)
        epilogue = cc._epilogue(OpKind.CONV_FUSED, inputs, layouts, params)
        x, w = (address(storage, layout) for storage, layout in zip(inputs[:2], layouts))
        if entry(g, layouts):  # planar in, blocked out, a channel's scale, shift, activation
            return cc.CConvolution._call(cc.library(), g, BLOCK_CHANNELS, threads, epilogue,
                                         x, w, out)
        if form == "direct":  # a stem: planar in, blocked out
            if not cc.avx512() or g.pointwise or g.groups != 1:  # not conv_direct.c's stem
                return lambda: planar(inputs, outputs, layouts, params)
            return cc.CConvolution._call(cc.library(cc.DIRECT), g, DIRECT_BLOCKED_OUT, threads,
                                         epilogue, x, w, out)
        depthwise = cc.library(cc.DEPTHWISE)
        if depthwise is None or g.kh * g.kw > DEPTHWISE_TAPS:
            return lambda: planar(inputs, outputs, layouts, params)
        return cc.CConvolution._call(depthwise, g, DEPTHWISE_BLOCKED, threads, epilogue, x, w,
                                     out)

    def __call__(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                 params) -> None:
        self.prepare(inputs, outputs, layouts, params)()


def _lanes(inputs: Sequence, layouts: Sequence[Layout], params: ConvEpilogueParams,
           g: cc.Geometry, threads: int, out: int, out_m: int = 0) -> Launcher:
    """conv.c's lanes form launched blocked (a dense, pointwise or grouped link) storing at
    ``out`` (``out_m``: into a slice of an output of that many channels an image), its
    weights scaled per image by the input scale where there is one."""
    epilogue = cc._epilogue(OpKind.CONV_FUSED, inputs, layouts, params)
    x, w = (address(storage, layout) for storage, layout in zip(inputs[:2], layouts))
    scale = (address(inputs[3 + params.residual], layouts[3 + params.residual])
             if params.input_scale else None)
    constant = params.constant_weights
    return cc.CConvolution._lanes(cc.library(), g, threads, epilogue, x, w, out, constant,
                                  inputs[1] if constant else None, form=LANES_BLOCKED,
                                  out_m=out_m, scale=scale)


class CBlockedConcat:
    """CONV_BLOCKED_CAT float32: each part's lanes launch (a dense or pointwise link's, as
    CBlockedConvolution's) storing its channel blocks into its slice of the one output, the
    blocks of an image the parts' together (no concat copy)."""

    __name__ = __qualname__ = "conv_blocked_cat_lanes_float32"

    @property
    def revision_source(self) -> str:
        return cc.revision_text() + "blocked"

    def prepare(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                params: ConvPartsParams) -> Launcher:
        n, total, oh, ow, _ = layouts[-1].shape
        parts = []
        for k, part in enumerate(params.parts):
            blocks = layouts[3 * k + 1].shape[0] // BLOCK
            part_layouts = (*layouts[3 * k:3 * k + 3],
                            Layout.contiguous((n, blocks, oh, ow, BLOCK)))
            parts.append((inputs[3 * k:3 * k + 3], part_layouts, part,
                          geometry(part_layouts, part)))
        if (not available() or not all(layout.is_contiguous() for layout in layouts)
                or any(len(p[1][0].shape) == 4 or _depthwise(p[3]) for p in parts)):
            return lambda: concat_planar(inputs, outputs, layouts, params)
        if layouts[-1].numel == 0:
            return lambda: None
        launches = []
        out = address(outputs[0], layouts[-1])
        for part_inputs, part_layouts, part, g in parts:
            launches.append(_lanes(part_inputs, part_layouts, part, g,
                                   cc._threads(g, _form(g, part_layouts)), out,
                                   out_m=total * BLOCK))
            out += g.m * oh * ow * dt.float32.itemsize  # the next part's blocks
        if all(call.__class__ is ForeignCall for call in launches):
            call = one_call(launches)
            if call is not None:
                return call

        def launch() -> None:
            for call in launches:
                call()

        launch.kernel_source = "c"
        return launch

    def __call__(self, inputs: Sequence, outputs: Sequence, layouts: Sequence[Layout],
                 params) -> None:
        self.prepare(inputs, outputs, layouts, params)()


def concat_planar(inputs, outputs, layouts, params: ConvPartsParams) -> None:
    """CONV_BLOCKED_CAT in NumPy: each part's planar launch into its blocks of the output."""
    result = output(outputs[0], layouts[-1])
    start = 0
    for k, part in enumerate(params.parts):
        blocks = layouts[3 * k + 1].shape[0] // BLOCK
        shape = result.shape[:1] + (blocks,) + result.shape[2:]
        result[:, start:start + blocks] = _planar_result(inputs[3 * k:3 * k + 3],
                                                         layouts[3 * k:3 * k + 3], part, shape)
        start += blocks


def _depthwise(g: cc.Geometry) -> bool:
    """A depthwise launch (depthwise.c's blocked form); dense and grouped ones run lanes."""
    return g.groups > 1 and g.groups == g.c == g.m


def entry(g: cc.Geometry, layouts: Sequence[Layout]) -> bool:
    """A chain's entry with a channel affine: a depthwise 1x1 launch (stride 1, no padding)
    on a planar input, conv.c's channel blocking with each channel's scale (the weight),
    shift (the bias) and activation."""
    return len(layouts[0].shape) == 4 and _depthwise(g) and g.pointwise


def _form(g: cc.Geometry, layouts: Sequence[Layout]) -> str:
    """The planar form whose team rule a blocked launch follows (a stem's input is planar:
    conv_direct.c's; a chain's entry is a copy, few flops a byte as depthwise's)."""
    if entry(g, layouts):
        return "depthwise"
    if len(layouts[0].shape) == 4:
        return "direct"
    return "depthwise" if _depthwise(g) else "lanes"


def blocking_copy(inputs, outputs, layouts) -> Launcher | None:
    """A float32 strided copy that blocks channels (a (N, C/16, H, W, 16) view of a planar
    (N, C, H, W) value) or unblocks them (a (N, C/16, 16, H, W) view of a blocked value) as
    conv.c's 16 x 16 transposes, or None for any other copy."""
    source, target = layouts[0], layouts[-1]
    if (len(source.shape) != 5 or not target.is_contiguous() or not available()
            or inputs[0].dtype is not dt.float32 or outputs[0].dtype is not dt.float32):
        return None
    n, blocks = source.shape[:2]
    if source.shape[4] == BLOCK:  # planar -> blocked
        h, w = source.shape[2:4]
        form = BLOCK_CHANNELS
        if source.strides != (blocks * BLOCK * h * w, BLOCK * h * w, w, 1, h * w):
            return None
    elif source.shape[2] == BLOCK:  # blocked -> planar
        h, w = source.shape[3:]
        form = UNBLOCK_CHANNELS
        if source.strides != (blocks * h * w * BLOCK, h * w * BLOCK, 1, w * BLOCK, BLOCK):
            return None
    else:
        return None
    if n * blocks * h * w == 0:
        return lambda: None
    g = cc.Geometry(n, blocks * BLOCK, h, w, blocks * BLOCK, 1, 1, h, w, 1, 1, 1, 1, 0, 0, 1)
    return cc.CConvolution._call(cc.library(), g, form, thread_count(), cc.Epilogue(),
                                 address(inputs[0], source), 0, address(outputs[0], target))


def planar(inputs, outputs, layouts, params: ConvEpilogueParams) -> None:
    """The launch in NumPy on planar values (float64 sums), its output blocked again."""
    result = output(outputs[0], layouts[-1])
    result[...] = _planar_result(inputs, layouts, params, result.shape)


def _planar_result(inputs, layouts, params: ConvEpilogueParams, shape: tuple) -> np.ndarray:
    """A blocked launch's (N, M/16, OH, OW, 16) output, computed on planar values."""
    conv = params.conv
    x = view(inputs[0], layouts[0]).astype(np.float64)
    if x.ndim == 5:  # a stem's input is planar
        n, blocks, h, w, _ = x.shape
        x = x.transpose(0, 1, 4, 2, 3).reshape(n, blocks * BLOCK, h, w)
    n = x.shape[0]
    if params.input_scale:
        at = 3 + params.residual
        x = x * view(inputs[at], layouts[at]).reshape(*x.shape[:2], 1, 1)
    weight = view(inputs[1], layouts[1]).astype(np.float64)
    _, out_blocks, oh, ow, _ = shape
    y = convolution.convolve(x, weight, conv, (oh, ow))
    y += view(inputs[2], layouts[2]).reshape(1, -1, 1, 1)
    if params.residual:
        y += view(inputs[3], layouts[3]).transpose(0, 1, 4, 2, 3).reshape(y.shape)
    y = cc.activate_numpy(y.astype(np.float32), params)
    return y.reshape(n, out_blocks, BLOCK, oh, ow).transpose(0, 1, 3, 4, 2)


KERNELS = KernelList(BackendId.CPU, "c")
KERNELS.add(OpKind.CONV_BLOCKED, [(dt.float32,) * operands for operands in (4, 5, 6)],
            CBlockedConvolution())
KERNELS.add(OpKind.CONV_BLOCKED_CAT, [(dt.float32,) * (3 * parts + 1) for parts in range(2, 9)],
            CBlockedConcat())
