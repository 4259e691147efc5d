"""Tokenizers built with Hugging Face ``tokenizers`` from a GGUF vocabulary (byte-level BPE
with the pre-tokenizer ``tokenizer.ggml.pre`` names, or SentencePiece BPE with byte fallback),
and incremental detokenization for streaming text."""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from fuel.models.common import ModelFormatError, notice, require

# llama.cpp pre-tokenizer names whose merges were learned on text with every digit split off
# (the original tokenizer.json of these models starts with Digits(individual_digits=True)).
DIGIT_SPLIT_PRE = frozenset({"smollm", "starcoder", "refact", "command-r", "codeshell"})
# llama.cpp's pre-tokenizer regexes by name (llama-vocab.cpp), where they are not GPT-2's
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
               r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# o200k's split (tokenizer.json of Phi-4, whose GGUF is a phi3 model with pre "gpt-4o"): words
# split at case changes, contractions kept, digits in threes
_CASED_WORDS = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+{c}|"
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*{c}|")
_SPLIT_TAIL = r" ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
GPT4O_REGEX = (_CASED_WORDS.replace("{c}", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?") + r"\p{N}{1,3}|"
               + _SPLIT_TAIL)
# Mistral's tekken (Mistral Nemo's GGUF: a llama model with pre "tekken"): the same words
# without contractions, every digit alone
TEKKEN_REGEX = _CASED_WORDS.replace("{c}", "") + r"\p{N}|" + _SPLIT_TAIL
# The regexes each pre-tokenizer splits text with, in turn (each splits the pieces the one
# before left; matches and the text between them are both pieces). Falcon3 and Pixtral files
# are llama models whose pre-tokenizer llama.cpp reads as Llama 3's, Megrez's as Qwen2's;
# "default" is llama.cpp's split for a file that names none.
_FALCON_WORDS = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
PRE_REGEXES: dict[str, tuple[str, ...]] = {
    name: (LLAMA3_REGEX,) for name in ("llama-bpe", "llama3", "dbrx", "smaug-bpe", "falcon3",
                                       "pixtral")}
PRE_REGEXES.update({name: (QWEN2_REGEX,) for name in ("qwen2", "deepseek-r1-qwen", "megrez")})
PRE_REGEXES.update({
    "gpt-4o": (GPT4O_REGEX,), "tekken": (TEKKEN_REGEX,),
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _FALCON_WORDS, r"\p{N}+", r"[0-9][0-9][0-9]"),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", _FALCON_WORDS, r"[0-9][0-9][0-9]"),
    "deepseek-coder": (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+",
                       "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", r"\p{N}"),
})
# pre-tokenizer names that split as GPT-2 does (compared with llama.cpp)
GPT2_SPLIT_PRE = frozenset({"gpt-2", "gpt2", "olmo", "mpt", "jais", "trillion", "a.x-4.0"})
# Token texts that end a generation wherever a vocabulary holds them, as llama.cpp reads them
# (llama-vocab.cpp, checked against llama_vocab_is_eog): end-of-turn markers of chat templates
# and end-of-text tokens
END_OF_GENERATION_TEXTS = frozenset({
    "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
    "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
    "<end_of_utterance>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "</s>", "<eos>"})
# Fill-in-the-middle tokens that end a generation too, each found by its text unless the file
# names its id (tokenizer.ggml.fim_pad_token_id, fim_rep_token_id, fim_sep_token_id)
FIM_END_TEXTS = {
    "fim_pad": frozenset({"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"}),
    "fim_rep": frozenset({"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                          "<reponame>"}),
    "fim_sep": frozenset({"<|file_sep|>"}),
}
NORMAL = 1
UNKNOWN = 2
CONTROL = 3
USER_DEFINED = 4
BYTE = 6
SPIECE_SPACE = "\u2581"  # SentencePiece's visible space


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
    elif pre in PRE_REGEXES:
        tokenizer.pre_tokenizer = tk.pre_tokenizers.Sequence(
            [tk.pre_tokenizers.Split(tk.Regex(regex), behavior="isolated")
             for regex in PRE_REGEXES[pre]]
            + [tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        if pre not in GPT2_SPLIT_PRE:
            notice(f"the tokenizer's pre-tokenizer '{pre}' is not one fuel knows; it splits "
                   "text as GPT-2 does, so token ids may differ from llama.cpp's")
        tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = tk.decoders.ByteLevel()
    _add_special(tk, tokenizer, tokens, token_types)
    return tokenizer


def _add_special(tk, tokenizer, tokens: Sequence[str], token_types: Sequence[int]) -> None:
    """Control tokens as special added tokens (matched whole, left out of decoded text),
    user-defined ones as plain added tokens (matched whole)."""
    special = [tk.AddedToken(token, special=True, normalized=False)
               for token, kind in zip(tokens, token_types) if kind == CONTROL]
    plain = [tk.AddedToken(token, special=False, normalized=False)
             for token, kind in zip(tokens, token_types) if kind == USER_DEFINED]
    if special:
        tokenizer.add_special_tokens(special)
    if plain:
        tokenizer.add_tokens(plain)


def sentencepiece_bpe(tokens: Sequence[str], scores: Sequence[float],
                      token_types: Sequence[int], add_space_prefix: bool = True):
    """A ``tokenizers.Tokenizer`` for a GGUF ``llama`` (SentencePiece BPE) vocabulary: spaces
    as U+2581 (one prepended to each text piece where ``add_space_prefix``), pieces merged in
    the order of their scores (the merges made from the vocabulary as Hugging Face's
    converter makes them), unknown characters as their UTF-8 bytes (``<0xXX>`` tokens)."""
    tk = require("tokenizers", "reading a GGUF tokenizer")
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    mergeable = {token: float(score) for token, score, kind in zip(tokens, scores, token_types)
                 if kind in (NORMAL, USER_DEFINED)}
    merges = []
    for piece, score in mergeable.items():
        local = [(piece[:i], piece[i:], score) for i in range(1, len(piece))
                 if piece[:i] in vocab and piece[i:] in vocab]
        local.sort(key=lambda merge: (vocab[merge[0]], vocab[merge[1]]))
        merges.extend(local)
    merges.sort(key=lambda merge: merge[2], reverse=True)
    unknown = next((token for token, kind in zip(tokens, token_types) if kind == UNKNOWN), None)
    model = tk.models.BPE(vocab=vocab, merges=[(a, b) for a, b, _ in merges], unk_token=unknown,
                          fuse_unk=True, byte_fallback=True)
    tokenizer = tk.Tokenizer(model)
    replace = tk.normalizers.Replace(" ", SPIECE_SPACE)
    tokenizer.normalizer = tk.normalizers.Sequence(
        [tk.normalizers.Prepend(SPIECE_SPACE), replace] if add_space_prefix else [replace])
    steps = [tk.decoders.Replace(SPIECE_SPACE, " "), tk.decoders.ByteFallback(),
             tk.decoders.Fuse()]
    if add_space_prefix:
        steps.append(tk.decoders.Strip(" ", 1, 0))
    tokenizer.decoder = tk.decoders.Sequence(steps)
    _add_special(tk, tokenizer, tokens, token_types)
    return tokenizer


class BytePieces:
    """Token id -> the bytes a byte-level BPE ``tokenizer`` decodes it to with
    ``skip_special_tokens`` (b"" for a special token), each looked up once."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self._special = {i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special}
        self._bytes_of = {c: bytes([b]) for b, c in _byte_alphabet().items()}
        self._pieces: dict[int, bytes] = {}

    def __call__(self, token: int) -> bytes:
        piece = self._pieces.get(token)
        if piece is None:
            text = None if token in self._special else self._tokenizer.id_to_token(token)
            piece = b"" if text is None else b"".join(
                self._bytes_of.get(c) or c.encode("utf-8") for c in text)
            self._pieces[token] = piece
        return piece


_BYTE_PIECES: dict[int, tuple[object, BytePieces]] = {}


def byte_pieces(tokenizer) -> BytePieces | None:
    """The (shared) BytePieces of ``tokenizer`` when it decodes byte-level BPE, else None."""
    decoder = getattr(tokenizer, "decoder", None)
    if type(decoder).__name__ != "ByteLevel" or not hasattr(tokenizer, "id_to_token"):
        return None
    found = _BYTE_PIECES.get(id(tokenizer))
    if found is None or found[0] is not tokenizer:
        if len(_BYTE_PIECES) >= 8:  # a process loads few models: keep the table small
            _BYTE_PIECES.pop(next(iter(_BYTE_PIECES)))
        found = _BYTE_PIECES[id(tokenizer)] = (tokenizer, BytePieces(tokenizer))
    return found[1]


class StreamDecoder:
    """Turns token ids, one at a time, into the new text each one completes (a token that ends
    inside a multi-byte character waits for the next).

    A byte-level BPE tokenizer (its decoder is ``ByteLevel``) is decoded token by token in
    Python: each id's bytes (its byte-alphabet spelling mapped back; special tokens none) into
    an incremental UTF-8 decoder, constant work per token, the text ``tokenizer.decode`` gives.
    Other decoders (SentencePiece's leading-space rule depends on the whole text) decode the
    ids so far again at each token. A server's engine thread calls this once per token of
    every request: a call into ``tokenizers`` there gives up the GIL, and taking it back waits
    on the HTTP thread."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._text = ""
        self._bytes = byte_pieces(tokenizer)
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def push(self, token: int) -> str:
        """Add one token; return the text it completes ('' while a character is partial)."""
        if self._bytes is not None:
            return self._utf8.decode(self._bytes(token))
        self._ids.append(token)
        text = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return ""
        piece = text[len(self._text):]
        self._text = text
        return piece

    def finish(self) -> str:
        """Whatever text is still pending (an incomplete character decodes as U+FFFD)."""
        if self._bytes is not None:
            return self._utf8.decode(b"", final=True)
        text = self._tokenizer.decode(self._ids, skip_special_tokens=True)
        piece = text[len(self._text):]
        self._text = text
        return piece


def end_of_generation_ids(tokens: Sequence[str], named: dict[str, int | None]
                          ) -> tuple[int, ...]:
    """Every id that ends a generation, ascending: the ``named`` special ids (``eos``,
    ``eot``, ``eom``, ``fim_pad``, ``fim_rep``, ``fim_sep``; None where a file names none),
    each token whose text ends a turn or the text (``END_OF_GENERATION_TEXTS``), and for each
    fill-in-the-middle kind the file names no id for, the first token of that kind
    (``FIM_END_TEXTS``: llama.cpp keeps one per kind)."""
    ids = {int(index) for index in named.values() if index is not None}
    # the kinds still to find, by text: one pass over the vocabulary finds them all
    wanted = {text: name for name, texts in FIM_END_TEXTS.items() if named.get(name) is None
              for text in texts}
    found: set[str] = set()
    for index, text in enumerate(tokens):
        if text in END_OF_GENERATION_TEXTS:
            ids.add(index)
        elif text in wanted and wanted[text] not in found:
            found.add(wanted[text])
            ids.add(index)
    return tuple(sorted(ids))
