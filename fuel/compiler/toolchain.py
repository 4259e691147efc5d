"""The C toolchain: find ``cc``, compile a kernel's source into a shared library, load it.

Libraries are cached on disk under ``$FUEL_CACHE_DIR/kernels`` (default ``~/.cache/fuel``),
keyed by a hash of the source, the compiler's identity and the flags, and in memory per
process. Each entry is an index file ``<key>.json`` naming the library ``<key>-<digest>.so``
and its SHA-256; both are written to a temporary name and renamed into place, so two processes
building the same kernel at once each leave a complete, self-consistent entry. An entry whose
library is missing or does not match its digest is reported once, rebuilt and replaced.
Nothing here runs at ``import fuel``: detection happens on the first compile.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from fuel.extras import cache_root
from fuel.ir.errors import KernelError

FLAGS = ("-O3", "-fPIC", "-shared", "-std=gnu11", "-ffp-contract=off", "-fwrapv",
         "-fno-math-errno", "-fopenmp-simd")
ENTRY_POINT = "fuel_kernel"


@dataclass(frozen=True, slots=True)
class Toolchain:
    """A working C compiler and the flags every kernel is built with."""

    compiler: str
    identity: str
    flags: tuple[str, ...]
    openmp: bool
    vector_math: bool = False
    libraries: tuple[str, ...] = ("-lm",)


@dataclass(slots=True)
class BuiltKernel:
    """A loaded kernel: its function, source hash, and where its source and library lie."""

    function: object
    key: str
    source_path: Path
    library_path: Path
    seconds: float
    # (phase, start, seconds) of the compiler run ("compile.c") and the load ("compile.load")
    # this process did, until a caller takes them for the profile (``take_spans``).
    spans: list = field(default_factory=list)


_lock = threading.Lock()
_detected: list = []
_loaded: dict[str, BuiltKernel] = {}
_building: dict[str, Future] = {}  # builds under way, by key
_workers: list = []  # [(pid, ThreadPoolExecutor)] once a build started
_reported: set[str] = set()


def cache_folder() -> Path:
    """``$FUEL_CACHE_DIR/kernels`` or ``~/.cache/fuel/kernels``."""
    return cache_root() / "kernels"


VECTOR_PROBE = ('extern float tanhf(float) __attribute__((simd("notinbranch")));\n'
                "void probe(float *x, long n) {\n"
                "  for (long i = 0; i < n; i++) x[i] = tanhf(x[i]);\n}\n")


def _try_compile(compiler: str, flags: tuple[str, ...], folder: str,
                 libraries: tuple[str, ...] = ("-lm",), source_text: str | None = None
                 ) -> str | None:
    """None when ``compiler`` builds a small kernel with ``flags``, else its message."""
    source = Path(folder) / "probe.c"
    source.write_text(source_text or "#include <math.h>\nvoid probe(float *x, long n) {\n"
                      "  for (long i = 0; i < n; i++) x[i] = expf(x[i]);\n}\n")
    result = subprocess.run([compiler, *flags, str(source), "-o", str(Path(folder) / "probe.so"),
                             *libraries], capture_output=True, text=True)
    return None if result.returncode == 0 else (result.stderr.strip() or "failed")


def detect() -> Toolchain | str:
    """The toolchain (``$CC`` or ``cc``), or a sentence saying why there is none. Probes once:
    ``-march=native`` where the compiler accepts it; OpenMP only when ``FUEL_OPENMP=1``; glibc's
    vector math library (libmvec) where it links, unless ``FUEL_VECTOR_MATH=0``."""
    with _lock:
        if _detected:
            return _detected[0]
        _detected.append(_detect())
        return _detected[0]


def _detect() -> Toolchain | str:
    compiler = os.environ.get("CC") or "cc"
    path = shutil.which(compiler)
    if path is None:
        return f"no C compiler: {compiler!r} is not on PATH (set CC)"
    key = _probe_key(path)
    remembered = _remembered_probe(key)
    if remembered is not None:
        return remembered
    found = _probe(path)
    if isinstance(found, Toolchain):
        _remember_probe(key, found)
    return found


PROBE_FILE = "toolchain.json"  # in the kernel cache: the last probe's verdict per machine


def _probe_key(path: str) -> str:
    """What a probe's verdict depends on: the compiler binary (its real path, size and
    modification time), the settings that steer the probe, the CPU (``-march=native``) and the
    probe's own flags and sources."""
    real = os.path.realpath(path)
    try:
        stat = os.stat(real)
        binary = (real, stat.st_size, stat.st_mtime_ns)
    except OSError:
        binary = (real, 0, 0)
    cpu = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            cpu = "".join(line for line in info.read().split("\n\n")[0].splitlines(True)
                          if line.startswith(("model name", "flags", "vendor_id")))
    except OSError:
        pass
    settings = tuple(os.environ.get(name, "") for name in ("FUEL_OPENMP", "FUEL_VECTOR_MATH"))
    text = repr((binary, settings, cpu, FLAGS, VECTOR_PROBE, _PROBE_REVISION))
    return hashlib.sha256(text.encode()).hexdigest()


_PROBE_REVISION = 1  # bump when _probe's decisions change


def _remembered_probe(key: str) -> Toolchain | None:
    """The Toolchain an earlier process probed under ``key`` (no compiler runs), if any."""
    try:
        stored = json.loads((cache_folder() / PROBE_FILE).read_text())
        if stored.get("key") != key:
            return None
        found = stored["toolchain"]
        toolchain = Toolchain(found["compiler"], found["identity"], tuple(found["flags"]),
                              bool(found["openmp"]), bool(found["vector_math"]),
                              tuple(found["libraries"]))
        if "openmp_flags" in stored and not _openmp_probe:
            _openmp_probe.append(tuple(stored["openmp_flags"]))
        return toolchain
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remember_probe(key: str, toolchain: Toolchain, openmp_flags: tuple | None = None) -> None:
    """Store a probe's verdict for the next process (written whole, then renamed)."""
    folder = cache_folder()
    entry: dict = {"key": key, "toolchain": {
        "compiler": toolchain.compiler, "identity": toolchain.identity,
        "flags": list(toolchain.flags), "openmp": toolchain.openmp,
        "vector_math": toolchain.vector_math, "libraries": list(toolchain.libraries)}}
    if openmp_flags is not None:
        entry["openmp_flags"] = list(openmp_flags)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f"{PROBE_FILE}.{os.getpid()}.tmp"
        partial.write_text(json.dumps(entry))
        os.replace(partial, folder / PROBE_FILE)
    except OSError:
        pass  # a read-only cache: the next process probes again


def _probe(path: str) -> Toolchain | str:
    """Run the compiler: its identity, whether it builds kernels, and which optional flags
    and libraries it takes."""
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout.splitlines()
    except (OSError, subprocess.SubprocessError) as error:
        return f"the C compiler {path} does not run: {error}"
    identity = f"{path} {version[0] if version else '?'}"
    with tempfile.TemporaryDirectory(prefix="fuel-cc-") as folder:
        failure = _try_compile(path, FLAGS, folder)
        if failure is not None:
            return f"the C compiler {path} cannot build kernels: {failure.splitlines()[0]}"
        flags = FLAGS
        if _try_compile(path, FLAGS + ("-march=native",), folder) is None:
            flags = FLAGS + ("-march=native",)
        openmp = (os.environ.get("FUEL_OPENMP") == "1"
                  and _try_compile(path, flags + ("-fopenmp",), folder) is None)
        if openmp:
            flags = flags + ("-fopenmp",)
        vector_libraries = ("-lmvec", "-lm")
        vector_math = (os.environ.get("FUEL_VECTOR_MATH", "1") != "0" and _try_compile(
            path, flags, folder, vector_libraries, VECTOR_PROBE) is None)
    return Toolchain(path, identity, flags, openmp, vector_math,
                     vector_libraries if vector_math else ("-lm",))


def unavailable_reason() -> str | None:
    """Why the CPU backend cannot compile kernels (None when it can)."""
    found = detect()
    return found if isinstance(found, str) else None


# libgomp's idle spin before a finished thread sleeps (its default: 300000), set for every
# process that builds OpenMP kernels, before libgomp loads (see fuel/backends/cpu/c_library.py).
SPIN_COUNT = "10000"


def openmp_flags() -> tuple[str, ...]:
    """``("-fopenmp",)`` where the compiler builds OpenMP code, else ``()`` (probed once).
    For hand-written kernels that thread themselves (the quantized matmul picks its thread
    count per launch) and generated kernels (serial or parallel rows or elements, the
    judge's variants). Handing the flags out sets the bounded idle spin (``GOMP_SPINCOUNT``,
    unless the user set one)."""
    found = detect()
    if isinstance(found, str):
        return ()
    os.environ.setdefault("GOMP_SPINCOUNT", SPIN_COUNT)  # read when libgomp loads
    with _lock:
        if not _openmp_probe:
            with tempfile.TemporaryDirectory(prefix="fuel-cc-") as folder:
                works = _try_compile(found.compiler, found.flags + ("-fopenmp",), folder) is None
            _openmp_probe.append(("-fopenmp",) if works else ())
            _remember_probe(_probe_key(found.compiler), found, _openmp_probe[0])
        return _openmp_probe[0]


_openmp_probe: list = []


def build(source: str, name: str, extra_flags: tuple[str, ...] = ()) -> BuiltKernel:
    """The loaded ``fuel_kernel`` of ``source``: from memory, from the disk cache, or compiled
    now (with ``extra_flags`` after the toolchain's). Raises KernelError naming the kernel,
    the source's path and the compiler's message."""
    return start_build(source, name, extra_flags).result()


def start_build(source: str, name: str, extra_flags: tuple[str, ...] = ()) -> Future:
    """Begin ``build`` on a compile worker and return its future (of a BuiltKernel). Builds
    run in parallel, one C compiler per core, while the caller goes on planning; a build
    already done or under way is shared. A failed build is forgotten: the next call retries."""
    found = detect()
    if isinstance(found, str):
        raise KernelError(f"cannot compile {name}: {found}")
    extra_flags = tuple(flag for flag in extra_flags if flag not in found.flags)
    if extra_flags:
        found = replace(found, flags=found.flags + extra_flags)
    key = hashlib.sha256("\x1f".join((source, found.identity, *found.flags,
                                       *found.libraries)).encode()
                         ).hexdigest()[:32]
    with _lock:
        built = _loaded.get(key)
        if built is not None:
            done: Future = Future()
            done.set_result(built)
            return done
        future = _building.get(key)
        if future is None:
            future = _building[key] = _compile_workers().submit(_build_now, found, source,
                                                                key, name)
        return future


def _build_now(found: Toolchain, source: str, key: str, name: str) -> BuiltKernel:
    try:
        built = _load_or_compile(found, source, key, name)
    except BaseException:
        with _lock:
            _building.pop(key, None)
        raise
    with _lock:
        _loaded[key] = built
        _building.pop(key, None)
    return built


def _compile_workers() -> ThreadPoolExecutor:
    """The process's compile threads (made again in a forked child, whose copy has none)."""
    pid, workers = _workers[0] if _workers else (None, None)
    if pid != os.getpid():
        workers = ThreadPoolExecutor(max_workers=os.cpu_count() or 1,
                                     thread_name_prefix="fuel-cc")
        _workers[:] = [(os.getpid(), workers)]
    return workers


def built_kernels() -> list[BuiltKernel]:
    """Every kernel this process loaded or compiled, in the order it first needed them."""
    with _lock:
        return list(_loaded.values())


def _load_or_compile(toolchain: Toolchain, source: str, key: str, name: str) -> BuiltKernel:
    start = time.perf_counter()
    folder = cache_folder()
    folder.mkdir(parents=True, exist_ok=True)
    index_path = folder / f"{key}.json"
    source_path = folder / f"{key}.c"
    library = _cached_library(folder, index_path, key)
    spans = []
    if library is None:
        began = time.perf_counter()
        library = _compile(toolchain, source, folder, key, source_path, index_path, name)
        spans.append(("compile.c", began, time.perf_counter() - began))
    elif not source_path.exists():
        _write_atomically(source_path, source.encode())
    began = time.perf_counter()
    function = _load(library, name, source_path)
    spans.append(("compile.load", began, time.perf_counter() - began))
    return BuiltKernel(function, key, source_path, library, time.perf_counter() - start, spans)


def take_spans(built: BuiltKernel) -> list[tuple[str, float, float]]:
    """The (phase, start, seconds) of ``built``'s compile and load, once: the caller that
    first takes them reports them (the CPU backend, into the profile's phases)."""
    with _lock:
        spans, built.spans = built.spans, []
    return spans


def _cached_library(folder: Path, index_path: Path, key: str) -> Path | None:
    """The cached library when its index names a file whose digest matches, else None
    (reporting a damaged entry once)."""
    try:
        index = json.loads(index_path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        _report(key, f"its index is unreadable ({error})")
        return None
    library = folder / str(index.get("library", ""))
    try:
        digest = hashlib.sha256(library.read_bytes()).hexdigest()
    except OSError:
        _report(key, f"its library {library.name} is missing")
        return None
    if digest != index.get("sha256"):
        _report(key, f"its library {library.name} does not match its recorded digest")
        return None
    return library


def _report(key: str, why: str) -> None:
    if key not in _reported:
        _reported.add(key)
        warnings.warn(f"fuel: the cached kernel {key} is damaged ({why}); rebuilding it",
                      RuntimeWarning, stacklevel=4)


_announced = threading.Event()
LOGGER = logging.getLogger("fuel.compiler")


def _announce_compiling(folder: Path) -> None:
    """Say once per process, at the first kernel that is not in the disk cache, that kernels
    are being compiled (the first run of a model pauses for it); logged at INFO on
    ``fuel.compiler``, which the ``fuel`` command prints."""
    if not _announced.is_set():
        _announced.set()
        LOGGER.info("fuel: compiling kernels for this machine (once: they are cached in %s)",
                    folder)


def _compile(toolchain: Toolchain, source: str, folder: Path, key: str, source_path: Path,
             index_path: Path, name: str) -> Path:
    _announce_compiling(folder)
    _write_atomically(source_path, source.encode())
    handle, temporary = tempfile.mkstemp(prefix=f"{key}-", suffix=".so.part", dir=folder)
    os.close(handle)
    try:
        result = subprocess.run([toolchain.compiler, *toolchain.flags, str(source_path), "-o",
                                 temporary, *toolchain.libraries], capture_output=True, text=True)
        if result.returncode != 0:
            raise KernelError(f"compiling {name} failed (source {source_path}): "
                              f"{result.stderr.strip()}")
        data = Path(temporary).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        library = folder / f"{key}-{digest[:16]}.so"
        os.replace(temporary, library)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    _write_atomically(index_path, json.dumps({"library": library.name, "sha256": digest,
                                              "compiler": toolchain.identity,
                                              "flags": list(toolchain.flags)}).encode())
    return library


def _write_atomically(path: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(prefix=path.name + ".", suffix=".part",
                                         dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _load(library: Path, name: str, source_path: Path):
    try:
        shared = ctypes.CDLL(str(library))
        function = getattr(shared, ENTRY_POINT)
    except (OSError, AttributeError) as error:
        raise KernelError(f"loading {name} from {library} (source {source_path}) failed: "
                          f"{error}") from None
    function.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    function.restype = None
    return function
