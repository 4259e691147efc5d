"""Chains of convolutions kept in blocked channels (NCHW16c) between them.

After import, a float32 2-d CONV_FUSED with constant weights, one group, depthwise or groups
of whole blocks, no prelu, channel counts in and out that are multiples of 16 and a shape
that runs blocked at least as fast as planar (``convolution_blocked.worth_blocking``) is a
link. A link whose input
or residual is another link's output runs as CONV_BLOCKED, as does that feeder (both with one
group: a depthwise link, or a grouped one whose groups are whole blocks of 16 channels in
and out (regnet_x's), joins a chain, never starts one, as a chain's entry converts its
input, larger before a strided depthwise). A strided stem (fewer than 16 channels in, whole
blocks out, ``convolution_blocked.blocked_stem``) feeding a link of any kind, or a pool that
feeds one (to at most POOLED_STEM_OUTPUTS channels), starts a chain with no entry to convert:
it reads its image planar and stores its output blocked. Then, in
graph order, so does a link fed by a blocked value, and a 2-d max or average pool of a
blocked value, a channel concat of blocked parts and a channel scale of a blocked value (a
squeeze-excite Mul by an (N, C, 1, 1) value) stay blocked; a channel concat of one-group
links nothing else reads runs as one CONV_BLOCKED_CAT, its parts storing into their blocks of
its output (no concat copy). Inside a chain the values are
(N, C/16, H, W, 16): conv.c's lanes form neither interleaves its input into 16-channel cells
nor transposes its tiles back into planes, and runs its epilogue as it stores. The layout
changes only at a chain's ends: a planar value entering it is permuted once, as is a blocked
value a planar consumer or a graph output reads (conv.c's 16 x 16 transposes). Measured
(in-process, two threads, the lanes form's copy and transposed store removed): resnet18's
64->64 3x3 at 56x56 617 -> 516 us, 64->128 3x3 stride 2 386 -> 272.

A channel scale whose one reader is a one-group link (its input, not a stem's, not a
concat's part) is folded into that link: CONV_BLOCKED's ``input_scale`` scales each image's
weights by it (K x 32 multiplies a unit of the lanes launch), so the scaled value is never
written. Measured (whole-sequence time with the squeeze-excite multiplies left out, judge
off, this 2-core EPYC): efficientnet_b0 batch 1 0.90x, batch 8 0.95x, mobilenet_v3_small
batch 8 0.90x, batch 1 0.96x (the multiply, a pass over the depthwise convolution's output
from the other core's cache, and the project convolution's read of it).

A planar channel affine that only chained nodes read, blocked (relu(x * s + b) per
channel: a pre-activation BatchNormalization and its Relu, densenet's), is the chain's entry
itself: a depthwise 1x1 CONV_BLOCKED on the planar x, conv.c's channel blocking applying
each channel's scale, shift and activation as it stores (``FUEL_BLOCKED_ENTRY=0`` turns it
off). Measured in-process against it off: densenet121 batch 1 0.93x, batch 8 0.95x,
regnet_y_400mf batch 1 0.92x.

A one-group link whose channels are not whole blocks (at least PADDED_CHANNELS, on maps of
more than one position) holds them padded to whole blocks, its weights and bias grown with
zeros, where no padded value would be converted between layouts (``_breaks``);
``FUEL_BLOCKED_PAD=0`` turns that off, ``FUEL_BLOCKED=0`` the whole rewrite.
"""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np

from fuel.frontend.build import make
from fuel.frontend.factories import from_numpy
from fuel.frontend.shape import pad as pad_dims
from fuel.graph.graph import Graph
from fuel.graph.node import Node, set_user_site
from fuel.ir import dtype as dt
from fuel.ir.device import BackendId
from fuel.ir.ops import OpKind
from fuel.ir.params import ConvEpilogueParams, ConvParams, ConvPartsParams
from fuel.ir.rules import BLOCK, whole_block_groups
from fuel.tensor import Tensor

# A channel count that is not whole blocks joins a chain padded from this many (24 -> 32: a
# quarter of the padded work on zero weights; onnxruntime's NCHWc pads the same way).
PADDED_CHANNELS = 24


def enabled() -> bool:
    """Whether the rewrite runs (``FUEL_BLOCKED`` unset or not 0, and conv.c's blocked launch
    is built here)."""
    if os.environ.get("FUEL_BLOCKED", "1") == "0":
        return False
    from fuel.backends.cpu import convolution_blocked

    return convolution_blocked.available()


def padding() -> bool:
    """Whether channel counts that are not whole blocks may join a chain, padded (unless
    ``FUEL_BLOCKED_PAD=0``)."""
    return os.environ.get("FUEL_BLOCKED_PAD", "1") != "0"


def padded(channels: int) -> int:
    """``channels`` rounded up to whole blocks of 16."""
    return -(-channels // BLOCK) * BLOCK


def _blockable(channels: int, pad: bool) -> bool:
    """Whether a link may hold ``channels`` channels blocked: whole blocks, or (``pad``) at
    least PADDED_CHANNELS, the last block's lanes past them zero weights (at most a quarter
    of the work wasted)."""
    return channels % BLOCK == 0 or (pad and channels >= PADDED_CHANNELS)


def _link(node: Node) -> bool:
    """Whether ``node`` is a convolution CONV_BLOCKED runs at least as fast as its planar
    kernel."""
    if not _candidate(node):
        return False
    from fuel.backends.cpu.convolution_blocked import DEPTHWISE_TAPS, worth_blocking

    params = node.params
    x, weight = node.inputs[:2]
    groups = params.conv.groups
    depthwise = (len(weight.shape) == 4 and groups == x.shape[1] == node.shape[1]
                 and weight.shape[1] == 1 and weight.shape[2] * weight.shape[3] <= DEPTHWISE_TAPS)
    grouped = whole_block_groups(groups, x.shape[1], node.shape[1])
    # padded: one group (a padded depthwise ran slower than planar) on maps larger than a
    # position (a squeeze-excite's 1 x 1 maps would only gain conversions)
    pad = padding() and groups == 1 and node.shape[2] * node.shape[3] > 1
    if not ((groups == 1 or depthwise or grouped) and _blockable(x.shape[1], pad)
            and _blockable(node.shape[1], pad)):
        return False
    c, m = padded(x.shape[1]), padded(node.shape[1])  # (only a one-group link pads)
    return worth_blocking((x.shape[0], c, *x.shape[2:]), (m, c // groups, *weight.shape[2:]),
                          (node.shape[0], m, *node.shape[2:]), params.conv)


def _stem(node: Node, pooled: bool = False) -> bool:
    """Whether ``node`` is a stem (fewer than 16 channels in) that stores its output blocked
    at least as fast as planar (``convolution_blocked.blocked_stem``; ``pooled``: when a pool
    reads it before a link): it may start a chain, its input read planar, even before a
    depthwise link (no entry conversion to pay)."""
    if not _candidate(node) or node.params.conv.groups != 1:
        return False
    from fuel.backends.cpu.convolution_blocked import blocked_stem

    x, weight = node.inputs[:2]
    return blocked_stem(x.shape, weight.shape, node.shape, node.params.conv, pooled)


def _candidate(node: Node) -> bool:
    """A 2-d float32 CONV_FUSED on the CPU with constant weights, no prelu and no empty
    dim: what a link or a stem may be."""
    return (node.op is OpKind.CONV_FUSED and node.buffer is None and node.dtype is dt.float32
            and len(node.shape) == 4 and node.params.constant_weights
            and node.params.activation != "prelu" and node.device.backend is BackendId.CPU
            and 0 not in node.shape and 0 not in node.inputs[0].shape)


def _feeders(node: Node) -> list[Node]:
    """A link's blocked operands: its input and its residual."""
    return [node.inputs[0]] + ([node.inputs[3]] if node.params.residual else [])


def _pool(node: Node) -> bool:
    """A float32 2-d max or average pool over channels in blocks of 16 (or padded ones)."""
    return (node.op in (OpKind.MAX_POOL, OpKind.AVG_POOL) and node.buffer is None
            and node.dtype is dt.float32 and len(node.shape) == 4
            and len(node.params.kernel) == 2 and _blockable(node.shape[1], padding()))


def _concat(node: Node) -> bool:
    """A float32 concat along the channels of parts in blocks of 16."""
    return (node.op is OpKind.CAT and node.buffer is None and node.dtype is dt.float32
            and len(node.shape) == 4 and node.params.dim == 1
            and all(part.shape[1] % BLOCK == 0 for part in node.inputs))


def _scaled(node: Node) -> int | None:
    """The operand index of the scaled value of a float32 channel scale (a squeeze-excite
    Mul: (N, C, H, W) times an (N, C, 1, 1) value expanded, C in blocks of 16), or None."""
    if (node.op is not OpKind.MUL or node.buffer is not None or node.dtype is not dt.float32
            or len(node.shape) != 4 or not _blockable(node.shape[1], padding())
            or len(node.inputs) != 2):
        return None
    n, c = node.shape[:2]
    for index, scale in enumerate(node.inputs):
        other = node.inputs[1 - index]
        if (scale.op is OpKind.EXPAND and tuple(scale.shape) == tuple(node.shape)
                and tuple(scale.inputs[0].shape) in ((n, c, 1, 1), (1, c, 1, 1))
                and tuple(other.shape) == tuple(node.shape) and other.dtype is dt.float32
                and scale.dtype is dt.float32):
            return 1 - index
    return None


def _channel(node: Node, channels: int) -> Node | None:
    """The (C, 1, 1) or (1, C, 1, 1) float32 value an expanded per-channel operand
    expands, else None."""
    if node.op is not OpKind.EXPAND or node.dtype is not dt.float32:
        return None
    inner = node.inputs[0]
    return inner if tuple(inner.shape) in ((channels, 1, 1), (1, channels, 1, 1)) else None


def _affine(node: Node, readers: dict[int, list[Node]]) -> tuple | None:
    """(value, scale, shift or None, activation) where ``node`` is a channel affine of a
    float32 (N, C, H, W) value, relu(value * scale + shift), its relu and shift optional
    (a pre-activation BatchNormalization and its Relu: densenet's), each step read only by
    the next; else None."""
    if node.dtype is not dt.float32 or len(node.shape) != 4 or node.buffer is not None:
        return None
    channels, activation, shift = node.shape[1], "", None
    if node.op is OpKind.RELU:
        activation, node = "relu", _only(node.inputs[0], node, readers)
    if node is not None and node.op is OpKind.ADD and len(node.inputs) == 2:
        for index, operand in enumerate(node.inputs):
            if (found := _channel(operand, channels)) is not None:
                shift, node = found, _only(node.inputs[1 - index], node, readers)
                break
        else:
            return None
    if node is None or node.op is not OpKind.MUL or len(node.inputs) != 2:
        return None
    for index, operand in enumerate(node.inputs):
        value = node.inputs[1 - index]
        if ((scale := _channel(operand, channels)) is not None and value.dtype is dt.float32
                and tuple(value.shape) == tuple(node.shape)):
            return value, scale, shift, activation
    return None


def _only(node: Node, reader: Node, readers: dict[int, list[Node]]) -> Node | None:
    """``node`` where ``reader`` is its one reader and it is computed here, else None."""
    found = readers.get(id(node), [])
    return node if len(found) == 1 and found[0] is reader and node.buffer is None else None


def _entries(order: list[Node], readers: dict[int, list[Node]], chained: set[int],
             planar: set[int]) -> dict[int, tuple]:
    """The channel affines (``_affine``) in whole blocks that are not chained and that only
    chained nodes read, each reading it blocked (read, and not in ``planar``: ``_planar``):
    their entry scales, shifts and activates each channel on its way into the blocks (a
    depthwise 1x1 CONV_BLOCKED on the planar value), so the affine is never a pass of its
    own. Maps each such node's id to ``_affine``'s tuple."""
    entries: dict[int, tuple] = {}
    if os.environ.get("FUEL_BLOCKED_ENTRY") == "0":
        return entries
    for node in order:
        if (id(node) in chained or id(node) in planar or id(node) not in readers
                or len(node.shape) != 4 or node.shape[1] % BLOCK):
            continue
        affine = _affine(node, readers)
        if affine is not None:
            entries[id(node)] = affine
    return entries


def block_chains(values: dict[str, object]) -> dict[str, object]:
    """``values`` (output name -> Tensor) with their convolution chains blocked; unchanged
    when any output is not a Tensor or no chain has two links."""
    if not values or not all(isinstance(v, Tensor) for v in values.values()) or not enabled():
        return values
    roots = [value._node for value in values.values()]
    order = Graph.build(roots).nodes  # inputs before consumers; realized nodes are leaves
    links = {id(node) for node in order if _link(node)}
    if not links:
        return values
    excluded: set[int] = set()  # padded values a planar reader would convert (``_breaks``)
    while True:
        stems = {id(node) for node in order if _stem(node)}
        chained = _chain(order, links - excluded, stems, excluded)
        if not chained:
            return values
        planar = _planar(order, roots, chained, stems)
        breaks = _breaks(order, chained, stems, planar)
        if not breaks:
            readers = _readers(order, roots)
            joined = _joined(order, readers, chained, stems)
            return _rewrite(values, order, chained, stems, joined,
                            _folded(order, readers, chained, stems, joined),
                            _entries(order, readers, chained, planar))
        excluded |= breaks


def _chain(order: list[Node], links: set[int], stems: set[int],
           excluded: set[int]) -> set[int]:
    """The nodes that run blocked: ``links`` chained (``stems`` gains the pooled stems that
    start a chain), then what follows a chained value; none of ``excluded``."""
    chained: set[int] = set()
    for node in order:  # links next to links (a depthwise one only joins a chain: below),
        if id(node) not in links:  # or fed by a stem, or by a pool of a stem
            continue
        for feeder in _feeders(node):
            if id(feeder) in stems or (id(feeder) in links and feeder.params.conv.groups == 1
                                       and node.params.conv.groups == 1):
                chained.update((id(node), id(feeder)))
            elif (_pool(feeder) and id(feeder) not in excluded
                  and _stem(stem := feeder.inputs[0], pooled=True)):
                stems.add(id(stem))  # the pool joins below, as what follows a chained value
                chained.update((id(node), id(stem)))
    if not chained:
        return chained
    for node in order:  # then what follows a chained value: links, pools, channel concats
        if id(node) in chained or id(node) in excluded:
            continue
        if id(node) in links:
            if any(id(feeder) in chained for feeder in _feeders(node)):
                chained.add(id(node))
        elif _pool(node) and id(node.inputs[0]) in chained:
            chained.add(id(node))
        elif _concat(node) and all(id(part) in chained for part in node.inputs):
            chained.add(id(node))
        elif (scaled := _scaled(node)) is not None and id(node.inputs[scaled]) in chained:
            chained.add(id(node))
    return chained


def _blocked_operands(node: Node, stems: set[int]) -> list[Node]:
    """The operands a chained node reads blocked."""
    if node.op is OpKind.CONV_FUSED:
        return [] if id(node) in stems else _feeders(node)
    if node.op is OpKind.MUL:
        return [node.inputs[_scaled(node)]]
    return list(node.inputs)  # a pool's input, a concat's parts


def _planar(order: list[Node], roots: list[Node], chained: set[int],
            stems: set[int]) -> set[int]:
    """The ids of the nodes something reads planar: an output, an operand of a node outside
    the chains, or one a chained node does not read blocked."""
    planar = {id(root) for root in roots}
    for node in order:
        if id(node) in chained:
            blocked = {id(operand) for operand in _blocked_operands(node, stems)}
            planar.update(id(child) for child in node.inputs if id(child) not in blocked)
        else:
            planar.update(id(child) for child in node.inputs)
    return planar


def _breaks(order: list[Node], chained: set[int], stems: set[int],
            planar: set[int]) -> set[int]:
    """The chained nodes that would convert a padded value (channels not whole blocks)
    between layouts: a padded one that something reads planar (``planar``: outside the
    chains, or an output), and one that reads blocked a padded value left planar. A padded
    value's entry would pad its channels and its exit drop them, each a copy more than a
    whole-block value's: the chains are formed again without these."""
    breaks = set()
    for node in order:
        if id(node) not in chained:
            continue
        if node.shape[1] % BLOCK and id(node) in planar:
            breaks.add(id(node))
        elif any(operand.shape[1] % BLOCK and id(operand) not in chained
                 for operand in _blocked_operands(node, stems)):
            breaks.add(id(node))
    return breaks


def _joined(order: list[Node], readers: dict[int, list[Node]], chained: set[int],
            stems: set[int]) -> dict[int, Node]:
    """The chained channel concats whose parts are all one-group links read by nothing else
    (nor an output): each becomes one CONV_BLOCKED_CAT whose parts store into its blocks.
    Maps each such part's id to its concat."""
    joined: dict[int, Node] = {}
    for node in order:
        if (id(node) in chained and node.op is OpKind.CAT and len(set(map(id, node.inputs)))
                == len(node.inputs) and all(
                    id(part) in chained and id(part) not in stems
                    and part.op is OpKind.CONV_FUSED and part.params.conv.groups == 1
                    and not part.params.residual and len(readers.get(id(part), ())) == 1
                    for part in node.inputs)):
            joined.update((id(part), node) for part in node.inputs)
    return joined


def _readers(order: list[Node], roots: list[Node]) -> dict[int, list[Node]]:
    """Per node id, the nodes that read it (an output counts as a reader: its root)."""
    readers: dict[int, list[Node]] = {}
    for node in order:
        for child in node.inputs:
            readers.setdefault(id(child), []).append(node)
    for root in roots:
        readers.setdefault(id(root), []).append(root)
    return readers


def _folded(order: list[Node], readers: dict[int, list[Node]], chained: set[int],
            stems: set[int], joined: dict[int, Node]) -> set[int]:
    """The chained channel scales (a squeeze-excite's Mul by an (N, C, 1, 1) value) whose
    only reader is a one-group link reading it as its input (not a stem, not a concat's
    part): the link runs with the scale folded into its weights per image
    (CONV_BLOCKED's ``input_scale``), and the scaled value is never written."""
    folded = set()
    for node in order:
        if id(node) not in chained or node.op is not OpKind.MUL:
            continue
        scale = node.inputs[1 - _scaled(node)].inputs[0]
        found = readers.get(id(node), [])
        if len(found) != 1 or scale.shape[0] != node.shape[0]:
            continue
        link = found[0]
        if (id(link) in chained and id(link) not in stems and id(link) not in joined
                and link.op is OpKind.CONV_FUSED and link.params.conv.groups == 1
                and link.inputs[0] is node
                and not (link.params.residual and link.inputs[3] is node)):
            folded.add(id(node))
    return folded


class _Rewrite:
    """The new graph: each old node's planar value, and its blocked value where one is made."""

    def __init__(self, chained: set[int], stems: set[int], joined: dict[int, Node],
                 folded: set[int], entries: dict[int, tuple]) -> None:
        self.chained = chained
        self.stems = stems
        self.joined = joined
        self.folded = folded
        self.entries = entries
        self.planar: dict[int, Node] = {}
        self.blocked: dict[int, Node] = {}

    def planar_of(self, node: Node) -> Node:
        found = self.planar.get(id(node))
        if found is None:  # a link's blocked value, read planar
            value = Tensor(self.blocked[id(node)])
            n, blocks, h, w, _ = value.shape
            assert node.shape[1] == blocks * BLOCK, "a padded value is never read planar"
            found = value.permute(0, 1, 4, 2, 3).contiguous().reshape(
                n, blocks * BLOCK, h, w)._node
            self.planar[id(node)] = found
        return found

    def blocked_of(self, node: Node) -> Node:
        found = self.blocked.get(id(node))
        if found is None and id(node) in self.entries:  # a channel affine entering a chain
            found = self.entry(*self.entries[id(node)])
            self.blocked[id(node)] = found
        if found is None:  # a planar value entering a chain
            value = Tensor(self.planar_of(node))
            n, c, h, w = value.shape
            assert c % BLOCK == 0, "a padded value never enters a chain"  # (``_breaks``)
            found = value.reshape(n, c // BLOCK, BLOCK, h, w).permute(
                0, 1, 3, 4, 2).contiguous()._node
            self.blocked[id(node)] = found
        return found

    def entry(self, value: Node, scale: Node, shift: Node | None, activation: str) -> Node:
        """``value`` (planar) into the blocks, each channel times ``scale`` plus ``shift``
        then ``activation``: a depthwise 1x1 CONV_BLOCKED on the planar value, the scale its
        weight and the shift its bias (read at each launch, never baked)."""
        x = Tensor(self.planar_of(value))
        channels = x.shape[1]
        weight = Tensor(self.planar_of(scale)).reshape(channels, 1, 1, 1)
        bias = (Tensor(self.planar_of(shift)).reshape(channels) if shift is not None
                else from_numpy(np.zeros(channels, np.float32), constant=True))
        conv = ConvParams((1, 1), (0, 0), (0, 0), (1, 1), groups=channels)
        return make(OpKind.CONV_BLOCKED, (x._node, weight._node, bias._node),
                    ConvEpilogueParams(conv, activation))._node

    def constant_of(self, node: Node, shape: tuple) -> Node:
        """The constant ``node``'s (a link's weights or bias) planar value, padded with zeros
        to ``shape`` where it is smaller."""
        value = self.planar_of(node)
        if tuple(value.shape) == shape:
            return value
        array = Tensor(value).numpy()
        grown = np.zeros(shape, array.dtype)
        grown[tuple(slice(0, size) for size in array.shape)] = array
        return from_numpy(grown, constant=True)._node

    def scale_of(self, node: Node, channels: int) -> Tensor:
        """A chained channel scale's (N, C, 1, 1) scale as (N, ``channels``): a padded
        value's padded with zeros for its lanes past the channels."""
        scale = Tensor(self.planar_of(node.inputs[1 - _scaled(node)].inputs[0]))
        scale = scale.reshape(scale.shape[0], scale.shape[1])
        if scale.shape[1] < channels:
            scale = Tensor(pad_dims(scale, (0, channels - scale.shape[1]))._node)
        return scale

    def link(self, node: Node) -> list[Node]:
        """A chained link's CONV_BLOCKED operands: its weights and bias padded with zeros
        where its channels in or out are not whole blocks; where its input is a folded
        channel scale, the scaled value and, last, the scale (N, C) (padded with zeros)."""
        x, weight, bias = node.inputs[:3]
        stem = id(node) in self.stems
        c = x.shape[1] if stem else padded(x.shape[1])  # a stem reads its input planar
        m = padded(node.shape[1])
        folded = id(x) in self.folded
        inputs = [self.planar_of(x) if stem else
                  self.blocked_of(x.inputs[_scaled(x)] if folded else x),
                  self.constant_of(weight, (m, c // node.params.conv.groups, *weight.shape[2:])),
                  self.constant_of(bias, (m,))]
        if node.params.residual:
            inputs.append(self.blocked_of(node.inputs[3]))
        if folded:
            inputs.append(self.scale_of(x, c)._node)
        return inputs

    def add(self, node: Node) -> None:
        """``node`` in the new graph (its inputs already there)."""
        if id(node) in self.chained and node.op in (OpKind.MAX_POOL, OpKind.AVG_POOL):
            p = node.params  # the window over (H, W) of (N, C/16, H, W, 16)
            params = replace(p, kernel=p.kernel + (1,), strides=p.strides + (1,),
                             pads_begin=p.pads_begin + (0,), pads_end=p.pads_end + (0,),
                             dilations=p.dilations + (1,))
            self.blocked[id(node)] = make(node.op, (self.blocked_of(node.inputs[0]),),
                                          params)._node
            return
        if id(node) in self.joined:  # a part its concat runs (below)
            return
        if id(node) in self.chained and node.op is OpKind.CAT and id(node.inputs[0]) in \
                self.joined:
            self.blocked[id(node)] = make(
                OpKind.CONV_BLOCKED_CAT,
                tuple(value for part in node.inputs for value in self.link(part)),
                ConvPartsParams(tuple(part.params for part in node.inputs)))._node
            return
        if id(node) in self.chained and node.op is OpKind.CAT:
            parts = tuple(self.blocked_of(part) for part in node.inputs)
            self.blocked[id(node)] = make(OpKind.CAT, parts, replace(node.params, dim=1))._node
            return
        if id(node) in self.folded:  # a channel scale its one reader folds in (``link``)
            return
        if id(node) in self.chained and node.op is OpKind.MUL:  # a channel scale
            scaled = _scaled(node)
            value = self.blocked_of(node.inputs[scaled])
            n, blocks, h, w, _ = value.shape
            scale = self.scale_of(node, blocks * BLOCK)
            scale = scale.reshape(scale.shape[0], blocks, BLOCK, 1, 1).permute(
                0, 1, 3, 4, 2).expand(n, blocks, h, w, BLOCK)._node
            operands = [None, None]
            operands[scaled], operands[1 - scaled] = value, scale
            self.blocked[id(node)] = make(OpKind.MUL, tuple(operands), node.params)._node
            return
        if id(node) in self.chained:
            params = node.params
            if id(node.inputs[0]) in self.folded:
                params = replace(params, input_scale=True)
            self.blocked[id(node)] = make(OpKind.CONV_BLOCKED, tuple(self.link(node)),
                                          params)._node
            return
        inputs = tuple(self.planar_of(child) for child in node.inputs)
        if all(new is old for new, old in zip(inputs, node.inputs)):
            self.planar[id(node)] = node
        else:
            self.planar[id(node)] = make(node.op, inputs, node.params,
                                         device=node.device)._node


def _rewrite(values: dict[str, object], order: list[Node], chained: set[int],
             stems: set[int], joined: dict[int, Node], folded: set[int],
             entries: dict[int, tuple]) -> dict:
    rewrite = _Rewrite(chained, stems, joined, folded, entries)
    for node in order:
        set_user_site(node.site)  # a new node keeps its ONNX node's name
        try:
            rewrite.add(node)
        finally:
            set_user_site(None)
    return {name: Tensor(rewrite.planar_of(value._node)) for name, value in values.items()}
