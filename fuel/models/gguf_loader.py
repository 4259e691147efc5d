"""Reading Llama-architecture GGUF files through the ``gguf`` package: the hyper-parameters, the
tokenizer (built with ``tokenizers``) and the tensors: block-quantized ones as stored
(memory-mapped, ``QuantizedArray``), or dequantized to float32.

Every tensor's header is checked when the file is opened (a known type, whole blocks per row,
data inside the file), so a damaged file raises ModelFormatError naming the tensor before
anything runs."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from fuel.ir.dtype import QUANTIZED_BY_GGUF_TYPE, QuantizedDType
from fuel.models.common import (
    ModelFormatError,
    notice,
    progress,
    release_freed_heap,
    require,
)
from fuel.models.gguf_checks import check_gguf, check_llama
from fuel.models.tokenizer import byte_level_bpe

# Tensor types gguf's NumPy dequantizer handles and fuel accepts for weights.
SUPPORTED_TENSOR_TYPES = (
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
    "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S",
    "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0", "MXFP4",
)


@dataclass(frozen=True)
class LlamaConfig:
    """The hyper-parameters of a Llama-architecture model and its special tokens."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_base: float
    rms_eps: float
    context_length: int
    bos_token_id: int | None
    eos_token_id: int | None
    add_bos_token: bool
    tied_embeddings: bool

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> LlamaConfig:
        return cls(**values)


@dataclass(frozen=True)
class QuantizedArray:
    """A matrix kept as its GGUF blocks: ``data`` is uint8 ``(rows, row bytes)`` (a view of
    the memory-mapped file, or a copy where rows were reordered or joined), ``shape`` is the
    logical ``(rows, k)``. ``order``, when set, is a pending reordering: the matrix is
    ``data[order]``, made by ``materialized`` or ``join_rows`` straight from the map."""

    data: np.ndarray
    dtype: QuantizedDType
    shape: tuple[int, int]
    order: np.ndarray | None = None

    def reorder_rows(self, transform) -> QuantizedArray:
        """The matrix with its rows rearranged by ``transform`` (a function of an array whose
        first axis is the rows, e.g. ``unpermute_rope_rows``), pending: nothing is copied
        yet."""
        rows = self.order if self.order is not None else np.arange(self.data.shape[0])
        return QuantizedArray(self.data, self.dtype, self.shape, transform(rows))

    def materialized(self) -> QuantizedArray:
        """The matrix with its pending reordering applied (itself when there is none)."""
        if self.order is None:
            return self
        return QuantizedArray(np.take(self.data, self.order, axis=0), self.dtype, self.shape)


def join_rows(parts: list[QuantizedArray]) -> QuantizedArray | None:
    """The parts stacked along their rows (one matmul for several projections; a single part
    as it is), or None when their formats or widths differ. Each part is read once, into
    its place in the result (no intermediate copies)."""
    first = parts[0]
    if len(parts) == 1:
        return first.materialized()  # nothing to join: a view of the map stays a view
    if any(p.dtype is not first.dtype or p.shape[1] != first.shape[1] for p in parts):
        return None
    data = np.empty((sum(p.data.shape[0] for p in parts), first.data.shape[1]), np.uint8)
    start = 0
    for part in parts:
        end = start + part.data.shape[0]
        if part.order is None:
            data[start:end] = part.data
        else:
            np.take(part.data, part.order, axis=0, out=data[start:end])
        start = end
    return QuantizedArray(data, first.dtype, (sum(p.shape[0] for p in parts), first.shape[1]))


def _checked_reader(gguf):
    """gguf's reader with every tensor header checked first, errors naming the tensor, and its
    metadata parts as plain arrays over the map.

    gguf's own ``_get`` slices the ``np.memmap``, and every slice of a memmap is a memmap
    carrying its own attributes and a chain of bases: SmolLM2's 49152 tokens and 48900 merges
    cost about 160 MiB of objects while the reader lives (and leave the heap fragmented after
    it is gone). Plain ``ndarray`` views of the same bytes cost a quarter of that."""

    class CheckedReader(gguf.GGUFReader):
        def _get(self, offset: int, dtype, count: int = 1, override_order=None) -> np.ndarray:
            """``count`` values of ``dtype`` at byte ``offset``, in the file's byte order (as
            gguf's ``_get``), viewed from a plain array over the map."""
            mapped = self.__dict__.get("_plain_bytes")
            if mapped is None:
                mapped = self._plain_bytes = self.data.view(np.ndarray)
            value_type = np.dtype(dtype)
            order = self.byte_order if override_order is None else override_order
            if order != "I":
                value_type = value_type.newbyteorder(order)
            count = int(count)
            return mapped[offset:offset + value_type.itemsize * count].view(value_type)[:count]

        def _build_tensors(self, start_offs: int, fields: list) -> None:
            for field in fields:
                check_tensor_header(gguf, field, start_offs, len(self.data))
            super()._build_tensors(start_offs, fields)

    return CheckedReader


def check_tensor_header(gguf, field, start: int, file_bytes: int) -> None:
    """Raise ModelFormatError when the tensor ``field`` describes has an unknown type, rows that
    are not whole blocks, or data past the end of the file."""
    _length, name_data, _count, dims, raw_type, offset = field.parts
    name = bytes(name_data).decode("utf-8", errors="replace")
    try:
        kind = gguf.GGMLQuantizationType(int(raw_type[0]))
    except ValueError:
        raise ModelFormatError(f"tensor '{name}' has the unknown GGUF type number "
                               f"{int(raw_type[0])}") from None
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[kind]
    shape = [int(d) for d in dims]
    if shape and shape[0] % block_size:
        raise ModelFormatError(f"tensor '{name}' ({kind.name}): its rows of {shape[0]} values are "
                               f"not a whole number of {block_size}-value blocks")
    count = int(np.prod(shape, dtype=np.int64))
    needed = count // block_size * block_bytes
    begin = start + int(offset[0])
    if begin + needed > file_bytes:
        raise ModelFormatError(f"tensor '{name}' ({kind.name}, shape {shape}) is truncated: its "
                               f"{needed} bytes at offset {begin} run past the end of the file "
                               f"({file_bytes} bytes)")


@dataclass(frozen=True)
class TensorEntry:
    """A tensor's header: name, GGUF type, shape (GGUF order: the row length first), where
    its data starts in the file, and the NumPy type and shape gguf reads its bytes as."""

    name: str
    tensor_type: object  # gguf.GGMLQuantizationType
    shape: tuple[int, ...]
    data_offset: int
    data_type: np.dtype
    data_shape: tuple[int, ...]

    @classmethod
    def of(cls, tensor) -> TensorEntry:
        """The entry of a gguf ``ReaderTensor``."""
        return cls(tensor.name, tensor.tensor_type, tuple(int(d) for d in tensor.shape),
                   int(tensor.data_offset), tensor.data.dtype, tuple(tensor.data.shape))

    def header(self) -> list:
        """The record as JSON-able values (``from_header`` reads them back)."""
        return [self.name, int(self.tensor_type), list(self.shape), self.data_offset,
                self.data_type.str, list(self.data_shape)]

    @classmethod
    def from_header(cls, values: list) -> TensorEntry:
        name, kind, shape, offset, data_type, data_shape = values
        gguf = require("gguf", "loading a GGUF model")
        return cls(name, gguf.GGMLQuantizationType(kind), tuple(shape), offset,
                   np.dtype(data_type), tuple(data_shape))

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.data_shape, dtype=np.int64)) * self.data_type.itemsize


class GGUFModelFile:
    """An opened GGUF file: metadata lookups, config, tokenizer and its tensors (as stored or
    dequantized)."""

    def __init__(self, path: str | os.PathLike) -> None:
        gguf = require("gguf", "loading a GGUF model")
        self.path = Path(path)
        check_gguf(self.path)  # every length, count, type, dim and offset, before gguf reads it
        try:
            self._reader = _checked_reader(gguf)(str(self.path))
        except (ValueError, OSError, IndexError, KeyError) as error:
            raise ModelFormatError(f"{self.path} is not a readable GGUF file: {error}") from None
        self._gguf = gguf
        self.tensors = {tensor.name: TensorEntry.of(tensor) for tensor in self._reader.tensors}
        self._noticed: set[str] = set()

    def drop_metadata(self) -> None:
        """Drop gguf's reader (the vocabulary alone is some 100k small arrays, and its map of
        the whole file) once the config, tokenizer and chat template are read, so it is freed
        before the weights are loaded; ``value`` answers ``default`` afterwards. The tensors
        stay readable (``TensorEntry`` records, read through maps of their own)."""
        # The records are made anew after the reader is gone: the first ones were made among
        # the reader's objects, and each one left there would keep a 1 MiB arena of Python's
        # allocator resident when the rest is freed (8 arenas for SmolLM2). In between they
        # are one string.
        headers = json.dumps([entry.header() for entry in self.tensors.values()])
        self._reader = self.tensors = None
        self.tensors = {entry.name: entry for entry in map(TensorEntry.from_header,
                                                            json.loads(headers))}
        release_freed_heap()  # the reader's ~30 MiB: the weights' copies would reuse a part

    def _field(self, key: str):
        return None if self._reader is None else self._reader.get_field(key)

    def value(self, key: str, default=None):
        """A metadata value (strings, numbers, lists), or ``default`` when absent."""
        field = self._field(key)
        return default if field is None else field.contents()

    def required(self, key: str):
        field = self._field(key)
        if field is None:
            raise ModelFormatError(f"{self.path.name} lacks the metadata key '{key}'")
        return field.contents()

    def llama_config(self) -> LlamaConfig:
        """The model's hyper-parameters; a ModelFormatError for a non-Llama file."""
        arch = self.value("general.architecture")
        if arch != "llama":
            raise ModelFormatError(f"{self.path.name} holds a '{arch}' model; fuel's GGUF "
                                   "loader runs the 'llama' architecture")
        hidden = int(self.required("llama.embedding_length"))
        heads = int(self.required("llama.attention.head_count"))
        head_dim = int(self.value("llama.rope.dimension_count", hidden // heads))
        if head_dim * heads != hidden:
            raise ModelFormatError(f"{self.path.name}: {heads} heads of {head_dim} do not make "
                                   f"the hidden size {hidden}")
        tokens = self.value("tokenizer.ggml.tokens") or []
        bos = self.value("tokenizer.ggml.bos_token_id")
        eos = self.value("tokenizer.ggml.eos_token_id")
        config = LlamaConfig(
            vocab_size=int(self.value("llama.vocab_size", len(tokens))),
            hidden_size=hidden,
            intermediate_size=int(self.required("llama.feed_forward_length")),
            num_layers=int(self.required("llama.block_count")),
            num_heads=heads,
            num_kv_heads=int(self.value("llama.attention.head_count_kv", heads)),
            head_dim=head_dim,
            rope_base=float(self.value("llama.rope.freq_base", 10000.0)),
            rms_eps=float(self.value("llama.attention.layer_norm_rms_epsilon", 1e-5)),
            context_length=int(self.value("llama.context_length", 2048)),
            bos_token_id=None if bos is None else int(bos),
            eos_token_id=None if eos is None else int(eos),
            add_bos_token=bool(self.value("tokenizer.ggml.add_bos_token", False)),
            tied_embeddings="output.weight" not in self.tensors,
        )
        types = self._field("tokenizer.ggml.token_type")
        check_llama(self.path.name, config, {n: t.shape for n, t in self.tensors.items()},
                    len(tokens), None if types is None else len(types.data))
        return config

    def tokenizer(self):
        """The tokenizer the file describes, as a ``tokenizers.Tokenizer``."""
        kind = self.value("tokenizer.ggml.model")
        if kind != "gpt2":
            raise ModelFormatError(f"{self.path.name} has a '{kind}' tokenizer; fuel builds "
                                   "byte-level BPE ('gpt2') tokenizers from GGUF")
        tokens = self.required("tokenizer.ggml.tokens")
        types = self.value("tokenizer.ggml.token_type") or [1] * len(tokens)
        try:
            return byte_level_bpe(tokens, self.required("tokenizer.ggml.merges"), types,
                                  self.value("tokenizer.ggml.pre", "default"))
        except Exception as error:  # tokenizers' own errors (a merge of unknown tokens, ...)
            if isinstance(error, ModelFormatError):
                raise
            raise ModelFormatError(f"{self.path.name}: its tokenizer cannot be built: "
                                   f"{error}") from None

    def check_tensor_types(self) -> None:
        """Raise a ModelFormatError naming the first tensor of a type fuel cannot dequantize."""
        for name, tensor in self.tensors.items():
            kind = tensor.tensor_type.name
            if kind not in SUPPORTED_TENSOR_TYPES:
                raise ModelFormatError(
                    f"tensor '{name}' in {self.path.name} has GGUF type {kind}, which fuel "
                    f"cannot dequantize; supported: {', '.join(SUPPORTED_TENSOR_TYPES)}"
                )

    def tensor(self, name: str) -> np.ndarray:
        """The named tensor as float32 in PyTorch layout ([out, in] for matrices)."""
        tensor = self.tensors.get(name)
        if tensor is None:
            raise ModelFormatError(f"{self.path.name} lacks the tensor '{name}'")
        kind = tensor.tensor_type.name
        if kind not in SUPPORTED_TENSOR_TYPES:
            self.check_tensor_types()
        shape = tuple(int(s) for s in reversed(tensor.shape))
        if kind == "F32":  # a copy, not a view that keeps the map
            values = np.array(self._mapped(tensor), dtype=np.float32)
        else:
            values = self._gguf.quants.dequantize(self._mapped(tensor), tensor.tensor_type)
        values = np.asarray(values, dtype=np.float32)
        if values.size != int(np.prod(shape)):
            raise ModelFormatError(f"tensor '{name}' holds {values.size} values, its header "
                                   f"says {shape}")
        return values.reshape(shape)

    def stored(self, name: str, kernels=None) -> QuantizedArray | np.ndarray:
        """The named tensor as kept in memory: a QuantizedArray over the file's blocks for a
        format fuel has kernels for (a view of a map of its own bytes, unmapped when the last
        view goes: a tensor copied from it leaves no pages resident), else float32 in PyTorch
        layout, dequantized (the first tensor of each such format prints a notice).
        ``kernels(dtype)``, when given, says whether the target device runs ``dtype``."""
        tensor = self.tensors.get(name)
        if tensor is None:
            raise ModelFormatError(f"{self.path.name} lacks the tensor '{name}'")
        dtype = stored_format(tensor)
        runnable = dtype is not None and (kernels is None or kernels(dtype))
        if not runnable or len(tensor.shape) != 2:
            kind = tensor.tensor_type.name
            if kind not in ("F32", "F16", "BF16") and kind not in self._noticed:
                self._noticed.add(kind)
                where = "fuel" if dtype is None else "the device"
                notice(f"{self.path.name}: {where} has no kernels for GGUF {kind} tensors "
                       f"(first: '{name}'); they are dequantized to float32")
            return self.tensor(name)
        shape = (int(tensor.shape[1]), int(tensor.shape[0]))
        return QuantizedArray(self._mapped(tensor).view(np.uint8), dtype, shape)

    def stored_together(self, names: list[str], kernels=None) -> QuantizedArray | None:
        """The named matrices joined along their rows as one view of the file, when they lie
        back to back in it in one format and width (as ``ffn_gate`` and ``ffn_up`` do in
        llama.cpp's files): nothing copied. None when they do not."""
        entries = [self.tensors.get(name) for name in names]
        if any(entry is None or len(entry.shape) != 2 for entry in entries):
            return None
        first = entries[0]
        dtype = stored_format(first)
        if dtype is None or (kernels is not None and not kernels(dtype)):
            return None
        for before, after in zip(entries, entries[1:]):
            if (after.tensor_type != first.tensor_type or after.shape[0] != first.shape[0]
                    or before.data_offset + before.nbytes != after.data_offset):
                return None
        rows = sum(entry.shape[1] for entry in entries)
        joined = TensorEntry(" | ".join(names), first.tensor_type, (first.shape[0], rows),
                             first.data_offset, first.data_type,
                             (rows, first.data_shape[-1]))
        return QuantizedArray(self._mapped(joined).view(np.uint8), dtype,
                              (rows, first.shape[0]))

    def _mapped(self, tensor) -> np.ndarray:
        """``tensor``'s bytes over a map of their own, not the reader's map of the whole file:
        the reader's map holds the metadata's pages (freed with the reader), and the kernel
        maps the cached pages around each fault (fault-around), so over one map of the file
        the first reads of a tensor would make its neighbours' pages resident too, tensors
        that were copied out and are never read through the map."""
        if tensor.nbytes == 0:
            return np.empty(tensor.data_shape, tensor.data_type)
        return np.memmap(self.path, tensor.data_type, "r", tensor.data_offset,
                         tensor.data_shape).view(np.ndarray)

    def iter_tensors(self, names: list[str], description: str) -> Iterator[tuple[str, np.ndarray]]:
        """(name, float32 array) for each name, with a progress bar."""
        for name in progress(names, len(names), description):
            yield name, self.tensor(name)


def stored_format(tensor: TensorEntry) -> QuantizedDType | None:
    """The format fuel keeps ``tensor`` in as stored (a block format, or F16/BF16 as 32-value
    float blocks where its rows are whole blocks), or None where it is de-quantized."""
    dtype = QUANTIZED_BY_GGUF_TYPE.get(int(tensor.tensor_type))
    if dtype is None or not tensor.shape or int(tensor.shape[0]) % dtype.block_size:
        return None
    return dtype


def unpermute_rope_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's interleaving of the q/k projection rows (back to Hugging Face's
    rotate-half order)."""
    rows = weight.shape[0]
    return (weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:])
            .swapaxes(2, 1).reshape(weight.shape))
