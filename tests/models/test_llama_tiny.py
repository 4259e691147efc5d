"""The Llama path on tiny random GGUF files: agreement with transformers on other shapes and
tensor types (untied output, F16 embeddings, Q8_0 and Q4_1 matrices), the weight cache, the
in-place KV cache, the decode graph's stable structure, streaming and sampling."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tests.models.tiny_gguf import assert_matches_the_cpu


@pytest.mark.parametrize("fields", [
    {},
    {"tied": True, "matrix_type": "Q8_0", "embedding_type": "F32", "kv_heads": 1},
    {"heads": 2, "kv_heads": 2, "rope_base": 500.0, "matrix_type": "F16"},
])
def test_tiny_model_matches_transformers(tiny_gguf, oracle, cache_dir, fields):
    from fuel.models.llama import load_gguf

    torch, transformers = oracle
    path = tiny_gguf(**fields)
    ours = load_gguf(path, dtype="float32")  # transformers computes in float32 throughout
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(path.parent),
                                                               gguf_file=path.name).eval()
    ids = ours.encode("the cat in the hat sat on the mat")
    with torch.no_grad():
        expected = theirs(torch.tensor([ids])).logits[0].numpy()
        greedy = theirs.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                                 pad_token_id=2)[0, len(ids):].tolist()
    logits = ours.forward(ids, ours.new_cache(len(ids)), all_logits=True)
    assert np.abs(logits - expected).max() <= 1e-4
    if 2 in greedy:  # transformers stops at EOS too, and keeps it
        greedy = greedy[:greedy.index(2) + 1]
    assert ours.generate_ids(ids, 12) == greedy


def test_weight_cache_round_trip(tiny_gguf, cache_dir, monkeypatch):
    import fuel.models.llama as llama

    path = tiny_gguf()
    first = llama.load_gguf(path, dtype="float32")
    entries = list(cache_dir.iterdir())
    assert len(entries) == 1 and (entries[0] / "weights.bin").exists()
    monkeypatch.setattr(llama, "GGUFModelFile", None)  # a cached load never opens the GGUF
    second = llama.load_gguf(path, dtype="float32")
    ids = first.encode("the hat")
    assert second.generate_ids(ids, 6) == first.generate_ids(ids, 6)
    assert second.config == first.config


def test_damaged_cache_is_rebuilt(tiny_gguf, cache_dir):
    from fuel.models.llama import load_gguf

    path = tiny_gguf()
    ids = load_gguf(path, dtype="float32").encode("the hat")
    expected = load_gguf(path, dtype="float32").generate_ids(ids, 6)
    blob = next(cache_dir.iterdir()) / "weights.bin"
    blob.write_bytes(blob.read_bytes()[:100])
    assert load_gguf(path, dtype="float32").generate_ids(ids, 6) == expected
    assert blob.stat().st_size > 100


def test_changed_source_gets_a_new_cache_entry(tiny_gguf, cache_dir):
    from fuel.models.llama import load_gguf

    path = tiny_gguf()
    load_gguf(path, dtype="float32")
    tiny_gguf(seed=1)  # same name, new weights
    load_gguf(path, dtype="float32")
    assert len(list(cache_dir.iterdir())) == 2


def test_unwritable_cache_only_warns(tiny_gguf, tmp_path, monkeypatch):
    from fuel.models.llama import load_gguf

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    monkeypatch.setenv("FUEL_CACHE_DIR", str(blocker))
    with pytest.warns(UserWarning, match="could not cache"):
        model = load_gguf(tiny_gguf(), dtype="float32")
    assert len(model.generate_ids(model.encode("the"), 3)) >= 1


def test_kv_cache_is_written_in_place(tiny_gguf, cache_dir):
    from fuel.models.llama import load_gguf
    from fuel.models.llama_graph import row_bucket

    model = load_gguf(tiny_gguf())
    cache = model.new_cache(16)
    storages = [t._node.buffer for t in cache.tensors()]
    ids = model.encode("the cat")
    model.forward(ids, cache)
    model.forward([5], cache)
    assert [t._node.buffer for t in cache.tensors()] == storages
    keys = cache.keys[0].numpy()
    written = len(ids) + 1
    assert cache.length == written
    assert np.abs(keys[:, :written]).min(axis=-1).max() > 0
    # the prompt step's padding rows (up to its row bucket) write past the length, where the
    # next tokens overwrite them; nothing is written past the padded step
    padded = max(row_bucket(len(ids)), written)
    assert not keys[:, padded:].any()



def test_kept_step_leaves_share_rotation_rows_and_each_step_computes_alone(tiny_gguf,
                                                                          cache_dir):
    """A cache's kept prompt-step leaves of two row buckets are views of one array of
    rotation matrices; steps of each bucket in turn (each refilling the shared rows) give
    the logits of the same steps run eagerly, and a decode step (its own rope) too."""
    from fuel.models.llama import load_gguf

    path = tiny_gguf()
    model, eager = load_gguf(path), load_gguf(path)
    eager.use_jit = False
    chunks = [np.arange(5, 10), np.arange(20, 22), np.arange(30, 35), np.array([40])]
    cache, eager_cache = model.new_cache(48), eager.new_cache(48)
    for chunk in chunks:  # rows 6, 2, 6 (refilled), then a decode step
        np.testing.assert_allclose(model.forward(chunk, cache, all_logits=True),
                                   eager.forward(chunk, eager_cache, all_logits=True),
                                   rtol=1e-4, atol=1e-4)
    kept = [step.rope._node.buffer.buffer for step in cache.step_inputs.values()]
    assert len(kept) >= 2 and np.shares_memory(kept[0], kept[1])
    assert all(np.shares_memory(rope, model._rope_rows(cache)) for rope in kept)

def test_decode_steps_build_identical_graph_structures(tiny_gguf, cache_dir):
    from fuel.graph import Graph
    from fuel.ir.ops import OpKind
    from fuel.models.llama import load_gguf
    from fuel.models.llama_graph import StepInputs, decoder_step

    model = load_gguf(tiny_gguf())

    def structure(position: int) -> list:
        cache = model.new_cache(32)
        cache.length = position
        step = StepInputs.create(np.array([7]), position, model.config,
                          model._inverse_frequencies, cache.capacity, None)
        logits = decoder_step(model.weights, model.config, step, cache, False)
        graph = Graph.build([logits._node] + [t._node for t in cache.tensors()])
        return [(n.op, n.shape, n.dtype, n.params) for n in graph.nodes]

    first, later = structure(3), structure(11)
    assert first == later  # the position is data (positions, rope, mask leaves), not structure
    ops = [op for op, *_ in first]
    assert ops.count(OpKind.INDEX_COPY) == 2 * model.config.num_layers
    assert OpKind.SLICE_ASSIGN not in ops


def test_streamed_text_equals_decoded_ids(tiny_gguf, cache_dir):
    from fuel.models.llama import load_gguf

    model = load_gguf(tiny_gguf())
    prompt = "the cat"
    pieces = list(model.generate(prompt, max_new_tokens=30, temperature=1.5, seed=11))
    ids = model.generate_ids(model.encode(prompt), 30, temperature=1.5, seed=11)
    assert "".join(pieces) == model.decode(ids)
    assert model.last_stats.new_tokens == len(ids)


def test_generation_stops_at_a_stop_token(tiny_gguf, cache_dir):
    from fuel.models.llama import load_gguf

    model = load_gguf(tiny_gguf())
    ids = model.encode("the cat")
    for seed in range(40):
        out = model.generate_ids(ids, 40, temperature=3.0, seed=seed)
        assert model.config.eos_token_id in model.config.stop_ids
        assert not model.config.stop_ids.intersection(out[:-1])
        if out[-1] in model.config.stop_ids:
            assert len(out) <= 40
            return
    pytest.fail("no sampled run reached a stop token, so stopping was never exercised")


def test_generation_stops_at_the_end_of_the_context(tiny_gguf, cache_dir):
    from fuel.models.llama import load_gguf

    model = load_gguf(tiny_gguf(context=12))
    out = model.generate_ids(list(range(3, 13)), 50, temperature=1.0, top_k=5, seed=0)
    assert 1 <= len(out) <= 2


def test_replayed_decode_steps_match_eager_ones(tiny_gguf, cache_dir):
    from fuel.models.llama import load_gguf

    model = load_gguf(tiny_gguf())
    ids = model.encode("the cat in the hat")
    rows = {}
    for use_jit in (True, False):
        model.use_jit = use_jit
        cache = model.new_cache(32)
        logits = [model.forward(ids, cache)[-1]]
        for token in (5, 77, 140, 9):
            logits.append(model.forward([token], cache)[-1])
        rows[use_jit] = np.stack(logits)
        if use_jit:
            assert cache.replays[(1, False)].replays == 3  # captured once, then replayed
    np.testing.assert_allclose(rows[True], rows[False], rtol=0, atol=1e-5)


def test_generations_reuse_a_pooled_cache_and_interleave_safely(tiny_gguf, cache_dir):
    from fuel.models.llama import load_gguf

    model = load_gguf(tiny_gguf())
    first, second = model.encode("the cat"), model.encode("in the hat")
    expected = [model.generate_ids(first, 10), model.generate_ids(second, 10)]
    pooled = list(model._cache_pool.values())
    assert len(pooled) == 1 and pooled[0].replays[(1, False)].replays >= 16
    a, b = model.stream_ids(first, 10), model.stream_ids(second, 10)
    interleaved = [[], []]
    for x, y in itertools.zip_longest(a, b):  # two live generations: the second gets its own
        interleaved[0] += [x] if x is not None else []  # cache
        interleaved[1] += [y] if y is not None else []
    assert interleaved == expected
    assert not any(cache.in_use for cache in model._cache_pool.values())


def test_prompt_chunks_of_a_repeated_length_are_replayed(tiny_gguf, cache_dir):
    from fuel.models.llama import load_gguf

    model = load_gguf(tiny_gguf())
    prompts = [[5, 9, 60, 7], [80, 3, 3, 41], [100, 200, 11, 12], [7, 7, 7, 7]]
    model.use_jit = False
    expected = [model.generate_ids(p, 5) for p in prompts]
    model.use_jit = True
    assert [model.generate_ids(p, 5) for p in prompts] == expected
    (cache,) = model._cache_pool.values()
    assert cache.replays[(4, False)].replays == 3  # captured at its first call, replayed 3x


@pytest.mark.parametrize("fields", [
    {},  # q4_1 matrices, a q8_0 output projection, a float16 embedding
    {"tied": True, "matrix_type": "Q8_0", "embedding_type": "Q4_0", "kv_heads": 1},
])
def test_tiny_model_on_another_device_matches_the_cpu(tiny_gguf, cache_dir, fields):
    """On OpenCL the weights stay in their GGUF formats (its dequantize, quantized_matmul and
    quantized_embedding kernels) and the model gives the CPU's logits and greedy ids."""
    from fuel.ir.device import parse_device
    from tests.backends.opencl.support import opencl_device

    device = parse_device(opencl_device())
    model = assert_matches_the_cpu(tiny_gguf(**fields), device)
    layer = model.weights.layers[0]
    assert layer.qkv_t.dtype.is_quantized and layer.qkv_t.device == device
    assert model.weights.embed_t.dtype.is_quantized == ("embedding_type" in fields)


def test_prompt_steps_span_the_written_positions(tiny_gguf, cache_dir):
    """A prompt step attends over the positions written so far rounded up (attention_span),
    a decode step over the whole cache; logits agree with those in a cache the prompt fills."""
    from fuel.models.llama import load_gguf
    from fuel.models.llama_graph import SPAN_BUCKET, attention_span, step_mask

    model = load_gguf(tiny_gguf(context=2 * SPAN_BUCKET + 64))
    capacity = model.config.context_length
    assert attention_span(0, 5, capacity) == SPAN_BUCKET
    assert attention_span(SPAN_BUCKET - 2, 5, capacity) == min(capacity, 2 * SPAN_BUCKET)
    assert attention_span(3, 1, capacity) == capacity  # decode: one graph for every position
    assert attention_span(0, 5, 16) == 16
    assert step_mask(model.config, 0, 5, capacity).shape[-1] == SPAN_BUCKET
    ids = model.encode("the cat in the hat sat on the mat")
    tokens = [5, 77, 140]
    rows = {}
    for size in (len(ids) + len(tokens), capacity):
        cache = model.new_cache(size)
        logits = [model.forward(ids, cache, all_logits=True)]
        logits += [model.forward([token], cache) for token in tokens]
        rows[size] = np.concatenate(logits)
    # the masked positions add nothing; the sums over other lengths round apart in float32
    np.testing.assert_allclose(rows[capacity], rows[len(ids) + len(tokens)], rtol=0, atol=1e-3)
