"""Quantized GGUF loading on tiny synthetic files written with gguf's writer: the blocks are
kept as stored (memory-mapped, nothing cached), the model matches the float32 path, a format
without kernels is de-quantized with a notice, and damaged headers raise ModelFormatError
naming the tensor before any token."""

from __future__ import annotations

import struct

import numpy as np
import pytest

# quantized_matmul rounds the activations to 16-bit blocks of 32 for q4_0/q4_1/q8_0 weights
# (round_int16_blocks, every row count), each value off by at most half a step (max|x| / 65534
# of its block): the logits then differ from the float32 path by a few 1e-5 of their span
# (measured on these tiny models: below 3.1e-5; 8-bit blocks, as llama.cpp's, gave up to 0.7%),
# not by summation order only.
ACTIVATION_ROUNDING = 1e-3


def assert_close_to_float_path(ours: np.ndarray, theirs: np.ndarray) -> None:
    """Logits within ACTIVATION_ROUNDING of the reference's span, and every position's top-1
    the same where the reference's top-2 margin is larger than twice the difference allowed."""
    allowed = ACTIVATION_ROUNDING * float(np.ptp(theirs))
    difference = float(np.abs(ours - theirs).max())
    print(f"max |logit difference| {difference:.2e} (allowed {allowed:.2e})")
    assert difference <= allowed
    top = np.sort(theirs, axis=-1)
    clear = top[..., -1] - top[..., -2] > 2 * allowed
    assert (ours.argmax(-1) == theirs.argmax(-1))[clear].all()


def _weight_entries(folder):
    """Converted-weight cache entries (the kernel cache's own folder left out)."""
    if not folder.exists():
        return []
    return [p for p in folder.iterdir() if p.name != "kernels"]


@pytest.mark.parametrize("fields", [
    {},
    {"tied": True, "matrix_type": "Q8_0", "embedding_type": "Q4_0", "kv_heads": 1},
    {"matrix_type": "Q4_0", "embedding_type": "Q8_0"},
    {"matrix_type": "Q5_0", "embedding_type": "Q5_1", "tied": True},
    {"matrix_type": "F16", "embedding_type": "BF16"},
])
def test_quantized_model_matches_the_float32_path(tiny_gguf, cache_dir, fields):
    from fuel.models.llama import load_gguf

    path = tiny_gguf(**fields)
    quantized = load_gguf(path)
    assert _weight_entries(cache_dir) == []  # nothing converted, nothing cached
    assert quantized.weights.layers[0].qkv_t.dtype.is_quantized
    reference = load_gguf(path, dtype="float32", use_cache=False)
    ids = quantized.encode("the hat in the")
    ours = quantized.forward(ids, quantized.new_cache(32), all_logits=True)
    theirs = reference.forward(ids, reference.new_cache(32), all_logits=True)
    assert_close_to_float_path(ours, theirs)


def test_mixed_formats_run_as_separate_projections(tiny_gguf, cache_dir):
    """q and k in one format, v in another (as Q4_K_M files mix them): no joined matrix; the
    parts' outputs are concatenated, and the model still matches the float32 path."""
    from fuel.models.llama import load_gguf

    path = tiny_gguf(type_overrides={"attn_v.weight": "Q8_0", "ffn_up.weight": "Q4_0"})
    model = load_gguf(path)
    layer = model.weights.layers[0]
    assert [part.dtype.name for part in layer.qkv_t] == ["q4_1", "q4_1", "q8_0"]
    assert [part.dtype.name for part in layer.gate_up_t] == ["q4_1", "q4_0"]
    reference = load_gguf(path, dtype="float32", use_cache=False)
    ids = model.encode("the hat")
    ours = model.forward(ids, model.new_cache(16), all_logits=True)
    theirs = reference.forward(ids, reference.new_cache(16), all_logits=True)
    assert_close_to_float_path(ours, theirs)


def test_format_without_kernels_is_dequantized_with_a_notice(tiny_gguf, cache_dir, capsys):
    from fuel.models.llama import load_gguf

    path = tiny_gguf(matrix_type="MXFP4")
    model = load_gguf(path)
    err = capsys.readouterr().err
    assert err.count("no kernels for GGUF MXFP4") == 1
    reference = load_gguf(path, dtype="float32", use_cache=False)
    ids = model.encode("the hat")
    assert model.generate_ids(ids, 5) == reference.generate_ids(ids, 5)


def _header_position(data: bytes, name: str) -> int:
    """Where the tensor ``name``'s info continues after its name (n_dims, dims, type)."""
    encoded = name.encode()
    start = data.index(struct.pack("<Q", len(encoded)) + encoded)
    return start + 8 + len(encoded)


def _patch(path, name: str, dims=None, type_number=None) -> None:
    data = bytearray(path.read_bytes())
    position = _header_position(bytes(data), name)
    (count,) = struct.unpack_from("<I", data, position)
    if dims is not None:
        struct.pack_into(f"<{count}Q", data, position + 4, *dims)
    if type_number is not None:
        struct.pack_into("<I", data, position + 4 + 8 * count, type_number)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("dtype", ["quantized", "float32"])
@pytest.mark.parametrize("damage, message", [
    ("truncated", r"'blk\.1\.ffn_down\.weight' \(Q4_1.*truncated"),
    ("blocks", r"'blk\.0\.attn_q\.weight' \(Q4_1\): its rows of 48 values are not a whole "
               r"number of 32-value blocks"),
    ("type", r"'blk\.0\.attn_k\.weight' has the unknown GGUF type number 250"),
])
def test_damaged_gguf_names_the_tensor(tiny_gguf, cache_dir, dtype, damage, message):
    from fuel.models import ModelFormatError
    from fuel.models.llama import load_gguf

    path = tiny_gguf()
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:-100])
    elif damage == "blocks":
        _patch(path, "blk.0.attn_q.weight", dims=(48, 64))
    else:
        _patch(path, "blk.0.attn_k.weight", type_number=250)
    with pytest.raises(ModelFormatError, match=message):
        load_gguf(path, dtype=dtype)
    assert _weight_entries(cache_dir) == []  # nothing half-written


def test_quantized_kernels_show_in_explain_and_the_kernel_list(tiny_gguf, cache_dir, capsys):
    import fuel
    from fuel.cli import main
    from fuel.models.llama import load_gguf

    model = load_gguf(tiny_gguf())
    layer = model.weights.layers[0]
    x = fuel.ones(3, 64)
    report = str(fuel.quantized_matmul(x, layer.o_t).explain())
    assert "quantized_matmul" in report and " c #" in report
    assert main(["kernels", "--op", "quantized_matmul"]) == 0
    listed = capsys.readouterr().out
    assert "q4_1" in listed and "c" in listed


def test_primitive_backend_runs_the_quantized_model_through_dequantize(tiny_gguf, cache_dir):
    """A backend with only the primitive set (dequantize among it) runs quantized_matmul and
    quantized_embedding as their decompositions (round_int16_blocks of the activations,
    dequantize, then matmul / index_select): the CPU's logits to the rounding's size (float
    summation order upstream may move a code by one step, max|x| / 32767 of its block; measured
    3.2e-5 of the logits' span)."""
    import fuel
    from fuel.models.llama import load_gguf
    from tests.backends.primitive_backend import DEVICE, primitive_backend

    primitive_backend()
    path = tiny_gguf()
    on_cpu, on_primitives = load_gguf(path), load_gguf(path, device=DEVICE)
    assert on_primitives.weights.layers[0].o_t.dtype.is_quantized
    ids = on_cpu.encode("the cat in the hat")
    expected = on_cpu.forward(ids, on_cpu.new_cache(32), all_logits=True)
    got = on_primitives.forward(ids, on_primitives.new_cache(32), all_logits=True)
    assert np.abs(got - expected).max() <= 2e-4 * float(np.ptp(expected))
    x = fuel.ones(2, 64, device=DEVICE)
    report = str(fuel.quantized_matmul(x, on_primitives.weights.layers[0].o_t).explain())
    assert "decomposed" in report and "dequantize" in report
    assert " round " in report and " abs " in report  # round_int16_blocks, decomposed too
