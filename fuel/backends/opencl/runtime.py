"""OpenCL devices: detection by probing, one context + in-order queue per device (made on the
device's first use), the program cache, launches, deferred fault reporting and buffer accounting.

Detection never raises: pyopencl may be missing, an ICD may list a platform whose compiler
builds a trivial kernel but fails real ones (the PoCL bundled by pocl-binary-distribution on
AMD EPYC), so every device is probed with a representative set of fuel's kernels in a child
process (``fuel.backends.opencl.probe``, cached per device and driver), and only working ones
are kept. A system ICD is preferred to one a Python wheel bundles.
"""

from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass, field

import numpy as np

from fuel.backends.opencl.codegen import ProgramSpec
from fuel.backends.opencl.memory import BufferCache
from fuel.extras import install_command
from fuel.ir.errors import DeviceError, FuelError, KernelError, KernelIndexError

try:  # optional dependency: the backend reports itself unavailable without it
    import pyopencl as cl
except Exception as _error:  # ImportError, or an OSError from a broken libOpenCL
    cl = None
    IMPORT_ERROR = f"pyopencl is not importable ({_error}); install it with " \
                   f"{install_command('opencl')}"
else:
    IMPORT_ERROR = ""

DEVICE_ENVIRONMENT = "FUEL_OPENCL_DEVICE"
_capture = threading.local()  # .events: the list a device timer is filling on this thread
_TYPE_RANK = {"GPU": 0, "ACCELERATOR": 1, "CPU": 2}
FAULT_WORDS = 4


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    useful = [line for line in lines if "error" in line.lower()]
    return (useful[-1] if useful else lines[0] if lines else type(error).__name__)[:200]


def _kind(device) -> str:
    for name in ("GPU", "ACCELERATOR", "CPU"):
        if device.type & getattr(cl.device_type, name):
            return name
    return "OTHER"


@dataclass
class Candidate:
    """One (platform, device) pair seen at detection, working or not."""

    platform: object
    device: object
    platform_index: int
    device_index: int
    error: str = ""
    number: int = 0  # its N in opencl:N: the position among the working devices
    bundled: bool = False  # its ICD comes with a Python wheel, not the system

    @property
    def platform_label(self) -> str:
        return f"{self.platform.name.strip()} [{self.platform.version.strip()}]"

    @property
    def label(self) -> str:
        return f"{self.platform_label} / {self.device.name.strip()}"

    @property
    def driver(self) -> str:
        return str(getattr(self.device, "driver_version", "")).strip()

    @property
    def sort_key(self) -> tuple:
        """GPUs first; among equals a system ICD before a wheel's bundled one."""
        return (_TYPE_RANK.get(_kind(self.device), 3), self.bundled, self.platform.name,
                self.platform.version, self.platform_index, self.device_index)


@dataclass
class Detection:
    """What detection found: the working devices, why there is none, the rejected ones."""

    working: list[Candidate]
    reason: str = ""
    rejected: list[Candidate] = field(default_factory=list)


def detect() -> tuple[list[Candidate], str]:
    """(working devices in a stable order, reason when there is none). Never raises."""
    found = detect_devices()
    return found.working, found.reason


def detect_devices() -> Detection:
    """Enumerate, probe (cached) and order the devices. Never raises."""
    if cl is None:
        return Detection([], IMPORT_ERROR or "pyopencl is not importable; install it with "
                                             f"{install_command('opencl')}")
    try:
        platforms = cl.get_platforms()
    except Exception as error:
        return Detection([], f"no OpenCL platform found ({_first_line(error)}); install an ICD "
                             "such as Debian's pocl-opencl-icd or your GPU's driver, or "
                             f"{install_command('opencl-cpu')}")
    seen: list[Candidate] = []
    for platform_index, platform in enumerate(platforms):
        try:
            devices = platform.get_devices()
        except Exception:
            continue
        for device_index, device in enumerate(devices):
            seen.append(Candidate(platform, device, platform_index, device_index))
    from fuel.backends.opencl import probe

    target = os.environ.get(probe.TARGET_ENVIRONMENT, "")
    if target:  # a probe's child process: that one device, unprobed
        chosen = [c for c in seen if f"{c.platform_index}:{c.device_index}" == target]
        return Detection(chosen, "" if chosen else f"probe target {target} not found")
    try:
        probe.probe_devices(seen, [probe.platform_label(p) for p in platforms])
    except Exception as error:  # probing must not take detection down with it
        for candidate in seen:
            candidate.error = f"probing failed: {_first_line(error)}"
    seen.sort(key=lambda c: c.sort_key)
    working = [c for c in seen if not c.error]
    rejected = [c for c in seen if c.error]
    if not seen:
        return Detection([], "no OpenCL device found on any platform")
    if not working:
        return Detection([], "no working OpenCL device: " + "; ".join(
            f"{c.label}: {c.error}" for c in seen), rejected)
    chosen, reason = _choose(working)
    return Detection(chosen, reason, rejected)


def _choose(working: list[Candidate]) -> tuple[list[Candidate], str]:
    for number, candidate in enumerate(working):
        candidate.number = number  # kept when FUEL_OPENCL_DEVICE picks one
    choice = os.environ.get(DEVICE_ENVIRONMENT, "").strip()
    if not choice:
        return working, ""
    if choice.isdigit():
        index = int(choice)
        if index < len(working):
            return [working[index]], ""
    else:
        matches = [c for c in working if choice.lower() in c.label.lower()]
        if matches:
            return matches[:1], ""
    listed = "; ".join(f"{i}: {c.label}" for i, c in enumerate(working))
    return [], f"{DEVICE_ENVIRONMENT}={choice!r} matches no working device (by index or by " \
               f"name): {listed}"


def _build_log(program, device) -> str:
    """The first lines of a program's build log on ``device`` ('empty' when there is none)."""
    try:
        log = program.get_build_info(device, cl.program_build_info.LOG) or ""
    except Exception:
        log = ""
    lines = [line.strip() for line in str(log).splitlines() if line.strip()]
    return " | ".join(lines[:3])[:400] or "empty"


def has_fp64(device) -> bool:
    """Whether ``device`` runs double precision (cl_khr_fp64)."""
    return bool(getattr(device, "double_fp_config", 0)) or "cl_khr_fp64" in device.extensions


def describe(candidate: Candidate) -> str:
    """A one-line description of a device, without setting it up."""
    device = candidate.device
    memory = device.global_mem_size / 2**30
    version = " ".join(candidate.platform.version.split()[:4])
    origin = ", bundled by a Python wheel" if candidate.bundled else ""
    return (f"{device.name.strip()} ({_kind(device)}, {device.max_compute_units} compute "
            f"units, {memory:.1f} GiB) on {candidate.platform.name.strip()}, {version}{origin}")


@dataclass
class Fault:
    """What a fault code means: which kind of launch raised it, for the error message."""

    what: str
    dim: int
    size: int


@dataclass
class DeviceContext:
    """Everything fuel keeps for one OpenCL device."""

    candidate: Candidate
    context: object = None
    queue: object = None
    lock: threading.RLock = field(default_factory=threading.RLock)
    programs: dict = field(default_factory=dict)
    kernels: dict = field(default_factory=dict)
    host_transfers: list = field(default_factory=list)
    faults: dict = field(default_factory=dict)
    fault_buffer: object = None
    buffers: BufferCache = None
    build_options: tuple = ()

    def __post_init__(self) -> None:
        device = self.candidate.device
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(
            self.context, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.buffers = BufferCache(cl, self.context, device)
        self.fault_buffer = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, 4 * FAULT_WORDS)
        cl.enqueue_fill_buffer(self.queue, self.fault_buffer, np.zeros(1, np.int32), 0,
                               4 * FAULT_WORDS)
        rounded = getattr(cl.device_fp_config, "CORRECTLY_ROUNDED_DIVIDE_SQRT", 0)
        if device.single_fp_config & rounded:
            self.build_options = ("-cl-fp32-correctly-rounded-divide-sqrt",)

    @property
    def device(self):
        return self.candidate.device

    @property
    def fp64(self) -> bool:
        return has_fp64(self.device)

    @property
    def max_allocation(self) -> int:
        return self.buffers.max_allocation

    @property
    def is_cpu(self) -> bool:
        return _kind(self.device) == "CPU"

    @property
    def compute_units(self) -> int:
        return int(self.device.max_compute_units)

    @property
    def work_group(self) -> int:
        """Work-group size for per-row trees in local memory."""
        return int(min(256, self.device.max_work_group_size))

    @property
    def launch_group(self) -> int:
        """Work-group size of one-item-per-element launches: wide on CPUs (PoCL turns a group
        into a vectorized loop), 256 elsewhere."""
        wide = 1024 if self.is_cpu else 256
        return int(min(wide, self.device.max_work_group_size))

    # ------------------------------------------------------------------ programs and launches

    def kernel(self, spec: ProgramSpec, name: str):
        """The cl.Kernel ``name`` of ``spec``, building the program once for this device."""
        key = (spec.digest, name)
        found = self.kernels.get(key)
        if found is not None:
            return found
        with self.lock:
            program = self.programs.get(spec.digest)
            if program is None:
                program = self.build(spec)
                self.programs[spec.digest] = program
            found = self.kernels.get(key)
            if found is None:
                try:
                    found = cl.Kernel(program, name)
                except cl.Error as error:  # built, but the compiler dropped the kernel
                    raise KernelError(
                        f"OpenCL program {spec.name} built for {self.device.name.strip()} "
                        f"({self.candidate.platform_label}) has no kernel {name} "
                        f"({_first_line(error)}); build log: {_build_log(program, self.device)}"
                    ) from error
                self.kernels[key] = found
            return found

    def build(self, spec: ProgramSpec):
        """Compile ``spec``; a failure is a KernelError carrying the compiler log."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return cl.Program(self.context, spec.full_source).build(
                    options=list(self.build_options))
        except cl.Error as error:
            raise KernelError(
                f"OpenCL program {spec.name} failed to build for {self.device.name.strip()} "
                f"({self.candidate.platform_label}):\n{error}"
            ) from error

    def launch(self, kernel, global_size, local_size, *args, offset=None) -> None:
        """Set the arguments and enqueue (one lock: kernels are shared between threads)."""
        with self.lock:
            try:
                kernel.set_args(*args)
                note_event(cl.enqueue_nd_range_kernel(self.queue, kernel, global_size,
                                                      local_size, global_work_offset=offset))
            except cl.Error as error:
                raise DeviceError(f"OpenCL launch of {kernel.function_name} failed: "
                                  f"{error}") from error

    def fault_code(self, what: str, dim: int, size: int) -> int:
        """A code an index kernel writes on an out-of-range index, checked at the next wait."""
        with self.lock:
            code = len(self.faults) + 1
            self.faults[code] = Fault(what, dim, size)
            return code

    def check_faults(self) -> None:
        """After a finished wait: raise the first index fault recorded since the last check."""
        if not self.faults:
            return
        words = np.zeros(FAULT_WORDS, np.int32)
        with self.lock:
            cl.enqueue_copy(self.queue, words, self.fault_buffer, is_blocking=True)
            faults, self.faults = self.faults, {}
            if words[0] == 0:
                return
            cl.enqueue_fill_buffer(self.queue, self.fault_buffer, np.zeros(1, np.int32), 0,
                                   4 * FAULT_WORDS)
        fault = faults.get(int(words[0]), Fault("index kernel", -1, -1))
        value = int(words[1:3].view(np.int64)[0])
        raise KernelIndexError(f"{fault.what}: index {value} is out of range for dim "
                               f"{fault.dim} of size {fault.size}")

    def keep_host_transfer(self, event) -> None:
        """Keep a non-blocking host transfer (and the host array it reads) alive until done."""
        with self.lock:
            self.host_transfers.append(event)
            if len(self.host_transfers) > 256:
                oldest, self.host_transfers = self.host_transfers[:128], self.host_transfers[128:]
                for item in oldest:
                    item.wait()

    def finish(self) -> None:
        """Block until the queue is empty; then release host transfers and check faults."""
        try:
            self.queue.finish()
        except cl.Error as error:
            raise DeviceError(f"OpenCL queue on {self.device.name.strip()} failed: "
                              f"{error}") from error
        with self.lock:
            self.host_transfers.clear()
        self.check_faults()


def note_event(event):
    """Hand an enqueued command's event to the device timer running on this thread, if any."""
    events = getattr(_capture, "events", None)
    if events is not None:
        events.append(event)
    return event


def device_timer():
    """Start collecting this thread's OpenCL events; the returned stop function gives a
    callable that sums their device time (from the queue's timestamps) once they finish."""
    events: list = []
    previous = getattr(_capture, "events", None)
    _capture.events = events

    def stop():
        _capture.events = previous
        if previous is not None:
            previous.extend(events)
        return lambda: _device_seconds(events) if events else None

    return stop


def _device_seconds(events) -> float | None:
    try:
        for event in events:
            event.wait()
        return sum(event.profile.end - event.profile.start for event in events) * 1e-9
    except Exception:  # a driver without timestamps, or a failed command
        return None


def wrap_errors(what: str):
    """Context manager turning pyopencl errors into DeviceError naming ``what``."""
    return _ErrorWrapper(what)


class _ErrorWrapper:
    __slots__ = ("what",)

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> bool:
        if error is None or isinstance(error, FuelError):
            return False
        if cl is not None and isinstance(error, (cl.Error, MemoryError)):
            raise DeviceError(f"{self.what}: {error}") from error
        return False
