"""What a loaded quantized model keeps resident: the metadata reader gives the same values as
gguf's own reader, weights used as stored stay views of per-tensor maps (never copies), the
reader is dropped after loading, and a KV cache's pages become resident only where positions
are written."""

from __future__ import annotations

import gc
import mmap
import sys

import numpy as np
import pytest


def _mapped_base(array: np.ndarray):
    """The object at the end of ``array``'s base chain."""
    while isinstance(array, np.ndarray) and array.base is not None:
        array = array.base
    return array


def test_metadata_and_tensors_match_ggufs_own_reader(smollm_path):
    """The plain-array reader (fuel's ``_get``) against gguf's stock GGUFReader: every
    metadata value, every tensor's header and bytes."""
    import gguf

    from fuel.models.gguf_loader import GGUFModelFile

    ours = GGUFModelFile(smollm_path)
    theirs = gguf.GGUFReader(str(smollm_path))
    for key, field in theirs.fields.items():
        if key.startswith("GGUF."):
            continue
        assert ours.value(key) == field.contents(), key
    assert list(ours.tensors) == [t.name for t in theirs.tensors]
    for tensor in theirs.tensors[:12]:
        entry = ours.tensors[tensor.name]
        assert entry.tensor_type == tensor.tensor_type
        assert entry.shape == tuple(int(d) for d in tensor.shape)
        assert np.array_equal(ours._mapped(entry), tensor.data)


def test_weights_used_as_stored_are_views_of_maps_and_the_reader_is_dropped(tiny_gguf,
                                                                            cache_dir):
    """Single projections (o, down), the embedding and gate|up (back to back in the file)
    are read through maps, not copied; q|k|v is one array; after loading, no metadata is
    held."""
    from fuel.models.gguf_loader import GGUFModelFile, QuantizedArray
    from fuel.models.llama import load_gguf, quantized_weights

    path = tiny_gguf(embedding_type="Q8_0")
    source = GGUFModelFile(path)
    config = source.llama_config()
    source.drop_metadata()
    assert source.value("general.architecture") is None
    assert source.value("general.architecture", "absent") == "absent"
    arrays = quantized_weights(source, config)
    for name in ("layers.0.o_t", "layers.0.down_t", "embed_t", "layers.0.gate_up_t"):
        assert isinstance(arrays[name], QuantizedArray)
        assert isinstance(_mapped_base(arrays[name].data), mmap.mmap), name
    assert arrays["layers.0.qkv_t"].data.flags.owndata  # q, k, v are not back to back
    gate, up = (f"blk.0.ffn_{part}.weight" for part in ("gate", "up"))
    together = source.stored_together([gate, up])
    assert np.array_equal(together.data, np.concatenate(
        [source.stored(gate).data, source.stored(up).data]))
    assert source.stored_together([up, gate]) is None  # not in the file's order
    model = load_gguf(path)
    assert model.encode("the hat")  # the tokenizer was built before the reader was dropped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_kv_cache_pages_are_resident_only_where_written():
    """A 64 MiB cache: creating it makes next to nothing resident, writing one position of
    every layer a page or so per head, and reading all of it (attention spans the whole
    capacity) maps the shared zero page, which is not resident memory of the process."""
    from fuel.models.kv_cache import KVCache

    def anonymous_kib() -> int:
        with open("/proc/self/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Anonymous:"):
                    return int(line.split()[1])
        raise AssertionError("no Anonymous line in smaps_rollup")

    import fuel

    layers, heads, capacity, head_dim = 16, 4, 2048, 64  # 2 x 16 x 2 MiB = 64 MiB

    def write_and_read(cache: KVCache) -> None:
        position = fuel.from_numpy(np.array([5]))
        written = np.ones((heads, 1, head_dim), np.float32)
        for layer in range(layers):
            cache.write(layer, position, fuel.from_numpy(written), fuel.from_numpy(written))
        fuel.realize(*cache.tensors())
        for tensor in cache.tensors():  # read in full (a copy each, freed again)
            array = tensor.numpy()
            assert array[:, 5].all() and not np.delete(array, 5, axis=1).any()

    # The same work on another cache first, so what a process sets up once (kernel libraries,
    # the buffer pool's copies, the allocator's arenas) is not counted against this cache.
    write_and_read(KVCache(layers, heads, capacity, head_dim))
    gc.collect()
    before = anonymous_kib()
    cache = KVCache(layers, heads, capacity, head_dim)
    assert anonymous_kib() - before < 4 * 1024
    write_and_read(cache)
    grown = anonymous_kib() - before
    assert grown < 2 * layers * heads * 8 + 4 * 1024, grown  # <= 2 pages per head + slack
