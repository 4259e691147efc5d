"""fuel: a lazy-graph tensor runtime with a transparent, pluggable kernel dispatch layer."""

from __future__ import annotations

import builtins
import importlib
from typing import Any

from fuel import backends as _backends
from fuel.frontend import factories as _factories
from fuel.frontend.factories import (
    arange,
    empty,
    empty_like,
    eye,
    from_dlpack,
    from_numpy,
    full,
    full_like,
    manual_seed,
    ones,
    ones_like,
    rand,
    randint,
    randn,
    zeros,
    zeros_like,
)
from fuel.frontend.generated import *  # noqa: F403 - the elementwise functions (exp, add, ...)
from fuel.frontend.generated import FUNCTIONS as _GENERATED_FUNCTIONS
from fuel.frontend.quantized import (
    dequantize,
    from_quantized,
    quantized_embedding,
    quantized_matmul,
    quantized_matmul_int8,
    round_int8_blocks,
    round_int16_blocks,
)
from fuel.frontend.shape import cat, chunk, gather, index_select, split, stack
from fuel.frontend.structured import matmul, softmax
from fuel.frontend.tape import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from fuel.functions import *  # noqa: F403 - sum, mean, reshape, clamp, where, ...
from fuel.functions import __all__ as _FUNCTIONS
from fuel.ir.device import BackendId, Device
from fuel.ir.dtype import (
    DType,
    bfloat16,
    float4_e2m1fn,
    float8_e4m3fn,
    float8_e4m3fnuz,
    float8_e5m2,
    float8_e5m2fnuz,
    float8_e8m0fnu,
    float16,
    float32,
    float64,
    int2,
    int4,
    int8,
    int16,
    int32,
    int64,
    iq4_nl,
    iq4_xs,
    promote_types,
    q2_k,
    q3_k,
    q4_0,
    q4_1,
    q4_k,
    q5_0,
    q5_1,
    q5_k,
    q6_k,
    q8_0,
    string,
    uint2,
    uint4,
    uint8,
    uint16,
    uint32,
    uint64,
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
from fuel.ir.ops import OpKind
from fuel.jit import jit
from fuel.memory.pool import empty_cache, memory_stats
from fuel.profiler import Profile, profile
from fuel.runtime.executor import plan_cache_stats, set_plan_cache_capacity
from fuel.runtime.judge import judge_stats
from fuel.tensor import Tensor

# ``fuel.tensor`` is the factory function, not the module that defines Tensor: bind it after
# that module's first import, which sets the package attribute of the same name.
tensor = _factories.tensor

__version__ = "0.1.0"

_backends.find_backend(BackendId.CPU)  # the embedded default registers its kernels at import

# Sub-packages imported on first use, so that ``import fuel`` needs only numpy and ml_dtypes:
# ``fuel.onnx.load(...)`` and ``fuel.models.llama.load_gguf()`` work right after ``import fuel``.
_LAZY_SUBPACKAGES = frozenset({"nn", "onnx", "models", "conformance", "distributed", "autograd",
                               "optim"})

def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBPACKAGES:
        return importlib.import_module(f"fuel.{name}")
    raise AttributeError(f"module 'fuel' has no attribute {name!r}")

def realize(*tensors: Tensor, pipelined: builtins.bool = False) -> tuple[Tensor, ...]:
    """Realize several tensors in one walk (shared subgraphs run once); returns them."""
    from fuel.runtime.executor import realize as _realize

    _realize([t._node for t in tensors], pipelined=pipelined)
    return tensors


def set_fusion(enabled: builtins.bool) -> None:
    """Fuse elementwise groups into generated kernels (True) or run one kernel per node;
    overrides ``FUEL_FUSION`` and drops cached plans built the other way."""
    from fuel.compiler.fusion import set_fusion as _set_fusion
    from fuel.runtime.executor import PLAN_CACHE

    _set_fusion(enabled)
    with PLAN_CACHE.lock:
        PLAN_CACHE.plans.clear()


__all__ = [
    "BackendId", "DType", "Device", "DeviceError", "DeviceMismatch", "DTypeError", "FuelError",
    "IndexOutOfRange", "InvalidArgument", "KernelError", "NoBackendForOp", "OpKind", "Profile",
    "ShapeError", "Tensor", "arange", "bfloat16", "bool", "cat", "chunk", "empty", "empty_like",
    "eye", "float16", "float32", "float64", "from_dlpack", "from_numpy", "full", "full_like",
    "gather",
    "index_select", "int16", "int32", "int64", "int8", "manual_seed", "matmul", "ones",
    "ones_like", "profile", "promote_types", "rand", "randint", "randn", "realize", "softmax",
    "split", "stack", "tensor", "uint8", "uint16", "uint32", "uint64", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn",
    "int4", "uint4", "int2", "uint2", "string", "zeros", "zeros_like",
    "memory_stats",
    "empty_cache", "judge_stats", "plan_cache_stats", "set_plan_cache_capacity", "jit",
    "set_fusion",
    "dequantize", "from_quantized", "quantized_embedding", "quantized_matmul", "round_int16_blocks",
    "quantized_matmul_int8", "round_int8_blocks",
    "q4_0", "q4_1",
    "q8_0", "q4_k", "q6_k", "q5_k", "q5_0", "q5_1", "q3_k", "q2_k", "iq4_nl", "iq4_xs",
    "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
    *_GENERATED_FUNCTIONS, *_FUNCTIONS,
]
