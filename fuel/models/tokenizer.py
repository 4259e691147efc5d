"""Tokenizers built with Hugging Face ``tokenizers``: byte-level BPE from a GGUF vocabulary, and
incremental detokenization for streaming text."""

from __future__ import annotations

from collections.abc import Sequence

from fuel.models.common import ModelFormatError, require

# llama.cpp pre-tokenizer names whose merges were learned on text with every digit split off
# (the original tokenizer.json of these models starts with Digits(individual_digits=True)).
DIGIT_SPLIT_PRE = frozenset({"smollm", "starcoder", "refact", "command-r", "codeshell"})
CONTROL = 3
USER_DEFINED = 4


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character map (the alphabet of byte-level BPE tokens)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    mapping = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(256 + extra)
            extra += 1
    return mapping


def byte_level_bpe(tokens: Sequence[str], merges: Sequence[str], token_types: Sequence[int],
                   pre: str):
    """A ``tokenizers.Tokenizer`` for a GGUF ``gpt2`` vocabulary: byte-level BPE with the
    file's merges, control tokens kept whole, digits split the way ``pre`` says."""
    tk = require("tokenizers", "reading a GGUF tokenizer")
    spelling = _byte_alphabet()
    alphabet = set(spelling.values())
    vocab = {}
    for index, token in enumerate(tokens):
        if not set(token) <= alphabet:  # a token stored as plain text: respell its bytes
            token = "".join(spelling[b] for b in token.encode("utf-8"))
        vocab.setdefault(token, index)
    pairs = []
    for merge in merges:
        parts = merge.split(" ")
        if len(parts) != 2:
            raise ModelFormatError(f"malformed BPE merge {merge!r} in the GGUF tokenizer")
        pairs.append((parts[0], parts[1]))
    tokenizer = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    byte_level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in DIGIT_SPLIT_PRE:
        tokenizer.pre_tokenizer = tk.pre_tokenizers.Sequence(
            [tk.pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = tk.decoders.ByteLevel()
    special = [tk.AddedToken(token, special=True, normalized=False)
               for token, kind in zip(tokens, token_types) if kind == CONTROL]
    plain = [tk.AddedToken(token, special=False, normalized=False)
             for token, kind in zip(tokens, token_types) if kind == USER_DEFINED]
    if special:
        tokenizer.add_special_tokens(special)
    if plain:
        tokenizer.add_tokens(plain)
    return tokenizer


class StreamDecoder:
    """Turns token ids, one at a time, into the new text each one completes (a token that ends
    inside a multi-byte character waits for the next)."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._text = ""

    def push(self, token: int) -> str:
        """Add one token; return the text it completes ('' while a character is partial)."""
        self._ids.append(token)
        text = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        piece = text[len(self._text):]
        self._text = text
        return piece

    def finish(self) -> str:
        """Whatever text is still pending (an incomplete character decodes as U+FFFD)."""
        text = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        piece = text[len(self._text):]
        self._text = text
        return piece
