"""Chat on a tiny GGUF carrying a ChatML template: the template comes from the file and renders
as jinja2 renders it for transformers; a ChatSession keeps its KV cache between turns (a
follow-up processes only its new tokens) and answers exactly as a fresh generation would."""

from __future__ import annotations

import pytest

from fuel import InvalidArgument


@pytest.fixture
def chat_model(tiny_gguf, tmp_path, monkeypatch):
    from fuel.models.llama import load_gguf
    from tests.models.tiny_gguf import CHATML_TEMPLATE

    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path / "cache"))
    return load_gguf(tiny_gguf(context=256, chat_template=CHATML_TEMPLATE))


def test_template_comes_from_the_file_and_survives_the_weight_cache(tiny_gguf, tmp_path,
                                                                     monkeypatch):
    import fuel.models.llama as llama
    from tests.models.tiny_gguf import CHATML_TEMPLATE

    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path / "cache"))
    path = tiny_gguf(chat_template=CHATML_TEMPLATE)
    assert llama.load_gguf(path).chat_template == CHATML_TEMPLATE  # quantized: from the file
    assert llama.load_gguf(path, dtype="float32").chat_template == CHATML_TEMPLATE
    monkeypatch.setattr(llama, "GGUFModelFile", None)  # a cached load never opens the GGUF
    model = llama.load_gguf(path, dtype="float32")
    messages = [{"role": "user", "content": "hi"}]
    assert model.apply_chat_template(messages) == (
        "<|im_start|>system\nYou are tiny.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\n")
    jinja2 = pytest.importorskip("jinja2")
    reference = jinja2.Environment(trim_blocks=True, lstrip_blocks=True).from_string(
        CHATML_TEMPLATE).render(messages=messages, add_generation_prompt=False)
    assert model.apply_chat_template(messages, add_generation_prompt=False) == reference
    assert model.encode_chat(messages)[:2] == [1, 3 + ord("s")]  # <|im_start|>, "s" as a byte


def test_a_model_without_a_template_says_so(tiny_gguf, tmp_path, monkeypatch):
    from fuel.models.chat import ChatSession, ChatTemplateError
    from fuel.models.llama import load_gguf

    monkeypatch.setenv("FUEL_CACHE_DIR", str(tmp_path / "cache"))
    model = load_gguf(tiny_gguf())
    with pytest.raises(ChatTemplateError, match="no chat template"):
        ChatSession(model)
    with pytest.raises(ChatTemplateError, match="tokenizer.chat_template"):
        model.apply_chat_template([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("messages, problem", [
    ([], "non-empty"), ([{"role": "wizard", "content": "x"}], "role"),
    ([{"role": "user", "content": 5}], "content"), (["hello"], "messages\\[0\\]"),
])
def test_bad_messages_are_named(chat_model, messages, problem):
    with pytest.raises(InvalidArgument, match=problem):
        chat_model.apply_chat_template(messages)


def test_follow_up_turns_reuse_the_cache_and_match_fresh_generation(chat_model):
    from fuel.models.chat import ChatSession

    session = ChatSession(chat_model, system="be brief")
    first = "".join(session.send("the cat", 12))
    stats = chat_model.last_stats
    assert stats.cached_tokens == 0
    ended_at_eos = stats.finish_reason == "stop"
    held = len(session.cached_ids)
    assert held == stats.prompt_tokens + stats.new_tokens - 1
    second = "".join(session.send("in the hat", 12))
    stats = chat_model.last_stats
    assert stats.cached_tokens == held  # only the new turn's tokens were processed
    new_turn = chat_model.tokenizer.encode(
        "<|im_end|>\n<|im_start|>user\nin the hat<|im_end|>\n<|im_start|>assistant\n",
        add_special_tokens=False).ids
    # the new turn's tokens, and the last answer token when it was not EOS (sampled, never run)
    assert stats.prompt_tokens - stats.cached_tokens == len(new_turn) + (not ended_at_eos)
    # the same ids from scratch (no cache) give the same answer
    ids = session.cached_ids[:stats.prompt_tokens]
    fresh = chat_model.stream_text(iter(chat_model.generate_ids(ids, 12)))
    assert "".join(fresh) == second
    assert session.messages[1:] == [
        {"role": "user", "content": "the cat"}, {"role": "assistant", "content": first},
        {"role": "user", "content": "in the hat"}, {"role": "assistant", "content": second}]


def test_a_growing_conversation_moves_to_a_larger_cache(chat_model, monkeypatch):
    import fuel.models.llama as llama
    from fuel.models.chat import ChatSession

    monkeypatch.setattr(llama, "CACHE_BUCKET", 32)
    session = ChatSession(chat_model)
    "".join(session.send("the cat", 4))
    small = session.cache.capacity
    held = len(session.cached_ids)
    answer = "".join(session.send("in the hat " * 4, 8))
    assert session.cache.capacity > small
    assert chat_model.last_stats.cached_tokens == held
    ids = session.cached_ids[:chat_model.last_stats.prompt_tokens]
    assert "".join(chat_model.stream_text(iter(chat_model.generate_ids(ids, 8)))) == answer
