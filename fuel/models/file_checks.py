"""Validation of the safetensors, config.json and tokenizer.json files a model folder holds,
before the libraries that read them (or fuel's kernels) see their sizes.

Each failure is a ``ModelFormatError`` (or, for a size over a resource limit, a
``ResourceLimitError``) naming the file and what is wrong: a damaged download never surfaces
as a library's traceback (``safetensors``' ``SafetensorError``, a ``tokenizers`` Rust panic)."""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import numpy as np

from fuel.ir.limits import check_limit
from fuel.models.common import ModelFormatError, require

MAX_HEADER_BYTES = 100 * 2**20  # safetensors' own limit on the JSON header
SAFETENSORS_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2,
                      "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
                      "F8_E4M3": 1, "F8_E5M2": 1}
NUMPY_DTYPES = {"F64", "F32", "F16", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8",
                "BOOL"}


def check_safetensors(path: str | os.PathLike) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Check a safetensors file's header against its bytes: the header length, each tensor's
    dtype, shape and data offsets (inside the data section, matching the shape, no overlap).
    Returns name -> (dtype, shape)."""
    path = Path(path)
    name = path.name

    def fail(what: str) -> ModelFormatError:
        return ModelFormatError(f"{name} is not a valid safetensors file: {what}")

    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise fail(f"it has {size} bytes, fewer than the 8 of its header length")
            (length,) = struct.unpack("<Q", prefix)
            if length > min(size - 8, MAX_HEADER_BYTES):
                raise fail(f"its header length {length} runs past the file's {size} bytes"
                           if length > size - 8 else
                           f"its header length {length} is over the {MAX_HEADER_BYTES} allowed")
            raw = handle.read(length)
    except OSError as error:
        raise ModelFormatError(f"cannot read {path}: {error.strerror or error}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise fail(f"its header is not JSON text ({error})"[:300]) from None
    if not isinstance(header, dict):
        raise fail("its header is not a JSON object")
    data_bytes = size - 8 - length
    entries: dict[str, tuple[str, tuple[int, ...]]] = {}
    spans = []
    for tensor, entry in header.items():
        if tensor == "__metadata__":
            if not isinstance(entry, dict) or any(
                    not isinstance(v, str) for v in entry.values()):
                raise fail("__metadata__ must map strings to strings")
            continue
        label = f"tensor '{tensor}'"
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise fail(f"{label} must have exactly dtype, shape and data_offsets")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPES:
            raise fail(f"{label} has the unknown dtype {dtype!r}")
        if not isinstance(shape, list) or any(
                not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in shape):
            raise fail(f"{label}'s shape {shape!r} is not a list of non-negative integers")
        for axis, dim in enumerate(shape):
            check_limit("dim", dim, f"{name}: dim {axis} of {label}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(
                isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise fail(f"{label}'s data_offsets {offsets!r} are not two integers")
        begin, end = offsets
        expected = math.prod(shape) * SAFETENSORS_DTYPES[dtype]
        if not 0 <= begin <= end <= data_bytes:
            raise fail(f"{label}'s data [{begin}, {end}) lies outside the data section of "
                       f"{data_bytes} bytes")
        if end - begin != expected:
            raise fail(f"{label} ({dtype}, shape {shape}) needs {expected} bytes, its data "
                       f"offsets hold {end - begin}")
        spans.append((begin, end, tensor))
        entries[tensor] = (dtype, tuple(shape))
    spans.sort()
    for (_, first_end, first), (second_begin, _, second) in zip(spans, spans[1:]):
        if second_begin < first_end:
            raise fail(f"the data of tensors '{first}' and '{second}' overlap")
    return entries


def read_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of a checked safetensors file (``safetensors.numpy.load_file``)."""
    path = Path(path)
    entries = check_safetensors(path)
    unreadable = sorted({dtype for dtype, _ in entries.values()} - NUMPY_DTYPES)
    if unreadable:
        raise ModelFormatError(f"{path.name} holds {', '.join(unreadable)} tensors, which NumPy "
                               "cannot read")
    numpy_loader = require("safetensors.numpy", "loading safetensors weights")
    try:
        return numpy_loader.load_file(str(path))
    except Exception as error:  # noqa: BLE001 - SafetensorError and whatever else it raises
        raise ModelFormatError(f"cannot read the safetensors file {path.name}: {error}") \
            from None


def read_tokenizer(path: str | os.PathLike):
    """A ``tokenizers.Tokenizer`` from a tokenizer.json; its parse errors (and Rust panics)
    become a ModelFormatError naming the file."""
    tokenizers = require("tokenizers", "reading tokenizer.json")
    path = Path(path)
    try:
        return tokenizers.Tokenizer.from_file(str(path))
    except BaseException as error:  # pyo3's PanicException derives from BaseException
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        raise ModelFormatError(f"{path.name} is not a usable tokenizer.json: "
                               f"{str(error)[:300]}") from None


def check_tokenizer_vocabulary(path: str | os.PathLike, tokenizer, vocab_size: int) -> None:
    """Refuse a tokenizer whose ids reach past the model's ``vocab_size`` embedding rows."""
    count = tokenizer.get_vocab_size(with_added_tokens=True)
    if count > vocab_size:
        raise ModelFormatError(f"{Path(path).name}: the tokenizer has {count} tokens, more than "
                               f"the model's vocabulary of {vocab_size}")


# ------------------------------------------------------------------ BERT
BERT_INTEGERS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "max_position_embeddings")
BERT_LIMITS = {"vocab_size": "vocab", "num_hidden_layers": "layers",
               "max_position_embeddings": "context"}


def check_bert_config(path: str | os.PathLike, values) -> None:
    """Types, signs and resource limits of a BERT ``config.json``'s values."""
    name = Path(path).name
    if not isinstance(values, dict):
        raise ModelFormatError(f"{name}: a BERT config must be a JSON object")
    for key in BERT_INTEGERS:
        value = values.get(key)
        if key not in values:
            continue  # BertConfig.from_file names a missing key
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ModelFormatError(f"{name}: '{key}' must be a positive integer, got {value!r}")
        check_limit(BERT_LIMITS.get(key, "dim"), value, f"{name}: '{key}'")
    heads, hidden = values.get("num_attention_heads"), values.get("hidden_size")
    if isinstance(heads, int) and isinstance(hidden, int) and hidden % heads:
        raise ModelFormatError(f"{name}: {heads} attention heads do not divide the hidden size "
                               f"{hidden}")
    eps = values.get("layer_norm_eps", 1e-12)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not (
            math.isfinite(eps) and eps >= 0):
        raise ModelFormatError(f"{name}: 'layer_norm_eps' must be a non-negative number, got "
                               f"{eps!r}")
    if not isinstance(values.get("hidden_act", "gelu"), str):
        raise ModelFormatError(f"{name}: 'hidden_act' must be a string")


def check_bert_weights(path: str | os.PathLike, config, arrays: dict[str, np.ndarray]) -> None:
    """Every tensor BERT reads is there, with the shape ``config`` gives it."""
    name = Path(path).name
    hidden, ffn = config.hidden_size, config.intermediate_size
    expected = {"embeddings.word_embeddings.weight": (config.vocab_size, hidden),
                "embeddings.position_embeddings.weight": (config.max_position_embeddings,
                                                          hidden),
                "embeddings.LayerNorm.weight": (hidden,), "embeddings.LayerNorm.bias": (hidden,)}
    for i in range(config.num_layers):
        prefix = f"encoder.layer.{i}."
        for part, shape in (("attention.self.query", (hidden, hidden)),
                            ("attention.self.key", (hidden, hidden)),
                            ("attention.self.value", (hidden, hidden)),
                            ("attention.output.dense", (hidden, hidden)),
                            ("intermediate.dense", (ffn, hidden)),
                            ("output.dense", (hidden, ffn))):
            expected[f"{prefix}{part}.weight"] = shape
            expected[f"{prefix}{part}.bias"] = shape[:1]
        for part in ("attention.output.LayerNorm", "output.LayerNorm"):
            expected[f"{prefix}{part}.weight"] = (hidden,)
            expected[f"{prefix}{part}.bias"] = (hidden,)
    stripped = {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in arrays.items()}
    for tensor, shape in expected.items():
        if tensor not in stripped:
            raise ModelFormatError(f"{name} lacks the BERT tensor '{tensor}'")
        found = tuple(np.shape(stripped[tensor]))
        if found != shape:
            raise ModelFormatError(f"{name}: the tensor '{tensor}' has shape {found}, the "
                                   f"config needs {shape}")
    types = stripped.get("embeddings.token_type_embeddings.weight")
    if types is None:
        raise ModelFormatError(f"{name} lacks the BERT tensor "
                               "'embeddings.token_type_embeddings.weight'")
    if np.ndim(types) != 2 or np.shape(types)[0] < 1 or np.shape(types)[1] != hidden:
        raise ModelFormatError(f"{name}: the tensor 'embeddings.token_type_embeddings.weight' "
                               f"has shape {np.shape(types)}, the config needs (types, {hidden})")
