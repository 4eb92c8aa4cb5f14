"""MTP drafting in `sluice serve` (issue 11): `--spec mtp` on the random-initialised hybrid
fixtures (tests/golden/fixtures/*_mtp: qwen35moe and qwen3next, each with one MTP layer) serves
every request with the tokens of the same request served serially (`"speculative": false` on the
same server), bit for bit by token_sha, greedy and sampled with seeds; concurrent requests, each
with its own MTP head, give what each gives alone; acceptance per draft depth is in the reply,
usage.sluice and /metrics; a trimmed draft vocabulary (tools/make_draft_vocab.py) keeps
drafted == serial, and a malformed or mismatched one stops the server at start with a clear
error."""
import concurrent.futures
import importlib.util
import pathlib
import re
import subprocess
import sys

import pytest

_spec = importlib.util.spec_from_file_location("server_conftest", pathlib.Path(__file__).with_name("conftest.py"))
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
start_server = _conftest.start_server
ROOT = _conftest.ROOT

FIXTURES = ROOT / "tests" / "golden" / "fixtures"
HYBRID = ["qwen35moe_e4_k2_mtp", "qwen3next_e4_k2_mtp"]
TEXT = ("the quick brown fox jumps over the lazy dog. the dog sleeps in the sun, and the fox runs "
        "into the woods. a cat watches them both from the wall of the old house by the river.\n") * 3

PROMPTS = ["the quick brown fox", "a cat watches them both from the wall", "def fib(n):\n    return", "x"]
SAMPLING = [{"temperature": 0},
            {"temperature": 0.9, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "seed": 7},
            {"temperature": 0.7, "seed": 12345}]


def model(name):
    return FIXTURES / name / "converted-F32.gguf"


def complete(server, body):
    status, reply = server.post_json("/v1/completions", body)
    assert status == 200, (reply, server.log_tail())
    return reply


def check_depths(usage_sluice):
    """The per-depth table adds up to the totals; depth d+1 never sees more drafts than depth d."""
    t = usage_sluice["acceptance_by_depth"]
    assert sum(d["proposed"] for d in t) == usage_sluice["drafts_proposed"]
    assert sum(d["accepted"] for d in t) == usage_sluice["drafts_accepted"]
    for i, d in enumerate(t):
        assert d["depth"] == i + 1 and 0 <= d["accepted"] <= d["proposed"] > 0
        assert d["acceptance"] == pytest.approx(d["accepted"] / d["proposed"])
        if i:
            assert d["proposed"] <= t[i - 1]["proposed"] and d["accepted"] <= t[i - 1]["accepted"]
    return t


def drafted_equals_serial(server, n_tokens=(24, 5)):
    """Every prompt x sampling x length, drafted and serial on one server; returns the drafts proposed."""
    proposed = 0
    for prompt in PROMPTS:
        for s in SAMPLING:
            for n in n_tokens:   # 5: the last window is cut by max_tokens
                body = {"prompt": prompt, "max_tokens": n, **s}
                serial = complete(server, {**body, "speculative": False})
                drafted = complete(server, {**body, "speculative": True})
                assert drafted["sluice"]["token_sha"] == serial["sluice"]["token_sha"], (body, server.log_tail())
                assert drafted["choices"][0]["text"] == serial["choices"][0]["text"]
                assert drafted["choices"][0]["finish_reason"] == serial["choices"][0]["finish_reason"]
                assert drafted["sluice"]["spec"]["drafter"] == "mtp"
                assert serial["sluice"]["spec"]["drafter"] == "none"
                u = drafted["usage"]["sluice"]
                check_depths(u)
                assert drafted["sluice"]["spec"]["acceptance_by_depth"] == u["acceptance_by_depth"]
                proposed += u["drafts_proposed"]
    return proposed


@pytest.fixture(scope="module", params=HYBRID)
def mtp_server(request, sluice_bin):
    # --draft-max 4: the MTP head chains up to 4 drafts. --draft-depth fixed: every window carries
    # them, so drafts are verified whatever the window timings say (the adaptive policy may turn
    # drafting off for a random-initialised head whose drafts are rarely kept; that path is
    # tests/server/test_spec_serving.py's).
    server = start_server(sluice_bin, str(model(request.param)), "--spec", "mtp", "--draft-max", "4",
                          "--draft-depth", "fixed",
                          name=f"mtp_server_{request.param}")
    yield server
    assert server.stop() == 0, server.log_tail()


def test_drafted_equals_serial(mtp_server):
    assert drafted_equals_serial(mtp_server) > 0, "no window carried an MTP draft"


def test_concurrent_requests_do_not_share_mtp_state(mtp_server):
    bodies = [{"prompt": p, "max_tokens": 20, **s} for p in PROMPTS for s in SAMPLING[:2]]
    alone = [complete(mtp_server, b)["sluice"]["token_sha"] for b in bodies]
    with concurrent.futures.ThreadPoolExecutor(len(bodies)) as pool:
        together = list(pool.map(lambda b: complete(mtp_server, b)["sluice"]["token_sha"], bodies))
    assert together == alone
    serial = [complete(mtp_server, {**b, "speculative": False})["sluice"]["token_sha"] for b in bodies]
    assert together == serial


def test_chat_stream_reports_acceptance_by_depth(mtp_server):
    body = {"messages": [{"role": "user", "content": "the quick brown fox"}], "max_tokens": 16, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    status, _, payload = mtp_server.request("POST", "/v1/chat/completions", body=body)
    assert status == 200, payload
    import json
    usage = [json.loads(line[6:]) for line in payload.decode().splitlines()
             if line.startswith("data: ") and line != "data: [DONE]"]
    usage = [e["usage"] for e in usage if e.get("usage")]
    assert len(usage) == 1
    check_depths(usage[0]["sluice"])
    status, whole = mtp_server.post_json("/v1/chat/completions", {
        "messages": body["messages"], "max_tokens": 16, "temperature": 0, "speculative": False})
    assert status == 200
    assert whole["usage"]["sluice"]["token_sha"] == usage[0]["sluice"]["token_sha"]


def test_metrics_count_drafts_by_depth(mtp_server):
    complete(mtp_server, {"prompt": PROMPTS[0], "max_tokens": 16, "temperature": 0})
    status, _, payload = mtp_server.get("/metrics")
    assert status == 200
    text = payload.decode()
    drafted = {int(d): int(v) for d, v in re.findall(r'^sluice_drafted_tokens_by_depth_total\{depth="(\d+)"\} (\d+)', text, re.M)}
    kept = {int(d): int(v) for d, v in re.findall(r'^sluice_accepted_tokens_by_depth_total\{depth="(\d+)"\} (\d+)', text, re.M)}
    total = int(float(re.search(r"^sluice_drafted_tokens_total (\S+)", text, re.M).group(1)))
    accepted = int(float(re.search(r"^sluice_accepted_tokens_total (\S+)", text, re.M).group(1)))
    assert drafted and sorted(drafted) == list(range(1, len(drafted) + 1)) and sorted(kept) == sorted(drafted)
    assert sum(drafted.values()) == total and sum(kept.values()) == accepted
    assert all(kept[d] <= drafted[d] for d in drafted)


def make_vocab(tmp, name, top):
    out = tmp / f"{name}.draft-vocab"
    text = tmp / "text.txt"
    text.write_text(TEXT)
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_draft_vocab.py"), str(model(name)), "--text", str(text),
                    "--top", str(top), "-o", str(out)], check=True)
    return out


@pytest.mark.parametrize("name", HYBRID)
def test_trimmed_draft_vocabulary_keeps_drafted_equal_to_serial(sluice_bin, tmp_path, name):
    vocab = make_vocab(tmp_path, name, 24)
    server = start_server(sluice_bin, str(model(name)), "--spec", "mtp", "--draft-max", "4", "--draft-depth", "fixed",
                          "--draft-vocab", str(vocab),
                          name=f"mtp_trimmed_{name}")
    try:
        assert "draft vocabulary of 24 of 384 ids" in server.log_tail(), server.log_tail()
        assert drafted_equals_serial(server, n_tokens=(24,)) > 0
    finally:
        assert server.stop() == 0, server.log_tail()


def serve_fails(sluice_bin, *args):
    """`sluice serve` that must exit at start: its exit status and output."""
    r = subprocess.run([str(sluice_bin), "serve", *args, "--host", "127.0.0.1", "--port", "0", "-t", "1"],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


BAD_VOCABS = {
    "no_header": "n_vocab 384\ncount 1\n5\n",
    "other_model": "sluice-draft-vocab 1\nn_vocab 151936\ncount 1\n5\n",
    "id_out_of_range": "sluice-draft-vocab 1\nn_vocab 384\ncount 2\n5\n384\n",
    "not_a_number": "sluice-draft-vocab 1\nn_vocab 384\ncount 2\n5\nfive\n",
    "duplicate": "sluice-draft-vocab 1\nn_vocab 384\ncount 2\n5\n5\n",
    "truncated": "sluice-draft-vocab 1\nn_vocab 384\ncount 3\n5\n6\n",
}
BAD_MESSAGES = {
    "no_header": "expected the header 'sluice-draft-vocab 1'",
    "other_model": "made for a vocabulary of 151936 ids but the model has 384",
    "id_out_of_range": "line 5: '384': expected a token id in [0, 384)",
    "not_a_number": "line 5: 'five': expected a token id in [0, 384)",
    "duplicate": "id 5 is listed twice",
    "truncated": "lists 2 ids but its count says 3",
}


@pytest.mark.parametrize("kind", sorted(BAD_VOCABS))
def test_malformed_or_mismatched_draft_vocabulary_is_a_clear_error(sluice_bin, tmp_path, kind):
    path = tmp_path / "bad.draft-vocab"
    path.write_text(BAD_VOCABS[kind])
    rc, out = serve_fails(sluice_bin, str(model(HYBRID[0])), "--spec", "mtp", "--draft-vocab", str(path))
    assert rc != 0, out
    assert "draft vocabulary" in out and str(path) in out and BAD_MESSAGES[kind] in out, out


def test_spec_mtp_on_a_model_without_mtp_layers_is_a_clear_error(sluice_bin):
    rc, out = serve_fails(sluice_bin, str(FIXTURES / "qwen3moe_e8_k2" / "model-Q8_0.gguf"), "--spec", "mtp")
    assert rc != 0 and "no MTP (nextn) layers" in out, out


def test_unknown_draft_depth_is_a_clear_error(sluice_bin):
    rc, out = serve_fails(sluice_bin, str(model(HYBRID[0])), "--spec", "mtp", "--draft-depth", "deep")
    assert rc != 0 and "--draft-depth" in out and "deep" in out, out
