"""torch.nn on fuel: ``functional`` (torch.nn.functional's names), ``Module`` and
``Parameter``, the layers (Linear, Conv2d, LayerNorm, MultiheadAttention, ...) and
``utils`` (clip_grad_norm_)."""

from fuel.nn import functional, utils
from fuel.nn.layers import *  # noqa: F403 - Linear, Conv2d, Sequential, ...
from fuel.nn.layers import __all__ as _LAYERS
from fuel.nn.module import Module, Parameter

__all__ = ["Module", "Parameter", "functional", "utils", *_LAYERS]
