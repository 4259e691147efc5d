"""Damaged and hostile model files: each one is refused with a FuelError naming the file and
what is wrong (a size over a resource limit names the limit and the variable that raises it),
before anything is allocated or handed to a kernel."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from fuel import FuelError
from fuel.ir.errors import ResourceLimitError


def _key_value_at(data: bytes, key: str) -> int:
    """The byte offset of ``key``'s value (after its type) in a GGUF file's metadata."""
    at = data.index(key.encode()) + len(key)
    return at + 4


def _patch(path: Path, offset: int, raw: bytes) -> Path:
    data = bytearray(path.read_bytes())
    data[offset:offset + len(raw)] = raw
    path.write_bytes(bytes(data))
    return path


def _load(path: Path, **kwargs):
    from fuel.models.llama import load_gguf

    return load_gguf(path, use_cache=False, **kwargs)


# ------------------------------------------------------------------ GGUF
def test_non_utf8_metadata_key_is_refused_naming_the_file(tiny_gguf):
    # the traceback: gguf's reader decoding a damaged key raised UnicodeDecodeError
    path = tiny_gguf("damaged.gguf")
    at = path.read_bytes().index(b"general.architecture")
    _patch(path, at + 3, b"\xff")
    with pytest.raises(FuelError, match=r"damaged.gguf is not a readable GGUF file: the key of "
                                        r"metadata entry \d+ at byte \d+ is not UTF-8"):
        _load(path)


def test_absurd_string_array_count_is_refused_without_looping(tiny_gguf):
    path = tiny_gguf("tokens.gguf")
    data = path.read_bytes()
    count_at = _key_value_at(data, "tokenizer.ggml.tokens") + 4  # after the item type
    _patch(path, count_at, struct.pack("<Q", 2**40))
    with pytest.raises(FuelError, match=r"tokens.gguf .*1099511627776 string items at byte "
                                        r"\d+ needs \d+ bytes"):
        _load(path)


def test_tensor_data_past_the_end_of_the_file(tiny_gguf):
    path = tiny_gguf("short.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 100])
    with pytest.raises(FuelError, match=r"short.gguf .*tensor '.*' .*is truncated"):
        _load(path)


@pytest.mark.parametrize("key, value, variable", [
    ("llama.context_length", 10**9, "FUEL_MAX_CONTEXT"),
    ("llama.vocab_size", 10**9, "FUEL_MAX_VOCAB"),
    ("llama.embedding_length", 2**31, "FUEL_MAX_DIM"),
])
def test_absurd_hyper_parameters_name_the_limit(tiny_gguf, key, value, variable):
    path = tiny_gguf("absurd.gguf")
    _patch(path, _key_value_at(path.read_bytes(), key), struct.pack("<I", value))
    with pytest.raises(ResourceLimitError, match=rf"absurd.gguf: '{key}' is {value}, over "
                                                 rf"fuel's limit .*{variable}"):
        _load(path)


def test_a_2_to_the_40_dim_is_refused_before_allocating(tiny_gguf):
    path = tiny_gguf("wide.gguf")
    data = path.read_bytes()
    name = b"output_norm.weight"
    dims_at = data.index(name) + len(name) + 4  # after the dim count
    _patch(path, dims_at, struct.pack("<Q", 2**40))
    with pytest.raises(ResourceLimitError, match=r"wide.gguf: dim 0 of tensor 'output_norm."
                                                 r"weight' is 1099511627776, .*FUEL_MAX_DIM"):
        _load(path)


def test_raising_the_limit_lets_a_trusted_file_load(tiny_gguf, monkeypatch, cache_dir):
    path = tiny_gguf("long.gguf", context=24)
    _patch(path, _key_value_at(path.read_bytes(), "llama.context_length"),
           struct.pack("<I", 3 * 2**20))
    with pytest.raises(ResourceLimitError, match="FUEL_MAX_CONTEXT"):
        _load(path)
    monkeypatch.setenv("FUEL_MAX_CONTEXT", str(4 * 2**20))
    model = _load(path)
    assert model.config.context_length == 3 * 2**20
    assert len(model.generate_ids([5, 6], max_new_tokens=1)) == 1


@pytest.mark.parametrize("key, value, message", [
    ("llama.attention.head_count_kv", 3, "4 query heads cannot share 3 key/value heads"),
    ("llama.attention.head_count", 0, "the metadata 'llama.attention.head_count' must be "
                                      "positive, got 0"),
    ("tokenizer.ggml.eos_token_id", 5000, r"the EOS token id 5000 is outside the vocabulary "
                                          r"\[0, 264\)"),
])
def test_inconsistent_llama_configs(tiny_gguf, key, value, message):
    path = tiny_gguf("odd.gguf")
    _patch(path, _key_value_at(path.read_bytes(), key), struct.pack("<I", value))
    with pytest.raises(FuelError, match=rf"odd.gguf.*{message}"):
        _load(path)


def test_a_tensor_shape_the_config_contradicts(tiny_gguf):
    path = tiny_gguf("shape.gguf")
    _patch(path, _key_value_at(path.read_bytes(), "llama.feed_forward_length"),
           struct.pack("<I", 64))
    with pytest.raises(FuelError, match=r"shape.gguf: the tensor 'blk.0.ffn_gate.weight' has "
                                        r"dims \[64, 96\], the config needs \[64, 64\]"):
        _load(path)


# ------------------------------------------------------------------ safetensors, BERT, tokenizer
@pytest.fixture
def bert_folder(tmp_path):
    pytest.importorskip("safetensors")
    pytest.importorskip("tokenizers")
    from bench.fuzz import _write_bert

    return _write_bert(tmp_path / "bert")


def _load_bert(folder: Path):
    from fuel.models.minilm import load

    return load(folder)


def _rewrite_header(path: Path, edit) -> None:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = edit(json.loads(data[8:8 + length]))
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length:])


def test_the_tiny_bert_folder_loads(bert_folder):
    vectors = _load_bert(bert_folder).encode(["the cat sat"])
    assert vectors.shape == (1, 16) and np.isfinite(vectors).all()


def test_safetensors_header_length_past_the_file(bert_folder):
    path = bert_folder / "model.safetensors"
    _patch(path, 0, struct.pack("<Q", 2**62))
    with pytest.raises(FuelError, match=r"model.safetensors is not a valid safetensors file: "
                                        r"its header length 4611686018427387904 runs past"):
        _load_bert(bert_folder)


def test_safetensors_offsets_outside_the_data_or_overlapping(bert_folder):
    path = bert_folder / "model.safetensors"

    def stretch(header):
        entry = header["embeddings.LayerNorm.bias"]
        entry["data_offsets"] = [entry["data_offsets"][0], 2**40]
        return header

    _rewrite_header(path, stretch)
    with pytest.raises(FuelError, match=r"model.safetensors .*'embeddings.LayerNorm.bias'.s "
                                        r"data \[\d+, 1099511627776\) lies outside"):
        _load_bert(bert_folder)


def test_safetensors_shape_against_the_config(bert_folder):
    config = bert_folder / "config.json"
    values = json.loads(config.read_text())
    values["intermediate_size"] = 40
    config.write_text(json.dumps(values))
    with pytest.raises(FuelError, match=r"model.safetensors: the tensor 'encoder.layer.0."
                                        r"intermediate.dense.weight' has shape \(32, 16\), the "
                                        r"config needs \(40, 16\)"):
        _load_bert(bert_folder)


@pytest.mark.parametrize("value, message", [
    ("16", r"'hidden_size' must be a positive integer, got '16'"),
    (2**40, r"'hidden_size' is 1099511627776, over fuel's limit .*FUEL_MAX_DIM"),
])
def test_bert_config_values(bert_folder, value, message):
    config = bert_folder / "config.json"
    values = json.loads(config.read_text())
    values["hidden_size"] = value
    config.write_text(json.dumps(values))
    with pytest.raises(FuelError, match=rf"config.json: {message}"):
        _load_bert(bert_folder)


@pytest.mark.parametrize("damage", ["truncate", "not utf-8", "unknown id"])
def test_damaged_tokenizer_json(bert_folder, damage):
    path = bert_folder / "tokenizer.json"
    text = path.read_text()
    if damage == "truncate":
        path.write_text(text[:len(text) // 2])
    elif damage == "not utf-8":
        path.write_bytes(text.encode()[:40] + b"\xff\xfe" + text.encode()[40:])
    else:  # the [CLS] the post-processor adds is an id past the model's vocabulary
        document = json.loads(text)
        document["post_processor"]["special_tokens"]["[CLS]"]["ids"] = [10**6]
        path.write_text(json.dumps(document))
    with pytest.raises(FuelError, match=r"tokenizer.json"):
        _load_bert(bert_folder).encode(["the cat"])


# ------------------------------------------------------------------ ONNX
def _onnx_seed(tmp_path) -> list[Path]:
    pytest.importorskip("onnx")
    from bench.fuzz import _onnx_seeds

    return _onnx_seeds(tmp_path)


def test_truncated_onnx_model_names_the_file(tmp_path):
    import fuel.onnx

    path = _onnx_seed(tmp_path)[0]
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(FuelError, match=r"mlp.onnx.* is not a valid ONNX model"):
        fuel.onnx.load(str(path))


@pytest.mark.parametrize("location", ["../../../../etc/passwd", "missing.bin", "/dev/zero"])
def test_external_data_outside_the_model_folder(tmp_path, location):
    import onnx

    import fuel.onnx

    path = _onnx_seed(tmp_path)[1]
    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = location
    onnx.save(model, str(path))
    with pytest.raises(FuelError, match=r"mlp_external.onnx: "):
        fuel.onnx.load(str(path)).run({"ids": np.array([1, 2, 3], np.int64)})
