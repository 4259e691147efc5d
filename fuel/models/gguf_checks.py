"""Reading and validating GGUF files: a bounds-checked walk of the header, metadata and tensor
infos (``check_gguf``: the loader keeps what it read, so no other reader parses the file), then
the Llama hyper-parameters against the resource limits and the tensors' shapes
(``check_llama``).

Model files come from the internet: gguf's reader trusts every length, count and offset it
reads (a string array's count drives a Python loop; a key's bytes are decoded as UTF-8 where
they are first used), and fuel hands the tensors' offsets and block counts to C kernels. So
every length, count, type, dim and offset is checked here first, against the bytes that are
actually there; each failure is a ``ModelFormatError`` naming the file, where in it and what
is wrong."""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

import numpy as np

from fuel.ir.limits import check_limit
from fuel.models.common import ModelFormatError
from fuel.models.families import FAMILIES

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_DEPTH = 2  # arrays of arrays: gguf writes none; one level of nesting is tolerated
DEFAULT_ALIGNMENT = 32
# value type -> (struct code, size); 8 is a string, 9 an array
SCALARS = {0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4),
           6: ("f", 4), 7: ("?", 1), 10: ("Q", 8), 11: ("q", 8), 12: ("d", 8)}
STRING, ARRAY = 8, 9
TYPE_NAMES = {0: "uint8", 1: "int8", 2: "uint16", 3: "int16", 4: "uint32", 5: "int32",
              6: "float32", 7: "bool", 8: "string", 9: "array", 10: "uint64", 11: "int64",
              12: "float64"}
# ggml's tensor types: number -> (name, values per block, bytes per block) (ggml.h, gguf-py's
# GGML_QUANT_SIZES), so reading a file needs no gguf package
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}
# a tensor's type: int() its number, .name ggml's name
GGMLType = IntEnum("GGMLType", {name: number for number, (name, _, _) in GGML_TYPES.items()})
# the NumPy item type gguf's reader views a tensor's bytes as (others: bytes, rows of blocks)
ITEM_TYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I8": np.int8,
              "I16": np.int16, "I32": np.int32, "I64": np.int64}
# metadata arrays of numbers: their NumPy item types by value type
ARRAY_ITEMS = {0: "u1", 1: "i1", 2: "u2", 3: "i2", 4: "u4", 5: "i4", 6: "f4", 7: "?", 10: "u8",
               11: "i8", 12: "f8"}


@dataclass(frozen=True)
class TensorInfo:
    """A tensor's header as the file states it (dims in GGUF order: the row length first)."""

    name: str
    dims: tuple[int, ...]
    type_number: int
    offset: int  # from the start of the data section


class _Walk:
    """A cursor over the file's bytes that refuses to step past their end."""

    def __init__(self, data, name: str, byte_order: str) -> None:
        self.data, self.name, self.order, self.at = data, name, byte_order, 0

    def fail(self, what: str) -> ModelFormatError:
        return ModelFormatError(f"{self.name} is not a readable GGUF file: {what}")

    def need(self, size: int, what: str) -> None:
        if size < 0 or self.at + size > len(self.data):
            raise self.fail(f"{what} at byte {self.at} needs {size} bytes, but the file ends at "
                            f"byte {len(self.data)}")

    def scalar(self, code: str, size: int, what: str):
        self.need(size, what)
        (value,) = struct.unpack_from(self.order + code, self.data, self.at)
        self.at += size
        return value

    def string(self, what: str) -> str:
        length = self.scalar("Q", 8, f"the length of {what}")
        self.need(length, f"{what} ({length} bytes)")
        raw = bytes(self.data[self.at:self.at + length])
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise self.fail(f"{what} at byte {self.at} is not UTF-8 text ({error.reason} at "
                            f"its byte {error.start})") from None
        self.at += length
        return text

    def value(self, kind: int, what: str, depth: int = 0):
        """A metadata value of type ``kind``: scalars and strings as Python values, arrays as
        lists (strings, arrays) or NumPy arrays (numbers, a copy in native byte order)."""
        if kind in SCALARS:
            code, size = SCALARS[kind]
            return self.scalar(code, size, what)
        if kind == STRING:
            return self.string(what)
        if kind != ARRAY:
            raise self.fail(f"{what} has the unknown value type {kind}")
        if depth >= MAX_ARRAY_DEPTH:
            raise self.fail(f"{what} nests arrays deeper than {MAX_ARRAY_DEPTH}")
        item_kind = self.scalar("I", 4, f"the item type of {what}")
        count = self.scalar("Q", 8, f"the item count of {what}")
        if item_kind in SCALARS:
            size = SCALARS[item_kind][1]
            self.need(count * size, f"{what}'s {count} {TYPE_NAMES[item_kind]} items")
            items = np.frombuffer(self.data, np.dtype(ARRAY_ITEMS[item_kind]).newbyteorder(
                self.order), count, self.at)
            self.at += count * size
            return items.astype(items.dtype.newbyteorder("="))
        least = 8 if item_kind == STRING else 12 if item_kind == ARRAY else 0
        if item_kind not in (STRING, ARRAY):
            raise self.fail(f"{what} has the unknown item type {item_kind}")
        self.need(count * least, f"{what}'s {count} {TYPE_NAMES[item_kind]} items")
        if item_kind == STRING:
            return self.strings(count, what)
        return [self.value(item_kind, f"item {i} of {what}", depth + 1) for i in range(count)]

    def strings(self, count: int, what: str) -> list[str]:
        """``count`` strings in a row (a vocabulary: the one loop over 10^5 items here, so
        written out for speed), each checked like ``string``."""
        data, at, end = self.data, self.at, len(self.data)
        unpack = struct.Struct(self.order + "Q").unpack_from
        items: list[str] = []
        append = items.append
        for index in range(count):
            if at + 8 > end:
                self.at = at
                self.need(8, f"the length of item {index} of {what}")
            (length,) = unpack(data, at)
            stop = at + 8 + length
            if stop > end:
                self.at = at + 8
                self.need(length, f"item {index} of {what} ({length} bytes)")
            try:
                append(data[at + 8:stop].decode("utf-8"))
            except UnicodeDecodeError as error:
                raise self.fail(f"item {index} of {what} at byte {at + 8} is not UTF-8 text "
                                f"({error.reason} at its byte {error.start})") from None
            at = stop
        self.at = at
        return items


@dataclass(frozen=True)
class GGUFLayout:
    """What ``check_gguf`` read: the metadata (key -> (value type, value): ``_Walk.value``),
    the tensor infos and where the data section starts."""

    metadata: dict
    tensors: list[TensorInfo]
    data_offset: int


def check_gguf(path: str | os.PathLike) -> GGUFLayout:
    """Walk the GGUF file at ``path``, checking every length, count, type, dim and offset
    against the bytes there; a ModelFormatError names the file and the first problem."""
    path = Path(path)
    name = path.name
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 24:
                raise ModelFormatError(f"{name} is not a readable GGUF file: it has {size} bytes, "
                                       "fewer than a GGUF header's 24")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _walk(data, name)
    except OSError as error:
        raise ModelFormatError(f"cannot read {path}: {error.strerror or error}") from None


def _walk(data, name: str) -> GGUFLayout:
    if data[:4] != MAGIC:
        raise ModelFormatError(f"{name} is not a readable GGUF file: it starts with "
                               f"{bytes(data[:4])!r}, not {MAGIC!r}")
    (version,) = struct.unpack_from("<I", data, 4)
    order = "<"
    if version & 0xFFFF == 0:  # written on a machine of the other byte order (as gguf's reader)
        order, version = ">", struct.unpack_from(">I", data, 4)[0]
    walk = _Walk(data, name, order)
    if version not in VERSIONS:
        raise walk.fail(f"version {version} (fuel reads versions {VERSIONS[0]} and "
                        f"{VERSIONS[-1]})")
    walk.at = 8
    tensor_count = walk.scalar("Q", 8, "the tensor count")
    kv_count = walk.scalar("Q", 8, "the metadata count")
    remaining = len(data) - walk.at
    if kv_count * 13 > remaining:  # a key of at least one byte, a type, a one-byte value
        raise walk.fail(f"it declares {kv_count} metadata entries, more than its "
                        f"{remaining} bytes can hold")
    if tensor_count * 24 > remaining:
        raise walk.fail(f"it declares {tensor_count} tensors, more than its {remaining} "
                        "bytes can hold")
    metadata: dict = {}
    for index in range(kv_count):
        key = walk.string(f"the key of metadata entry {index}")
        if key in metadata:
            raise walk.fail(f"the metadata key '{key}' appears twice")
        kind = walk.scalar("I", 4, f"the value type of '{key}'")
        metadata[key] = (kind, walk.value(kind, f"the value of '{key}'"))
    for key, (kind, value) in metadata.items():
        _check_metadata(walk, key, kind, value)
    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in metadata:
        kind, alignment = metadata["general.alignment"]
        if kind != 4 or alignment <= 0 or alignment & (alignment - 1):
            raise walk.fail(f"general.alignment must be a power of two (uint32), got "
                            f"{alignment!r} ({TYPE_NAMES.get(kind, kind)})")
    tensors: list[TensorInfo] = []
    names: set[str] = set()
    for index in range(tensor_count):
        tensor = walk.string(f"the name of tensor {index}")
        if tensor in names:
            raise walk.fail(f"the tensor '{tensor}' appears twice")
        names.add(tensor)
        n_dims = walk.scalar("I", 4, f"the dim count of tensor '{tensor}'")
        if not 1 <= n_dims <= MAX_DIMS:
            raise walk.fail(f"tensor '{tensor}' has {n_dims} dims (1 to {MAX_DIMS} allowed)")
        dims = tuple(walk.scalar("Q", 8, f"dim {d} of tensor '{tensor}'") for d in range(n_dims))
        type_number = walk.scalar("I", 4, f"the type of tensor '{tensor}'")
        offset = walk.scalar("Q", 8, f"the data offset of tensor '{tensor}'")
        tensors.append(TensorInfo(tensor, dims, type_number, offset))
    data_offset = -(-walk.at // alignment) * alignment
    for tensor in tensors:
        _check_tensor(walk, tensor, data_offset, alignment)
    return GGUFLayout(metadata, tensors, data_offset)


# The types (and limits) of the metadata fuel reads, by the key's part after the architecture
# ("llama.context_length" -> "context_length"): a damaged type is refused here, not met as a
# TypeError where the loader converts it.
INTEGERS = frozenset({0, 1, 2, 3, 4, 5, 10, 11})
NUMBERS = INTEGERS | {6, 12}
SIZES = {"context_length": "context", "embedding_length": "dim", "feed_forward_length": "dim",
         "block_count": "layers", "attention.head_count": "dim",
         "attention.head_count_kv": "dim", "rope.dimension_count": "dim", "vocab_size": "vocab"}
FLOATS = ("rope.freq_base", "attention.layer_norm_rms_epsilon")
TOKEN_IDS = ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
             "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id",
             "tokenizer.ggml.fim_pad_token_id", "tokenizer.ggml.fim_rep_token_id",
             "tokenizer.ggml.fim_sep_token_id",
             "tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id")
STRINGS = ("general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.pre",
           "tokenizer.chat_template")
STRING_LISTS = ("tokenizer.ggml.tokens", "tokenizer.ggml.merges")


def _check_metadata(walk: _Walk, key: str, kind: int, value) -> None:
    def fail(expected: str) -> ModelFormatError:
        return walk.fail(f"the metadata '{key}' must be {expected}, got a "
                         f"{TYPE_NAMES.get(kind, kind)}")

    suffix = key.split(".", 1)[1] if "." in key and not key.startswith(
        ("general.", "tokenizer.")) else None
    if suffix in SIZES:
        if kind not in INTEGERS:
            raise fail("an integer")
        if value < 1:
            raise walk.fail(f"the metadata '{key}' must be positive, got {value}")
        check_limit(SIZES[suffix], value, f"{walk.name}: '{key}'")
    elif suffix in FLOATS:
        if kind not in NUMBERS:
            raise fail("a number")
    elif key in TOKEN_IDS:
        if kind not in INTEGERS:
            raise fail("an integer")
    elif key in STRINGS:
        if kind != STRING:
            raise fail("a string")
    elif key in STRING_LISTS:
        if kind != ARRAY or not isinstance(value, list) or any(
                not isinstance(item, str) for item in value):
            raise fail("an array of strings")
        if key == "tokenizer.ggml.merges":
            for index, merge in enumerate(value):
                if len(merge.split(" ")) != 2:
                    raise walk.fail(f"merge {index} of '{key}' is {merge!r}, not two tokens "
                                    "separated by one space")
    elif key == "tokenizer.ggml.token_type":
        if kind != ARRAY or isinstance(value, list):
            raise fail("an array of integers")
    elif key == "tokenizer.ggml.add_bos_token" and kind != 7:
        raise fail("a bool")


def _check_tensor(walk: _Walk, tensor: TensorInfo, data_offset: int, alignment: int) -> None:
    label = f"tensor '{tensor.name}'"
    if tensor.type_number not in GGML_TYPES:
        raise walk.fail(f"{label} has the unknown GGUF type number {tensor.type_number}")
    kind = GGMLType(tensor.type_number)
    _, block, block_bytes = GGML_TYPES[tensor.type_number]
    for axis, dim in enumerate(tensor.dims):
        check_limit("dim", dim, f"{walk.name}: dim {axis} of {label}")
    if tensor.dims[0] % block:
        raise walk.fail(f"{label} ({kind.name}): its rows of {tensor.dims[0]} values are not a "
                        f"whole number of {block}-value blocks")
    nbytes = math.prod(tensor.dims) // block * block_bytes
    begin = data_offset + tensor.offset
    if tensor.offset % alignment:
        raise walk.fail(f"{label}'s data offset {tensor.offset} is not a multiple of the "
                        f"alignment {alignment}")
    if begin + nbytes > len(walk.data):
        raise walk.fail(f"{label} ({kind.name}, dims {list(tensor.dims)}) is truncated: its "
                        f"{nbytes} bytes at byte {begin} run past the end of the file "
                        f"({len(walk.data)} bytes)")


# ------------------------------------------------------------------ Llama hyper-parameters
def check_llama(name: str, config, shapes: dict[str, tuple[int, ...]], token_count: int,
                type_count: int | None) -> None:
    """Refuse a decoder config (any family of ``families``) that is inconsistent, over the resource
    limits or that its tensors contradict. ``shapes`` maps tensor names to their dims in
    GGUF order (the row length first); ``token_count`` is the tokenizer's vocabulary,
    ``type_count`` the length of its token types (None when absent)."""
    def fail(what: str) -> ModelFormatError:
        return ModelFormatError(f"{name}: {what}")

    for field, value in (("vocab_size", config.vocab_size), ("hidden_size", config.hidden_size),
                         ("intermediate_size", config.intermediate_size),
                         ("num_layers", config.num_layers), ("num_heads", config.num_heads),
                         ("num_kv_heads", config.num_kv_heads), ("head_dim", config.head_dim),
                         ("context_length", config.context_length)):
        if value <= 0:
            raise fail(f"{field} must be positive, got {value}")
    check_limit("vocab", config.vocab_size, f"{name}: the vocabulary")
    check_limit("context", config.context_length, f"{name}: the context length")
    check_limit("layers", config.num_layers, f"{name}: the layer count")
    for field, value in (("hidden_size", config.hidden_size),
                         ("intermediate_size", config.intermediate_size),
                         ("head_dim", config.head_dim), ("num_heads", config.num_heads)):
        check_limit("dim", value, f"{name}: {field}")
    if config.head_dim % 2:
        raise fail(f"the head size {config.head_dim} is odd (rotary embeddings pair dims)")
    if config.num_kv_heads > config.num_heads or config.num_heads % config.num_kv_heads:
        raise fail(f"{config.num_heads} query heads cannot share {config.num_kv_heads} "
                   "key/value heads")
    if not (math.isfinite(config.rope_base) and config.rope_base > 0):
        raise fail(f"the rope base must be a positive number, got {config.rope_base}")
    if not (math.isfinite(config.rms_eps) and config.rms_eps >= 0):
        raise fail(f"the RMS norm epsilon must be a non-negative number, got {config.rms_eps}")
    if token_count > config.vocab_size:
        raise fail(f"the tokenizer has {token_count} tokens, more than the vocabulary size "
                   f"{config.vocab_size}")
    if type_count is not None and type_count != token_count:
        raise fail(f"the tokenizer has {token_count} tokens but {type_count} token types")
    ends = [("end-of-generation", index) for index in config.end_token_ids]
    for field, value in [("BOS", config.bos_token_id), ("EOS", config.eos_token_id)] + ends:
        if value is not None and not 0 <= value < config.vocab_size:
            raise fail(f"the {field} token id {value} is outside the vocabulary "
                       f"[0, {config.vocab_size})")
    hidden, ffn = config.hidden_size, config.intermediate_size
    q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
    expected = {"token_embd.weight": (hidden, config.vocab_size),
                "output_norm.weight": (hidden,)}
    if not config.tied_embeddings:
        expected["output.weight"] = (hidden, config.vocab_size)
    family = FAMILIES[config.family]  # the tensors a family's layers have
    for i in range(config.num_layers):
        layer: dict = {}  # in the file's order: norms, attention, feed-forward
        if family.pre_norms:
            layer.update({f"blk.{i}.attn_norm.weight": (hidden,),
                          f"blk.{i}.ffn_norm.weight": (hidden,)})
        if family.fused_qkv:
            layer[f"blk.{i}.attn_qkv.weight"] = (hidden, q + 2 * kv)
        else:
            layer.update({f"blk.{i}.attn_q.weight": (hidden, q),
                          f"blk.{i}.attn_k.weight": (hidden, kv),
                          f"blk.{i}.attn_v.weight": (hidden, kv)})
        layer[f"blk.{i}.attn_output.weight"] = (q, hidden)
        if family.fused_gate_up:
            layer[f"blk.{i}.ffn_up.weight"] = (hidden, 2 * ffn)
        else:
            layer.update({f"blk.{i}.ffn_gate.weight": (hidden, ffn),
                          f"blk.{i}.ffn_up.weight": (hidden, ffn)})
        layer[f"blk.{i}.ffn_down.weight"] = (ffn, hidden)
        expected.update(layer)
    for tensor, dims in expected.items():
        found = shapes.get(tensor)
        if found is None:
            raise fail(f"the tensor '{tensor}' is missing")
        if tuple(found) != dims:
            raise fail(f"the tensor '{tensor}' has dims {list(found)}, the config needs "
                       f"{list(dims)}")
