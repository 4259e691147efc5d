"""Reading decoder GGUF files: the hyper-parameters, the tokenizer (built with ``tokenizers``)
and the tensors: block-quantized ones as stored (memory-mapped, ``QuantizedArray``), or
dequantized to float32 (through the ``gguf`` package's de-quantizer).

The file is read by ``gguf_checks.check_gguf``'s walk, which checks every length, count, type,
dim and offset as it goes (a known type, whole blocks per row, data inside the file), so a
damaged file raises ModelFormatError naming the tensor before anything runs; the metadata is
kept from that walk (no ``gguf`` import, none of its reader's objects)."""

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
from fuel.models.families import Family, family_of
from fuel.models.gguf_checks import GGML_TYPES, ITEM_TYPES, GGMLType, check_gguf, check_llama
from fuel.models.tokenizer import byte_level_bpe, end_of_generation_ids, sentencepiece_bpe

# Tensor types gguf's NumPy dequantizer handles and fuel accepts for weights.
SUPPORTED_TENSOR_TYPES = (
    "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
    "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S",
    "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0", "MXFP4",
)


@dataclass(frozen=True)
class LlamaConfig:
    """The hyper-parameters of a decoder model and its special tokens; ``family`` names its
    row of ``families.FAMILIES`` (the fields after it hold that family's numbers; their
    defaults are Llama's)."""

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
    family: str = "llama"
    rope_dim: int = 0  # rotated dims of each head (partial rotary); 0: all
    rope_scale: float = 1.0  # linear rope scaling: positions divided by this
    rope_factors: tuple[float, ...] = ()  # per-frequency divisors (llama3's rope_freqs)
    # longrope (Phi-3.5, Phi-3's 128k files, Phi-4-mini): cos and sin multiplied by this
    rope_mscale: float = 1.0
    rope_base_local: float = 0.0  # sliding-window layers' rope base; 0: rope_base
    attention_scale: float = 0.0  # 0: 1 / sqrt(head_dim)
    attention_softcap: float = 0.0  # tanh soft-cap of attention scores; 0: none
    final_softcap: float = 0.0  # tanh soft-cap of the logits; 0: none
    sliding_window: int = 0  # window of the sliding layers; 0: none
    sliding_layers: tuple[bool, ...] = ()  # per layer: attends through the window
    embedding_scale: float = 1.0
    residual_scale: float = 1.0
    logit_scale: float = 1.0  # logits are divided by this
    # every id that ends a generation (EOS, EOT, EOM, end-of-turn tokens); empty: EOS alone
    end_token_ids: tuple[int, ...] = ()

    @property
    def stop_ids(self) -> frozenset[int]:
        """The ids that end a generation: ``end_token_ids``, or EOS where those are empty."""
        if self.end_token_ids:
            return frozenset(self.end_token_ids)
        return frozenset(() if self.eos_token_id is None else (self.eos_token_id,))

    @property
    def rotary_dim(self) -> int:
        return self.rope_dim or self.head_dim

    @property
    def query_scale(self) -> float:
        """What the attention scores are multiplied by."""
        return self.attention_scale or 1.0 / float(np.sqrt(self.head_dim))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> LlamaConfig:
        values = dict(values)
        for name in ("rope_factors", "sliding_layers", "end_token_ids"):
            if name in values:
                values[name] = tuple(values[name])
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


@dataclass(frozen=True)
class TensorEntry:
    """A tensor's header: name, GGUF type, shape (GGUF order: the row length first), where
    its data starts in the file, and the NumPy type and shape gguf reads its bytes as."""

    name: str
    tensor_type: GGMLType
    shape: tuple[int, ...]
    data_offset: int
    data_type: np.dtype
    data_shape: tuple[int, ...]

    @classmethod
    def of(cls, info, data_offset: int) -> TensorEntry:
        """The entry of ``check_gguf``'s ``TensorInfo`` (its offset from the data section at
        ``data_offset``), its bytes viewed as gguf's reader views them: float and integer types
        as their items, block formats as rows of bytes."""
        kind = GGMLType(info.type_number)
        _, block, block_bytes = GGML_TYPES[info.type_number]
        shape = tuple(int(d) for d in info.dims)
        item = ITEM_TYPES.get(kind.name)
        data_shape = tuple(reversed(shape))
        if item is None:
            item = np.uint8
            data_shape = data_shape[:-1] + (data_shape[-1] // block * block_bytes,)
        return cls(info.name, kind, shape, data_offset + info.offset, np.dtype(item), data_shape)

    def header(self) -> list:
        """The record as JSON-able values (``from_header`` reads them back)."""
        return [self.name, int(self.tensor_type), list(self.shape), self.data_offset,
                self.data_type.str, list(self.data_shape)]

    @classmethod
    def from_header(cls, values: list) -> TensorEntry:
        name, kind, shape, offset, data_type, data_shape = values
        return cls(name, GGMLType(kind), tuple(shape), offset, np.dtype(data_type),
                   tuple(data_shape))

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.data_shape, dtype=np.int64)) * self.data_type.itemsize


class GGUFModelFile:
    """An opened GGUF file: metadata lookups, config, tokenizer and its tensors (as stored or
    dequantized)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        layout = check_gguf(self.path)  # every length, count, type, dim and offset, checked
        self._metadata: dict | None = layout.metadata
        self.tensors = {info.name: TensorEntry.of(info, layout.data_offset)
                        for info in layout.tensors}
        self._noticed: set[str] = set()
        self.architecture = self.value("general.architecture")

    def drop_metadata(self) -> None:
        """Drop the metadata (the vocabulary alone is some 100k strings) once the config,
        tokenizer and chat template are read, so it is freed before the weights are loaded;
        ``value`` answers ``default`` afterwards. The tensors stay readable (``TensorEntry``
        records, read through maps of their own)."""
        # The records are made anew after the metadata is gone: the first ones were made
        # among the walk's objects, and each one left there would keep a 1 MiB arena of
        # Python's allocator resident when the rest is freed. In between they are one string.
        headers = json.dumps([entry.header() for entry in self.tensors.values()])
        self._metadata = self.tensors = None
        self.tensors = {entry.name: entry for entry in map(TensorEntry.from_header,
                                                            json.loads(headers))}
        release_freed_heap()  # the vocabulary's strings: the weights' copies would reuse a part

    def _raw(self, key: str):
        """The walk's value of ``key`` (arrays of numbers as NumPy arrays), or None."""
        entry = None if self._metadata is None else self._metadata.get(key)
        return None if entry is None else entry[1]

    def value(self, key: str, default=None):
        """A metadata value (strings, numbers, lists, as gguf's ``ReaderField.contents``), or
        ``default`` when absent."""
        value = self._raw(key)
        return default if value is None else _contents(value)

    def required(self, key: str):
        value = self._raw(key)
        if value is None:
            raise ModelFormatError(f"{self.path.name} lacks the metadata key '{key}'")
        return _contents(value)

    @property
    def rope_permuted(self) -> bool:
        """Whether the file's q/k rows are in llama.cpp's interleaved rotary order."""
        return self.family.permuted_rope

    @property
    def family(self) -> Family:
        """The file's decoder family (a ModelFormatError listing the supported ones)."""
        return family_of(self.architecture, self.path.name)

    def llama_config(self) -> LlamaConfig:
        """The model's hyper-parameters from the metadata of its family (``families``)."""
        family = self.family
        arch = family.name

        def key(name: str, default=None):
            return self.value(f"{arch}.{name}", default)

        def needed(name: str):
            return self.required(f"{arch}.{name}")

        hidden = int(needed("embedding_length"))
        heads = int(needed("attention.head_count"))
        head_dim = int(key("attention.key_length", 0) or hidden // heads)
        rope_dim = int(key("rope.dimension_count", head_dim))
        if rope_dim > head_dim or rope_dim % 2:
            raise ModelFormatError(f"{self.path.name}: a rotary dimension of {rope_dim} does "
                                   f"not fit heads of {head_dim}")
        layers = int(needed("block_count"))
        tokens = self.value("tokenizer.ggml.tokens") or []
        bos = self.value("tokenizer.ggml.bos_token_id")
        eos = self.value("tokenizer.ggml.eos_token_id")
        scaling = str(key("rope.scaling.type", "none"))
        if scaling not in ("none", "linear", "longrope"):
            raise ModelFormatError(f"{self.path.name}: rope scaling '{scaling}' is not supported "
                                   "(fuel runs none, linear, llama3's rope_freqs and longrope)")
        factors: tuple[float, ...] = ()
        mscale = 1.0
        if "rope_freqs.weight" in self.tensors:
            factors = tuple(float(f) for f in self.tensor("rope_freqs.weight"))
        elif "rope_factors_short.weight" in self.tensors:
            # longrope: the short factors, which llama.cpp and transformers use while the
            # context stays within the original one (the long ones serve beyond it)
            factors = tuple(float(f) for f in self.tensor("rope_factors_short.weight"))
            mscale = float(key("rope.scaling.attn_factor", 1.0) or 1.0)
        window = int(key("attention.sliding_window", 0) or 0) if family.sliding else 0
        attention_scale = float(key("attention.scale", 0.0) or 0.0)
        if family.gemma_scale and not attention_scale:
            big = layers in (46, 62)  # the 27B models
            attention_scale = 1.0 / float(np.sqrt(hidden / heads if big else head_dim))
        embedding_scale = float(key("embedding_scale", 1.0) or 1.0)
        if family.scaled_embedding:
            embedding_scale = float(np.sqrt(np.float32(hidden)))
        config = LlamaConfig(
            vocab_size=int(key("vocab_size", len(tokens))),
            hidden_size=hidden,
            intermediate_size=int(needed("feed_forward_length")),
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=int(key("attention.head_count_kv", heads)),
            head_dim=head_dim,
            rope_base=float(key("rope.freq_base", 10000.0)),
            rms_eps=float(key("attention.layer_norm_rms_epsilon", 1e-5)),
            context_length=int(key("context_length", 2048)),
            bos_token_id=None if bos is None else int(bos),
            eos_token_id=None if eos is None else int(eos),
            add_bos_token=bool(self.value("tokenizer.ggml.add_bos_token", False)),
            tied_embeddings="output.weight" not in self.tensors,
            family=arch,
            rope_dim=rope_dim if rope_dim != head_dim else 0,
            rope_scale=float(key("rope.scaling.factor", 1.0) or 1.0) if scaling == "linear"
            else 1.0,
            rope_factors=factors,
            rope_mscale=mscale,
            rope_base_local=10000.0 if arch == "gemma3" else 0.0,
            attention_scale=attention_scale,
            attention_softcap=float(key("attn_logit_softcapping", 0.0) or 0.0),
            final_softcap=float(key("final_logit_softcapping", 0.0) or 0.0),
            sliding_window=window,
            sliding_layers=tuple(family.sliding(i, layers) for i in range(layers))
            if window else (),
            embedding_scale=embedding_scale,
            residual_scale=float(key("residual_scale", 1.0) or 1.0),
            logit_scale=float(key("logit_scale", 1.0) or 1.0),
            end_token_ids=self.end_token_ids(),
        )
        types = self._raw("tokenizer.ggml.token_type")
        check_llama(self.path.name, config, {n: t.shape for n, t in self.tensors.items()},
                    len(tokens), None if types is None else len(types))
        return config

    def end_token_ids(self) -> tuple[int, ...]:
        """The ids that end a generation, llama.cpp's end-of-generation set: EOS, EOT, EOM
        and the fill-in-the-middle pad, repository and file separator where the file names
        them, and the tokens whose text ends a turn or the text."""
        names = ("eos", "eot", "eom", "fim_pad", "fim_rep", "fim_sep")
        return end_of_generation_ids(
            self.value("tokenizer.ggml.tokens") or [],
            {name: self.value(f"tokenizer.ggml.{name}_token_id") for name in names})

    def tokenizer(self):
        """The tokenizer the file describes, as a ``tokenizers.Tokenizer``."""
        kind = self.value("tokenizer.ggml.model")
        if kind not in ("gpt2", "llama"):
            raise ModelFormatError(f"{self.path.name} has a '{kind}' tokenizer; fuel builds "
                                   "byte-level BPE ('gpt2') and SentencePiece ('llama') "
                                   "tokenizers from GGUF")
        tokens = self.required("tokenizer.ggml.tokens")
        types = self.value("tokenizer.ggml.token_type") or [1] * len(tokens)
        try:
            if kind == "llama":
                scores = self.value("tokenizer.ggml.scores") or [0.0] * len(tokens)
                return sentencepiece_bpe(
                    tokens, scores, types,
                    bool(self.value("tokenizer.ggml.add_space_prefix", True)))
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
            gguf = require("gguf", "de-quantizing a GGUF tensor")
            values = gguf.quants.dequantize(self._mapped(tensor),
                                            gguf.GGMLQuantizationType(int(tensor.tensor_type)))
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


def _contents(value):
    """A walked metadata value as gguf's ``contents`` gives it: arrays as lists."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list):
        return [_contents(item) for item in value] if value and not isinstance(
            value[0], str) else value
    return value


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
