"""A CUDA device made of host memory, for running the real CUDA backend without a GPU: a fake
``cupy`` (device memory as host arrays, streams and events that are always done, modules
whose functions run the kernels' CUDA C emulated on the host, ``tests.backends.cuda.emulation``)
and a fake cuBLAS whose strided-batched GEMM computes in NumPy with cuBLAS's column-major
semantics. Everything above the driver is the backend's own code: detection, contexts,
pools, pinned transfers, argument packing for ``cuLaunchKernel``, completions, matmul's
operand transposition, the fault word. Kernels with a barrier (block per row) cannot run
serially, so ``install`` makes every row kernel take its thread-per-row rendering."""

from __future__ import annotations

import ctypes
import re
from types import SimpleNamespace

import numpy as np

from tests.backends.cuda import emulation


def _array(pointer: int, dtype, count: int) -> np.ndarray:
    dtype = np.dtype(dtype)
    buffer = (ctypes.c_char * max(count * dtype.itemsize, 1)).from_address(pointer)
    return np.frombuffer(buffer, dtype, count)


class MemoryPointer:
    def __init__(self, array: np.ndarray, offset: int = 0) -> None:
        self.array = array  # keeps the memory alive
        self.ptr = array.ctypes.data + offset

    def __add__(self, offset: int) -> MemoryPointer:
        return MemoryPointer(self.array, self.ptr - self.array.ctypes.data + offset)

    def copy_from_host_async(self, source: int, size: int, stream=None) -> None:
        ctypes.memmove(self.ptr, source, size)

    def copy_to_host_async(self, target: int, size: int, stream=None) -> None:
        ctypes.memmove(target, self.ptr, size)

    def memset_async(self, value: int, size: int, stream=None) -> None:
        ctypes.memset(self.ptr, value, size)


class OutOfMemoryError(MemoryError):
    pass


class MemoryPool:
    def __init__(self) -> None:
        self.used = 0

    def malloc(self, size: int) -> MemoryPointer:
        self.used += size
        return MemoryPointer(np.zeros(size, np.uint8))

    def free_all_blocks(self) -> None:
        pass

    def total_bytes(self) -> int:
        return self.used

    def used_bytes(self) -> int:
        return self.used


class Pinned(np.ndarray):
    @property
    def ptr(self) -> int:
        return self.ctypes.data


def alloc_pinned_memory(size: int) -> Pinned:
    return np.zeros(max(size, 1), np.uint8).view(Pinned)


class Event:
    done = True

    def __init__(self, *args, **kwargs) -> None:
        pass

    def record(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass


class Stream:
    ptr = 0

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def record(self, event=None):
        return event if event is not None else Event()


class Device:
    def __init__(self, index: int = 0) -> None:
        self.id = index

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


_FUNCTIONS: dict[int, str] = {}
_LIBRARIES: dict[str, object] = {}


class Function:
    def __init__(self, source: str) -> None:
        self.ptr = len(_FUNCTIONS) + 1
        _FUNCTIONS[self.ptr] = source


class Module:
    def load(self, image: bytes) -> None:
        self.source = image.decode()

    def get_function(self, name: str) -> Function:
        assert name == "fuel_kernel"
        return Function(self.source)


def launch_kernel(function, gx, gy, gz, bx, by, bz, shared, stream, parameters, extra) -> None:
    """Run the kernel serially: read each parameter through ``kernel_params`` as the driver
    does (a pointer per buffer, then one to the argument struct)."""
    assert (gy, gz, by, bz, extra) == (1, 1, 1, 1, 0)
    source = _FUNCTIONS[function]
    count = pointer_count(source)
    slots = _array(parameters, np.uint64, count + 1)
    pointers = [int(_array(int(slot), np.uint64, 1)[0]) for slot in slots[:count]]
    words = int(re.search(r"long long v\[(\d+)\]; \} fuel_arguments_t", source).group(1))
    arguments = _array(int(slots[count]), np.int64, words).tolist()
    found = _LIBRARIES.get(source)
    if found is None:
        found = _LIBRARIES[source] = (emulation.build([(source, count)]), 0)
    library, index = found
    values = np.array(arguments, np.int64)
    addresses = (ctypes.c_void_p * count)(*pointers)
    run = getattr(library, f"fuel_launch_{index}")
    run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_longlong]
    run(addresses, values.ctypes.data, gx, bx)


def pointer_count(source: str) -> int:
    """How many buffer pointers the kernel of ``source`` takes."""
    return source[source.index("fuel_kernel("):].split(")", 1)[0].count("*")


def preload(sources: list[str]) -> None:
    """Build the emulations of ``sources`` in one library (one compiler run, not one each)."""
    missing = [s for s in dict.fromkeys(sources) if s not in _LIBRARIES]
    if missing:
        library = emulation.build([(s, pointer_count(s)) for s in missing])
        for index, source in enumerate(missing):
            _LIBRARIES[source] = (library, index)


def _properties(index: int) -> dict:
    return {"name": b"Fake GPU (host memory)", "major": 9, "minor": 0,
            "totalGlobalMem": 1 << 30, "multiProcessorCount": 4, "sharedMemPerBlock": 49152}


def cupy_module() -> SimpleNamespace:
    cuda = SimpleNamespace(
        Device=Device, Stream=Stream, Event=Event, MemoryPool=MemoryPool,
        alloc_pinned_memory=alloc_pinned_memory,
        get_elapsed_time=lambda start, stop: 0.001,
        memory=SimpleNamespace(OutOfMemoryError=OutOfMemoryError),
        function=SimpleNamespace(Module=Module),
        driver=SimpleNamespace(launchKernel=launch_kernel),
        runtime=SimpleNamespace(getDeviceCount=lambda: 1, getDeviceProperties=_properties))
    return SimpleNamespace(cuda=cuda)


# ----------------------------------------------------------------------------- cuBLAS

_TYPES = {0: np.float32, 1: np.float64, 2: np.float16, 14: None}


def _numpy_type(code: int):
    if code == 14:
        import ml_dtypes

        return ml_dtypes.bfloat16
    return _TYPES[code]


def _matrix(pointer: int, dtype, op: int, rows: int, columns: int, ld: int) -> np.ndarray:
    """op(X) as a (rows, columns) array of a column-major X with leading dim ``ld``."""
    itemsize = np.dtype(dtype).itemsize
    span = (rows + columns) * max(ld, 1) + rows + columns
    memory = _array(pointer, dtype, span)
    strides = (itemsize, ld * itemsize) if op == 0 else (ld * itemsize, itemsize)
    return np.lib.stride_tricks.as_strided(memory, (rows, columns), strides, writeable=False)


def gemm_strided_batched_ex(handle, transa, transb, m, n, k, alpha, a, a_type, lda, stride_a,
                            b, b_type, ldb, stride_b, beta, c, c_type, ldc, stride_c, count,
                            compute, algo) -> None:
    """C = alpha op(A) op(B) + beta C per batch entry, column-major, in float64."""
    scalar = np.float64 if compute == 70 else np.float32
    alpha_value = float(_array(alpha, scalar, 1)[0])
    beta_value = float(_array(beta, scalar, 1)[0])
    dtype = _numpy_type(c_type)
    itemsize = np.dtype(dtype).itemsize
    for entry in range(count):
        left = _matrix(a + entry * stride_a * itemsize, _numpy_type(a_type), transa, m, k, lda)
        right = _matrix(b + entry * stride_b * itemsize, _numpy_type(b_type), transb, k, n, ldb)
        product = alpha_value * (left.astype(np.float64) @ right.astype(np.float64))
        memory = _array(c + entry * stride_c * itemsize, dtype, ldc * n)
        target = np.lib.stride_tricks.as_strided(memory, (m, n), (itemsize, ldc * itemsize))
        if beta_value:
            product += beta_value * target.astype(np.float64)
        target[...] = product.astype(dtype)


def cublas_module() -> SimpleNamespace:
    return SimpleNamespace(create=lambda: 1, setStream=lambda handle, stream: None,
                           gemmStridedBatchedEx=gemm_strided_batched_ex)


def install(monkeypatch):
    """Make CUDA available on a fake device for the rest of the test (``monkeypatch`` undoes
    it): the fakes in place of CuPy and cuBLAS, NVRTC's output the source itself (the
    emulation compiles it), every row kernel a thread per row; a fresh CUDA backend
    registered. Returns (backend, device)."""
    import shutil
    import sys

    import pytest

    if shutil.which("g++") is None:
        pytest.skip("the fake CUDA device emulates kernels with g++, which is not here")
    libs = pytest.importorskip("cupy_backends.cuda.libs", reason="CuPy (the cuda extra)")

    from fuel import backends
    from fuel.backends.cuda import kernels
    from fuel.backends.cuda.backend import CudaBackend
    from fuel.compiler import nvrtc
    from fuel.dispatch import kernel as table_module
    from fuel.ir.device import BackendId

    monkeypatch.setitem(sys.modules, "cupy", cupy_module())
    monkeypatch.setitem(libs.__dict__, "cublas", cublas_module())
    monkeypatch.setattr(nvrtc, "compile_cuda",
                        lambda source, arch, options=(), **kw: source.encode())
    monkeypatch.setattr(nvrtc, "unavailable_reason", lambda: None)
    monkeypatch.setattr(nvrtc, "supported_architectures", lambda: [75, 80, 86, 89, 90])
    monkeypatch.setattr(kernels, "use_groups", lambda length: False)
    monkeypatch.setattr(table_module, "_global_table", table_module._global_table)
    monkeypatch.setitem(backends._backends, BackendId.CUDA,
                        backends._backends.get(BackendId.CUDA))
    backend = CudaBackend()
    backends.register_backend(backend)
    return backend, backend.devices()[0]
