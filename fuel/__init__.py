"""fuel: a lazy-graph tensor runtime with a transparent, pluggable kernel dispatch layer."""

from __future__ import annotations

from fuel import backends as _backends
from fuel import nn  # noqa: E402
from fuel.frontend.build import at_user_line as _at_user_line
from fuel.frontend.elementwise import where
from fuel.frontend.factories import (
    arange,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    manual_seed,
    ones,
    ones_like,
    rand,
    randint,
    randn,
    tensor,
    zeros,
    zeros_like,
)
from fuel.frontend.jit import jit
from fuel.frontend.shape import cat, chunk, gather, index_select, split, stack
from fuel.frontend.structured import matmul, softmax
from fuel.ir.device import BackendId, Device
from fuel.ir.dtype import (
    DType,
    bfloat16,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    promote_types,
    uint8,
)
from fuel.ir.dtype import bool_ as bool  # noqa: A001 - torch's name
from fuel.ir.errors import (
    DeviceError,
    DeviceMismatch,
    DTypeError,
    FuelError,
    IndexOutOfRange,
    InvalidArgument,
    KernelError,
    NoBackendForOp,
    ShapeError,
)
from fuel.memory.pool import empty_cache, memory_stats
from fuel.profiler import Profile, profile
from fuel.runtime.executor import plan_cache_stats, set_plan_cache_capacity
from fuel.tensor import Tensor

__version__ = "0.1.0"

_backends.find_backend(BackendId.CPU)  # the embedded default registers its kernels at import


def realize(*tensors: Tensor, pipelined: bool = False) -> tuple[Tensor, ...]:
    """Realize several tensors in one walk (shared subgraphs run once); returns them."""
    from fuel.runtime.executor import realize as _realize

    _realize([t._node for t in tensors], pipelined=pipelined)
    return tensors


def _elementwise_function(name: str):
    def function(x, *args, **kwargs):
        if not isinstance(x, Tensor):
            raise InvalidArgument(f"fuel.{name}() takes a Tensor first, got {type(x).__name__}")
        return getattr(x, name)(*args, **kwargs)

    function.__name__ = name
    function.__doc__ = f"``fuel.{name}(x, ...)`` is ``x.{name}(...)``."
    return function


# Functional aliases of Tensor methods, as torch has them (fuel.exp(x), fuel.sum(x, 1), ...).
for _name in (
    "neg abs exp log sqrt rsqrt reciprocal square sin cos tanh sigmoid relu gelu silu erf floor "
    "ceil round sign logical_not isnan add sub mul div remainder pow maximum minimum eq ne lt "
    "le gt ge logical_and logical_or logical_xor sum mean max min prod amax amin argmax argmin "
    "var std all any cumsum reshape permute transpose flatten squeeze unsqueeze flip tril triu "
    "clamp masked_fill log_softmax"
).split():
    globals()[_name] = _elementwise_function(_name)
del _name

# Module-level ops name the user's line in their errors, like the Tensor methods do.
for _name in ("where", "cat", "stack", "split", "chunk", "gather", "index_select", "matmul",
              "softmax", "tensor", "from_numpy", "full", "zeros", "ones", "empty", "arange",
              "eye", "rand", "randn", "randint", "zeros_like", "ones_like", "full_like",
              "empty_like"):
    globals()[_name] = _at_user_line(globals()[_name])
del _name

__all__ = [
    "BackendId", "DType", "Device", "DeviceError", "DeviceMismatch", "DTypeError", "FuelError",
    "IndexOutOfRange", "InvalidArgument", "KernelError", "NoBackendForOp", "Profile",
    "ShapeError", "Tensor", "arange", "bfloat16", "bool", "cat", "chunk", "empty", "empty_like",
    "eye", "float16", "float32", "float64", "from_numpy", "full", "full_like", "gather",
    "index_select", "int16", "int32", "int64", "int8", "manual_seed", "matmul", "nn", "ones",
    "ones_like", "profile", "promote_types", "rand", "randint", "randn", "realize", "softmax",
    "split", "stack", "tensor", "uint8", "where", "zeros", "zeros_like", "memory_stats",
    "empty_cache", "plan_cache_stats", "set_plan_cache_capacity", "jit",
]
