"""The CPU backend's hand-written C kernels (the float32 matmul, the quantized kernels, the
indexing copies): each source built once per process through the kernel compiler's toolchain
and its on-disk cache, then looked up by name.

Threads: kernels built with OpenMP leave finished threads spinning a bounded while
(``GOMP_SPINCOUNT`` defaults to ``fuel.compiler.toolchain.SPIN_COUNT``), then sleeping: a
decode step launches ~120 short matmuls back to back, and waking a sleeping thread for each
cost ~40% of decode speed (``bench/models.py``: 38-47 tok/s passive, 57-67 bounded spin on 2
cores), while an unbounded spin would fight OpenBLAS's threads.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fuel.ir.layout import Layout

_functions: dict[str, object] = {}
_lock = threading.Lock()


def address(storage, layout: Layout) -> int:
    """The address a C kernel is handed for ``layout``'s first element (whole blocks for a
    quantized storage)."""
    base = storage.host_address()
    dtype = storage.dtype
    if dtype.is_quantized:
        return base + dtype.storage_bytes(layout.offset)
    return base + layout.offset * storage.buffer.itemsize


def entry_point(name: str, source: Callable[[], str], openmp: bool = False):
    """The loaded ``fuel_kernel`` of the library ``name`` (``source()`` built or fetched from
    the kernel cache the first time), or None where the machine has no working C compiler."""
    function = _functions.get(name)
    if function is not None:
        return function
    from fuel.backends.cpu.generated import report_build
    from fuel.compiler import toolchain

    if toolchain.unavailable_reason() is not None:
        return None
    with _lock:
        function = _functions.get(name)
        if function is None:
            flags = toolchain.openmp_flags() if openmp else ()
            built = toolchain.build(source(), name, flags)
            report_build(built)
            function = _functions[name] = built.function
    return function


# conv_common.h's calls that hand conv.c's work pool to other libraries: a POOL_ADDRESS call
# writes conv.c's pool_run_units into data[0], a POOL_SHARE call with that data makes it the
# receiving library's pool (one set of helpers: with a pool each, idle helpers of other
# libraries spun on the core a launch needed).
POOL_SHARE, POOL_ADDRESS = -7, -8
# The receiving side in C (run_units on the handed pool, take_pool), put before the sources of
# the libraries other than the convolutions' own.
POOL_UNITS = Path(__file__).with_name("qlinear_units.h")
_pool: list = []  # conv.c's pool as a POOL_SHARE call's data, once conv.c is loaded


def offer_pool(data) -> None:
    """Record conv.c's work pool (``data`` of a POOL_SHARE call) for other libraries."""
    if not _pool:
        _pool.append(data)


def offered_pool():
    """conv.c's work pool where this process has loaded conv.c, else None (a library that
    takes it then runs on the convolutions' helpers)."""
    return _pool[0] if _pool else None


def required_entry_point(name: str, source: Callable[[], str], openmp: bool = False):
    """``entry_point``, or a KernelError naming the library and why where the machine has no
    working C compiler (for kernels with no other way to run)."""
    function = entry_point(name, source, openmp)
    if function is None:
        from fuel.compiler import toolchain
        from fuel.ir.errors import KernelError

        raise KernelError(f"cannot compile {name}: {toolchain.unavailable_reason()}")
    return function


# Constant weights' rearranged copies (winograd's transform, lanes' transposition, the
# quantized convolution's packing, the matmul's packed weights), per weight storage and key
# (form, weights' address, geometry): a launcher prepared again (a new output buffer each call
# where the convolution writes a model's output: a detector's heads) reuses the copy instead
# of redoing it (1024->256 1x1 at 14x14: 2.1 ms a call before a 0.9 ms launch). At most
# KEPT_SHAPES keys per storage, the oldest dropped (the geometry's batch is not part of the
# key: the copies do not depend on it).
_kept: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_kept_lock = threading.Lock()
KEPT_SHAPES = 4


def kept(storage, key: tuple, make: Callable[[], np.ndarray | None]) -> np.ndarray | None:
    """What ``make()`` returned for ``storage`` (a constant weight storage) and ``key``, made
    once (a None answer is not kept); ``storage`` None: ``make()`` every call."""
    if storage is None:
        return make()
    with _kept_lock:
        found = _kept.get(storage, {}).get(key)
    if found is not None:
        return found
    made = make()
    if made is not None:
        with _kept_lock:
            entries = _kept.setdefault(storage, {})
            entries[key] = made
            while len(entries) > KEPT_SHAPES:
                entries.pop(next(iter(entries)))
    return made


def aligned_filled(size: int, fill: Callable[[int], None]) -> np.ndarray:
    """``size`` floats, 64-byte aligned, written by ``fill(address)``."""
    buffer = np.empty(size + 16, np.float32)
    start = -buffer.ctypes.data % 64 // 4
    array = buffer[start:start + size]
    fill(array.ctypes.data)
    return array
