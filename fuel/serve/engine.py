"""The serving engine: one worker thread owns the models. Requests wait in a bounded queue; up
to ``slots`` generations are live at once, each on its own KV cache. Every round runs the
prompts of newly admitted requests, then one batched decode step that gives every other live
generation its next token (continuous batching: requests join and leave between steps). A
request cancelled by its client (a dropped connection) leaves its slot before the next step.

The engine is a scheduler: each request's own state (prompt, sampling, tokens, text, stop
strings, finish reason) is a ``fuel.models.generation.Generation``, the state machine that
LlamaModel's own generation drives too; the engine only decides which step runs when."""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

import fuel
from fuel.ir.errors import FuelError
from fuel.models.batched_decode import BatchDecoder
from fuel.models.generation import Generation
from fuel.models.kv_cache import KVCache
from fuel.models.sampling import SamplingConfig
from fuel.serve.metrics import Metrics

FREE_CACHES_PER_SLOT = 2  # KV caches kept for reuse, per slot
DECODE_STEP = (1, False)  # the replay key of a one-token decode step (LlamaModel._step)


def _heap_trimmer():
    """glibc's ``malloc_trim``, or None where there is none."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_trim_heap = _heap_trimmer() if sys.platform.startswith("linux") else None


def describe(error: Exception) -> str:
    """A FuelError's own message; anything else named with its type (an internal error)."""
    if isinstance(error, FuelError):
        return str(error)
    return f"internal error: {type(error).__name__}: {error}"


class QueueFull(FuelError):
    """The request queue is at its limit; the client should retry later."""


@dataclass
class Job:
    """One request's work and where its events go. ``emit(kind, payload)`` is called on the
    engine thread: ("piece", text), ("done", (finish_reason, prompt_tokens, completion_tokens)),
    ("embeddings", array) or ("error", message)."""

    emit: Callable[[str, object], None]
    ids: list[int] = field(default_factory=list)
    max_tokens: int = 16
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    stop: tuple[str, ...] = ()
    texts: list[str] | None = None  # an embedding job's inputs
    cancelled: bool = False
    # engine-side state of a live generation
    generation: Generation | None = None
    cache: KVCache | None = None
    queued_at: float = field(default_factory=time.perf_counter)

    def cancel(self) -> None:
        """Ask the engine to drop this job (thread-safe: a flag read before every step)."""
        self.cancelled = True


class Engine:
    """Runs generation and embedding jobs for ``model`` (a LlamaModel) and ``encoder`` (a
    SentenceEncoder or None) on a worker thread."""

    def __init__(self, model, encoder=None, slots: int = 4, max_queue: int = 64,
                 metrics: Metrics | None = None, batching: bool = True) -> None:
        self.model = model
        self.batching = batching
        self._batch = BatchDecoder(model)
        self.encoder = encoder
        self.slots = slots
        self.max_queue = max_queue
        self.metrics = metrics or Metrics()
        self._waiting: deque[Job] = deque()
        self._active: list[Job] = []
        self._free_caches: list[KVCache] = []
        self._condition = threading.Condition()
        self._running = False
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifetime
    def start(self) -> None:
        """Start the worker thread."""
        self._running = True
        self._thread = threading.Thread(target=self._run, name="fuel-engine", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the worker thread (live jobs get an error event)."""
        with self._condition:
            self._running = False
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def active_count(self) -> int:
        return len(self._active)

    def submit(self, job: Job) -> None:
        """Queue ``job``; QueueFull when ``max_queue`` jobs already wait."""
        with self._condition:
            if len(self._waiting) >= self.max_queue:
                raise QueueFull(f"the server is busy: {len(self._waiting)} requests are "
                                f"queued (the limit is {self.max_queue}); retry shortly")
            self._waiting.append(job)
            self._condition.notify()

    # ------------------------------------------------------------------ the worker
    def _run(self) -> None:
        while True:
            with self._condition:
                while self._running and not self._waiting and not self._active:
                    self._condition.wait(timeout=1.0)
                if not self._running:
                    break
                admitted = []
                while self._waiting and len(self._active) + len(admitted) < self.slots:
                    admitted.append(self._waiting.popleft())
            for job in admitted:
                self._admit(job)
            self._round()
            self.metrics.set_load(len(self._waiting), len(self._active))
            if not self._active and not self._waiting:
                self._release_memory()
        for job in self._active + list(self._waiting):
            self._finish(job, error="the server is shutting down")

    def _release_memory(self) -> None:
        """Once idle: drop the captured batch steps and pooled buffers, and hand the freed heap
        back to the system (glibc keeps it otherwise), so memory returns to its baseline."""
        self._batch.clear()
        fuel.empty_cache()
        if _trim_heap is not None:
            _trim_heap(0)

    def _admit(self, job: Job) -> None:
        if job.cancelled:
            self.metrics.cancelled += 1
            return
        if job.texts is not None:
            self._embed(job)
            return
        try:
            job.generation = self.model.start_generation(job.ids, job.max_tokens, job.sampling,
                                                         text=True, stop=job.stop)
            job.cache = self._acquire_cache(job.generation.positions_needed)
        except Exception as error:
            self._finish(job, error=describe(error))
            return
        self._active.append(job)

    def _round(self) -> None:
        """Prompts of newly admitted jobs, then one decode step for every other live job:
        batched across jobs when ``batching`` (and more than one decodes), else in turn."""
        for job in [job for job in self._active if job.cancelled]:
            self.metrics.cancelled += 1
            self._finish(job)
        decoding = []
        for job in list(self._active):
            if job.generation.produced:
                decoding.append(job)
                continue
            try:  # the prompt, and the first token
                logits = self.model.forward(job.generation.pending_ids(), job.cache)[-1]
            except Exception as error:
                self._finish(job, error=describe(error))
                continue
            self._deliver(job, logits)
        if len(decoding) > 1 and self.batching:
            try:
                tokens = [job.generation.pending_ids()[0] for job in decoding]
                rows = self._batch.step(tokens, [job.cache for job in decoding])
            except Exception as error:
                for job in decoding:
                    self._finish(job, error=describe(error))
                return
            for job, logits in zip(decoding, rows):
                self._deliver(job, logits)
            return
        for job in decoding:
            try:
                logits = self.model.forward(job.generation.pending_ids(), job.cache)[-1]
            except Exception as error:
                self._finish(job, error=describe(error))
                continue
            self._deliver(job, logits)

    def _deliver(self, job: Job, logits: np.ndarray) -> None:
        """Advance ``job``'s generation with ``logits``: send the text of its new token, end
        the job when the generation is over (the stop token, a stop string or its budget)."""
        generation = job.generation
        generation.advance(logits)
        if generation.produced == 1:
            self.metrics.first_token(time.perf_counter() - job.queued_at)
        self.metrics.count_token()
        if generation.piece:
            job.emit("piece", generation.piece)
        if generation.finished:
            self._finish(job)

    def _finish(self, job: Job, error: str | None = None) -> None:
        """End ``job``: return its cache, send its last events."""
        if job in self._active:
            self._active.remove(job)
        if job.cache is not None:
            self._release_cache(job.cache)
            job.cache = None
        if job.cancelled:
            return
        if error is not None:
            job.emit("error", error)
            return
        generation = job.generation
        rest = generation.finish_text()
        if rest:
            job.emit("piece", rest)
        self.metrics.count_request_tokens(len(job.ids), generation.produced)
        job.emit("done", (generation.finish_reason, len(job.ids), generation.produced))

    def _embed(self, job: Job) -> None:
        try:
            vectors = self.encoder.encode(job.texts)
        except Exception as error:
            job.emit("error", describe(error))
            return
        job.emit("embeddings", np.asarray(vectors, np.float32))

    # ------------------------------------------------------------------ caches
    def _acquire_cache(self, needed: int) -> KVCache:
        """A free KV cache for ``needed`` positions (capacities rounded up to the model's
        bucket), reused when one of that capacity is free."""
        capacity = self.model.cache_capacity(needed)
        for index, cache in enumerate(self._free_caches):
            if cache.capacity == capacity:
                del self._free_caches[index]
                cache.reset()
                return cache
        return self.model.new_cache(capacity)

    def _release_cache(self, cache: KVCache) -> None:
        """Keep ``cache`` for a later request with only its captured one-token decode step: a
        captured prompt step holds its activations, and prompt lengths rarely repeat."""
        cache.reset()
        for key in [key for key in cache.replays if key != DECODE_STEP]:
            del cache.replays[key]
        self._free_caches.append(cache)
        while len(self._free_caches) > FREE_CACHES_PER_SLOT * self.slots:
            self._batch.forget(self._free_caches.pop(0))
