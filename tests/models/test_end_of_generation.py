"""The ids that end a generation: EOS, EOT and EOM where a file names them and the tokens whose
text ends a turn (``<|im_end|>``, ``<|eot_id|>``, ``<end_of_turn>``...). GGUF files: the same set
as llama.cpp's ``llama_vocab_is_eog`` (llama-cpp-python reading the file, vocabulary only);
Hugging Face folders: EOS of ``config.json`` and ``generation_config.json`` plus the same
tokens; and a generation ends at any of them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.models.test_gguf_tokenizers import _close, _writer

MARKERS = ["<|eot_id|>", "<end_of_turn>", "<|eom_id|>", "<|end|>", "_<EOT>", "<|end_of_text|>",
           "</s>", "<eos>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<|fim_middle|>",
           "<start_of_turn>", "<|END_OF_TURN_TOKEN|>"]


def _vocabulary(source_path, tmp_path, markers: list[str], named: dict[str, int]):
    """SmolLM2's byte-level vocabulary with tokens 100.. renamed to ``markers`` (control
    tokens) and the ``named`` special ids (eos, eot, eom) set, written as a vocabulary-only GGUF."""
    from fuel.models.gguf_loader import GGUFModelFile

    source = GGUFModelFile(source_path)
    tokens = list(source.value("tokenizer.ggml.tokens"))
    types = list(source.value("tokenizer.ggml.token_type"))
    for offset, marker in enumerate(markers):
        assert marker not in tokens  # llama.cpp refuses a vocabulary with a text twice
        tokens[100 + offset], types[100 + offset] = marker, 3
    path = tmp_path / "vocab.gguf"
    writer = _writer(path, "gpt2", tokens, types)
    writer.add_tokenizer_pre("smollm")
    writer.add_token_merges(source.value("tokenizer.ggml.merges"))
    for name, index in named.items():
        writer.add_uint32(f"tokenizer.ggml.{name}_token_id", index)
    _close(writer)
    return path


CASES = {"eos-only": ([], {"eos": 7}), "markers": (MARKERS, {"eos": 0}),
         "named-eot-eom": (MARKERS[:2], {"eos": 0, "eot": 300, "eom": 301}),
         "named-fim": (MARKERS, {"eos": 0, "fim_pad": 302, "fim_sep": 303})}


@pytest.mark.parametrize("case", sorted(CASES))
def test_gguf_end_ids_are_llama_cpps(case, smollm_path, tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is the reference")
    from fuel.models.gguf_loader import GGUFModelFile

    markers, named = CASES[case]
    path = _vocabulary(smollm_path, tmp_path, markers, named)
    reference = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(reference.model)
    expected = tuple(i for i in range(reference.n_vocab())
                     if llama_cpp.llama_vocab_is_eog(vocab, i))
    assert GGUFModelFile(path).end_token_ids() == expected


def test_gguf_end_ids_rule(smollm_path, tmp_path):
    """Without the reference: the named ids and every marker, nothing else."""
    from fuel.models.gguf_loader import GGUFModelFile

    path = _vocabulary(smollm_path, tmp_path, MARKERS[:2], {"eos": 0, "eot": 300, "eom": 301})
    ends = GGUFModelFile(path).end_token_ids()
    # SmolLM2's own <|endoftext|> (0), <|im_end|> (2) and <reponame> (4, a fill-in-the-middle
    # repository token) end generations too
    assert ends == (0, 2, 4, 100, 101, 300, 301)


def test_the_shipped_model_stops_at_the_end_of_its_turn():
    from fuel.models.llama import load_gguf

    model = load_gguf()
    im_end = model.tokenizer.token_to_id("<|im_end|>")
    assert im_end in model.config.stop_ids
    assert model.tokenizer.token_to_id("<|endoftext|>") in model.config.stop_ids


def _folder(tmp_path, config: dict, generation: dict | None, added: list[dict]):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", **config}))
    if generation is not None:
        (folder / "generation_config.json").write_text(json.dumps(generation))
    vocab = {f"t{i}": i for i in range(20)}
    (folder / "tokenizer.json").write_text(json.dumps(
        {"model": {"type": "BPE", "vocab": vocab, "merges": []}, "added_tokens": added}))
    header = b"{}"
    (folder / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    return folder


def test_hf_folder_end_ids(tmp_path):
    from fuel.models.hf_folder import HFModelFolder

    added = [{"id": 20, "content": "<|begin_of_text|>", "special": True},
             {"id": 21, "content": "<|end_of_text|>", "special": True},
             {"id": 22, "content": "<|eot_id|>", "special": True},
             {"id": 23, "content": "<|eom_id|>", "special": True},
             {"id": 99, "content": "<|im_end|>", "special": True}]  # past the vocabulary
    folder = _folder(tmp_path, {"vocab_size": 30, "eos_token_id": 21},
                     {"eos_token_id": [21, 5, 22]}, added)
    assert HFModelFolder(folder).end_token_ids() == (5, 21, 22, 23)


def test_hf_folder_without_generation_config(tmp_path):
    from fuel.models.hf_folder import HFModelFolder

    folder = _folder(tmp_path, {"vocab_size": 30, "eos_token_id": [3, 4]}, None, [])
    assert HFModelFolder(folder).end_token_ids() == (3, 4)


def test_a_generation_ends_at_any_stop_token():
    from fuel.models.generation import Generation
    from fuel.models.sampling import Sampler, SamplingConfig

    for stop in (4, 9):
        generation = Generation(np.array([1, 2]), 10, Sampler(SamplingConfig()), {4, 9})
        generation.pending_ids()
        for token in (6, stop, 7):
            logits = np.zeros(12, np.float32)
            logits[token] = 1.0
            generation.advance(logits)
            if generation.finished:
                break
        assert generation.tokens == [6, stop]
        assert generation.finish_reason == "stop"
