"""Every decoder family on tiny random models: the GGUF file (as llama.cpp's converter writes
it) and the Hugging Face folder, loaded by fuel, give transformers' logits (float32 weights:
within 1e-4 of the logits' span, summation order only) and its greedy continuation; a Q8_0
GGUF stays within 2e-2 of the span. Where transformers reads the family's GGUF itself, its
reading agrees with the model the file was written from (the writer's conventions)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.models.tiny_families import (
    FAMILY_CONFIGS,
    TRANSFORMERS_GGUF,
    save_folder,
    tiny_model,
    write_gguf,
)

PROMPT = "the cat in the hat sat in the hat"


def _reference(model, torch, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].numpy()
        greedy = model.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False,
                                pad_token_id=0)[0, len(ids):].tolist()
    if 2 in greedy:  # transformers stops at EOS too, and keeps it
        greedy = greedy[:greedy.index(2) + 1]
    return logits, greedy


def _check(ours, ids, expected, greedy, tolerance):
    logits = ours.forward(ids, ours.new_cache(48), all_logits=True)
    span = float(np.ptp(expected))
    difference = float(np.abs(logits - expected).max())
    print(f"max |logit difference| {difference:.2e} on a span of {span:.2f}")
    assert difference <= tolerance * span
    if tolerance <= 1e-4:
        assert ours.generate_ids(ids, 6) == greedy


@pytest.mark.parametrize("family", list(FAMILY_CONFIGS))
def test_family_matches_transformers(family, oracle, tmp_path, cache_dir, capsys):
    from fuel.models.llama import load_gguf

    torch, transformers = oracle
    model = tiny_model(family)
    name = family.replace("/", "-")
    path = write_gguf(model, family, tmp_path / f"{name}.gguf")
    ours = load_gguf(path, dtype="float32", use_cache=False)
    ids = ours.encode(PROMPT)
    expected, greedy = _reference(model, torch, ids)
    _check(ours, ids, expected, greedy, 1e-4)
    folder = save_folder(model, tmp_path / "hf")
    _check(load_gguf(folder), ids, expected, greedy, 1e-4)
    if family == "llama":  # the command line takes the folder too
        from fuel.cli import main

        capsys.readouterr()
        assert main(["generate", PROMPT, "--model", str(folder), "--max-new-tokens", "6"]) == 0
        assert capsys.readouterr().out == PROMPT + ours.decode(greedy) + "\n"
    quantized = write_gguf(model, family, tmp_path / f"{name}-q8.gguf", "Q8_0")
    _check(load_gguf(quantized), ids, expected, greedy, 2e-2)
    if family in TRANSFORMERS_GGUF:
        theirs = transformers.AutoModelForCausalLM.from_pretrained(
            str(tmp_path), gguf_file=path.name).eval()
        with torch.no_grad():
            read = theirs(torch.tensor([ids])).logits[0].numpy()
        assert np.abs(read - expected).max() <= 1e-4 * float(np.ptp(expected))


def test_unsupported_family_lists_the_supported_ones(tiny_gguf, cache_dir):
    from fuel.models import ModelFormatError
    from fuel.models.families import FAMILIES
    from fuel.models.llama import load_gguf

    path = tiny_gguf(architecture="mamba")
    with pytest.raises(ModelFormatError, match="holds a 'mamba' model; fuel runs these "
                                               "families: " + ", ".join(FAMILIES)):
        load_gguf(path)


def test_bfloat16_folder_matches_transformers(oracle, tmp_path, cache_dir):
    """A folder saved in bfloat16 (as most published ones are) is read as its values."""
    from fuel.models.llama import load_gguf

    torch, _ = oracle
    model = tiny_model("qwen2").to(torch.bfloat16)
    folder = save_folder(model, tmp_path / "hf")
    model = model.to(torch.float32)  # the same (rounded) values, computed in float32
    ours = load_gguf(folder)
    ids = ours.encode(PROMPT)
    expected, greedy = _reference(model, torch, ids)
    _check(ours, ids, expected, greedy, 1e-4)


def test_sliding_window_steps_match_a_whole_forward(oracle, tmp_path, cache_dir):
    """Gemma 3 (sliding and global layers, two rope bases) stepped one token at a time past
    the window gives the logits of one forward over the whole sequence; the serving engine,
    whose paged step has no sliding window yet, refuses the model with the reason."""
    import fuel
    from fuel.models.llama import load_gguf
    from fuel.serve.engine import Engine

    model = load_gguf(write_gguf(tiny_model("gemma3"), "gemma3", tmp_path / "g.gguf"))
    prompt = model.encode("the cat in the hat")
    tokens = [5 + step for step in range(6)]
    stepped = model.new_cache(64)
    model.forward(prompt, stepped)
    rows = np.stack([model.forward([t], stepped)[-1] for t in tokens])
    whole = np.stack([model.forward(prompt + tokens[:k + 1], model.new_cache(64))[-1]
                      for k in range(len(tokens))])
    np.testing.assert_allclose(rows, whole, rtol=0, atol=1e-4)
    with pytest.raises(fuel.InvalidArgument, match="sliding-window layers"):
        Engine(model)
