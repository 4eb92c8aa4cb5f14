"""Speculative decoding in `sluice serve` (issue 5, serving part): a request served with --spec
(the depth policy sizing each window) has the token_sha of the same request served without
drafting -- by the per-request switch `"speculative": false` and by a server started without
--spec -- greedy and sampled with a seed; the request's drafting statistics are in
usage.sluice (OpenAI's usage fields untouched); with n > 1, usage.prompt_tokens_details.cached_tokens
counts the prompt tokens no choice had to compute. The default model (the shipped MoE)."""
import importlib.util
import json
import pathlib

import pytest

# conftest's start_server, loaded by path: "conftest" names tests/conftest.py as well.
_spec = importlib.util.spec_from_file_location("server_conftest", pathlib.Path(__file__).with_name("conftest.py"))
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
start_server = _conftest.start_server

# A module followed by the start of the same module again: prompt lookup finds long matches.
_MODULE = '''import os
import sys


def read_config(path):
    """Read a JSON configuration file and return a dict."""
    with open(path) as f:
        return json.load(f)


def write_config(path, config):
    """Write a dict to a JSON configuration file."""
    with open(path, "w") as f:
        json.dump(config, f)
'''
PROMPT = _MODULE + "\n\n# The same module again:\n" + _MODULE[:200]

REQUESTS = [
    {"prompt": PROMPT, "max_tokens": 48, "temperature": 0},
    {"prompt": PROMPT, "max_tokens": 48, "temperature": 0.8, "top_p": 0.95, "seed": 1234},
    {"prompt": "The quick brown fox", "max_tokens": 32, "temperature": 0.7, "seed": 99},
]


@pytest.fixture(scope="module")
def spec_server(sluice_bin):
    server = start_server(sluice_bin, "--spec", name="spec_server")
    yield server
    assert server.stop() == 0, server.log_tail()


@pytest.fixture(scope="module")
def plain_server(sluice_bin):
    server = start_server(sluice_bin, name="plain_server")
    yield server
    assert server.stop() == 0, server.log_tail()


def complete(server, body):
    status, reply = server.post_json("/v1/completions", body)
    assert status == 200, reply
    return reply


def check_usage(reply):
    """OpenAI's usage fields as OpenAI sends them, plus sluice's extension object."""
    u = reply["usage"]
    assert isinstance(u["prompt_tokens"], int) and isinstance(u["completion_tokens"], int)
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"]
    assert 0 <= u["prompt_tokens_details"]["cached_tokens"] <= u["prompt_tokens"]
    s = u["sluice"]
    assert s["token_sha"] == reply["sluice"]["token_sha"]
    assert s["token_shas"][0] == s["token_sha"]
    steps = s["verify_steps"]
    rows = s["rows_per_verify"]
    assert steps >= 1 and 1 <= rows["min"] <= rows["mean"] <= rows["max"] <= 16
    # Every window is the pending row plus its drafts; it commits what it accepted plus one.
    assert rows["mean"] * steps == pytest.approx(steps + s["drafts_proposed"])
    assert s["accepted_per_step"] == pytest.approx(u["completion_tokens"] / steps)
    assert 0 <= s["drafts_accepted"] <= s["drafts_proposed"]
    if s["drafts_proposed"]:
        assert s["acceptance"] == pytest.approx(s["drafts_accepted"] / s["drafts_proposed"])
    return s


@pytest.mark.parametrize("body", REQUESTS, ids=["greedy", "sampled", "sampled-short"])
def test_drafted_request_equals_the_same_request_without_drafting(spec_server, body):
    drafted = complete(spec_server, {**body, "speculative": True})
    serial = complete(spec_server, {**body, "speculative": False})
    d, s = check_usage(drafted), check_usage(serial)
    assert d["token_sha"] == s["token_sha"]
    assert drafted["choices"][0]["text"] == serial["choices"][0]["text"]
    assert drafted["usage"]["completion_tokens"] == serial["usage"]["completion_tokens"]
    assert d["speculative"] is True and s["speculative"] is False
    assert s["drafts_proposed"] == 0 and s["rows_per_verify"]["max"] == 1 and s["accepted_per_step"] <= 1.0
    assert drafted["sluice"]["spec"]["drafter"] == "ngram" and serial["sluice"]["spec"]["drafter"] == "none"


def test_drafting_goes_through_the_depth_policy(spec_server):
    reply = complete(spec_server, {**REQUESTS[0], "speculative": True})
    s = check_usage(reply)
    # Every window after the first asked the drafter; the depth policy either put drafts in it
    # or ran it without (counted). Which of the two it chose depends on the window costs
    # measured on this machine; the tokens do not (the tests above).
    assert s["drafts_proposed"] + s["windows_drafting_off"] > 0, s
    assert s["windows_drafting_off"] < s["verify_steps"]
    assert s["accepted_per_step"] >= 1.0


def test_spec_server_equals_a_server_without_spec(spec_server, plain_server):
    for body in REQUESTS:
        a = check_usage(complete(spec_server, body))
        b = check_usage(complete(plain_server, body))
        assert a["token_sha"] == b["token_sha"], body
        assert b["speculative"] is False and b["drafts_proposed"] == 0
    # On a server without --spec the switch changes nothing: there is no drafter to turn on.
    on = check_usage(complete(plain_server, {**REQUESTS[0], "speculative": True}))
    assert on["speculative"] is False


def test_chat_and_streaming_carry_usage_sluice(spec_server):
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 24, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    status, headers, payload = spec_server.request("POST", "/v1/chat/completions", body=body)
    assert status == 200, payload
    events = [json.loads(line[6:]) for line in payload.decode().splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    usage = [e for e in events if e.get("usage")]
    assert len(usage) == 1
    s = usage[0]["usage"]["sluice"]
    assert s["speculative"] is True and s["verify_steps"] >= 1
    # The same request whole, drafting off: the same tokens.
    whole = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    status, reply = spec_server.post_json("/v1/chat/completions", {**whole, "speculative": False})
    assert status == 200, reply
    assert check_usage(reply)["token_sha"] == s["token_sha"]


def test_speculative_must_be_a_boolean(spec_server):
    status, reply = spec_server.post_json("/v1/completions", {"prompt": "x", "speculative": "no"})
    assert status == 400
    assert reply["error"]["param"] == "speculative"


def test_n_choices_report_the_prompt_tokens_no_choice_computed(spec_server):
    prompt = PROMPT + "\n# a prompt of its own for the cache test\n"
    # Fresh: choices submitted together all compute the prompt.
    fresh = complete(spec_server, {"prompt": prompt, "max_tokens": 4, "temperature": 0, "n": 3})
    hits = ["E5" in c["sluice"]["exact"] for c in fresh["choices"]]
    if not all(hits):
        assert fresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # Again: every choice restores the prompt (all but its last token) from the prefix cache.
    again = complete(spec_server, {"prompt": prompt, "max_tokens": 4, "temperature": 0, "n": 3})
    assert all("E5" in c["sluice"]["exact"] for c in again["choices"])
    u = again["usage"]
    assert u["prompt_tokens"] == fresh["usage"]["prompt_tokens"]
    assert u["prompt_tokens_details"]["cached_tokens"] == u["prompt_tokens"] - 1
    assert len(u["sluice"]["token_shas"]) == 3
    # Greedy: three equal choices, equal to the fresh ones.
    assert len(set(u["sluice"]["token_shas"])) == 1
    assert u["sluice"]["token_shas"] == fresh["usage"]["sluice"]["token_shas"]


def test_openapi_documents_the_extensions(spec_server):
    status, _, payload = spec_server.get("/openapi.json")
    assert status == 200
    doc = json.loads(payload)
    schemas = doc["components"]["schemas"]
    for req in ("ChatRequest", "CompletionRequest"):
        spec = schemas[req]["properties"]["speculative"]
        assert "boolean" in (spec["type"] if isinstance(spec["type"], list) else [spec["type"]])
        assert "token_sha" in spec["description"]
    usage = schemas["Usage"]["properties"]
    assert usage["sluice"] == {"$ref": "#/components/schemas/UsageSluice"}
    props = schemas["UsageSluice"]["properties"]
    for key in ("token_sha", "rows_per_verify", "accepted_per_step", "acceptance", "windows_drafting_off"):
        assert key in props
