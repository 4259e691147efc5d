"""Layout: how a flat Storage is viewed as an n-d tensor (shape, strides, offset in elements)."""

from __future__ import annotations

from math import prod


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides, in elements, for ``shape``."""
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


class Layout:
    """An immutable strided view description. Views never copy: they produce new Layouts."""

    __slots__ = ("shape", "strides", "offset", "_contiguous", "_numel")

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int = 0) -> None:
        self.shape = shape
        self.strides = strides
        self.offset = offset
        self._contiguous = None
        self._numel = None

    @classmethod
    def contiguous(cls, shape: tuple[int, ...]) -> Layout:
        return cls(tuple(shape), contiguous_strides(tuple(shape)), 0)

    def __eq__(self, other) -> bool:
        return (
            isinstance(other, Layout)
            and self.shape == other.shape
            and self.strides == other.strides
            and self.offset == other.offset
        )

    def __hash__(self) -> int:
        return hash((self.shape, self.strides, self.offset))

    def __repr__(self) -> str:
        return f"Layout(shape={self.shape}, strides={self.strides}, offset={self.offset})"

    @property
    def numel(self) -> int:
        count = self._numel
        if count is None:
            count = self._numel = prod(self.shape)
        return count

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        """Row-major dense (size-1 dims may carry any stride). Computed once."""
        known = self._contiguous
        if known is None:
            known = True
            step = 1
            for size, stride in zip(reversed(self.shape), reversed(self.strides)):
                if size != 1 and stride != step:
                    known = False
                    break
                step *= size
            self._contiguous = known
        return known

    def is_dense_from_zero(self) -> bool:
        """Contiguous and starting at element 0: the storage itself, reshaped."""
        return self.offset == 0 and self.is_contiguous()

    def span(self) -> tuple[int, int]:
        """The lowest and one-past-highest element offsets this layout touches."""
        if self.numel == 0:
            return self.offset, self.offset
        low = high = self.offset
        for size, stride in zip(self.shape, self.strides):
            if stride > 0:
                high += (size - 1) * stride
            else:
                low += (size - 1) * stride
        return low, high + 1

    def permute(self, dims: tuple[int, ...]) -> Layout:
        return Layout(
            tuple(self.shape[d] for d in dims), tuple(self.strides[d] for d in dims), self.offset
        )

    def broadcast_to(self, shape: tuple[int, ...]) -> Layout:
        """Stride-0 expansion to ``shape`` (the caller has checked compatibility)."""
        lead = len(shape) - len(self.shape)
        strides = [0] * lead
        for size, own_size, stride in zip(shape[lead:], self.shape, self.strides):
            strides.append(stride if own_size == size else 0)
        return Layout(tuple(shape), tuple(strides), self.offset)

    def slice(self, starts, stops, steps) -> Layout:
        """Per-dim slicing with normalized, in-range ``start``, ``stop`` and nonzero ``step``."""
        offset = self.offset
        shape = []
        strides = []
        for start, stop, step, stride in zip(starts, stops, steps, self.strides):
            if step > 0:
                size = max(0, (stop - start + step - 1) // step)
            else:
                size = max(0, (start - stop - step - 1) // -step)
            if size:
                offset += start * stride
            shape.append(size)
            strides.append(stride * step)
        return Layout(tuple(shape), tuple(strides), offset)

    def reshape(self, shape: tuple[int, ...]) -> Layout | None:
        """The same elements under ``shape`` without copying, or None when that needs a copy."""
        if self.is_contiguous() or prod(shape) == 0:
            return Layout(tuple(shape), contiguous_strides(tuple(shape)), self.offset)
        return self._reshape_strided(tuple(shape))

    def _reshape_strided(self, shape: tuple[int, ...]) -> Layout | None:
        # Group old dims into runs that are mutually contiguous, then split each run.
        old = [(s, st) for s, st in zip(self.shape, self.strides) if s != 1]
        new_strides: list[int] = []
        old_index = 0
        new_index = 0
        target = [s for s in shape]
        while new_index < len(target):
            if target[new_index] == 1:
                new_strides.append(0)
                new_index += 1
                continue
            if old_index >= len(old):
                return None
            # Take old dims until their product matches a product of new dims.
            old_product = old[old_index][0]
            run_end = old_index
            new_product = target[new_index]
            group_end = new_index
            while old_product != new_product:
                if old_product < new_product:
                    run_end += 1
                    if run_end >= len(old):
                        return None
                    if old[run_end - 1][1] != old[run_end][0] * old[run_end][1]:
                        return None
                    old_product *= old[run_end][0]
                else:
                    group_end += 1
                    if group_end >= len(target):
                        return None
                    new_product *= target[group_end]
            stride = old[run_end][1]
            group = []
            for position in range(group_end, new_index - 1, -1):
                group.append(stride)
                stride *= target[position]
            new_strides.extend(reversed(group))
            old_index = run_end + 1
            new_index = group_end + 1
        if old_index != len(old):
            return None
        return Layout(shape, tuple(new_strides), self.offset)
