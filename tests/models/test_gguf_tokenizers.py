"""Tokenizers built from GGUF vocabularies give llama.cpp's token ids (llama-cpp-python reading
the same file, vocabulary only) on about five hundred varied strings: unicode, code, numbers,
whitespace runs, special tokens inside text. Byte-level BPE: SmolLM2's vocabulary under the
pre-tokenizers llama.cpp names (smollm, llama-bpe, qwen2, gpt-2, gpt-4o, tekken and others).
SentencePiece: a BPE model trained here with byte fallback, with and without the space
prefix (Llama's and Gemma's settings)."""

from __future__ import annotations

import itertools

import pytest

WORDS = ["Hello", "world", "the", "café", "naïve", "Straße", "東京", "日本語の文", "😀", "👍🏽",
         "don't", "I'M", "we'll", "x=1", "foo(bar)", "a_b", "<tag>", "12345", "3.14159", "-7",
         "2024-06-01", "$100", "über", "Ωmega", "עברית", "русский", "ab\u200bcd", "ﬁ", "tab\tbed"]
GLUES = [" ", "  ", "\n", "\n\n", "\t", " \n ", "", "   ", ", ", "\r\n"]
CODE = ["def f(x):\n    return x ** 2\n", "for (int i = 0; i < n; ++i) { s += a[i]; }",
        "if x:\n\tpass  # done", "SELECT * FROM t WHERE id = 42;", "<div class=\"a\">b</div>",
        "  leading spaces", "trailing spaces   ", "", " ", "\n", "a\n\n\nb", "1 22 333 4444 55555"]


def varied_strings() -> list[str]:
    """About five hundred strings: word pairs and triples with varied glue, code, edges."""
    strings = list(CODE)
    pairs = itertools.product(WORDS, GLUES, WORDS)
    strings += [a + glue + b for a, glue, b in itertools.islice(pairs, 0, None, 37)]
    triples = itertools.product(WORDS[::3], GLUES[::2], WORDS[1::4], GLUES[1::3], WORDS[2::5])
    strings += ["".join(parts) for parts in itertools.islice(triples, 0, None, 25)]
    return strings


def _writer(path, model: str, tokens, types):
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    for add, value in (("add_block_count", 1), ("add_context_length", 64),
                       ("add_embedding_length", 64), ("add_feed_forward_length", 64),
                       ("add_head_count", 4), ("add_head_count_kv", 4),
                       ("add_rope_dimension_count", 16)):
        getattr(writer, add)(value)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model(model)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    return writer


def _close(writer) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _compare(path, strings) -> None:
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is the reference")
    from fuel.models.gguf_loader import GGUFModelFile

    reference = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    ours = GGUFModelFile(path).tokenizer()
    mismatches = []
    for text in strings:
        expected = reference.tokenize(text.encode(), add_bos=False, special=True)
        got = ours.encode(text, add_special_tokens=False).ids
        if got != expected:
            mismatches.append((text, expected, got))
    assert not mismatches, f"{len(mismatches)} of {len(strings)} differ, e.g. {mismatches[:3]}"


@pytest.mark.parametrize("pre", ["smollm", "llama-bpe", "qwen2", "gpt-2", "gpt-4o", "tekken",
                                 "falcon3", "pixtral", "megrez", "default", "falcon",
                                 "deepseek-coder",
                                 "refact", "dbrx", "olmo", "starcoder", "command-r",
                                 "deepseek-r1-qwen"])
def test_byte_level_bpe_matches_llama_cpp(pre, smollm_path, tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is the reference")
    from fuel.models.gguf_loader import GGUFModelFile

    source = GGUFModelFile(smollm_path)
    tokens = source.value("tokenizer.ggml.tokens")
    writer = _writer(tmp_path / "vocab.gguf", "gpt2", tokens,
                     source.value("tokenizer.ggml.token_type"))
    writer.add_tokenizer_pre(pre)
    writer.add_token_merges(source.value("tokenizer.ggml.merges"))
    _close(writer)
    _compare(tmp_path / "vocab.gguf", varied_strings() + [
        "<|im_start|>user\nhi<|im_end|>", "x 1234567 y", "a,b;;c!!d", "ab   12 345 6789 ",
        "$$x ^^y ||z", "```code```", "中文字符测试 한국어 abc"])


@pytest.fixture(scope="module")
def sentencepiece_model(tmp_path_factory):
    """A SentencePiece BPE model (byte fallback, a user-defined and control tokens) trained
    on the varied strings."""
    sentencepiece = pytest.importorskip("sentencepiece", reason="trains the reference vocabulary")
    folder = tmp_path_factory.mktemp("spm")
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(s.replace("\n", " ") for s in varied_strings() * 3))
    sentencepiece.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "m"), vocab_size=400, model_type="bpe",
        byte_fallback=True, character_coverage=0.9995, user_defined_symbols=["<start>"],
        control_symbols=["<ctrl>"], bos_id=1, eos_id=2, unk_id=0, pad_id=-1,
        split_digits=True, allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
        normalization_rule_name="identity", minloglevel=2)
    return sentencepiece.SentencePieceProcessor(model_file=str(folder / "m.model"))


@pytest.mark.parametrize("space_prefix", [True, False], ids=["llama", "gemma"])
def test_sentencepiece_matches_llama_cpp(sentencepiece_model, space_prefix, tmp_path):
    processor = sentencepiece_model
    tokens, scores, types = [], [], []
    for i in range(processor.vocab_size()):
        tokens.append(processor.id_to_piece(i))
        scores.append(processor.get_score(i))
        types.append(2 if processor.is_unknown(i) else 3 if processor.is_control(i)
                     else 6 if processor.is_byte(i) else 5 if processor.is_unused(i)
                     else 4 if tokens[-1] == "<start>" else 1)
    writer = _writer(tmp_path / "spm.gguf", "llama", tokens, types)
    writer.add_token_scores(scores)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_space_prefix(space_prefix)
    _close(writer)
    _compare(tmp_path / "spm.gguf", varied_strings() + ["a <start> b", "x<ctrl>y", "<s> z"])
