"""Resumed equals fresh (issue 6, DESIGN.md E5): a follow-up conversation turn served with the
prefix cache -- the KV rows of the history restored from the last turn's checkpoint, only the
new suffix prefilled -- gives the token ids and token_sha that the same prompt served fresh
gives, greedy and sampled, with cached_tokens > 0. SmolLM2-135M and a golden MoE fixture,
through tests/capi/capi_serving.cpp."""
import pathlib

import pytest

from test_batch_equals_solo import FIXTURES, Serving, chatml

TURNS = ["What is the capital of France?", "And of Italy? Answer in one sentence.", "Which one is bigger?"]


def conversation(srv, settings, n_predict):
    """Serves the turns one after the other, each with its history; returns (resumed, fresh) pairs."""
    history = ""
    pairs = []
    for i, user in enumerate(TURNS):
        text = history + chatml(user)
        prompt = srv.tokenize(text)
        resumed = srv.run(prompt, n_predict=n_predict, cache=True, seed=100 + i, **settings)
        fresh = srv.run(prompt, n_predict=n_predict, cache=False, seed=100 + i, **settings)
        assert resumed["finish"] != "error", resumed["error"]
        pairs.append((len(prompt), resumed, fresh))
        history = text + resumed["text"].decode("utf-8", "replace") + "<|im_end|>\n"
    return pairs


def check(pairs):
    for turn, (n_prompt, resumed, fresh) in enumerate(pairs):
        assert resumed["tokens"] == fresh["tokens"], f"turn {turn}: resumed != fresh"
        assert resumed["sha"] == fresh["sha"] and resumed["finish"] == fresh["finish"]
        assert fresh["cached"] == 0
        if turn > 0:
            # The last turn checkpointed its prompt and reply: at least that prompt comes back
            # (less a token or two where the re-tokenised reply joins it differently).
            prev_prompt = pairs[turn - 1][0]
            assert resumed["cached"] >= prev_prompt - 2, (turn, resumed["cached"], prev_prompt)
            assert 0 < resumed["cached"] < n_prompt


def test_resumed_equals_fresh_smollm2(capi, smollm2_gguf):
    srv = Serving(capi, smollm2_gguf, max_batch=2)
    try:
        check(conversation(srv, dict(temperature=0.0), n_predict=20))
        check(conversation(srv, dict(temperature=0.9, repeat_penalty=1.1), n_predict=20))
        assert srv.metric("cached_prompt_tokens") > 0
    finally:
        srv.close()


def test_resumed_equals_fresh_golden_moe(capi):
    srv = Serving(capi, FIXTURES / "qwen3moe_e8_k2" / "model-Q8_0.gguf", max_batch=2, n_ctx=512)
    try:
        check(conversation(srv, dict(temperature=0.0), n_predict=24))
        check(conversation(srv, dict(temperature=0.8, drafter=1), n_predict=24))
    finally:
        srv.close()


def test_tiny_cache_budget_still_gives_fresh_results(capi):
    # A budget too small for any checkpoint: nothing is cached, nothing changes.
    srv = Serving(capi, FIXTURES / "qwen3_gqa4" / "model-Q8_0.gguf", max_batch=2, n_ctx=256, cache_bytes=64)
    try:
        pairs = conversation(srv, dict(temperature=0.0), n_predict=12)
        for _, resumed, fresh in pairs:
            assert resumed["cached"] == 0 and resumed["tokens"] == fresh["tokens"]
        assert srv.metric("prefix_cache_entries") == 0
    finally:
        srv.close()


@pytest.mark.parametrize("name", ["qwen35moe_e4_k2_mtp", "qwen3next_e4_k2_mtp"])
def test_resumed_equals_fresh_hybrid(capi, name):
    # Hybrid models (issue 11): the checkpoint keeps the recurrent state after its last token and
    # comes back only when all of its tokens begin the prompt. The random-weight models' replies
    # do not survive a detokenise/retokenise round trip, so each turn's prompt is built from ids:
    # the last prompt, the reply's ids, then the new user message.
    srv = Serving(capi, FIXTURES / name / "converted-F32.gguf", max_batch=2, n_ctx=512)
    try:
        for settings in (dict(temperature=0.0), dict(temperature=0.8, drafter=1)):
            prompt = []
            for i, user in enumerate(TURNS):
                prompt = prompt + srv.tokenize(chatml(user))
                resumed = srv.run(prompt, n_predict=16, cache=True, seed=200 + i, **settings)
                fresh = srv.run(prompt, n_predict=16, cache=False, seed=200 + i, **settings)
                assert resumed["finish"] != "error", resumed["error"]
                assert resumed["tokens"] == fresh["tokens"] and resumed["sha"] == fresh["sha"], f"turn {i}"
                assert fresh["cached"] == 0
                if i > 0:   # the last turn's prompt and reply (less its last token, never forwarded)
                    assert prev_len - 1 <= resumed["cached"] < len(prompt), (i, resumed["cached"], prev_len)
                prompt = prompt + resumed["tokens"]
                prev_len = len(prompt)
        assert srv.metric("cached_prompt_tokens") > 0
    finally:
        srv.close()


@pytest.mark.parametrize("name", ["qwen35moe_e4_k2_mtp", "qwen3next_e4_k2_mtp"])
def test_hybrid_prompt_sent_again_restores_its_state(capi, name):
    # A hybrid's state exists only at the lengths the sequence passed, so the checkpoint at the end
    # of a request cannot serve its own prompt again (a regenerate, n > 1 sent as requests): the
    # engine checkpoints the prompt as well, once its rows are prefilled. The second request
    # restores every prompt row but the last (the first window's) and gives fresh's tokens.
    srv = Serving(capi, FIXTURES / name / "converted-F32.gguf", max_batch=2, n_ctx=512)
    try:
        prompt = srv.tokenize(chatml(TURNS[0]))
        for settings in (dict(temperature=0.0), dict(temperature=0.8, seed=7, drafter=1)):
            first = srv.run(prompt, n_predict=12, cache=True, **settings)
            again = srv.run(prompt, n_predict=12, cache=True, **settings)
            fresh = srv.run(prompt, n_predict=12, cache=False, **settings)
            for r in (first, again):
                assert r["finish"] != "error", r["error"]
                assert r["tokens"] == fresh["tokens"] and r["sha"] == fresh["sha"]
            assert again["cached"] == len(prompt) - 1, (again["cached"], len(prompt))
            # A prompt that goes on past the checkpointed one restores it too (all of it begins
            # the new prompt) and prefills the rest.
            longer = prompt + srv.tokenize(chatml(TURNS[1]))
            resumed = srv.run(longer, n_predict=12, cache=True, **settings)
            fresh = srv.run(longer, n_predict=12, cache=False, **settings)
            assert resumed["tokens"] == fresh["tokens"] and resumed["sha"] == fresh["sha"]
            assert resumed["cached"] >= len(prompt) - 1, (resumed["cached"], len(prompt))
    finally:
        srv.close()


@pytest.mark.parametrize("name", ["qwen35moe_e4_k2_mtp", "qwen3next_e4_k2_mtp"])
def test_hybrid_mtp_requests_resume_with_the_heads_rows(capi, name):
    # An MTP request's checkpoint keeps its head's rows and the pending hidden state beside the
    # trunk's rows and state (mtp_drafter::save), so the same prompt again or a next turn restores
    # both instead of prefilling in full. At a fixed depth (drafter 13) the proposals depend on
    # the head's state alone: a restored head proposes what the head it was saved from did, so
    # the resumed request's drafted and accepted counts equal those of the same request on an
    # engine with an empty cache, whose last prompt rows also go alone to be checkpointed.
    def engine():
        return Serving(capi, FIXTURES / name / "converted-F32.gguf", max_batch=2, n_ctx=512)

    turn1 = None
    for settings in (dict(temperature=0.0, drafter=13), dict(temperature=0.8, seed=5, drafter=13)):
        srv, ref = engine(), engine()
        try:
            turn1 = srv.tokenize(chatml(TURNS[0]))
            first = srv.run(turn1, n_predict=16, cache=True, **settings)
            assert first["finish"] != "error", first["error"]
            assert first["cached"] == 0 and first["drafts"][0] > 0
            again = srv.run(turn1, n_predict=16, cache=True, **settings)
            assert again["cached"] == len(turn1) - 1
            assert (again["tokens"], again["sha"], again["drafts"]) == (first["tokens"], first["sha"], first["drafts"])
            turn2 = turn1 + first["tokens"] + srv.tokenize(chatml(TURNS[1]))
            resumed = srv.run(turn2, n_predict=16, cache=True, **settings)
            fresh = ref.run(turn2, n_predict=16, cache=True, **settings)
            assert resumed["finish"] != "error", resumed["error"]
            assert resumed["cached"] >= len(turn1) - 1 and fresh["cached"] == 0
            assert (resumed["tokens"], resumed["sha"], resumed["drafts"]) == (fresh["tokens"], fresh["sha"], fresh["drafts"])
            # A request without MTP takes the same checkpoints (the head's rows unused).
            plain = srv.run(turn1, n_predict=8, cache=True)
            assert plain["cached"] == len(turn1) - 1
        finally:
            srv.close()
            ref.close()
