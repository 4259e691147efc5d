"""The serving engine: one worker thread owns the models and runs one forward per step for
every live request at once (continuous batching with chunked prefill over a paged KV cache).

Each step gathers, within a token budget: one decode token of every request that is
generating, the next chunk of every prompt still being read, and the first chunks of newly
admitted requests. ``fuel.models.paged_step`` runs them as one forward (the weights read once
for all rows; each row's attention over its own request's blocks), captured per row-count
bucket and replayed. A long prompt is read a budget's worth at a time, so it never stalls the
others' decoding for more than a step.

Memory is a pool of fixed-size KV blocks (``fuel.serve.blocks``): a request is admitted when
the blocks of its prompt are free (after taking the blocks of any prefix already cached),
takes one more block whenever its positions cross a block boundary, and gives them back when
it ends. When a generating request finds no block, the most recently admitted request is
preempted: its blocks are released and it goes back to the front of the queue, to be
recomputed (its prompt and the tokens it made so far, most of it often still cached by
prefix) when blocks are free again; its client sees nothing but a pause.

The engine is a scheduler: each request's own state (prompt, sampling, tokens, text, stop
strings, finish reason) is a ``fuel.models.generation.Generation``, the state machine that
LlamaModel's own generation drives too; the engine only decides which rows run when."""

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
from fuel.ir.errors import FuelError, InvalidArgument
from fuel.models.generation import Generation
from fuel.models.kv_cache import PagedKVPool
from fuel.models.paged_step import Chunk, PagedStepper, unsupported
from fuel.models.sampling import SamplingConfig
from fuel.serve.blocks import BlockManager, block_hashes
from fuel.serve.constraints import GrammarFactory
from fuel.serve.metrics import Metrics

DEFAULT_SLOTS = 16
# positions per KV block: prefix reuse takes whole blocks, so a shared prefix (a chat
# template's system part, a system prompt) is reused up to a multiple of this; a request's step
# costs the same at 4, 8 or 16 (the tables are only wider), while bench/serve.py's load (prompts
# sharing 29 of 37-40 tokens) spent 8.24, 8.71 and ~8.9 ms of CPU per token at 1 client and 4.48,
# 4.85 and ~5.4 at 8 clients (bench/serve.py --engine --block-size N). A block smaller than a
# page shares pages with its neighbours, so cached blocks among free ones keep more resident:
# the server's memory after that load grew +6.9% with 4, +4.0% with 8, +1.9% with 16.
DEFAULT_BLOCK_SIZE = 8
DEFAULT_TOKEN_BUDGET = 64  # rows per step: below the quantized matmul's BLAS switch (96)
DEFAULT_KV_MEMORY = 1 << 30  # bytes of KV blocks, when the number of blocks is not given
DEFAULT_PREFIX_CACHE_POSITIONS = 1024  # cached prefix positions kept while the server is idle
# captured step buckets kept while the server is idle (each holds its plan's buffers, a few
# MiB; the most recently run stay, the others are captured again when they come back, their
# first run 100-600 ms on SmolLM2; a burst of 8 or 32 clients meets 5-15 buckets)
DEFAULT_KEPT_CAPTURES = 32


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


def token_logprobs(logits: np.ndarray, token: int, top: int) -> tuple:
    """(token, its log probability, the ``top`` most likely tokens with theirs) under the
    model's distribution (log-softmax of ``logits``, in float64)."""
    row = np.asarray(logits, np.float64).reshape(-1)
    shifted = row - row.max()
    values = shifted - np.log(np.exp(shifted).sum())
    best = np.argpartition(-values, top)[:top] if top else np.zeros(0, np.int64)
    best = best[np.argsort(-values[best], kind="stable")]
    return int(token), float(values[token]), [(int(i), float(values[i])) for i in best]


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
    timeout_s: float | None = None  # the whole request's limit, from queueing to its end
    schema: dict | None = None  # the JSON schema the answer must follow (structured output)
    logprobs: int | None = None  # report each token's log probability and this many top ones
    cancelled: bool = False
    # engine-side state of a live generation
    generation: Generation | None = None
    tokens: list[int] = field(default_factory=list)  # prompt, then the tokens made
    computed: int = 0  # leading tokens whose keys and values are in the job's blocks
    blocks: list[int] = field(default_factory=list)
    named: int = 0  # leading blocks named for prefix reuse
    queued_at: float = field(default_factory=time.perf_counter)
    prompt_hashes: list[bytes] | None = None  # its prompt's full blocks' hashes, once known
    start_error: str | None = None  # why its generation could not start

    def cancel(self) -> None:
        """Ask the engine to drop this job (thread-safe: a flag read before every step)."""
        self.cancelled = True


class Engine:
    """Runs generation and embedding jobs for ``model`` (a LlamaModel) and ``encoder`` (a
    SentenceEncoder or None) on a worker thread.

    Limits: ``slots`` requests generate at once; ``max_queue`` more wait; ``token_budget``
    rows per step (decode tokens and prompt chunks together); ``kv_blocks`` blocks of
    ``block_size`` positions (default: DEFAULT_KV_MEMORY bytes' worth); ``max_inflight_tokens``
    caps the prompt plus max_tokens of all admitted requests together (None: no cap);
    ``request_timeout_s`` ends a request that runs longer (None: no limit);
    ``prefix_cache_blocks`` cached prefix blocks (default DEFAULT_PREFIX_CACHE_POSITIONS
    positions' worth) outlive an idle moment (the rest of the
    cache is forgotten then, its memory given back), and so do the captured steps of the
    ``kept_captures`` most recently run row buckets. ``batching=False``
    runs one request's rows per step (in turn). ``activations``: the quantized matmuls'
    activation precision, "int8" (quantized_matmul_int8, llama.cpp's rule: batched steps
    about twice as cheap in integer dots) or "int16" (quantized_matmul, in-process
    generation's rule)."""

    def __init__(self, model, encoder=None, slots: int = DEFAULT_SLOTS, max_queue: int = 64,
                 metrics: Metrics | None = None, batching: bool = True,
                 kv_blocks: int | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
                 token_budget: int = DEFAULT_TOKEN_BUDGET,
                 max_inflight_tokens: int | None = None,
                 request_timeout_s: float | None = None,
                 prefix_cache_blocks: int | None = None,
                 kept_captures: int = DEFAULT_KEPT_CAPTURES,
                 activations: str = "int8") -> None:
        for name, value in (("slots", slots), ("block_size", block_size),
                            ("token_budget", token_budget), ("max_queue", max_queue)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"the engine's {name} must be a positive integer, "
                                      f"got {value!r}")
        if isinstance(kept_captures, bool) or not isinstance(kept_captures, int) or \
                kept_captures < 0:
            raise InvalidArgument(f"the engine's kept_captures must be a non-negative integer, "
                                  f"got {kept_captures!r}")
        if token_budget < slots:
            raise InvalidArgument(f"the token budget ({token_budget}) must hold a decode token "
                                  f"of every slot ({slots})")
        config = model.config
        self.model = model
        self.encoder = encoder
        self.batching = batching
        self.slots = slots
        self.max_queue = max_queue
        self.token_budget = token_budget
        self.max_inflight_tokens = max_inflight_tokens
        self.request_timeout_s = request_timeout_s
        if prefix_cache_blocks is None:
            prefix_cache_blocks = DEFAULT_PREFIX_CACHE_POSITIONS // block_size
        self.prefix_cache_blocks = prefix_cache_blocks
        self.kept_captures = kept_captures
        self.metrics = metrics or Metrics()
        table_width = -(-config.context_length // block_size)
        if kv_blocks is None:
            per_block = 8 * block_size * config.num_kv_heads * config.head_dim * \
                config.num_layers
            kv_blocks = min(slots * table_width, DEFAULT_KV_MEMORY // per_block) + 1
        self.pool = PagedKVPool(config.num_layers, config.num_kv_heads, config.head_dim,
                                kv_blocks, block_size, model.device)
        self.blocks = BlockManager(kv_blocks, block_size)
        reason = unsupported(model)
        if reason is not None:  # a wrong answer served is worse than none
            raise InvalidArgument(reason)
        self.stepper = PagedStepper(model, self.pool, table_width, activations)
        self.metrics.blocks = self.blocks
        self.grammars = GrammarFactory(model.tokenizer, config.vocab_size, config.eos_token_id)
        self._waiting: deque[Job] = deque()
        self._active: list[Job] = []
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
        if job.timeout_s is None:
            job.timeout_s = self.request_timeout_s
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
            try:
                self._step()
            except Exception as error:  # never a dead engine: fail the step's requests
                for job in list(self._active):
                    self._finish(job, error=describe(error))
            self.metrics.set_load(len(self._waiting), len(self._active))
            if not self._active and not self._waiting:
                self._release_memory()
        for job in self._active + list(self._waiting):
            self._finish(job, error="the server is shutting down")

    def _release_memory(self) -> None:
        """Once idle: the pages of free KV blocks and pooled buffers go back to the system
        (glibc keeps freed heap otherwise), so memory returns to its baseline. The
        ``prefix_cache_blocks`` most recently used blocks cached for prefix reuse stay, and
        the captured steps of the ``kept_captures`` most recently run buckets."""
        self.pool.release(self.blocks.released(self.prefix_cache_blocks))
        self.stepper.trim(self.kept_captures)
        fuel.empty_cache()
        if _trim_heap is not None:
            _trim_heap(0)

    def _step(self) -> None:
        """One scheduling round and, when any rows are due, one forward."""
        self._drop_ended()
        plan: list[tuple[Job, int]] = []
        budget = self.token_budget
        index = 0
        while index < len(self._active) and budget > 0:
            job = self._active[index]
            count = min(len(job.tokens) - job.computed, budget)
            if not self._reserve(job, job.computed + count):
                break  # ``job`` itself was preempted: it was the last one
            plan.append((job, count))
            budget -= count
            index += 1
            if not self.batching:
                break
        pending = self._pending_prefixes() if self.batching else set()
        held: list[Job] = []
        try:
            while budget > 0 and (self.batching or not plan) and self._waiting and \
                    len(self._active) < self.slots:
                job = self._waiting[0]
                if pending and self._prefix_pending(job, pending):
                    held.append(self._waiting.popleft())
                    continue
                if not self._admit(job):
                    break
                if job not in self._active:  # an embedding job, or one that failed to start
                    continue
                count = min(len(job.tokens) - job.computed, budget)
                plan.append((job, count))
                budget -= count
                if self.batching:
                    pending.update(self._prompt_hashes(job))
        finally:  # held jobs keep their places at the front of the queue
            self._waiting.extendleft(reversed(held))
        if not plan:
            return
        chunks = [Chunk(job.tokens[job.computed:job.computed + count], job.computed,
                        job.blocks, job.computed + count == len(job.tokens))
                  for job, count in plan]
        try:
            logits = self.stepper.step(chunks)
        except Exception as error:
            for job, _ in plan:
                self._finish(job, error=describe(error))
            return
        self.metrics.count_step(sum(count for _, count in plan), len(plan))
        # Greedy rows' picks in one NumPy call per step, not one per request (each call gives
        # up the GIL, which the HTTP thread may then hold); none where fewer than two rows
        # would take theirs (sampled or constrained requests choose from their own row).
        greedy = sum(chunk.logits and job.generation.constraint is None
                     and job.generation.sampler.plain_greedy
                     for (job, _), chunk in zip(plan, chunks))
        picks = logits.argmax(axis=1) if greedy > 1 else None
        row = 0
        for (job, count), chunk in zip(plan, chunks):
            job.computed += count
            job.named = self.blocks.name(job.blocks, job.tokens[:job.computed], job.named)
            if chunk.logits:
                self._deliver(job, logits[row], None if picks is None else int(picks[row]))
                row += 1

    def _drop_ended(self) -> None:
        """Cancelled jobs leave; jobs past their timeout end with an error."""
        now = time.perf_counter()
        for job in list(self._active) + list(self._waiting):
            if job.cancelled:
                self.metrics.cancelled += 1
                self._finish(job)
            elif job.timeout_s is not None and now - job.queued_at > job.timeout_s:
                self._finish(job, error=f"the request ran past its time limit of "
                                        f"{job.timeout_s:g} s")

    def _prompt_hashes(self, job: Job) -> list[bytes]:
        """The chained hashes of the full blocks of ``job``'s prompt that prefix reuse could
        take (computed once; none for a job that has made tokens, i.e. a preempted one)."""
        if job.prompt_hashes is None:
            size = self.blocks.block_size
            job.prompt_hashes = [] if job.generation is None or job.generation.produced else \
                block_hashes(job.tokens, size, (len(job.tokens) - 1) // size)
        return job.prompt_hashes

    def _pending_prefixes(self) -> set[bytes]:
        """The block hashes the active requests still reading their prompts will name."""
        pending: set[bytes] = set()
        for job in self._active:
            if len(job.tokens) - job.computed > 1:
                pending.update(self._prompt_hashes(job))
        return pending

    def _prefix_pending(self, job: Job, pending: set[bytes]) -> bool:
        """Whether ``job`` (not yet admitted) should wait for a prefix being computed: a
        request admitted before it is reading a prompt whose leading blocks are ``job``'s too,
        beyond what the cache holds now. Waiting (usually one step) lets ``job`` take those
        blocks from the cache and compute only its own tokens: concurrent requests sharing a
        system prompt or a chat template read it once, not once each."""
        if job.texts is not None or (job.generation is not None and job.generation.produced):
            return False
        if job.generation is None and not self._start(job):
            return False
        hashes = self._prompt_hashes(job)
        cached = self.blocks.cached_prefix(hashes)
        return cached < len(hashes) and hashes[cached] in pending

    def _reserve(self, job: Job, positions: int) -> bool:
        """Blocks for ``job``'s first ``positions`` positions, preempting the most recently
        admitted jobs while none is free; False when ``job`` itself had to be preempted."""
        while len(job.blocks) < self.blocks.blocks_for(positions):
            if self.blocks.usable == 0:
                victim = self._active[-1]
                self._preempt(victim)
                if victim is job:
                    return False
                continue
            job.blocks.append(self.blocks.allocate())
        return True

    def _preempt(self, job: Job) -> None:
        """``job`` gives back its blocks and waits at the front of the queue to be recomputed
        (its prompt and the tokens made so far)."""
        self._active.remove(job)
        self.blocks.release(job.blocks)
        job.blocks, job.computed, job.named = [], 0, 0
        self._waiting.appendleft(job)
        self.metrics.preemptions += 1

    def _admit(self, job: Job) -> bool:
        """Start ``job`` when its prompt's blocks are free (and the in-flight cap allows);
        False to keep it waiting. An embedding job runs at once; a job that fails to start
        ends with its error."""
        if job.texts is not None:
            self._waiting.popleft()
            self._embed(job)
            return True
        if job.generation is None and not self._start(job):
            self._waiting.popleft()
            self._finish(job, error=job.start_error)
            return True
        if self.max_inflight_tokens is not None and self._active:
            inflight = sum(j.generation.positions_needed for j in self._active)
            if inflight + job.generation.positions_needed > self.max_inflight_tokens:
                return False
        shared = self.blocks.match(job.tokens)
        needed = self.blocks.blocks_for(len(job.tokens)) - len(shared)
        if needed + 1 > self.blocks.usable and not (needed <= self.blocks.usable
                                                     and not self._active):
            self.blocks.release(shared)
            if not self._active and needed > self.blocks.blocks - 1 - len(shared):
                self._waiting.popleft()
                self._finish(job, error=f"the request needs {needed} KV blocks; the pool "
                                        f"holds {self.blocks.blocks - 1}")
                return True
            return False
        self._waiting.popleft()
        job.blocks = shared + [self.blocks.allocate() for _ in range(needed)]
        job.computed = job.named = len(shared)
        job.computed *= self.blocks.block_size
        self.metrics.cached_prompt_tokens += job.computed
        self._active.append(job)
        return True

    def _start(self, job: Job) -> bool:
        """Start ``job``'s generation (its prompt checked, its grammar built); False, with
        the reason in ``job.start_error``, when it cannot start."""
        if job.start_error is not None:
            return False
        try:
            job.generation = self.model.start_generation(
                job.ids, job.max_tokens, job.sampling, text=True, stop=job.stop)
            if job.schema is not None:
                job.generation.constraint = self.grammars.constraint(job.schema)
        except Exception as error:
            job.generation = None
            job.start_error = describe(error)
            return False
        job.tokens = [int(t) for t in job.generation.prompt]
        return True

    def _deliver(self, job: Job, logits: np.ndarray, argmax: int | None = None) -> None:
        """Advance ``job``'s generation with ``logits`` (``argmax``: the row's, when known):
        send the text of its new token, end the job when the generation is over (a stop
        token, a stop string or its budget)."""
        generation = job.generation
        token = generation.advance(logits, argmax)
        job.tokens.append(int(token))
        if job.logprobs is not None:
            job.emit("logprobs", token_logprobs(logits, token, job.logprobs))
        if generation.produced == 1:
            self.metrics.first_token(time.perf_counter() - job.queued_at)
        self.metrics.count_token()
        if generation.piece:
            job.emit("piece", generation.piece)
        if generation.finished:
            self._finish(job)

    def _finish(self, job: Job, error: str | None = None) -> None:
        """End ``job``: return its blocks, send its last events."""
        if job in self._active:
            self._active.remove(job)
        elif job in self._waiting:
            self._waiting.remove(job)
        if job.blocks:
            self.blocks.release(job.blocks)
            job.blocks = []
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
