"""NVRTC: CUDA C to PTX or a cubin, without a GPU or a driver (CuPy's NVRTC wrapper over the
``nvidia-cuda-nvrtc-cu12`` library; the ``cuda`` extra).

``compile_cuda(source, arch)`` compiles for one explicit target: ``sm_90`` gives a cubin
(NVRTC runs the assembler too, so inline PTX is checked), ``compute_90`` gives PTX. Results
are cached by (source digest, target, options) in memory and on disk under
``$FUEL_CACHE_DIR/cuda`` (written to a temporary name and renamed, so concurrent processes
leave whole files). A compile error is a ``KernelError`` carrying NVRTC's log and the source.
Imported lazily: ``import fuel`` never loads CuPy.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from fuel.extras import cache_root, install_command
from fuel.ir.errors import KernelError

DEFAULT_OPTIONS = ("--std=c++17", "--fmad=false")

_memory: dict[tuple[str, str, tuple[str, ...]], bytes] = {}
_lock = threading.Lock()


def unavailable_reason() -> str | None:
    """Why NVRTC cannot compile here (None when it can); never raises."""
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as error:  # noqa: BLE001 - any failure means: not here
        return (f"NVRTC is not available ({type(error).__name__}: {error}); install the "
                f"cuda extra: {install_command('cuda')}")
    return None


def version() -> tuple[int, int]:
    """NVRTC's (major, minor) version."""
    from cupy_backends.cuda.libs import nvrtc

    return tuple(nvrtc.getVersion())


def supported_architectures() -> list[int]:
    """The compute capabilities (90 for sm_90) this NVRTC compiles for."""
    from cupy_backends.cuda.libs import nvrtc

    return [int(a) for a in nvrtc.getSupportedArchs()]


def digest(source: str) -> str:
    return hashlib.blake2b(source.encode(), digest_size=16).hexdigest()


def _disk_path(key: str, arch: str) -> Path:
    return cache_root() / "cuda" / f"{key}-{arch}.{'cubin' if arch.startswith('sm_') else 'ptx'}"


def compile_cuda(source: str, arch: str, options: tuple[str, ...] = DEFAULT_OPTIONS,
                 name: str = "fuel_kernel.cu", disk: bool = True) -> bytes:
    """The cubin (``arch`` = ``sm_XY``) or PTX (``compute_XY``) of ``source``; KernelError
    with NVRTC's log and the numbered source on a compile error."""
    if not arch.startswith(("sm_", "compute_")):
        raise ValueError(f"arch {arch!r} is neither sm_XY (a cubin) nor compute_XY (PTX)")
    options = tuple(options)
    key = digest(source + "\0" + "\0".join(options))
    found = _memory.get((key, arch, options))
    if found is not None:
        return found
    path = _disk_path(key, arch)
    if disk:
        try:
            found = path.read_bytes()
        except OSError:
            found = None
    if not found:
        found = _compile(source, arch, options, name)
        if disk:
            _write(path, found)
    with _lock:
        _memory[(key, arch, options)] = found
    return found


def _compile(source: str, arch: str, options: tuple[str, ...], name: str) -> bytes:
    from cupy_backends.cuda.libs import nvrtc

    program = nvrtc.createProgram(source, name, [], [])
    try:
        try:
            nvrtc.compileProgram(program, [*options, f"--gpu-architecture={arch}"])
        except nvrtc.NVRTCError as error:
            log = nvrtc.getProgramLog(program)
            numbered = "\n".join(f"{n + 1:4d}  {line}"
                                 for n, line in enumerate(source.splitlines()))
            raise KernelError(f"NVRTC failed to compile {name} for {arch} ({error}):\n{log}\n"
                              f"source:\n{numbered}") from None
        if arch.startswith("sm_"):
            return bytes(nvrtc.getCUBIN(program))
        ptx = nvrtc.getPTX(program)
        return ptx.encode() if isinstance(ptx, str) else bytes(ptx)
    finally:
        nvrtc.destroyProgram(program)


def _write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary name (a failure only loses the cache)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        temporary.write_bytes(data)
        os.replace(temporary, path)
    except OSError:
        pass
