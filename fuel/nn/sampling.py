"""Grid sampling (torch.nn.functional.grid_sample, N-d)."""

from __future__ import annotations

from fuel.ir.errors import InvalidArgument
from fuel.ir.ops import OpKind
from fuel.ir.params import GridSampleParams
from fuel.tensor import Tensor, make

__all__ = ["grid_sample"]

_TORCH_MODES = {"bilinear": "linear", "bicubic": "cubic", "nearest": "nearest",
                "linear": "linear", "cubic": "cubic"}


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear",  # noqa: A002
                padding_mode: str = "zeros", align_corners: bool = False) -> Tensor:
    """Sample ``input`` (N, C, D1..Dr) at the normalized coordinates of ``grid``
    (N, O1..Or, r; the last entry indexes the last dim) as ONNX GridSample defines it (torch
    agrees except for bicubic with border padding, where ONNX also clamps the coordinate)."""
    kind = _TORCH_MODES.get(mode)
    if kind is None:
        raise InvalidArgument(f"grid_sample mode must be bilinear, bicubic or nearest, got "
                              f"{mode!r}")
    if not input.dtype.is_floating:
        input = input.float()
    params = GridSampleParams(kind, padding_mode, bool(align_corners))
    return make(OpKind.GRID_SAMPLE, (input._node, grid.to(input.dtype)._node), params)
