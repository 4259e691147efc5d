"""The engine's scheduling over the paged KV pool, in-process on the tiny model: whatever the
limits force (prompts read in chunks of a small token budget, requests preempted and recomputed
when blocks run out, prefixes taken from cached blocks), every request ends exactly as the
model's own generation of it alone ends (greedy and sampled); and the block manager's
bookkeeping (reference counts, names, least-recently-used reuse)."""

from __future__ import annotations

import queue

import pytest

from fuel.serve.blocks import BlockManager, OutOfBlocks, block_hashes

TIMEOUT_S = 120


def _alone(model, prompt_ids, max_tokens, sampling):
    generation = model.start_generation(prompt_ids, max_tokens, sampling, text=True)
    text = "".join(model.drive_text(generation))
    return text, (generation.finish_reason, len(prompt_ids), generation.produced)


def _serve(model, requests, engine=None, **limits):
    """Run ``requests`` ((ids, max_tokens, sampling)) on one engine (``engine``, else a new
    one with ``limits``; at int16 activations unless they say: in-process generation's rule,
    so its answers are the reference), all queued before it starts; their (text, done
    payload) in order, and the engine."""
    from fuel.serve.engine import Engine, Job

    events: queue.Queue = queue.Queue()
    engine = engine or Engine(model, **{"activations": "int16", **limits})
    for index, (ids, max_tokens, sampling) in enumerate(requests):
        def emit(kind, payload, index=index):
            events.put((index, kind, payload))

        engine.submit(Job(emit=emit, ids=ids, max_tokens=max_tokens, sampling=sampling))
    engine.start()
    pieces: list[list[str]] = [[] for _ in requests]
    done: dict[int, tuple] = {}
    try:
        while len(done) < len(requests):
            index, kind, payload = events.get(timeout=TIMEOUT_S)
            if kind == "error":
                done[index] = ("error", payload)
            elif kind == "piece":
                pieces[index].append(payload)
            else:
                done[index] = payload
    finally:
        engine.stop()
    return [("".join(p), done[i]) for i, p in enumerate(pieces)], engine


def _requests(model, count, prefix=""):
    from fuel.models.sampling import SamplingConfig

    words = ["the cat", "in the hat", "a red hat", "the mat", "sat on it", "a big dog"]
    out = []
    for index in range(count):
        sampling = SamplingConfig(temperature=0.7, seed=index) if index % 3 == 2 \
            else SamplingConfig()
        ids = model.encode(prefix + words[index % len(words)] + " " * (index // 6))
        out.append((ids, 10 + 3 * (index % 4), sampling))
    return out


def test_chunked_prompts_end_as_alone(local_model):
    model = local_model
    requests = _requests(model, 5, prefix="the long hat of the cat " * 6)
    expected = [_alone(model, *request) for request in requests]
    answers, engine = _serve(model, requests, slots=3, token_budget=8)
    assert answers == expected
    assert engine.metrics.steps > max(len(ids) for ids, _, _ in requests) // 8


def test_int8_batched_chunked_requests_end_as_each_alone_on_the_engine(local_model):
    """At the serving precision (int8 activations, the engine's default) the reference is the
    engine itself with one request at a time: batched decode rows and prompt chunks of a small
    budget end exactly as each request alone (a row's result never depends on its step's
    other rows)."""
    from fuel.serve.engine import Engine

    model = local_model
    requests = _requests(model, 5, prefix="the long hat of the cat " * 6)
    alone = Engine(model, slots=1, token_budget=256)
    assert alone.stepper.activations == "int8"
    expected = [_serve(model, [request], engine=alone)[0][0] for request in requests]
    answers, engine = _serve(model, requests, slots=3, token_budget=8, activations="int8")
    assert answers == expected
    assert engine.metrics.steps > max(len(ids) for ids, _, _ in requests) // 8


def test_an_idle_engine_keeps_its_most_recent_captured_steps(local_model):
    """Going idle, the engine drops the captured steps of all but its kept_captures most
    recently run row buckets; the dropped ones are captured again and answer as before."""
    from fuel.serve.engine import Engine

    model = local_model
    requests = _requests(model, 4, prefix="the long hat of the cat " * 3)
    expected = [_alone(model, *request) for request in requests]
    engine = Engine(model, slots=3, token_budget=8, kept_captures=1, activations="int16")
    trim, dropped = engine.stepper.trim, []
    engine.stepper.trim = lambda keep: dropped.append(trim(keep)) or dropped[-1]
    for _ in range(2):  # the second round captures the dropped buckets again
        answers, _ = _serve(model, requests, engine=engine)
        assert answers == expected
        assert dropped[-1] >= 1  # the engine went idle at the end and trimmed
        assert len(engine.stepper._inputs) == len(engine.stepper._jit.captures) == 1


def test_preempted_requests_are_recomputed_and_end_as_alone(local_model):
    model = local_model
    requests = _requests(model, 6)
    expected = [_alone(model, *request) for request in requests]
    answers, engine = _serve(model, requests, slots=4, kv_blocks=9, block_size=4,
                             token_budget=16)
    assert answers == expected
    assert engine.metrics.preemptions > 0
    assert engine.blocks.used == 0  # every block given back


def test_a_shared_prefix_is_taken_from_cached_blocks(local_model):
    model = local_model
    prefix = "a hat on the mat of the cat " * 8
    first, second = _requests(model, 2, prefix=prefix)
    expected = [_alone(model, *first), _alone(model, *second)]
    from fuel.serve.engine import Engine

    answers, engine = _serve(model, [first], slots=2, block_size=8)
    assert answers == expected[:1] and engine.metrics.cached_prompt_tokens == 0
    answers, _ = _serve_on(engine, model, [second])  # the same engine's cached blocks
    assert answers == expected[1:]
    shared = len(model.encode(prefix)) - 1  # the tokenizer may join the prefix's last word
    assert engine.metrics.cached_prompt_tokens == shared // 8 * 8
    assert isinstance(engine, Engine)


def _serve_on(engine, model, requests):
    """``_serve`` on an existing (stopped) engine, which keeps its cached blocks."""
    from fuel.serve.engine import Job

    events: queue.Queue = queue.Queue()
    for index, (ids, max_tokens, sampling) in enumerate(requests):
        engine.submit(Job(emit=lambda k, p, i=index: events.put((i, k, p)), ids=ids,
                          max_tokens=max_tokens, sampling=sampling))
    engine.start()
    pieces: list[list[str]] = [[] for _ in requests]
    done: dict[int, tuple] = {}
    try:
        while len(done) < len(requests):
            index, kind, payload = events.get(timeout=TIMEOUT_S)
            if kind == "piece":
                pieces[index].append(payload)
            else:
                done[index] = payload if kind == "done" else ("error", payload)
    finally:
        engine.stop()
    return [("".join(p), done[i]) for i, p in enumerate(pieces)], engine


def test_concurrent_requests_sharing_an_uncached_prefix_read_it_once(local_model):
    """Requests queued together whose prompts share a prefix no cache holds yet: the first
    reads it, the others wait for its blocks and compute only their own tokens (and every
    answer is the request's alone)."""
    model = local_model
    prefix = "a hat on the mat of the cat " * 8
    requests = _requests(model, 4, prefix=prefix)
    expected = [_alone(model, *request) for request in requests]
    answers, engine = _serve(model, requests, slots=4, block_size=8, token_budget=256)
    assert answers == expected
    shared = len(model.encode(prefix)) - 1  # the tokenizer may join the prefix's last word
    assert engine.metrics.cached_prompt_tokens == 3 * (shared // 8 * 8)
    assert engine.blocks.prefix_hits == 3


def test_a_prompt_larger_than_the_pool_is_refused_with_its_size(local_model):
    model = local_model
    ids = model.encode("the cat in the hat " * 10)
    answers, _ = _serve(model, [(ids, 4, None)], slots=1, kv_blocks=3, block_size=4,
                        token_budget=8)
    kind, message = answers[0][1]
    assert kind == "error" and "KV blocks; the pool holds 2" in message


def test_a_request_past_its_time_limit_ends_with_an_error(local_model):
    model = local_model
    answers, _ = _serve(model, [(model.encode("the cat"), 50, None)], request_timeout_s=0.0)
    assert answers[0][1][0] == "error" and "time limit of 0 s" in answers[0][1][1]


def test_block_manager_counts_names_and_reuses_least_recent_first():
    manager = BlockManager(5, 2)  # blocks 1..4 usable
    tokens = [1, 2, 3, 4, 5]
    held = [manager.allocate() for _ in range(3)]
    assert manager.used == 3 and manager.usable == 1
    assert manager.name(held, tokens, 0) == 2  # two full blocks named
    assert manager.match(tokens) == held[:2]  # shared: counted twice now
    manager.release(held)
    assert manager.used == 2 and manager.cached == 0
    manager.release(held[:2])
    assert manager.cached == 2 and manager.usable == 4
    fresh = [manager.allocate() for _ in range(2)]  # free blocks first, then the named LRU
    assert set(fresh).isdisjoint(held[:2])
    manager.allocate()  # the prefix's tail block goes first (released last-first), its head
    assert manager.match(tokens) == held[:1]  # stays
    manager.release(held[:1])
    manager.allocate()
    with pytest.raises(OutOfBlocks):
        manager.allocate()


def test_released_blocks_are_the_free_ones_once_any_was_written_and_the_cache_is_trimmed():
    manager = BlockManager(6, 2)
    held = [manager.allocate() for _ in range(3)]
    manager.name(held, [1, 2, 3, 4, 5, 6], 0)
    manager.release(held)  # all three named, now cached
    # the prefix's tail leaves the cache; every free block is offered (pages are shared by
    # neighbouring blocks), the cached head is not
    assert sorted(manager.released(keep_cached=1)) == [2, 3, 4, 5] and held[0] == 1
    assert manager.cached == 1 and manager.match([1, 2, 3]) == held[:1]
    assert manager.released(keep_cached=1) == []  # nothing written since


def test_the_pool_gives_back_whole_pages_of_runs_of_small_blocks():
    """Blocks smaller than a page: a run of free blocks gives back the pages inside it (they
    read as zeros again); a page shared with a block in use keeps its data."""
    import mmap

    import numpy as np

    from fuel.models.kv_cache import PagedKVPool

    pool = PagedKVPool(1, 1, 16, 4 * mmap.PAGESIZE // 64 + 2, 1)  # 64-byte blocks
    keys = pool._arrays[0]
    if not hasattr(mmap, "MADV_DONTNEED") or not hasattr(mmap, "MAP_PRIVATE"):
        pytest.skip("no POSIX madvise here: the pool keeps its pages")
    keys[:] = 1.0
    per_page = mmap.PAGESIZE // 64
    pool.release(range(1, 3 * per_page + 1))  # block 0 (in use) shares the first page
    assert (keys[:per_page] == 1.0).all()  # the first page: block 0 still in use
    assert (keys[per_page:3 * per_page] == 0.0).all()  # whole pages inside the run
    assert (keys[3 * per_page + 1:] == 1.0).all()  # past the run
    pool.release([3 * per_page + 1])  # one block alone holds no whole page
    assert np.all(keys[3 * per_page + 1] == 1.0)


def test_block_hashes_chain_over_the_whole_prefix():
    first = block_hashes([1, 2, 3, 4], 2, 2)
    assert block_hashes([9, 9, 3, 4], 2, 2)[1] != first[1]  # same block, other prefix
    assert block_hashes([3, 4], 2, 1, first[0]) == first[1:]


def test_an_unknown_activation_precision_is_refused(local_model):
    from fuel.ir.errors import InvalidArgument
    from fuel.serve.engine import Engine

    with pytest.raises(InvalidArgument, match="activations must be one of int8, int16"):
        Engine(local_model, activations="fp8")
