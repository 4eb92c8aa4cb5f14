"""`sluice serve` over real HTTP with the default model: every endpoint, OpenAI's JSON and SSE
framing, stop strings, errors, the queue bound, authentication, a client that disconnects, and
SIGTERM. Stdlib only (urllib / http.client); the openai-client, schemathesis, load and browser
tests are test_e2e_*.py.
"""
import http.client
import json
import os
import pathlib
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _log_dir() -> pathlib.Path:
    d = pathlib.Path(os.environ.get("SLUICE_BINARY_DIR", ROOT / "build" / "release")) / "test-output"
    d.mkdir(parents=True, exist_ok=True)
    return d


class Serve:
    """One `sluice serve` process on a free loopback port."""

    def __init__(self, sluice_bin, *args, name="http"):
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = _log_dir() / f"test_http_{name}.log"
        cmd = [str(sluice_bin), "serve", "--host", "127.0.0.1", "--port", str(self.port), "-t", "2", *args]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"sluice serve exited {self.proc.returncode}:\n{self.log()}"
            try:
                if self.get("/ready")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.proc.kill()
        pytest.fail(f"sluice serve not ready in 120 s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def request(self, method, path, body=None, headers=None, timeout=120):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if body is None or isinstance(body, (bytes, str)) else json.dumps(body)
            hdrs = {"Content-Type": "application/json", **(headers or {})}
            conn.request(method, path, body=data, headers=hdrs)
            r = conn.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        status, headers, payload = self.request("POST", path, body, **kw)
        return status, headers, json.loads(payload) if payload else None

    def stream(self, path, body, timeout=120):
        """POSTs with stream=true; returns (status, content-type, list of data payloads)."""
        status, headers, payload = self.request("POST", path, {**body, "stream": True}, timeout=timeout)
        events = [line[len("data: "):] for line in payload.decode().split("\n\n") if line.startswith("data: ")]
        return status, headers.get("content-type"), events

    def metric(self, name) -> float:
        text = self.get("/metrics")[2].decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not in /metrics:\n{text}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"no exit within 60 s of SIGTERM:\n{self.log()}")
        return self.proc.returncode


@pytest.fixture(scope="module")
def server(sluice_bin):
    s = Serve(sluice_bin, "--parallel", "4", "--queue", "16", name="main")
    yield s
    assert s.stop() == 0, s.log()


CHAT = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "temperature": 0, "max_tokens": 12}


def test_every_endpoint_answers(server):
    assert server.get("/health")[0] == 200
    status, _, body = server.get("/ready")
    assert status == 200 and json.loads(body)["status"] == "ready"
    status, _, body = server.get("/v1/models")
    models = json.loads(body)
    assert status == 200 and models["object"] == "list" and models["data"][0]["object"] == "model"
    status, headers, body = server.get("/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    assert b"sluice_ready 1" in body
    status, _, body = server.get("/openapi.json")
    doc = json.loads(body)
    assert status == 200 and doc["openapi"].startswith("3.")
    assert {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/ready", "/metrics"} <= set(doc["paths"])
    if (ROOT / "web" / "index.html").exists():
        status, headers, body = server.get("/")
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert body == (ROOT / "web" / "index.html").read_bytes()


def test_chat_reply_has_openai_shape_and_exactness(server):
    status, _, j = server.post("/v1/chat/completions", CHAT)
    assert status == 200, j
    assert j["object"] == "chat.completion" and j["id"].startswith("chatcmpl-")
    choice = j["choices"][0]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    assert choice["finish_reason"] in ("stop", "length")
    u = j["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and 0 < u["completion_tokens"] <= 12
    assert "cached_tokens" in u["prompt_tokens_details"]
    s = j["sluice"]
    assert len(s["token_sha"]) == 64 and int(s["token_sha"], 16) >= 0
    assert {"E1", "E2", "E4"} <= set(s["exact"])
    assert set(s["spec"]) == {"drafter", "verify_steps", "rows_min", "rows_mean", "tokens_per_step", "acceptance",
                              "acceptance_by_depth"}
    # Greedy twice, and sampled twice with one seed: the same tokens (E4).
    assert server.post("/v1/chat/completions", CHAT)[2]["sluice"]["token_sha"] == s["token_sha"]
    sampled = {**CHAT, "temperature": 0.9, "seed": 1234}
    a, b = (server.post("/v1/chat/completions", sampled)[2] for _ in range(2))
    assert a["sluice"]["token_sha"] == b["sluice"]["token_sha"]
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]


def test_chat_stream_framing_and_same_tokens_as_json(server):
    _, _, whole = server.post("/v1/chat/completions", CHAT)
    status, ctype, events = server.stream("/v1/chat/completions", {**CHAT, "stream_options": {"include_usage": True}})
    assert status == 200 and ctype.startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    finish = chunks[-2]
    assert finish["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert finish["sluice"]["token_sha"] == whole["sluice"]["token_sha"]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"] == whole["usage"]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    assert text == whole["choices"][0]["message"]["content"]


def test_completions_json_and_stream_agree(server):
    body = {"prompt": "The capital of France is", "temperature": 0, "max_tokens": 10}
    status, _, j = server.post("/v1/completions", body)
    assert status == 200 and j["object"] == "text_completion"
    status, _, events = server.stream("/v1/completions", body)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == j["choices"][0]["text"]
    assert chunks[-1]["sluice"]["token_sha"] == j["sluice"]["token_sha"]


def test_stop_string_is_cut_and_not_returned(server):
    body = {"prompt": "1, 2, 3, 4, 5,", "temperature": 0, "max_tokens": 24}
    full = server.post("/v1/completions", body)[2]["choices"][0]["text"]
    assert len(full) > 6, full
    stop = full[3:6]  # a stop string from the middle of the greedy reply
    want = full[: full.index(stop)]
    j = server.post("/v1/completions", {**body, "stop": [stop]})[2]
    assert j["choices"][0]["text"] == want and j["choices"][0]["finish_reason"] == "stop"
    _, _, events = server.stream("/v1/completions", {**body, "stop": stop})
    streamed = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
    assert streamed == want


def test_logprobs_in_openai_format(server):
    j = server.post("/v1/chat/completions", {**CHAT, "max_tokens": 4, "logprobs": True, "top_logprobs": 3})[2]
    content = j["choices"][0]["logprobs"]["content"]
    assert 0 < len(content) <= 4
    for e in content:
        assert set(e) >= {"token", "logprob", "bytes", "top_logprobs"} and e["logprob"] <= 0
        assert len(e["top_logprobs"]) == 3
        # Greedy: the chosen token is the most likely one.
        assert e["logprob"] == pytest.approx(e["top_logprobs"][0]["logprob"])
    c = server.post("/v1/completions", {"prompt": "Hello", "temperature": 0, "max_tokens": 3, "logprobs": 2})[2]
    lp = c["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(lp["text_offset"])
    assert lp["text_offset"][0] == len("Hello")


def test_n_choices(server):
    j = server.post("/v1/chat/completions", {**CHAT, "temperature": 1.0, "seed": 5, "n": 2, "max_tokens": 6})[2]
    assert [c["index"] for c in j["choices"]] == [0, 1]
    assert [c["sluice"]["seed"] for c in j["choices"]] == [5, 6]
    # Choice 1 is what seed 6 alone gives.
    alone = server.post("/v1/chat/completions", {**CHAT, "temperature": 1.0, "seed": 6, "max_tokens": 6})[2]
    assert alone["sluice"]["token_sha"] == j["choices"][1]["sluice"]["token_sha"]


@pytest.mark.parametrize(
    "path,body,param",
    [
        ("/v1/chat/completions", b"{not json", None),
        ("/v1/chat/completions", {"messages": "hi"}, "messages"),
        ("/v1/chat/completions", {**CHAT, "temperature": -1}, "temperature"),
        ("/v1/chat/completions", {**CHAT, "max_tokens": -5}, "max_tokens"),
        ("/v1/chat/completions", {**CHAT, "n": 10**30}, "n"),
        ("/v1/chat/completions", {**CHAT, "frobnicate": 1}, "frobnicate"),
        ("/v1/chat/completions", {**CHAT, "response_format": {"type": "json_object"}}, "response_format"),
        ("/v1/chat/completions", {**CHAT, "logit_bias": {"99999999": 1}}, "logit_bias"),
        ("/v1/completions", {"prompt": [0, 10**9]}, "prompt"),
        ("/v1/completions", {"prompt": "x", "echo": True}, "echo"),
    ],
)
def test_bad_requests_get_400_with_an_openai_error(server, path, body, param):
    status, _, j = server.post(path, body)
    assert status == 400, j
    assert set(j["error"]) == {"message", "type", "param", "code"}
    assert j["error"]["type"] == "invalid_request_error" and j["error"]["param"] == param


def test_prompt_longer_than_the_context_says_both_counts(server):
    n_ctx = json.loads(server.get("/v1/models")[2])["data"][0]["meta"]["n_ctx"]
    status, _, j = server.post("/v1/completions", {"prompt": "hello " * (n_ctx + 10)})
    assert status == 400 and j["error"]["code"] == "context_length_exceeded"
    assert str(n_ctx) in j["error"]["message"] and "tokens" in j["error"]["message"]


def test_a_client_that_disconnects_is_cancelled(server):
    # Bounded: a server that answers with an error, or stops writing, fails here instead of
    # leaving the loop waiting for events that never come.
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 1000, "stream": True, "temperature": 0.8,
                       "seed": 11}).encode()
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < 3:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the stream after {got[:2000]!r}"
        got += chunk
    sock.close()
    closed_at = server.metric("sluice_generated_tokens_total")
    # Generation stops within a step or two of the close: the token count stops growing long
    # before the 1000 tokens asked for (about 3 s of decoding here).
    time.sleep(1.0)
    settled = server.metric("sluice_generated_tokens_total")
    time.sleep(0.5)
    assert server.metric("sluice_generated_tokens_total") == settled
    assert settled - closed_at < 20, (closed_at, settled)


def test_metrics_count_requests_by_status(server):
    server.post("/v1/chat/completions", b"[")
    text = server.get("/metrics")[2].decode()
    assert 'sluice_requests_total{path="/v1/chat/completions",status="400"}' in text
    assert 'sluice_requests_total{path="/v1/chat/completions",status="200"}' in text
    assert "sluice_time_to_first_token_seconds_count" in text and "sluice_prompt_tokens_total" in text


def _read_reply(f):
    """One HTTP response from a socket's file: (status, headers, body), or None at the end."""
    line = f.readline()
    if not line:
        return None
    status = int(line.split()[1])
    headers = {}
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            break
        name, value = line.decode().split(":", 1)
        headers[name.strip().lower()] = value.strip()
    return status, headers, f.read(int(headers.get("content-length", "0")))


def _exchange(port, *messages, timeout=60):
    """Sends raw requests on one connection, each after the reply to the one before (httplib
    does not read pipelined requests); the replies and whether the server then closed the
    connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        f = s.makefile("rb")
        out = []
        for data in messages:
            s.sendall(data)
            out.append(_read_reply(f))
        s.settimeout(2)
        try:
            closed = f.read(1) == b""
        except (socket.timeout, TimeoutError):
            closed = False
        return out, closed


def _chunked(body, size):
    return b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + size]), body[i:i + size])
                    for i in range(0, len(body), size)) + b"0\r\n\r\n"


HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


def _post_head(extra):
    return (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
            b"\r\n")


def test_chunked_and_compressed_bodies_are_read_to_the_limit(server):
    # Chunked and gzip bodies are served (as vLLM's server does); the decoded size is held to
    # --max-body-mb (4 MiB here) as it arrives, so a small gzip body that inflates to 8 MiB or
    # 40 MiB, or an endless chunked one, never grows the process.
    import gzip
    small = json.dumps({"prompt": "hi", "max_tokens": 1}).encode()
    (ok, health), closed = _exchange(server.port, _post_head(b"Transfer-Encoding: chunked\r\n") +
                                     _chunked(small, 5), HEALTH)
    assert ok[0] == 200 and json.loads(ok[2])["usage"]["completion_tokens"] == 1, ok
    assert health[0] == 200 and not closed, health
    status, _, payload = server.request("POST", "/v1/completions", gzip.compress(small),
                                        headers={"Content-Encoding": "gzip"})
    assert status == 200, payload
    (ok,), _ = _exchange(server.port, _post_head(b"Transfer-Encoding: Chunked\r\n") + _chunked(small, 7))
    assert ok[0] == 200, ok   # coding names are case-insensitive (RFC 9112)

    # Past the limit, the rest of the body is read and dropped so the 413 arrives and the next
    # request on the connection is read from where it starts.
    big = small[:-1] + b"," + b" " * (5 << 20) + b"}"
    (over, health), closed = _exchange(server.port, _post_head(b"Transfer-Encoding: chunked\r\n") +
                                       _chunked(big, 1 << 16), HEALTH)
    assert over[0] == 413 and json.loads(over[2])["error"]["code"] == "payload_too_large", over
    assert health[0] == 200 and not closed
    bomb = gzip.compress(big + b" " * (3 << 20), 9)
    (over, health), closed = _exchange(server.port, _post_head(b"Content-Encoding: gzip\r\nContent-Length: %d\r\n"
                                                               % len(bomb)) + bomb, HEALTH)
    assert over[0] == 413 and health[0] == 200 and not closed, over
    # Past four times the limit the body is cut off, and the connection with it.
    bomb = gzip.compress(b" " * (40 << 20), 9)
    (over,), closed = _exchange(server.port, _post_head(b"Content-Encoding: gzip\r\nContent-Length: %d\r\n"
                                                        % len(bomb)) + bomb)
    assert over[0] == 413 and over[1].get("connection") == "close" and closed, over
    assert server.post("/v1/completions", {"prompt": "hi", "max_tokens": 1})[0] == 200


def test_an_http_1_0_stream_is_not_chunked(server):
    # HTTP/1.0 has no chunked encoding: the events go as they are and end with the connection.
    body = json.dumps({"prompt": "def f(", "max_tokens": 4, "stream": True, "seed": 1}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.settimeout(3)   # the end of the stream closes the connection, Keep-Alive or not
        s.sendall(b"POST /v1/completions HTTP/1.0\r\nConnection: Keep-Alive\r\nContent-Length: %d\r\n\r\n" % len(body)
                  + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, events = data.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0] and b"chunked" not in head.lower(), head
    assert events.startswith(b"data: {") and events.rstrip().endswith(b"data: [DONE]"), events[:200]


def test_unreadable_bodies_end_the_connection(server):
    # A body the server cannot read to its end leaves bytes that are not a request: the error is
    # sent and the connection closed, never the rest read as the client's next request.
    cases = [
        (b"Transfer-Encoding: gzip, chunked\r\n\r\n" + _chunked(b"{}", 2), 501, "not_implemented"),
        (b"Content-Encoding: zstd\r\nContent-Length: 2\r\n\r\n{}", 415, "unsupported_media_type"),
        (b"Content-Encoding: GZIP\r\nContent-Length: 2\r\n\r\n{}", 415, "unsupported_media_type"),
        (b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400, "invalid_body"),
        (b"Content-Encoding: gzip\r\nContent-Length: 9\r\n\r\nnot gzip!", 400, "invalid_body"),
        # Framing a proxy and this server could read two ways (RFC 9112 section 6.3).
        (b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(b"{}", 2), 400, "invalid_body"),
        (b"Content-Length: 30\r\nContent-Length: 2\r\n\r\n{}" + b" " * 28, 400, "invalid_body"),
        # httplib took -1 as 2^64 - 1 and waited for that many bytes.
        (b"Content-Length: -1\r\n\r\n{}", 400, "invalid_body"),
        (b"Content-Length: 99999999999999999999\r\n\r\n{}", 400, "invalid_body"),
        # Far past the limit the reply does not wait for the declared bytes (it came after the
        # read timeout); the socket gives up before the server's 10 s would.
        (b"Content-Length: 50000000\r\n\r\n{\"prompt\": \"hi\"}", 413, "payload_too_large"),
    ]
    # Only the completions read chunked or compressed bodies (with their bound): elsewhere httplib
    # would read them whole, to any size.
    path = b"/v1/completions"
    cases = [(path, *c) for c in cases] + [
        (b"/health", b"Transfer-Encoding: chunked\r\n\r\n" + _chunked(b"{}", 2), 501, "not_implemented"),
        (b"/nope", b"Content-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}", 415, "unsupported_media_type")]
    for path, head, status, code in cases:
        (reply,), closed = _exchange(server.port, b"POST %s HTTP/1.1\r\nHost: x\r\n" % path + head, timeout=8)
        assert reply is not None and reply[0] == status, (path, head, reply)
        assert json.loads(reply[2])["error"]["code"] == code and closed, (path, head, reply)
    # A Range header on such a reply: httplib passed its offset and length to the body's provider
    # unchecked, and 20 KB of the heap followed the 54-byte error.
    with socket.create_connection(("127.0.0.1", server.port), timeout=8) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: zstd\r\nRange: bytes=0-20000\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    body = data.partition(b"\r\n\r\n")[2]
    assert json.loads(body)["error"]["code"] == "not_implemented", data[:300]
    assert server.post("/v1/completions", {"prompt": "hi", "max_tokens": 1})[0] == 200


def test_metrics_path_label_takes_fixed_values(server):
    # A client's URL never becomes a label: quotes and newlines in it would break the exposition
    # text (and inject series), and each distinct path would add a series without bound.
    server.get('/v1/x%22%7D%201%0Afake_metric%7Ba%3D%22')
    text = server.get("/metrics")[2].decode()
    assert "fake_metric" not in text and '/v1/x"' not in text
    assert 'sluice_requests_total{path="other",status="404"}' in text


def test_a_negative_seed_is_echoed_as_sent_and_reproduces(server):
    body = {"prompt": "Hello", "max_tokens": 5, "temperature": 1.0, "seed": -1}
    first = server.post("/v1/completions", body)[2]
    assert first["sluice"]["seed"] == -1   # one choice: the reply's own block
    again = server.post("/v1/completions", {**body, "seed": first["sluice"]["seed"]})[2]
    assert again["sluice"]["token_sha"] == first["sluice"]["token_sha"]
    # One below int64's range arrives as a double rounded to -2^63: still out of range.
    status, _, j = server.post("/v1/completions", b'{"prompt": "Hello", "max_tokens": 1, "seed": -9223372036854775809}')
    assert status == 400 and j["error"]["param"] == "seed", j


def test_queue_zero_serves_the_batch_and_n_is_bounded_by_it(sluice_bin):
    # --queue 0: nothing waits beyond the batch, but the batch's slots still take requests; n
    # choices beyond batch + queue could never be taken, so they get 400, not 429 forever.
    s = Serve(sluice_bin, "--parallel", "2", "--queue", "0", name="queue0")
    try:
        assert s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4})[0] == 200
        assert s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4, "n": 2})[0] == 200
        status, _, j = s.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4, "n": 3})
        assert status == 400 and j["error"]["param"] == "n", j
    finally:
        assert s.stop() == 0


def test_api_key_is_required(sluice_bin):
    s = Serve(sluice_bin, "--api-key", "k3y", name="apikey")
    try:
        status, headers, j = s.post("/v1/chat/completions", CHAT)
        assert status == 401 and j["error"]["code"] == "invalid_api_key"
        assert s.post("/v1/chat/completions", CHAT, headers={"Authorization": "Bearer k3y"})[0] == 200
        # The scheme name is case-insensitive (RFC 9110); the key is not.
        assert s.post("/v1/chat/completions", CHAT, headers={"Authorization": "bearer k3y"})[0] == 200
        assert s.post("/v1/chat/completions", CHAT, headers={"Authorization": "Bearer K3Y"})[0] == 401
        assert s.post("/v1/chat/completions", CHAT, headers={"Authorization": "Bearerk3y"})[0] == 401
        assert s.get("/health")[0] == 200
    finally:
        assert s.stop() == 0


def test_a_full_queue_answers_429(sluice_bin):
    s = Serve(sluice_bin, "--parallel", "1", "--queue", "1", name="queue")
    try:
        long_req = {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0}
        results = []
        threads = [threading.Thread(target=lambda: results.append(s.post("/v1/completions", long_req)[:2]))
                   for _ in range(4)]
        for t in threads:
            t.start()
            time.sleep(0.05)
        for t in threads:
            t.join()
        statuses = sorted(r[0] for r in results)
        assert 429 in statuses and 200 in statuses and set(statuses) <= {200, 429}, statuses
        assert all(h.get("retry-after") for st, h in results if st == 429)
    finally:
        assert s.stop() == 0


def test_sigterm_finishes_in_flight_requests_and_exits_0(sluice_bin):
    s = Serve(sluice_bin, name="sigterm")
    result = {}

    def run():
        result["r"] = s.stream("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0})

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    s.proc.send_signal(signal.SIGTERM)
    t.join(timeout=60)
    assert s.proc.wait(timeout=60) == 0, s.log()
    status, _, events = result["r"]
    assert status == 200 and events[-1] == "[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] in ("stop", "length")
