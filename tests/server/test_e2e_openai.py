"""`sluice serve` through the official `openai` Python client: chat and completions, streamed
and not, tools, stop strings, logprobs, n > 1 and errors. The client parses every reply into its
own typed models, so a field of the wrong shape fails here the way it would fail a user.

Greedy replies are compared across the ways of asking (streamed = not streamed, same token_sha);
sampled replies are compared across repeats with the same seed (E4: a function of the seed alone).
"""
import json
import pathlib
import re

import pytest

from conftest import start_server

try:
    import openai
except ImportError:  # CI installs it; a developer without it gets the install line
    openai = None

HEX64 = re.compile(r"^[0-9a-f]{64}$")
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
COUNTING = [{"role": "user", "content": "Count from 1 to 30, separated by commas."}]


@pytest.fixture(scope="module")
def client(sluice_server):
    if openai is None:
        pytest.fail("the openai package is not installed: pip install openai (CI installs it)")
    # No --api-key on the server: the client still needs a key, which the server ignores.
    return openai.OpenAI(base_url=sluice_server.base_url + "/v1", api_key="sk-unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(sluice_server):
    return sluice_server.model_id()


def check_sluice_record(record):
    """The exactness record every reply carries: token_sha, the guarantees held, spec telemetry."""
    assert isinstance(record, dict), record
    assert HEX64.match(record["token_sha"]), record
    assert isinstance(record["exact"], list) and set(record["exact"]) <= {"E1", "E2", "E3", "E4", "E5"}, record
    spec = record["spec"]
    for key in ("drafter", "verify_steps", "rows_min", "rows_mean", "tokens_per_step", "acceptance"):
        assert key in spec, (key, spec)
    assert 0.0 <= spec["acceptance"] <= 1.0, spec


def check_usage(usage, max_completion=None):
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens >= 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details is not None
    assert 0 <= usage.prompt_tokens_details.cached_tokens <= usage.prompt_tokens
    if max_completion is not None:
        assert usage.completion_tokens <= max_completion


def test_models_are_listed(client, model):
    models = client.models.list()
    ids = [m.id for m in models.data]
    assert model in ids
    assert all(m.object == "model" for m in models.data)
    assert client.models.retrieve(model).id == model
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_chat_reply_is_well_formed(client, model):
    r = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=16, temperature=0)
    assert r.object == "chat.completion"
    assert r.id and isinstance(r.created, int)
    assert len(r.choices) == 1
    choice = r.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    check_usage(r.usage, 16)
    check_sluice_record(r.model_extra["sluice"])


def collect_chat_stream(stream):
    """Joins a chat stream; checks OpenAI's framing: role first, finish_reason last, usage after."""
    chunks = list(stream)
    assert chunks, "empty stream"
    choice_chunks = [c for c in chunks if c.choices]
    assert choice_chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in choice_chunks]
    assert finishes[-1] in ("stop", "length", "tool_calls"), finishes
    assert all(f is None for f in finishes[:-1]), finishes
    assert len({c.id for c in chunks}) == 1, "chunks of one reply carry different ids"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in choice_chunks)
    records = [c.model_extra["sluice"] for c in chunks if c.model_extra and "sluice" in c.model_extra]
    assert records, "no chunk carries the sluice record"
    return chunks, text, finishes[-1], records[-1]


def test_chat_stream_equals_the_unstreamed_reply(client, model):
    plain = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=24, temperature=0)
    stream = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=24, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks, text, finish, record = collect_chat_stream(stream)
    # With include_usage the last chunk has empty choices and the usage.
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    check_usage(chunks[-1].usage, 24)
    check_sluice_record(record)
    assert text == plain.choices[0].message.content
    assert finish == plain.choices[0].finish_reason
    assert record["token_sha"] == plain.model_extra["sluice"]["token_sha"]
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_stream_without_include_usage_sends_no_usage_chunk(client, model):
    stream = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=8, temperature=0, stream=True)
    chunks = list(stream)
    assert all(c.choices for c in chunks), "a chunk with empty choices was sent without include_usage"


def test_completion_reply_and_stream_agree(client, model):
    prompt = "The three primary colours are"
    plain = client.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0)
    assert plain.object == "text_completion"
    assert len(plain.choices) == 1 and plain.choices[0].index == 0
    assert plain.choices[0].finish_reason in ("stop", "length")
    check_usage(plain.usage, 16)
    check_sluice_record(plain.model_extra["sluice"])

    stream = client.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0,
                                       stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    choice_chunks = [c for c in chunks if c.choices]
    text = "".join(c.choices[0].text for c in choice_chunks)
    assert text == plain.choices[0].text
    assert choice_chunks[-1].choices[0].finish_reason == plain.choices[0].finish_reason
    records = [c.model_extra["sluice"] for c in chunks if c.model_extra and "sluice" in c.model_extra]
    assert records and records[-1]["token_sha"] == plain.model_extra["sluice"]["token_sha"]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_seeded_sampling_repeats_and_depends_on_the_seed(client, model):
    def ask(seed):
        r = client.chat.completions.create(model=model, messages=COUNTING, max_tokens=16, temperature=1.0,
                                           top_p=1.0, seed=seed)
        return r.model_extra["sluice"]["token_sha"], r.choices[0].message.content

    first = ask(1234)
    assert ask(1234) == first
    # Three other seeds at temperature 1 over 16 tokens: at least one differs from seed 1234.
    assert any(ask(seed)[0] != first[0] for seed in (1, 2, 3))


def test_max_tokens_ends_with_length(client, model):
    r = client.chat.completions.create(model=model, messages=COUNTING, max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 3
    r = client.chat.completions.create(model=model, messages=COUNTING, max_completion_tokens=5, temperature=0)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 5


def test_stop_string_cuts_the_reply_streamed_or_not(client, model):
    full = client.chat.completions.create(model=model, messages=COUNTING, max_tokens=40, temperature=0)
    text = full.choices[0].message.content
    # A stop string taken from the middle of the greedy reply: the reply must end just before it.
    assert len(text) >= 12, text
    stop = text[6:9]
    expected = text[: text.index(stop)]
    cut = client.chat.completions.create(model=model, messages=COUNTING, max_tokens=40, temperature=0, stop=[stop])
    assert cut.choices[0].message.content == expected
    assert cut.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(model=model, messages=COUNTING, max_tokens=40, temperature=0,
                                            stop=stop, stream=True)
    _, streamed, finish, _ = collect_chat_stream(stream)
    assert streamed == expected and finish == "stop"


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
WEATHER_QUESTION = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def check_tool_calls(calls):
    for call in calls or []:
        assert call.id and call.type == "function"
        assert call.function.name == "get_weather"
        assert isinstance(json.loads(call.function.arguments), dict)


@pytest.fixture(scope="module")
def tools_client(sluice_bin):
    """A server whose chat template renders tools: the shipped model's ChatML has none, and a
    template that cannot show the tools is refused (below). Qwen3's template, as users pass one
    to vLLM (--chat-template) or llama.cpp (--chat-template-file)."""
    template = pathlib.Path(__file__).resolve().parent / "templates" / "Qwen-Qwen3-0.6B.jinja"
    server = start_server(sluice_bin, "--chat-template", str(template), name="e2e_tools_server")
    yield openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-unused", max_retries=0, timeout=120)
    assert server.stop() == 0, server.log_tail()


def test_tools_the_template_cannot_show_are_refused(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=WEATHER_QUESTION, tools=[WEATHER_TOOL], max_tokens=4)
    assert e.value.body["param"] == "tools" and "chat template" in e.value.body["message"], e.value.body


def test_tools_request_is_accepted_and_well_formed(tools_client, model):
    client = tools_client
    # The small model may or may not call the tool; either way the reply must be well formed.
    r = client.chat.completions.create(model=model, messages=WEATHER_QUESTION, tools=[WEATHER_TOOL],
                                       tool_choice="auto", max_tokens=48, temperature=0)
    choice = r.choices[0]
    assert choice.finish_reason in ("stop", "length", "tool_calls")
    if choice.finish_reason == "tool_calls":
        assert choice.message.tool_calls
    check_tool_calls(choice.message.tool_calls)
    assert choice.message.content is not None or choice.message.tool_calls
    check_sluice_record(r.model_extra["sluice"])

    # Streamed: the same tokens, and tool-call deltas (if any) join into the same calls.
    stream = client.chat.completions.create(model=model, messages=WEATHER_QUESTION, tools=[WEATHER_TOOL],
                                            tool_choice="auto", max_tokens=48, temperature=0, stream=True)
    chunks, text, finish, record = collect_chat_stream(stream)
    assert record["token_sha"] == r.model_extra["sluice"]["token_sha"]
    assert finish == choice.finish_reason
    assert text == (choice.message.content or "")
    joined = {}
    for c in chunks:
        for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            entry = joined.setdefault(d.index, {"name": "", "arguments": ""})
            if d.function and d.function.name:
                entry["name"] += d.function.name
            if d.function and d.function.arguments:
                entry["arguments"] += d.function.arguments
    expected = [{"name": t.function.name, "arguments": t.function.arguments} for t in choice.message.tool_calls or []]
    assert [joined[i] for i in sorted(joined)] == expected


def test_conversation_with_a_tool_result_is_accepted(tools_client, model):
    client = tools_client
    messages = WEATHER_QUESTION + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 18, "unit": "celsius"}'},
    ]
    r = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER_TOOL], max_tokens=24, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    check_tool_calls(r.choices[0].message.tool_calls)


def test_logprobs_in_openai_format(client, model):
    r = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=6, temperature=0,
                                       logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for entry in content:
        assert entry.logprob <= 0.0
        assert len(entry.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert entry.logprob == pytest.approx(max(t.logprob for t in entry.top_logprobs), abs=1e-5)
        assert entry.bytes == list(entry.token.encode("utf-8")) or entry.bytes is None or "\ufffd" in entry.token
    c = client.completions.create(model=model, prompt="Paris is", max_tokens=4, temperature=0, logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset)
    assert all(x <= 0.0 for x in lp.token_logprobs)
    # The sampled token is always among them (up to logprobs + 1 entries), as OpenAI sends them.
    assert all(tok in top and len(top) <= 3 for tok, top in zip(lp.tokens, lp.top_logprobs)), lp


def test_n_choices_are_indexed_and_seeded(client, model):
    r = client.chat.completions.create(model=model, messages=COUNTING, max_tokens=8, temperature=1.0, seed=42, n=2)
    assert [c.index for c in r.choices] == [0, 1]
    assert all(c.message.content is not None for c in r.choices)
    again = client.chat.completions.create(model=model, messages=COUNTING, max_tokens=8, temperature=1.0, seed=42, n=2)
    assert [c.message.content for c in again.choices] == [c.message.content for c in r.choices]
    assert r.usage.completion_tokens <= 16


def test_bad_requests_get_openai_errors(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=QUESTION, max_tokens=-5)
    assert e.value.status_code == 400
    assert e.value.body and e.value.body.get("message"), e.value.body
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=QUESTION, temperature="hot")
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=QUESTION, response_format={"type": "json_object"})
    # The server still answers after refusing them.
    r = client.chat.completions.create(model=model, messages=QUESTION, max_tokens=2, temperature=0)
    assert r.choices[0].message.role == "assistant"
