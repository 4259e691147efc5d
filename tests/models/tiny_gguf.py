"""Writes tiny random Llama GGUF files (a few KB) for fast loader, cache and bad-input tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class TinyLlama:
    """Hyper-parameters and tensor types of a tiny Llama written to GGUF."""

    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 96
    context: int = 48
    rope_base: float = 10000.0
    matrix_type: str = "Q4_1"
    embedding_type: str = "F16"
    tied: bool = False
    architecture: str = "llama"
    tokenizer_model: str = "gpt2"
    extra_tensors: dict = field(default_factory=dict)  # name -> (array, GGUF type name)
    chat_template: str | None = None  # written as tokenizer.chat_template when given
    eos: bool = True  # False writes no EOS token: generation then never stops early
    # per-tensor types by the name's last two parts ("attn_v.weight": "Q8_0"), as mixed
    # files (Q4_K_M) have them
    type_overrides: dict = field(default_factory=dict)


# A ChatML template in the style of SmolLM2's (test data for the chat and serving tests).
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are tiny.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def byte_tokens() -> list[str]:
    """GPT-2's byte alphabet, one token per byte (the fixture's vocabulary starts with it)."""
    from fuel.models.tokenizer import _byte_alphabet

    alphabet = _byte_alphabet()
    return [alphabet[b] for b in range(256)]


SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a"]
MERGED = ["Ġt", "he", "Ġthe", "in", "Ġa"]


def _permute_for_gguf(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's interleaving of q/k rows (what its HF -> GGUF converter writes)."""
    return (weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


def write_tiny_llama(path: Path, spec: TinyLlama | None = None, seed: int = 0) -> Path:
    """Write a random tiny Llama (and its byte-level vocabulary) to ``path``."""
    import gguf

    spec = spec or TinyLlama()
    rng = np.random.default_rng(seed)
    tokens = SPECIAL + byte_tokens() + MERGED
    vocab = len(tokens)
    head_dim = spec.hidden // spec.heads
    writer = gguf.GGUFWriter(str(path), spec.architecture)
    arch = spec.architecture
    writer.add_block_count(spec.layers)
    writer.add_context_length(spec.context)
    writer.add_embedding_length(spec.hidden)
    writer.add_feed_forward_length(spec.ffn)
    writer.add_head_count(spec.heads)
    writer.add_head_count_kv(spec.kv_heads)
    writer.add_rope_freq_base(spec.rope_base)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_uint32(f"{arch}.vocab_size", vocab)
    writer.add_tokenizer_model(spec.tokenizer_model)
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_merges(MERGES)
    writer.add_token_types([3] * len(SPECIAL) + [1] * (vocab - len(SPECIAL)))
    writer.add_bos_token_id(1)
    if spec.eos:
        writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    if spec.chat_template is not None:
        writer.add_chat_template(spec.chat_template)

    def add(name: str, array: np.ndarray, kind: str) -> None:
        kind = spec.type_overrides.get(name.split(".", 2)[-1], kind)
        qtype = gguf.GGMLQuantizationType[kind]
        array = array.astype(np.float32)
        if kind in ("F32", "F16"):
            writer.add_tensor(name, gguf.quants.quantize(array, qtype))
        else:
            writer.add_tensor(name, gguf.quants.quantize(array, qtype), raw_dtype=qtype)

    def matrix(rows: int, columns: int) -> np.ndarray:
        return rng.normal(0.0, 1.0 / np.sqrt(columns), (rows, columns))

    add("token_embd.weight", rng.normal(0.0, 1.0, (vocab, spec.hidden)), spec.embedding_type)
    add("output_norm.weight", 1.0 + 0.1 * rng.normal(size=spec.hidden), "F32")
    if not spec.tied:
        add("output.weight", matrix(vocab, spec.hidden), "Q8_0")
    kv = spec.kv_heads * head_dim
    for i in range(spec.layers):
        add(f"blk.{i}.attn_norm.weight", 1.0 + 0.1 * rng.normal(size=spec.hidden), "F32")
        add(f"blk.{i}.ffn_norm.weight", 1.0 + 0.1 * rng.normal(size=spec.hidden), "F32")
        add(f"blk.{i}.attn_q.weight",
            _permute_for_gguf(matrix(spec.hidden, spec.hidden), spec.heads), spec.matrix_type)
        add(f"blk.{i}.attn_k.weight", _permute_for_gguf(matrix(kv, spec.hidden), spec.kv_heads),
            spec.matrix_type)
        add(f"blk.{i}.attn_v.weight", matrix(kv, spec.hidden), spec.matrix_type)
        add(f"blk.{i}.attn_output.weight", matrix(spec.hidden, spec.hidden), spec.matrix_type)
        add(f"blk.{i}.ffn_gate.weight", matrix(spec.ffn, spec.hidden), spec.matrix_type)
        add(f"blk.{i}.ffn_up.weight", matrix(spec.ffn, spec.hidden), spec.matrix_type)
        add(f"blk.{i}.ffn_down.weight", matrix(spec.hidden, spec.ffn), spec.matrix_type)
    for name, (array, kind) in spec.extra_tensors.items():
        qtype = gguf.GGMLQuantizationType[kind]
        writer.add_tensor(name, array, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def assert_matches_the_cpu(path: Path, device):
    """The Llama GGUF at ``path`` on ``device`` gives the CPU backend's logits for a short
    prompt, and the same 8 greedy ids; returns the model on ``device``. Logits within 2e-4 of
    their span: quantized weights round the activations to 16-bit blocks on every device, and
    float summation order upstream may move a code by one step (max|x| / 32767 of its block)."""
    from fuel.models.llama import load_gguf

    on_cpu, on_device = load_gguf(path), load_gguf(path, device=device)
    ids = on_cpu.encode("the cat in the hat")
    expected = on_cpu.forward(ids, on_cpu.new_cache(32), all_logits=True)
    got = on_device.forward(ids, on_device.new_cache(32), all_logits=True)
    difference, span = float(np.abs(got - expected).max()), float(np.ptp(expected))
    print(f"max |logit difference| {difference:.2e} on a span of {span:.2f}")
    assert difference <= 2e-4 * span
    assert on_device.generate_ids(ids, 8) == on_cpu.generate_ids(ids, 8)
    return on_device
