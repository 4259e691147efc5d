"""One wgpu device: detection, the pipeline cache and the deferred command batch.

The batch is the seed's second completion model. Kernels *record* a compute pass into one open
command encoder and return at once (their handles are Ready during the walk). The batch is
submitted before a download or a cross-device copy, when it holds ``DISPATCH_LIMIT`` dispatches
or its parameter arena is full, and at the drain (``synchronize``). Completion of a submitted
batch is observed through a buffer map: every batch ends with a 4-byte copy into its own
``MAP_READ`` fence buffer, and mapping that buffer returns once the batch has run. (wgpu-py
0.32.0's ``queue.on_submitted_work_done`` is broken, so the map is the signal.) Submissions run
in order on the one queue, so a finished batch finishes every earlier one.

A buffer released while a batch that uses it is open or in flight is not destroyed: it joins
that batch's deferred-destruction list and is destroyed when the batch completes.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Sequence

import numpy as np

from fuel.backends.wgpu.windows import binding_resource
from fuel.extras import install_command
from fuel.ir.errors import DeviceError, KernelError, KernelIndexError

try:  # optional dependency: the wgpu extra
    if not os.environ.get("XDG_RUNTIME_DIR"):  # Mesa's drivers warn without one
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="fuel-xdg-")
    import wgpu
except Exception as import_error:  # noqa: BLE001 - any failure makes the backend unavailable
    wgpu = None
    IMPORT_ERROR = f"wgpu is not installed ({import_error}); {install_command('wgpu')}"
else:
    IMPORT_ERROR = ""

DISPATCH_LIMIT = 1024  # a batch holding this many dispatches is submitted
ARENA_BYTES = 1 << 16  # launch parameters of one batch (its ``meta`` words)
CACHE_CEILING = 1 << 30  # bytes of released buffers kept for reuse
# Adapter limits the device is requested with (the defaults are WebGPU's minimums).
REQUESTED_LIMITS = ("max-storage-buffers-per-shader-stage", "max-buffer-size",
                    "max-storage-buffer-binding-size", "max-compute-workgroup-storage-size",
                    "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x",
                    "max-bind-groups")
# Features requested where the adapter has them: timestamps for the profile's device time,
# 16-bit floats in shaders (the float16 kernels).
OPTIONAL_FEATURES = ("timestamp-query", "shader-f16")
SHOWN_LIMITS = ("max-buffer-size", "max-storage-buffer-binding-size",
                "max-storage-buffers-per-shader-stage", "max-compute-workgroups-per-dimension")


def detect():
    """(adapter, reason): the default adapter, or None and why there is none. Never raises."""
    if wgpu is None:
        return None, IMPORT_ERROR
    try:
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception as error:  # noqa: BLE001 - no driver, no ICD, a broken loader
        return None, f"no wgpu adapter: {error}"
    if adapter is None:
        return None, "no wgpu adapter (no Vulkan or Metal driver found)"
    return adapter, ""


_capture = threading.local()


def device_timer():
    """Start timestamping this thread's dispatches; the returned stop function gives a callable
    resolving their device seconds (reading the timestamps waits for their batch)."""
    queries: list = []
    previous = getattr(_capture, "queries", None)
    _capture.queries = queries

    def stop():
        _capture.queries = previous
        return lambda: _device_seconds(queries) if queries else None

    return stop


def _device_seconds(queries) -> float | None:
    total = 0.0
    try:
        for context, resolved in queries:
            if context.lost:
                return None
            stamps = np.frombuffer(context.read(resolved, 0, 16), np.uint64)
            total += max(0, int(stamps[1]) - int(stamps[0])) * 1e-9  # nanoseconds
    except Exception:  # noqa: BLE001 - a failed batch has no times
        return None
    return total


class CommandBatch:
    """One command encoder being recorded (then submitted), what it must keep alive, and the
    fence buffer whose map says it finished."""

    __slots__ = ("encoder", "arena", "arena_buffer", "keep", "retired", "dispatches",
                 "fence", "submitted", "done", "number")

    def __init__(self, device, number: int) -> None:
        self.encoder = device.create_command_encoder()
        self.arena = bytearray()
        self.arena_buffer = device.create_buffer(
            size=ARENA_BYTES, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_DST)
        self.keep: list = []  # staging buffers, bind groups: alive until the batch completes
        self.retired: list = []  # released buffers to destroy once the batch completes
        self.dispatches = 0
        self.fence = None
        self.submitted = False
        self.done = False
        self.number = number


class DeviceContext:
    """A wgpu device and queue, its pipelines, buffers and its open and in-flight batches."""

    def __init__(self, adapter) -> None:
        self.adapter = adapter
        self.info = adapter.info
        limits = adapter.limits
        required = {name: limits[name] for name in REQUESTED_LIMITS if name in limits}
        features = [f for f in OPTIONAL_FEATURES if f in adapter.features]
        self.features = frozenset(features)  # requested, so the device has them
        self.timestamps = "timestamp-query" in self.features  # passes can write timestamps
        self.device = adapter.request_device_sync(required_features=features,
                                                  required_limits=required)
        self.queue = self.device.queue
        self.limits = dict(self.device.limits)
        self.lock = threading.RLock()
        self.pipelines: dict[str, tuple] = {}
        self.layouts: dict[tuple[bool, ...], object] = {}
        self.batch: CommandBatch | None = None
        self.in_flight: list[CommandBatch] = []
        self.batch_count = 0
        self.submits = 0
        self.lost = ""
        self.fence_source = self.device.create_buffer_with_data(
            data=np.zeros(1, np.uint32), usage=wgpu.BufferUsage.COPY_SRC)
        self.max_buffer = int(self.limits["max-buffer-size"])
        self.max_binding = int(self.limits["max-storage-buffer-binding-size"])
        self.max_bindings = int(self.limits["max-storage-buffers-per-shader-stage"])
        self.max_groups = int(self.limits["max-compute-workgroups-per-dimension"])
        self.alignment = int(self.limits["min-storage-buffer-offset-alignment"])
        self.buffers = BufferCache(self)
        # An index kernel writes (1, index, dim size) here on an out-of-range index.
        self.fault_buffer = self.device.create_buffer_with_data(
            data=np.zeros(4, np.int32), usage=wgpu.BufferUsage.STORAGE
            | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST)
        self.fault_watch: list[str] = []  # what the index kernels since the last check were
        self.matmul_shape: str | None = None  # None: the adapter's (see matmul.shader_shape)

    def check_faults(self) -> None:
        """After a finished wait: raise the index fault an index kernel recorded, if any."""
        if not self.fault_watch:
            return
        with self.lock:
            watch, self.fault_watch = self.fault_watch, []
        words = np.frombuffer(self.read(self.fault_buffer, 0, 16), np.int32)
        if words[0] == 0:
            return
        self.write(self.fault_buffer, np.zeros(4, np.int32))
        raise KernelIndexError(f"{watch[0] if len(watch) == 1 else 'an index kernel'}: index "
                               f"{int(words[1])} is out of range for dim {int(words[3])} of "
                               f"size {int(words[2])}")

    @property
    def backend_type(self) -> str:
        return str(self.info.get("backend_type", ""))

    def describe(self) -> str:
        info = self.info
        limits = ", ".join(f"{name} {self.limits[name]}" for name in SHOWN_LIMITS)
        features = ", ".join(sorted(self.features)) or "none"
        return (f"{info.get('device', '?')} ({info.get('adapter_type', '?')}) through "
                f"{self.backend_type}, driver {info.get('description', '?')}; {limits}; "
                f"features {features}")

    def check(self) -> None:
        if self.lost:
            raise DeviceError(f"the wgpu device was lost: {self.lost}")

    # ------------------------------------------------------------------ pipelines

    def pipeline(self, source: str, writable: Sequence[bool], label: str):
        """(compute pipeline, bind group layout) of ``source``, compiled once per device.
        ``writable`` says, per binding after ``meta``, whether the shader writes it."""
        found = self.pipelines.get(source)
        if found is not None:
            return found
        bindings = 1 + len(writable)
        if bindings > self.max_bindings:
            raise KernelError(
                f"{label} needs {bindings} storage buffers; the adapter's "
                f"max-storage-buffers-per-shader-stage is {self.max_bindings}")
        with self.lock:
            key = tuple(writable)
            layout = self.layouts.get(key)
            if layout is None:
                entries = [{"binding": 0, "visibility": wgpu.ShaderStage.COMPUTE,
                            "buffer": {"type": wgpu.BufferBindingType.read_only_storage}}]
                for position, write in enumerate(writable):
                    kind = (wgpu.BufferBindingType.storage if write
                            else wgpu.BufferBindingType.read_only_storage)
                    entries.append({"binding": 1 + position,
                                    "visibility": wgpu.ShaderStage.COMPUTE,
                                    "buffer": {"type": kind}})
                layout = self.device.create_bind_group_layout(entries=entries)
                self.layouts[key] = layout
            try:
                module = self.device.create_shader_module(code=source, label=label)
                pipeline = self.device.create_compute_pipeline(
                    layout=self.device.create_pipeline_layout(bind_group_layouts=[layout]),
                    compute={"module": module, "entry_point": "main"}, label=label)
            except Exception as error:
                raise KernelError(f"WGSL shader {label} failed to compile: {error}") from error
            found = (pipeline, layout)
            self.pipelines[source] = found
            return found

    # ------------------------------------------------------------------ the batch

    def open_batch(self) -> CommandBatch:
        """The batch being recorded (a new one when none is open)."""
        self.check()
        batch = self.batch
        if batch is None:
            self.batch_count += 1
            batch = self.batch = CommandBatch(self.device, self.batch_count)
        return batch

    def dispatch(self, pipeline_layout, buffers: Sequence, meta: np.ndarray, items: int,
                 groups: tuple[int, int, int] | None = None) -> None:
        """Record one dispatch of ``items`` invocations (``WORKGROUP`` per group), or of
        ``groups`` workgroups, reading ``meta`` and binding ``buffers`` in order."""

        if groups is None and items <= 0:
            return
        pipeline, layout = pipeline_layout
        self._check_sizes(buffers)
        groups = groups or self._groups(items)
        data = np.ascontiguousarray(meta, dtype=np.int32).tobytes()
        with self.lock:
            batch = self.open_batch()
            start = -(-len(batch.arena) // self.alignment) * self.alignment
            if start + len(data) > ARENA_BYTES:
                self.submit()
                batch = self.open_batch()
                start = 0
            batch.arena.extend(b"\0" * (start - len(batch.arena)))
            batch.arena.extend(data)
            entries = [{"binding": 0, "resource": {"buffer": batch.arena_buffer,
                                                   "offset": start, "size": len(data)}}]
            entries += [{"binding": 1 + position, "resource": binding_resource(buffer)}
                        for position, buffer in enumerate(buffers)]
            group = self.device.create_bind_group(layout=layout, entries=entries)
            self._record(batch, pipeline, group, groups)

    def bind(self, pipeline_layout, buffers: Sequence, meta: np.ndarray, items: int,
             groups: tuple[int, int, int] | None = None):
        """A launcher recording this dispatch again and again (a replay's prepared launch):
        its params in a buffer of their own and its bind group made once, here."""
        pipeline, layout = pipeline_layout
        self._check_sizes(buffers)
        groups = groups or self._groups(items)
        params = self.device.create_buffer_with_data(
            data=np.ascontiguousarray(meta, dtype=np.int32), usage=wgpu.BufferUsage.STORAGE)
        entries = [{"binding": 0, "resource": {"buffer": params}}]
        entries += [{"binding": 1 + position, "resource": binding_resource(buffer)}
                    for position, buffer in enumerate(buffers)]
        group = self.device.create_bind_group(layout=layout, entries=entries)

        def launch() -> None:
            with self.lock:
                self._record(self.open_batch(), pipeline, group, groups)
        launch.params = params  # alive as long as the launcher
        return launch

    def _check_sizes(self, buffers: Sequence) -> None:
        for binding in buffers:
            size = binding.size
            if size > self.max_binding:
                raise DeviceError(
                    f"a {size}-byte buffer binding exceeds the adapter's "
                    f"max-storage-buffer-binding-size ({self.max_binding} bytes)")

    def _groups(self, items: int) -> tuple[int, int, int]:
        from fuel.compiler.render_wgsl import WORKGROUP

        count = -(-items // WORKGROUP)
        columns = min(count, self.max_groups)
        return (columns, -(-count // columns), 1)

    def _record(self, batch: CommandBatch, pipeline, group, groups) -> None:
        """One compute pass (timestamped while a device timer runs) into ``batch``."""
        timed = getattr(_capture, "queries", None)
        if timed is not None and self.timestamps:
            queries = self.device.create_query_set(type=wgpu.QueryType.timestamp, count=2)
            compute = batch.encoder.begin_compute_pass(timestamp_writes={
                "query_set": queries, "beginning_of_pass_write_index": 0,
                "end_of_pass_write_index": 1})
        else:
            compute = batch.encoder.begin_compute_pass()
        compute.set_pipeline(pipeline)
        compute.set_bind_group(0, group)
        compute.dispatch_workgroups(*groups)
        compute.end()
        if timed is not None and self.timestamps:
            resolved = self.device.create_buffer(
                size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
            batch.encoder.resolve_query_set(queries, 0, 2, resolved, 0)
            batch.keep.append(queries)
            timed.append((self, resolved))
        batch.keep.append(group)
        batch.dispatches += 1
        if batch.dispatches >= DISPATCH_LIMIT:
            self.submit()

    def copy(self, source, source_offset: int, target, target_offset: int, nbytes: int) -> None:
        """Record a buffer-to-buffer copy (offsets and size in bytes, multiples of 4: whole
        buffers, which are sized in words, always are)."""
        if nbytes <= 0:
            return
        with self.lock:
            batch = self.open_batch()
            batch.encoder.copy_buffer_to_buffer(source, source_offset, target, target_offset,
                                                nbytes)

    def write(self, target, array: np.ndarray) -> None:
        """Record a copy of ``array``'s bytes into ``target`` from a staging buffer made now:
        ordered with the recorded kernels, no submit."""
        data = np.ascontiguousarray(array)
        if data.nbytes == 0:
            return
        with self.lock:
            staging = self.device.create_buffer_with_data(data=data,
                                                          usage=wgpu.BufferUsage.COPY_SRC)
            batch = self.open_batch()
            batch.encoder.copy_buffer_to_buffer(staging, 0, target, 0, data.nbytes)
            batch.keep.append(staging)

    def submit(self) -> CommandBatch | None:
        """Submit the open batch (if it recorded anything); it joins the in-flight list."""
        with self.lock:
            batch = self.batch
            if batch is None:
                return None
            self.batch = None
            batch.fence = self.device.create_buffer(
                size=4, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
            batch.encoder.copy_buffer_to_buffer(self.fence_source, 0, batch.fence, 0, 4)
            try:
                if batch.arena:
                    self.queue.write_buffer(batch.arena_buffer, 0, bytes(batch.arena))
                self.queue.submit([batch.encoder.finish()])
            except Exception as error:
                batch.done = True
                self._release(batch)
                raise DeviceError(f"wgpu submit failed: {error}") from error
            batch.submitted = True
            batch.encoder = None
            self.submits += 1
            self.in_flight.append(batch)
            return batch

    def wait(self, batch: CommandBatch) -> None:
        """Block until ``batch`` (submitting it first when still open) and every earlier
        batch have run; then release what they kept alive."""
        if batch.done:
            return
        if not batch.submitted:
            self.submit()
        self.check()
        try:
            batch.fence.map_sync(wgpu.MapMode.READ)
            batch.fence.unmap()
        except Exception as error:
            raise DeviceError(f"waiting for a wgpu command batch failed: {error}") from error
        with self.lock:
            while self.in_flight and self.in_flight[0].number <= batch.number:
                finished = self.in_flight.pop(0)
                finished.done = True
                self._release(finished)

    def finish(self) -> None:
        """Submit the open batch and wait for everything submitted."""
        last = self.submit()
        if last is None and self.in_flight:
            last = self.in_flight[-1]
        if last is not None:
            self.wait(last)

    def retire(self, buffer) -> None:
        """Destroy ``buffer`` once no open or in-flight batch can use it."""
        with self.lock:
            holder = self.batch or (self.in_flight[-1] if self.in_flight else None)
            if holder is None:
                buffer.destroy()
            else:
                holder.retired.append(buffer)

    def _release(self, batch: CommandBatch) -> None:
        for buffer in batch.retired:
            buffer.destroy()
        batch.retired.clear()
        batch.keep.clear()
        batch.arena_buffer.destroy()
        if batch.fence is not None:
            batch.fence.destroy()

    def drop_open(self) -> None:
        """Forget the open batch without submitting it (after a device loss)."""
        with self.lock:
            batch, self.batch = self.batch, None
            batches = ([batch] if batch is not None else []) + self.in_flight
            self.in_flight = []
            for each in batches:
                each.done = True
                each.retired.clear()
                each.keep.clear()

    def read(self, buffer, offset: int, nbytes: int) -> bytes:
        """The bytes of ``buffer`` at ``offset``: recorded as a copy into a mapped staging
        buffer, after submitting the open batch (a read is a submit point)."""
        staging = self.device.create_buffer(
            size=nbytes, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
        with self.lock:
            self.copy(buffer, offset, staging, 0, nbytes)
            batch = self.submit()
        try:
            self.wait(batch)
            staging.map_sync(wgpu.MapMode.READ)
            data = staging.read_mapped(copy=True)
            staging.unmap()
        finally:
            staging.destroy()
        return bytes(data)


class BufferCache:
    """wgpu buffers of one device: released ones are kept by byte size (up to a bound) for the
    next allocation of that size. Reuse is safe: the one queue runs commands in order, so work
    recorded later on a recycled buffer runs after everything recorded before. A buffer not
    kept is retired (destroyed once no open or in-flight batch can use it)."""

    def __init__(self, context: DeviceContext) -> None:
        self.context = context
        self.free: dict[int, list] = {}
        self.lock = threading.Lock()
        self.live_buffers = self.live_bytes = self.peak_bytes = self.cached_bytes = 0
        self.limit = CACHE_CEILING

    def take(self, nbytes: int):
        with self.lock:
            self.live_buffers += 1
            self.live_bytes += nbytes
            self.peak_bytes = max(self.peak_bytes, self.live_bytes)
            bucket = self.free.get(nbytes)
            if bucket:
                self.cached_bytes -= nbytes
                return bucket.pop()
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        try:
            return self.context.device.create_buffer(size=nbytes, usage=usage)
        except Exception as error:
            with self.lock:
                self.live_buffers -= 1
                self.live_bytes -= nbytes
            raise DeviceError(f"cannot allocate {nbytes} bytes on the wgpu device: "
                              f"{error}") from error

    def give_back(self, buffer, nbytes: int) -> None:
        with self.lock:
            self.live_buffers -= 1
            self.live_bytes -= nbytes
            if self.cached_bytes + nbytes <= self.limit and not self.context.lost:
                self.free.setdefault(nbytes, []).append(buffer)
                self.cached_bytes += nbytes
                return
        self.context.retire(buffer)

    def release_cached(self) -> None:
        with self.lock:
            buffers = [b for bucket in self.free.values() for b in bucket]
            self.free.clear()
            self.cached_bytes = 0
        for buffer in buffers:
            self.context.retire(buffer)

    def stats(self) -> dict[str, int]:
        return {"live_buffers": self.live_buffers, "live_bytes": self.live_bytes,
                "peak_bytes": self.peak_bytes, "cached_bytes": self.cached_bytes}
