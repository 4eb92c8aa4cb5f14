"""The wire format as curl sees it: SSE framing of streamed replies byte for byte (OpenAI's:
`data: {json}` events separated by a blank line, the role chunk first, finish_reason on the last
choice chunk, the usage chunk with empty choices, then `data: [DONE]`), events that arrive while
the model generates rather than all at the end, JSON replies and errors, /metrics as Prometheus
text, and a client that hangs up mid-stream: its request stops decoding and the next request gets
the reply it would have got anyway.
"""
import json
import re
import shutil
import subprocess
import time

import pytest

COUNTING = [{"role": "user", "content": "Count from 1 to 50, separated by commas."}]
COUNT_PROMPT = "1, 2, 3, 4, 5,"


@pytest.fixture(scope="module")
def curl():
    path = shutil.which("curl")
    if not path:
        pytest.fail("curl is not installed (apt-get install curl)")
    return path


def curl_stream(curl, url, body, timeout=120):
    """POSTs with curl -N; returns (response headers text, [(arrival time, line)] of the body)."""
    cmd = [curl, "-sS", "-N", "-D", "/dev/stderr", "-H", "Content-Type: application/json",
           "--data-binary", json.dumps(body), "--max-time", str(timeout), url]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = []
    for raw in iter(proc.stdout.readline, b""):
        lines.append((time.monotonic(), raw.decode("utf-8")))
    headers = proc.stderr.read().decode("latin-1")
    assert proc.wait() == 0, headers
    return headers, lines


def parse_sse(lines):
    """Checks the framing and returns the JSON payloads (without [DONE])."""
    text = "".join(line for _, line in lines)
    assert text.endswith("data: [DONE]\n\n"), repr(text[-200:])
    events = text[: -len("\n\n")].split("\n\n")
    assert events[-1] == "data: [DONE]"
    payloads = []
    for ev in events[:-1]:
        assert ev.startswith("data: ") and "\n" not in ev, f"not one data line: {ev!r}"
        payloads.append(json.loads(ev[len("data: "):]))
    return payloads


def content_arrivals(lines, key):
    """Arrival times of the events that carry generated text (delta.content or text)."""
    times = []
    for t, line in lines:
        if line.startswith("data: {"):
            for choice in json.loads(line[len("data: "):]).get("choices") or []:
                if (choice.get("delta") or {}).get(key) or choice.get(key):
                    times.append(t)
    return times


def test_chat_stream_is_framed_as_openai_sse(sluice_server, curl):
    headers, lines = curl_stream(curl, sluice_server.base_url + "/v1/chat/completions", {
        "messages": COUNTING, "max_tokens": 48, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True}})
    assert re.search(r"^HTTP/1\.1 200", headers, re.M), headers
    assert re.search(r"^content-type: text/event-stream", headers, re.M | re.I), headers
    chunks = parse_sse(lines)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    choice_chunks = [c for c in chunks if c["choices"]]
    first = choice_chunks[0]["choices"][0]
    assert first["delta"].get("role") == "assistant" and first["index"] == 0
    finishes = [c["choices"][0]["finish_reason"] for c in choice_chunks]
    assert finishes[-1] in ("stop", "length") and all(f is None for f in finishes[:-1]), finishes
    # The usage chunk: empty choices, last before [DONE], and it counts what was generated (a
    # model may end its turn at once: the framing is what is tested here).
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and 0 <= usage_chunk["usage"]["completion_tokens"] <= 48
    assert [c for c in chunks if c.get("usage")] == [usage_chunk]
    # The exactness record is in the last chunk.
    record = usage_chunk.get("sluice")
    assert record and re.fullmatch(r"[0-9a-f]{64}", record["token_sha"]), usage_chunk


def test_completion_stream_arrives_as_it_is_generated(sluice_server, curl):
    # A counting prompt runs to max_tokens with any model that has learned to count.
    headers, lines = curl_stream(curl, sluice_server.base_url + "/v1/completions", {
        "prompt": COUNT_PROMPT, "max_tokens": 64, "temperature": 0, "stream": True})
    assert re.search(r"^content-type: text/event-stream", headers, re.M | re.I), headers
    chunks = parse_sse(lines)
    assert chunks and all(c["object"] == "text_completion" for c in chunks)
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] in ("stop", "length") and all(f is None for f in finishes[:-1]), finishes
    assert all(c.get("usage") is None for c in chunks), "usage sent without stream_options.include_usage"
    record = chunks[-1].get("sluice")
    assert record, chunks[-1]
    # Streamed, not buffered: the text events are spread over at least a quarter of the time
    # the server says decoding took (a server that buffers sends them all in one burst).
    arrivals = content_arrivals(lines, "text")
    steps = record["spec"]["verify_steps"]
    assert len(arrivals) >= 8, f"{len(arrivals)} text events for {steps} decode steps"
    decode_s = steps / record["decode_tok_s"]
    spread = arrivals[-1] - arrivals[0]
    assert spread >= 0.25 * decode_s, f"text events spread over {spread:.3f} s of a {decode_s:.3f} s decode"


def curl_json(curl, url, body=None):
    cmd = [curl, "-sS", "-i", "--max-time", "120", url]
    if body is not None:
        cmd[1:1] = ["-H", "Content-Type: application/json", "--data-binary", body if isinstance(body, str) else json.dumps(body)]
    out = subprocess.run(cmd, capture_output=True, check=True).stdout.decode("utf-8")
    head, _, payload = out.partition("\r\n\r\n")
    status = int(head.split()[1])
    return status, head, payload


def test_unstreamed_reply_and_errors_are_json(sluice_server, curl):
    url = sluice_server.base_url + "/v1/chat/completions"
    status, head, payload = curl_json(curl, url, {"messages": COUNTING, "max_tokens": 4, "temperature": 0})
    assert status == 200 and re.search(r"^content-type: application/json", head, re.M | re.I), head
    body = json.loads(payload)
    assert body["object"] == "chat.completion" and "token_sha" in body["sluice"]
    # A refused streaming request is a JSON error, not an event stream.
    status, head, payload = curl_json(curl, url, {"messages": COUNTING, "max_tokens": -1, "stream": True})
    assert status == 400 and re.search(r"^content-type: application/json", head, re.M | re.I), head
    err = json.loads(payload)["error"]
    assert err["message"] and err["type"] == "invalid_request_error"
    status, _, payload = curl_json(curl, url, '{"messages": [')
    assert status == 400 and json.loads(payload)["error"]["message"]


PROM_LINE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? '
                       r'[-+]?([0-9.]+([eE][-+]?[0-9]+)?|Inf|NaN)( [0-9]+)?$')


def test_metrics_are_prometheus_text(sluice_server, curl):
    status, head, payload = curl_json(curl, sluice_server.base_url + "/metrics")
    assert status == 200 and re.search(r"^content-type: text/plain", head, re.M | re.I), head
    samples = [line for line in payload.splitlines() if line and not line.startswith("#")]
    assert samples
    bad = [line for line in samples if not PROM_LINE.match(line)]
    assert not bad, bad
    assert any(line.startswith("sluice_") for line in samples)


def metric(server, name):
    status, _, payload = server.get("/metrics")
    assert status == 200
    for line in payload.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"/metrics has no {name}")


def test_client_hangup_mid_stream_is_cancelled_and_the_server_keeps_serving(sluice_server, curl):
    solo = sluice_server.post_json("/v1/completions", {"prompt": COUNT_PROMPT, "max_tokens": 6, "temperature": 0})
    assert solo[0] == 200
    # A 2000-token stream (seconds to minutes of decoding); curl is killed after its first event.
    generated_before = metric(sluice_server, "sluice_generated_tokens_total")
    cmd = [curl, "-sS", "-N", "--max-time", "120", "-H", "Content-Type: application/json", "--data-binary",
           json.dumps({"prompt": COUNT_PROMPT, "max_tokens": 2000, "temperature": 0, "stream": True}),
           sluice_server.base_url + "/v1/completions"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        first = proc.stdout.readline()
        assert first.startswith(b"data: {"), first
    finally:
        proc.kill()
        proc.wait()
    # The server notices the closed socket at its next write and ends the request within a
    # step: a second after the hang-up the token counter has stopped, far short of 2000.
    time.sleep(1.0)
    settled = metric(sluice_server, "sluice_generated_tokens_total")
    time.sleep(1.0)
    later = metric(sluice_server, "sluice_generated_tokens_total")
    assert later == settled, f"still decoding after the client left: {settled} -> {later} tokens"
    assert later - generated_before < 1000, f"{later - generated_before} tokens generated for a client that left"
    again = sluice_server.post_json("/v1/completions", {"prompt": COUNT_PROMPT, "max_tokens": 6, "temperature": 0})
    assert again[0] == 200
    assert again[1]["sluice"]["token_sha"] == solo[1]["sluice"]["token_sha"]
    assert sluice_server.get("/health")[0] == 200 and sluice_server.get("/ready")[0] == 200
