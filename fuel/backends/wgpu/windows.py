"""Launches over buffers larger than the adapter's storage binding size.

A wgpu buffer may be up to ``max-buffer-size`` bytes, but one binding sees at most
``max-storage-buffer-binding-size`` of it (128 MiB on lavapipe). A launch is described as an
index space and one ``Layout`` per operand over that space; ``split_launch`` cuts the space's
splittable dims until every buffer above the binding size is touched, per piece, within one
window (a binding offset aligned to ``min-storage-buffer-offset-alignment`` plus a size). Each
piece comes with its operands' layouts shifted into their windows, so the kernels run
unchanged on every piece. Elements are 4 bytes but float16's 2: a window's offset is aligned
(so it falls on an element) and its size rounded up to whole words, as bindings need (the
buffer itself is sized in words, so the rounded window stays inside it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from fuel.ir.errors import DeviceError
from fuel.ir.layout import Layout

WORD_BYTES = 4  # a binding's size is a multiple of 4 bytes


class Window(NamedTuple):
    """The part of ``buffer`` one binding sees: ``size`` bytes from byte ``offset``."""

    buffer: object
    offset: int
    size: int


class Piece(NamedTuple):
    """One launch of a split: where it starts in the index space, its sizes, its operands'
    layouts (relative to their bindings) and the bindings themselves."""

    starts: tuple[int, ...]
    shape: tuple[int, ...]
    layouts: list[Layout]
    bindings: list


def binding_resource(binding) -> dict:
    """The bind group resource of a buffer (bound whole) or of a ``Window``."""
    if isinstance(binding, Window):
        return {"buffer": binding.buffer, "offset": binding.offset, "size": binding.size}
    return {"buffer": binding}


def split_launch(context, shape: Sequence[int], buffers: Sequence, layouts: Sequence[Layout],
                 item_bytes: Sequence[int], fixed: Sequence[int] = (),
                 label: str = "a kernel") -> list[Piece]:
    """Pieces of the launch over ``shape`` (one when every buffer fits a binding); each
    buffer's elements are ``item_bytes`` wide. The dims in ``fixed`` are never cut (a
    reduction's reduced dims, a gather's source dim)."""
    shape, fixed = tuple(shape), frozenset(fixed)
    limit, alignment = context.max_binding, max(context.alignment, WORD_BYTES)
    large = [buffer.size > limit for buffer in buffers]
    if not any(large):
        return [Piece((0,) * len(shape), shape, list(layouts), list(buffers))]
    pieces: list[Piece] = []
    pending = [(0,) * len(shape)], [shape]
    starts_list, shapes_list = pending
    while starts_list:
        starts, sizes = starts_list.pop(), shapes_list.pop()
        moved = [_shifted(layout, starts, sizes) for layout in layouts]
        windows = [_window(buffer, layout, alignment, item) if big else None
                   for buffer, layout, big, item in zip(buffers, moved, large, item_bytes)]
        if all(window is None or window.size <= limit for window in windows):
            bindings = [buffer if window is None else window
                        for buffer, window in zip(buffers, windows)]
            shifted = [layout if window is None else
                       Layout(layout.shape, layout.strides, layout.offset - window.offset // item)
                       for layout, window, item in zip(moved, windows, item_bytes)]
            pieces.append(Piece(starts, sizes, shifted, bindings))
            continue
        worst = max(w.size for w in windows if w is not None)
        dim, after = _best_cut(moved, sizes, large, fixed, buffers, alignment, item_bytes)
        if dim is None or after >= worst:
            raise DeviceError(
                f"{label} reads or writes {worst} bytes of one buffer in a single element "
                f"range, above the adapter's max-storage-buffer-binding-size ({limit} bytes); "
                f"it cannot be split further")
        half = sizes[dim] // 2
        for start, size in ((starts[dim] + half, sizes[dim] - half), (starts[dim], half)):
            starts_list.append(starts[:dim] + (start,) + starts[dim + 1:])
            shapes_list.append(sizes[:dim] + (size,) + sizes[dim + 1:])
    pieces.sort(key=lambda piece: piece.starts)
    return pieces


def _shifted(layout: Layout, starts: tuple[int, ...], sizes: tuple[int, ...]) -> Layout:
    offset = layout.offset + sum(s * stride for s, stride in zip(starts, layout.strides))
    return Layout(sizes, layout.strides, offset)


def _window(buffer, layout: Layout, alignment: int, item_bytes: int) -> Window:
    low, high = layout.span()
    start = low * item_bytes // alignment * alignment
    end = -(-high * item_bytes // WORD_BYTES) * WORD_BYTES
    return Window(buffer, start, max(end - start, WORD_BYTES))


def _best_cut(layouts, sizes, large, fixed, buffers, alignment,
              item_bytes) -> tuple[int | None, int]:
    """The cuttable dim whose halving shrinks the largest oversized window most, and the
    largest window after that cut."""
    best, best_size = None, None
    for dim, size in enumerate(sizes):
        if size < 2 or dim in fixed:
            continue
        half = sizes[:dim] + (size - size // 2,) + sizes[dim + 1:]
        worst = max(_window(buffer, Layout(half, layout.strides, layout.offset), alignment,
                            item).size
                    for buffer, layout, big, item in zip(buffers, layouts, large, item_bytes)
                    if big)
        if best_size is None or worst < best_size:
            best, best_size = dim, worst
    return best, best_size or 0
