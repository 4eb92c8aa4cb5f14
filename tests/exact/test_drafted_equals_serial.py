"""Drafted equals serial, byte for byte (issue 5, DESIGN.md E4): for every drafter, greedy and
sampled with several seeds, the speculative decoder gives the token ids (and token_sha) that
serial decoding gives. Runs the public engine through tests/capi/capi_engine.cpp on the real
SmolLM2-135M GGUF and on the golden fixtures (a MoE target with a dense draft model of the same
tokenizer)."""
import ctypes
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "golden" / "fixtures"

PROMPTS = [
    # code editing
    "Rename the variable x to count in this code:\n\nx = 0\nfor item in items:\n    x += 1\nprint(x)",
    "Add type hints to this function:\n\ndef add(a, b):\n    return a + b",
    "Fix the bug in this code:\n\ndef mean(xs):\n    return sum(xs) / len(xs) + 1",
    "Convert this loop to a list comprehension:\n\nsquares = []\nfor i in range(10):\n    squares.append(i * i)",
    "Rewrite this in Python 3:\n\nprint 'hello world'",
    # code completion (raw)
    "def fibonacci(n):",
    "import json\n\ndef load(path):\n    with open(path) as f:",
    "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, x):",
    "for i in range(10):\n    if i % 2 == 0:",
    "#include <stdio.h>\n\nint main(void) {",
    # chat
    "What is the capital of France?",
    "Give me three tips for sleeping better.",
    "Explain what a hash table is in two sentences.",
    "Write a haiku about the sea.",
    "What is 12 times 12?",
    # JSON
    "Return a JSON object with the keys name and age for a person called Ada who is 36.",
    "List three fruits as a JSON array.",
    "Summarise as JSON with keys city and country: Paris is the capital of France.",
    "Convert to JSON: name=Bob, role=admin, active=yes",
    "Produce a JSON object describing a book with title, author and year.",
]
RAW = {5, 6, 7, 8, 9}   # indices of raw completions; the rest use the chat template
N_PREDICT = 24


class Engine:
    def __init__(self, capi, model, draft=None, threads=2, adaptive_depth=True):
        capi.sluice_engine_open.restype = ctypes.c_void_p
        capi.sluice_engine_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        capi.sluice_engine_open_error.restype = ctypes.c_char_p
        capi.sluice_engine_error.restype = ctypes.c_char_p
        capi.sluice_engine_error.argtypes = [ctypes.c_void_p]
        capi.sluice_engine_close.argtypes = [ctypes.c_void_p]
        capi.sluice_engine_generate.argtypes = [
            ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_int,
            ctypes.c_float, ctypes.c_float, ctypes.c_ulonglong, ctypes.c_float, ctypes.c_int, ctypes.c_int]
        capi.sluice_engine_last_tokens.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        for f in ("sluice_engine_last_sha", "sluice_engine_last_stop", "sluice_engine_last_spec"):
            getattr(capi, f).restype = ctypes.c_char_p
            getattr(capi, f).argtypes = [ctypes.c_void_p]
        for f in ("sluice_engine_last_tokens_per_step", "sluice_engine_last_acceptance"):
            getattr(capi, f).restype = ctypes.c_double
            getattr(capi, f).argtypes = [ctypes.c_void_p]
        self.capi = capi
        self.h = capi.sluice_engine_open(str(model).encode(), str(draft or "").encode(), threads, 1024)
        if not self.h:
            pytest.fail(f"engine open failed: {capi.sluice_engine_open_error().decode()}")
        # adaptive_depth=False: every window drafts to max_window, so drafts are verified on any
        # machine (the depth policy rightly stops drafting where a draft costs as much as a row,
        # as SmolLM2 drafting for itself does, and that depends on measured timings).
        capi.sluice_engine_set_adaptive_depth.argtypes = [ctypes.c_void_p, ctypes.c_int]
        capi.sluice_engine_set_adaptive_depth(self.h, int(adaptive_depth))

    def generate(self, prompt, chat, drafter=0, temperature=0.0, seed=0, repeat_penalty=1.0, n=N_PREDICT,
                 max_window=16):
        c = self.capi
        got = c.sluice_engine_generate(self.h, prompt.encode(), int(chat), n, temperature, 40, 0.95, 0.05, seed,
                                       repeat_penalty, drafter, max_window)
        if got < 0:
            pytest.fail(c.sluice_engine_error(self.h).decode())
        buf = (ctypes.c_int * max(got, 1))()
        c.sluice_engine_last_tokens(self.h, buf, got)
        return dict(tokens=list(buf[:got]), sha=c.sluice_engine_last_sha(self.h).decode(),
                    stop=c.sluice_engine_last_stop(self.h).decode(),
                    spec=c.sluice_engine_last_spec(self.h).decode(),
                    tokens_per_step=c.sluice_engine_last_tokens_per_step(self.h))

    def close(self):
        self.capi.sluice_engine_close(self.h)


SAMPLING = [
    dict(temperature=0.0),                                # greedy
    dict(temperature=0.9, seed=7),
    dict(temperature=0.7, seed=12345, repeat_penalty=1.1),
]


def check_all_drafters(eng, prompts, chat_of, drafters):
    mismatches = []
    accepted_steps = 0.0
    runs = 0
    for i, prompt in enumerate(prompts):
        for s in SAMPLING:
            serial = eng.generate(prompt, chat_of(i), drafter=0, **s)
            assert serial["tokens_per_step"] <= 1.0  # serial: one row per window (an EOS window emits none)
            for d in drafters:
                drafted = eng.generate(prompt, chat_of(i), drafter=d, **s)
                if drafted["tokens"] != serial["tokens"] or drafted["sha"] != serial["sha"] \
                        or drafted["stop"] != serial["stop"]:
                    mismatches.append((i, s, d, serial["tokens"], drafted["tokens"]))
                accepted_steps += drafted["tokens_per_step"]
                runs += 1
    assert not mismatches, f"drafted != serial in {len(mismatches)} cases, first: {mismatches[0]}"
    return accepted_steps / runs


def test_drafted_equals_serial_smollm2(capi, smollm2_gguf):
    # The draft model is SmolLM2 itself: same tokenizer by construction, and a draft model whose
    # picks equal the target's (acceptance near 1) exercises long windows.
    eng = Engine(capi, smollm2_gguf, draft=smollm2_gguf, adaptive_depth=False)
    try:
        mean_tps = check_all_drafters(eng, PROMPTS, lambda i: i not in RAW, drafters=[1, 2])
    finally:
        eng.close()
    print(f"mean tokens per verify step over drafted runs: {mean_tps:.2f}")
    assert mean_tps > 1.0, "no draft was ever accepted: the test would not see a verify bug"


def test_drafted_equals_serial_golden_moe_with_dense_draft(capi):
    target = FIXTURES / "qwen3moe_e8_k2" / "model-Q8_0.gguf"
    draft = FIXTURES / "qwen3_gqa4" / "model-Q8_0.gguf"
    eng = Engine(capi, target, draft=draft)
    try:
        check_all_drafters(eng, PROMPTS, lambda i: False, drafters=[1, 2])
    finally:
        eng.close()


def test_threads_give_the_same_tokens(capi, smollm2_gguf):
    """E2 through the whole engine: 1, 2 and 3 threads give the same token_sha."""
    shas = set()
    for threads in (1, 2, 3):
        eng = Engine(capi, smollm2_gguf, threads=threads)
        try:
            shas.add(eng.generate(PROMPTS[0], True, temperature=0.8, seed=3)["sha"])
        finally:
            eng.close()
    assert len(shas) == 1
