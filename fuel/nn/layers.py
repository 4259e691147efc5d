"""torch.nn's layers on fuel: Linear, Conv1d/2d, Embedding, norms, Dropout, activations,
containers and MultiheadAttention. Weights are Parameters initialized as torch does (same
distributions, fuel's seeded generator: ``fuel.manual_seed``)."""

from __future__ import annotations

import math
from collections.abc import Iterable

from fuel.frontend import factories, tape
from fuel.frontend.backward import assign
from fuel.frontend.build import make
from fuel.ir.errors import InvalidArgument, ShapeError
from fuel.ir.ops import NO_PARAMS, OpKind, ShapeParams
from fuel.ir.params import ConvParams
from fuel.nn import conv as conv_functions
from fuel.nn import functional as F
from fuel.nn.module import Module, Parameter, _assign
from fuel.tensor import Tensor

__all__ = [
    "BatchNorm2d", "Conv1d", "Conv2d", "Dropout", "Embedding", "Flatten", "GELU", "Identity",
    "LayerNorm", "Linear", "ModuleList", "MultiheadAttention", "RMSNorm", "ReLU", "SiLU",
    "Sequential", "Sigmoid", "Tanh",
]


def _uniform(shape: tuple[int, ...], bound: float, dtype=None, device=None) -> Parameter:
    values = factories.rand(*shape, dtype=dtype, device=device) * (2.0 * bound) - bound
    return Parameter(values.realize())


class Linear(Module):
    """y = x W^T + b, W of shape (out_features, in_features)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features) if in_features else 0.0
        self.weight = _uniform((out_features, in_features), bound, dtype, device)
        self.bias = _uniform((out_features,), bound, dtype, device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class _ConvNd(Module):
    rank = 0

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise InvalidArgument(f"channels {in_channels} -> {out_channels} do not divide "
                                  f"into {groups} groups")
        kernel = (kernel_size,) * self.rank if isinstance(kernel_size, int) else tuple(
            kernel_size)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        fan_in = in_channels // groups * math.prod(kernel)
        bound = 1.0 / math.sqrt(fan_in)
        self.weight = _uniform((out_channels, in_channels // groups) + kernel, bound, dtype,
                               device)
        self.bias = _uniform((out_channels,), bound, dtype, device) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        node, weight = x._node, self.weight._node
        bias = self.bias._node if self.bias is not None else None
        if len(node.shape) == self.rank + 2 and not isinstance(self.padding, str) and \
                node.dtype is weight.dtype and node.dtype.is_floating and (
                    bias is None or bias.dtype is node.dtype and bias.shape == weight.shape[:1]):
            # Numbers for padding and one dtype: the nodes conv_nd builds, built directly.
            key = (self.stride, self.padding, self.dilation, self.groups)
            if self.__dict__.get("_conv_key") != key:
                rank = self.rank
                pads = conv_functions._per_dim(self.padding, rank, "padding")
                self.__dict__["_conv_params"] = ConvParams(
                    conv_functions._per_dim(self.stride, rank, "stride"), pads, pads,
                    conv_functions._per_dim(self.dilation, rank, "dilation"), int(self.groups))
                self.__dict__["_conv_key"] = key
            result = make(OpKind.CONV, (node, weight), self.__dict__["_conv_params"])
            if bias is None:
                return result
            out = result._node
            if bias.shape[0] == out.shape[1]:
                shaped = make(OpKind.RESHAPE, (bias,), ShapeParams(bias.shape + (1,) * self.rank))
                return make(OpKind.ADD, (out, make(OpKind.EXPAND, (shaped._node,), ShapeParams(
                    out.shape))._node), NO_PARAMS)
        conv = F.conv1d if self.rank == 1 else F.conv2d
        return conv(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                    self.groups)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}")


class Conv1d(_ConvNd):
    rank = 1


class Conv2d(_ConvNd):
    rank = 2


class Embedding(Module):
    """Rows of a (num_embeddings, embedding_dim) table picked by integer ids."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 device=None, dtype=None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        weight = factories.randn(num_embeddings, embedding_dim, dtype=dtype, device=device)
        if padding_idx is not None:
            weight[padding_idx] = 0.0
        self.weight = Parameter(weight.realize())

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.weight, self.padding_idx)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(
            normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        self.weight = Parameter(factories.ones(*shape, dtype=dtype, device=device)) \
            if elementwise_affine else None
        self.bias = Parameter(factories.zeros(*shape, dtype=dtype, device=device)) \
            if elementwise_affine and bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class RMSNorm(Module):
    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(
            normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        self.weight = Parameter(factories.ones(*shape, dtype=dtype, device=device)) \
            if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


class BatchNorm2d(Module):
    """Per-channel normalization of (N, C, H, W): batch statistics in training (running
    averages updated, unbiased variance as torch), the running ones in eval."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device=None,
                 dtype=None) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = Parameter(factories.ones(num_features, dtype=dtype, device=device)) \
            if affine else None
        self.bias = Parameter(factories.zeros(num_features, dtype=dtype, device=device)) \
            if affine else None
        self.track_running_stats = track_running_stats
        if track_running_stats:
            self.register_buffer("running_mean",
                                 factories.zeros(num_features, dtype=dtype, device=device))
            self.register_buffer("running_var",
                                 factories.ones(num_features, dtype=dtype, device=device))

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 4 or x.shape[1] != self.num_features:
            raise ShapeError(f"BatchNorm2d({self.num_features}) needs (N, {self.num_features}, "
                             f"H, W), got {x.shape}")
        shape = (1, self.num_features, 1, 1)
        if self.training or not self.track_running_stats:
            mean = x.mean((0, 2, 3), keepdim=True)
            centered = x - mean
            var = (centered * centered).mean((0, 2, 3), keepdim=True)
            if self.training and self.track_running_stats:
                count = x.numel() // self.num_features
                with tape.no_grad():
                    m = self.momentum
                    unbiased = var.detach().reshape(-1) * (count / max(count - 1, 1))
                    # Realized now (a lazy running average would hold every past batch);
                    # a state update of a step that fuel.jit captures.
                    assign([(self.running_mean, self.running_mean * (1.0 - m)
                             + mean.detach().reshape(-1) * m),
                            (self.running_var, self.running_var * (1.0 - m) + unbiased * m)])
        else:
            mean = self.running_mean.reshape(shape)
            centered = x - mean
            var = self.running_var.reshape(shape)
        result = centered * (var + self.eps).rsqrt()
        if self.weight is not None:
            result = result * self.weight.reshape(shape) + self.bias.reshape(shape)
        return result


class Dropout(Module):
    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, approximate=self.approximate)


class SiLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class Identity(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        shape = x._node.shape
        if self.start_dim == 1 and self.end_dim == -1 and len(shape) > 2:
            # The batch kept, the rest merged: the reshape flatten builds, built directly.
            return make(OpKind.RESHAPE, (x._node,), ShapeParams((shape[0], math.prod(shape[1:]))))
        return x.flatten(self.start_dim, self.end_dim)


class Sequential(Module):
    """Modules applied in order."""

    def __init__(self, *modules: Module) -> None:
        super().__init__()
        for index, module in enumerate(modules):
            self.add_module(str(index), module)

    def __getitem__(self, index: int) -> Module:
        return list(self._modules.values())[index]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, x):
        for module in self._modules.values():
            x = module(x)
        return x


class ModuleList(Module):
    """A list of modules, registered (their parameters are the owner's)."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        for module in modules:
            self.append(module)

    def append(self, module: Module) -> ModuleList:
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        for module in modules:
            self.append(module)
        return self

    def __getitem__(self, index: int) -> Module:
        return list(self._modules.values())[index]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class MultiheadAttention(Module):
    """torch.nn.MultiheadAttention (packed in-projection, ``batch_first`` or (L, N, E))."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0,
                 bias: bool = True, batch_first: bool = False, device=None,
                 dtype=None) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise InvalidArgument(f"embed_dim {embed_dim} is not divisible by num_heads "
                                  f"{num_heads}")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.batch_first = batch_first
        bound = math.sqrt(6.0 / (embed_dim + 3 * embed_dim))  # xavier_uniform
        self.in_proj_weight = _uniform((3 * embed_dim, embed_dim), bound, dtype, device)
        self.in_proj_bias = Parameter(factories.zeros(3 * embed_dim, dtype=dtype,
                                                      device=device)) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if bias:
            _assign(self.out_proj.bias, factories.zeros(embed_dim, dtype=dtype, device=device))

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                key_padding_mask: Tensor | None = None, need_weights: bool = True,
                attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False):
        if not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        batch, length, width = query.shape
        source = key.shape[1]
        heads, head = self.num_heads, width // self.num_heads
        w_q, w_k, w_v = self.in_proj_weight.chunk(3, 0)
        b_q, b_k, b_v = self.in_proj_bias.chunk(3, 0) if self.in_proj_bias is not None \
            else (None, None, None)

        def split(x: Tensor, w: Tensor, b, size: int) -> Tensor:
            return F.linear(x, w, b).reshape(batch, size, heads, head).transpose(1, 2)

        q, k, v = split(query, w_q, b_q, length), split(key, w_k, b_k, source), \
            split(value, w_v, b_v, source)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head))
        if is_causal and attn_mask is None:
            allowed = factories.ones(length, source, dtype="bool", device=query.device).tril()
            scores = scores.masked_fill(~allowed, float("-inf"))
        if attn_mask is not None:
            if attn_mask.dtype.is_bool:  # True: not allowed (torch's MHA convention)
                scores = scores.masked_fill(attn_mask, float("-inf"))
            else:
                scores = scores + attn_mask
        if key_padding_mask is not None:
            padded = key_padding_mask.reshape(batch, 1, 1, source)
            if padded.dtype.is_bool:
                scores = scores.masked_fill(padded, float("-inf"))
            else:
                scores = scores + padded
        weights = F.softmax(scores, -1)
        dropped = F.dropout(weights, self.dropout, self.training)
        out = (dropped @ v).transpose(1, 2).reshape(batch, length, width)
        out = self.out_proj(out)
        if not self.batch_first:
            out = out.transpose(0, 1)
        if not need_weights:
            return out, None
        return out, weights.mean(1) if average_attn_weights else weights
