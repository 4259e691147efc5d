"""Tensor factories: from data, constants, ranges and seeded random numbers."""

from __future__ import annotations

import numpy as np

from fuel.frontend.base import TensorBase
from fuel.frontend.build import at_user_line, leaf, make_source
from fuel.ir import dtype as dt
from fuel.ir.device import CPU, parse_device
from fuel.ir.errors import DTypeError, InvalidArgument
from fuel.ir.ops import ArangeParams, FullParams, OpKind

_generator = np.random.default_rng()


def manual_seed(seed: int) -> None:
    """Seed fuel's random number generator (rand, randn, dropout) for reproducible results."""
    global _generator
    _generator = np.random.default_rng(int(seed))


def _shape(size) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    shape = []
    for s in size:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
            raise InvalidArgument(f"sizes must be non-negative integers, got {tuple(size)}")
        shape.append(int(s))
    return tuple(shape)


@at_user_line
def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> TensorBase:
    """A tensor holding a copy of ``data`` (nested lists, scalars, NumPy arrays, Tensors);
    ``requires_grad``: a leaf that collects ``.grad`` (fuel.autograd)."""
    result = _tensor(data, dtype, device)
    if requires_grad:
        if isinstance(data, TensorBase):  # a new leaf, never the argument's own node
            result = result.detach()
        result.requires_grad_(True)
    return result


# NumPy dtype -> fuel's, for the common case of ``_tensor`` (an array of a known dtype).
_KNOWN_NUMPY = {d.numpy: d for d in dt.KNOWN_DTYPES}


def _tensor(data, dtype, device) -> TensorBase:
    if data.__class__ is np.ndarray and dtype is None and device is None and \
            data.dtype in _KNOWN_NUMPY:  # a plain array for the CPU: the checks below hold
        return leaf(np.array(data, copy=True), CPU)
    target = parse_device(device)
    if isinstance(data, TensorBase):
        result = data.to(dtype=dtype) if dtype is not None else data
        return result.to(target)
    if isinstance(data, np.ndarray) and data.dtype.kind in "OUT":
        return leaf(_strings(data), target)
    if isinstance(data, np.ndarray):
        array = data
        known = tuple(d.numpy for d in dt.KNOWN_DTYPES)
        if array.dtype == object or array.dtype.kind not in "biuf" and array.dtype not in known:
            raise DTypeError(f"fuel.tensor() needs numeric data, got a {array.dtype} array")
        if dtype is None and array.dtype not in known:
            raise DTypeError(f"NumPy dtype {array.dtype} has no fuel equivalent")
        array = np.array(array, order="C")  # a dense copy of its own: uploaded as is
    else:
        try:
            inferred = dt.infer_from_python(data)
        except DTypeError as error:
            raise DTypeError(f"fuel.tensor() needs numbers or nested lists of numbers: {error}") \
                from None
        try:
            array = np.array(data, dtype=inferred.numpy)
        except (ValueError, TypeError) as error:
            raise InvalidArgument(f"fuel.tensor() got ragged or malformed data: {error}") \
                from None
    if dtype is not None:
        array = array.astype(dt.to_dtype(dtype).numpy)
    return leaf(array, target)


def _strings(array: np.ndarray) -> np.ndarray:
    """A copy of ``array`` (object, str_ or StringDType) as an object array of ``str``."""
    copied = np.array(array, dtype=object, copy=True)
    wrong = next((v for v in copied.reshape(-1) if not isinstance(v, str)), None)
    if wrong is not None:
        raise DTypeError(f"fuel.tensor() takes numbers or strings; the array holds a "
                         f"{type(wrong).__name__} ({wrong!r})")
    return copied


@at_user_line
def from_numpy(array: np.ndarray, device=None, constant: bool = False) -> TensorBase:
    """A tensor over ``array`` (shared on the CPU when it is contiguous, as in torch).
    ``constant=True``: the values never change (a model's weights): the tensor holds a
    read-only copy of its own, kernels may keep rearranged copies of it (a matmul's packed
    weights) and an in-place write into it raises."""
    if not isinstance(array, np.ndarray):
        raise InvalidArgument(f"from_numpy() takes a NumPy array, got {type(array).__name__}")
    dt.from_numpy(array.dtype)
    if constant:
        array = np.array(array, order="C")  # a dense copy of its own: uploaded as is
        array.flags.writeable = False
    tensor = leaf(array, parse_device(device))
    if constant:
        tensor._node.buffer.constant = True
    return tensor


@at_user_line
def from_dlpack(source) -> TensorBase:
    """A CPU tensor over the host memory of any DLPack producer (a NumPy array, a torch,
    JAX or CuPy host array, a DLPack capsule) without a copy, as ``torch.from_dlpack``; only
    a non-contiguous source is copied (fuel's leaves are dense)."""
    from fuel.frontend.dlpack import to_numpy

    array = to_numpy(source)
    dt.from_numpy(array.dtype)
    return leaf(array, parse_device("cpu"))


@at_user_line
def full(size, fill_value, dtype=None, device=None) -> TensorBase:
    """A tensor of ``size`` filled with ``fill_value`` (dtype inferred from the value)."""
    shape = tuple(size) if isinstance(size, (tuple, list)) else _shape((size,))
    kind = dt.scalar_kind(fill_value)
    chosen = dt.to_dtype(dtype) if dtype is not None else {
        "b": dt.bool_, "i": dt.DEFAULT_INT, "f": dt.DEFAULT_FLOAT}[kind]
    return make_source(OpKind.FULL, FullParams(_shape(shape), fill_value, chosen),
                       parse_device(device))


@at_user_line
def zeros(*size, dtype=None, device=None) -> TensorBase:
    return full(_shape(size), 0, dtype or dt.DEFAULT_FLOAT, device)


@at_user_line
def ones(*size, dtype=None, device=None) -> TensorBase:
    return full(_shape(size), 1, dtype or dt.DEFAULT_FLOAT, device)


@at_user_line
def empty(*size, dtype=None, device=None) -> TensorBase:
    """A tensor of ``size`` whose values are unspecified (fuel fills it with zeros)."""
    return zeros(*size, dtype=dtype, device=device)


@at_user_line
def zeros_like(x: TensorBase, dtype=None, device=None) -> TensorBase:
    return full(x.shape, 0, dtype or x.dtype, device or x.device)


@at_user_line
def ones_like(x: TensorBase, dtype=None, device=None) -> TensorBase:
    return full(x.shape, 1, dtype or x.dtype, device or x.device)


@at_user_line
def full_like(x: TensorBase, fill_value, dtype=None, device=None) -> TensorBase:
    return full(x.shape, fill_value, dtype or x.dtype, device or x.device)


@at_user_line
def empty_like(x: TensorBase, dtype=None, device=None) -> TensorBase:
    return zeros_like(x, dtype, device)


@at_user_line
def arange(start, end=None, step=1, dtype=None, device=None) -> TensorBase:
    """Values from ``start`` (default 0) up to ``end`` by ``step``, torch's dtype rules."""
    if end is None:
        start, end = 0, start
    for value in (start, end, step):
        dt.scalar_kind(value)
    if step == 0:
        raise InvalidArgument("arange step must be nonzero")
    count = max(0, int(np.ceil((end - start) / step)))
    integral = all(dt.scalar_kind(v) in "bi" for v in (start, end, step))
    chosen = dt.to_dtype(dtype) if dtype is not None else (
        dt.DEFAULT_INT if integral else dt.DEFAULT_FLOAT)
    return make_source(OpKind.ARANGE, ArangeParams(start, step, count, chosen),
                       parse_device(device))


@at_user_line
def eye(n: int, m: int | None = None, dtype=None, device=None) -> TensorBase:
    """The identity matrix of n x m (m defaults to n)."""
    chosen = dt.to_dtype(dtype) if dtype is not None else dt.DEFAULT_FLOAT
    return leaf(np.eye(n, n if m is None else m, dtype=chosen.numpy), parse_device(device))


@at_user_line
def rand(*size, dtype=None, device=None) -> TensorBase:
    """Uniform samples in [0, 1) from fuel's seeded generator."""
    chosen = dt.to_dtype(dtype) if dtype is not None else dt.DEFAULT_FLOAT
    if not chosen.is_floating:
        raise DTypeError(f"rand() makes floating-point tensors, not {chosen.name}")
    values = _generator.random(_shape(size), dtype=np.float64).astype(chosen.numpy)
    return leaf(values, parse_device(device))


@at_user_line
def randn(*size, dtype=None, device=None) -> TensorBase:
    """Standard normal samples from fuel's seeded generator."""
    chosen = dt.to_dtype(dtype) if dtype is not None else dt.DEFAULT_FLOAT
    if not chosen.is_floating:
        raise DTypeError(f"randn() makes floating-point tensors, not {chosen.name}")
    values = _generator.standard_normal(_shape(size)).astype(chosen.numpy)
    return leaf(values, parse_device(device))


@at_user_line
def randint(low, high=None, size=(), dtype=None, device=None) -> TensorBase:
    """Integers in [low, high) from fuel's seeded generator."""
    if high is None:
        low, high = 0, low
    chosen = dt.to_dtype(dtype) if dtype is not None else dt.DEFAULT_INT
    values = _generator.integers(low, high, size=_shape(tuple(size))).astype(chosen.numpy)
    return leaf(values, parse_device(device))


def random_generator(seed: float | None = None) -> np.random.Generator:
    """fuel's seeded generator, or (``seed`` given) a fresh one seeded with it, whose draws
    repeat for the same seed (ONNX's ``seed`` attributes)."""
    if seed is None:
        return _generator
    return np.random.default_rng(int(np.array(seed, np.float64).view(np.uint64)))


def random_uniform(shape: tuple[int, ...], device) -> TensorBase:
    """Uniform float32 samples for dropout masks."""
    return leaf(_generator.random(shape, dtype=np.float32), parse_device(device))
