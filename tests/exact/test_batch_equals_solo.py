"""Batch equals solo (issue 6, DESIGN.md E1): requests decoded together by the serving engine's
scheduler -- their rows in one forward, prefill chunks beside decode rows and verify windows --
give the token ids and token_sha each one gives alone, greedy and sampled, serial and drafted.
And alone, a served request gives what the one-request engine (`sluice run`) gives. Runs
tests/capi/capi_serving.cpp on SmolLM2-135M and on the golden fixtures (a MoE target with a
dense draft model of the same tokenizer). Logprobs are checked against numpy's log-softmax of
the model's own logits."""
import ctypes
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "golden" / "fixtures"
I32P = ctypes.POINTER(ctypes.c_int32)


def _bind(c):
    c.sluice_serving_open.restype = ctypes.c_void_p
    c.sluice_serving_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_longlong]
    c.sluice_serving_open_error.restype = ctypes.c_char_p
    c.sluice_serving_error.restype = ctypes.c_char_p
    c.sluice_serving_error.argtypes = [ctypes.c_void_p]
    c.sluice_serving_close.argtypes = [ctypes.c_void_p]
    c.sluice_serving_n_vocab.argtypes = [ctypes.c_void_p]
    c.sluice_serving_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, I32P, ctypes.c_int]
    c.sluice_serving_submit.argtypes = [
        ctypes.c_void_p, I32P, ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_int, ctypes.c_float,
        ctypes.c_float, ctypes.c_ulonglong, ctypes.c_float, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    c.sluice_serving_wait.argtypes = [ctypes.c_void_p]
    for f in ("tokens", "streamed", "top_ids"):
        getattr(c, f"sluice_serving_result_{f}").argtypes = [ctypes.c_void_p, ctypes.c_int, I32P, ctypes.c_int]
    c.sluice_serving_result_logprobs.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_float),
                                                 ctypes.c_int]
    c.sluice_serving_result_text.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    for f in ("sha", "finish", "error"):
        getattr(c, f"sluice_serving_result_{f}").restype = ctypes.c_char_p
        getattr(c, f"sluice_serving_result_{f}").argtypes = [ctypes.c_void_p, ctypes.c_int]
    c.sluice_serving_result_cached.argtypes = [ctypes.c_void_p, ctypes.c_int]
    c.sluice_serving_result_drafts.restype = ctypes.c_longlong
    c.sluice_serving_result_drafts.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    c.sluice_serving_metric.restype = ctypes.c_longlong
    c.sluice_serving_metric.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


class Serving:
    """One serving engine over the C ABI; submit() queues a request, wait() waits for all."""

    def __init__(self, capi, model, max_batch=4, threads=2, n_ctx=1024, cache_bytes=1 << 30, draft=None):
        _bind(capi)
        self.c = capi
        self.h = capi.sluice_serving_open(str(model).encode(), str(draft or "").encode(), threads, n_ctx, max_batch,
                                          cache_bytes)
        if not self.h:
            pytest.fail(f"serving open failed: {capi.sluice_serving_open_error().decode()}")
        self.n_vocab = capi.sluice_serving_n_vocab(self.h)

    def tokenize(self, text, parse_special=True):
        buf = (ctypes.c_int32 * 8192)()
        n = self.c.sluice_serving_tokenize(self.h, text.encode(), int(parse_special), buf, 8192)
        assert n >= 0, self.c.sluice_serving_error(self.h).decode()
        return list(buf[:n])

    def submit(self, prompt, n_predict=24, temperature=0.0, seed=0, repeat_penalty=1.0, drafter=0, cache=True,
               top_logprobs=-1, top_k=40, top_p=0.95, min_p=0.05):
        arr = (ctypes.c_int32 * len(prompt))(*prompt)
        idx = self.c.sluice_serving_submit(self.h, arr, len(prompt), n_predict, temperature, top_k, top_p, min_p, seed,
                                           repeat_penalty, drafter, int(cache), top_logprobs)
        assert idx >= 0, self.c.sluice_serving_error(self.h).decode()
        return idx

    def _ints(self, fn, idx):
        n = fn(self.h, idx, None, 0)
        buf = (ctypes.c_int32 * max(n, 1))()
        fn(self.h, idx, buf, n)
        return list(buf[:n])

    def result(self, idx):
        c = self.c
        n = c.sluice_serving_result_logprobs(self.h, idx, None, 0)
        lp = (ctypes.c_float * max(n, 1))()
        c.sluice_serving_result_logprobs(self.h, idx, lp, n)
        nt = c.sluice_serving_result_text(self.h, idx, None, 0)
        text = ctypes.create_string_buffer(max(nt, 1))
        c.sluice_serving_result_text(self.h, idx, text, nt)
        return dict(tokens=self._ints(c.sluice_serving_result_tokens, idx),
                    streamed=self._ints(c.sluice_serving_result_streamed, idx),
                    top_ids=self._ints(c.sluice_serving_result_top_ids, idx),
                    logprobs=list(lp[:n]), text=text.raw[:nt],
                    sha=c.sluice_serving_result_sha(self.h, idx).decode(),
                    finish=c.sluice_serving_result_finish(self.h, idx).decode(),
                    error=c.sluice_serving_result_error(self.h, idx).decode(),
                    cached=c.sluice_serving_result_cached(self.h, idx),
                    drafts=(c.sluice_serving_result_drafts(self.h, idx, 0), c.sluice_serving_result_drafts(self.h, idx, 1)))

    def wait(self):
        self.c.sluice_serving_wait(self.h)

    def run(self, prompt, **kw):
        """One request alone: submitted, then waited for before anything else is submitted."""
        idx = self.submit(prompt, **kw)
        self.wait()
        return self.result(idx)

    def metric(self, name):
        return self.c.sluice_serving_metric(self.h, name.encode())

    def close(self):
        self.c.sluice_serving_close(self.h)


def chatml(user):
    return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


# (text, chat): chat ones are wrapped in ChatML exactly as `sluice run --chat` wraps them.
PROMPTS = [
    ("What is the capital of France?", True),
    ("Rename the variable x to count in this code:\n\nx = 0\nfor item in items:\n    x += 1\nprint(x)", True),
    ("def fibonacci(n):", False),
    ("Return a JSON object with the keys name and age for a person called Ada who is 36.", True),
    ("Write a haiku about the sea.", True),
]
SETTINGS = [
    dict(temperature=0.0),
    dict(temperature=0.9, seed=7, drafter=1),
    dict(temperature=0.7, seed=12345, repeat_penalty=1.1),
    dict(temperature=0.0, drafter=1),
    dict(temperature=0.8, seed=3),
]


def batch_vs_solo(srv, prompts, settings, n_predict):
    solo = [srv.run(p, n_predict=n_predict, cache=False, **s) for p, s in zip(prompts, settings)]
    steps_before = srv.metric("steps")
    ids = [srv.submit(p, n_predict=n_predict, cache=False, **s) for p, s in zip(prompts, settings)]
    srv.wait()
    together = [srv.result(i) for i in ids]
    for i, (a, b) in enumerate(zip(solo, together)):
        assert a["finish"] != "error", a["error"]
        assert b["tokens"] == a["tokens"], f"request {i}: batched {b['tokens']} != solo {a['tokens']}"
        assert b["sha"] == a["sha"] and b["finish"] == a["finish"]
        assert b["streamed"] == b["tokens"] and b["text"] == a["text"]
    assert srv.metric("max_segments") >= 2, "the requests never shared a step"
    assert srv.metric("steps") > steps_before
    return solo


def test_batch_equals_solo_smollm2(capi, smollm2_gguf):
    srv = Serving(capi, smollm2_gguf, max_batch=4)
    try:
        prompts = [srv.tokenize(chatml(t) if chat else t, parse_special=chat) for t, chat in PROMPTS]
        solo = batch_vs_solo(srv, prompts, SETTINGS, n_predict=16)
    finally:
        srv.close()
    assert any(len(s["tokens"]) > 0 for s in solo)

    # Alone, a served request is what the one-request engine (sluice run's decoder) gives.
    from test_drafted_equals_serial import Engine
    eng = Engine(capi, smollm2_gguf)
    try:
        for i in (0, 2):
            s = SETTINGS[i]
            text, chat = PROMPTS[i]
            got = eng.generate(text, chat=chat, temperature=s["temperature"], seed=s.get("seed", 0),
                               repeat_penalty=s.get("repeat_penalty", 1.0), n=16)
            assert got["tokens"] == solo[i]["tokens"] and got["sha"] == solo[i]["sha"]
    finally:
        eng.close()


def test_batch_equals_solo_golden_moe_with_draft_model(capi):
    target = FIXTURES / "qwen3moe_e8_k2" / "model-Q8_0.gguf"
    draft = FIXTURES / "qwen3_gqa4" / "model-Q8_0.gguf"
    srv = Serving(capi, target, max_batch=3, n_ctx=256, draft=draft)
    try:
        rng = np.random.default_rng(5)
        prompts = [list(map(int, rng.integers(0, 381, size=int(n)))) for n in (3, 40, 17, 90, 8, 25)]
        settings = [dict(temperature=0.0, drafter=2), dict(temperature=0.9, seed=1, drafter=1),
                    dict(temperature=0.0), dict(temperature=0.8, seed=2, drafter=2),
                    dict(temperature=0.7, seed=3, repeat_penalty=1.2), dict(temperature=0.0, drafter=1)]
        batch_vs_solo(srv, prompts, settings, n_predict=20)
    finally:
        srv.close()


def _fwd(capi, model, n_ctx, rows):
    capi.sluice_fwd_open.restype = ctypes.c_void_p
    capi.sluice_fwd_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    capi.sluice_fwd_forward.argtypes = [ctypes.c_void_p, I32P, ctypes.c_int, ctypes.c_int,
                                        ctypes.POINTER(ctypes.c_float)]
    capi.sluice_fwd_close.argtypes = [ctypes.c_void_p]
    h = capi.sluice_fwd_open(str(model).encode(), n_ctx, 2, rows)
    assert h
    return h


def test_logprobs_are_numpy_log_softmax_of_the_logits(capi):
    model = FIXTURES / "qwen3_gqa4" / "model-Q8_0.gguf"
    srv = Serving(capi, model, n_ctx=256)
    try:
        prompt = srv.tokenize(chatml("the quick brown fox"))
        r = srv.run(prompt, n_predict=12, temperature=0.8, seed=9, top_logprobs=5, cache=False)
    finally:
        srv.close()
    n = len(r["tokens"])
    assert n > 0 and len(r["logprobs"]) == n and len(r["top_ids"]) == 5 * n
    # The model's logits for every generated position (teacher forced), then numpy.
    seq = prompt + r["tokens"]
    h = _fwd(capi, model, 256, len(seq))
    try:
        nv = capi.sluice_fwd_n_vocab(ctypes.c_void_p(h))
        out = (ctypes.c_float * (len(seq) * nv))()
        assert capi.sluice_fwd_forward(h, (ctypes.c_int32 * len(seq))(*seq), len(seq), 0, out) == 0
    finally:
        capi.sluice_fwd_close(h)
    logits = np.frombuffer(out, dtype=np.float32).reshape(len(seq), nv).astype(np.float64)
    for i, tok in enumerate(r["tokens"]):
        row = logits[len(prompt) - 1 + i]
        lsm = row - row.max() - np.log(np.exp(row - row.max()).sum())
        assert abs(lsm[tok] - r["logprobs"][i]) < 1e-4
        best = sorted(range(nv), key=lambda j: (-row[j], j))[:5]
        assert r["top_ids"][5 * i:5 * i + 5] == best
