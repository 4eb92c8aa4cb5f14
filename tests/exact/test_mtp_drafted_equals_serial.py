"""Drafted equals serial with the MTP drafter (issue 11 item 3, DESIGN.md E4): the hybrid fixtures
(qwen3next, qwen35moe, each with one random MTP block) generate the same token ids, token_sha and
stop reason with `--spec mtp` (drafter 3 of the C ABI) as serially, greedy and sampled with
several seeds, with windows cut by max_tokens; the engine prefills the prompt through the MTP
drafter, so this covers the path `sluice run --spec mtp` takes. A model without nextn layers
is a clear error."""
import pytest

from test_drafted_equals_serial import FIXTURES, PROMPTS, SAMPLING, Engine

HYBRID = ["qwen3next_e4_k2_mtp", "qwen35moe_e4_k2_mtp"]
MTP = 3


@pytest.mark.parametrize("name", HYBRID)
def test_mtp_drafted_equals_serial(capi, name):
    eng = Engine(capi, FIXTURES / name / "converted-F32.gguf", adaptive_depth=False)
    mismatches, proposed_runs = [], 0
    try:
        for i, prompt in enumerate(PROMPTS[:10]):
            for s in SAMPLING:
                for n in (24, 5):   # 5: the last window is cut by max_tokens
                    serial = eng.generate(prompt, False, drafter=0, n=n, **s)
                    for window in (2, 5):
                        drafted = eng.generate(prompt, False, drafter=MTP, n=n, max_window=window, **s)
                        if (drafted["tokens"], drafted["sha"], drafted["stop"]) != \
                                (serial["tokens"], serial["sha"], serial["stop"]):
                            mismatches.append((i, s, n, window, serial["tokens"], drafted["tokens"]))
                        assert "drafter mtp" in drafted["spec"], drafted["spec"]
                        proposed_runs += "acceptance by depth 1:" in drafted["spec"]
    finally:
        eng.close()
    assert not mismatches, f"drafted != serial in {len(mismatches)} cases, first: {mismatches[0]}"
    assert proposed_runs > 0, "no window carried an MTP draft"


def test_mtp_without_nextn_layers_is_a_clear_error(capi):
    eng = Engine(capi, FIXTURES / "qwen3moe_e8_k2" / "model-Q8_0.gguf")
    try:
        c = eng.capi
        got = c.sluice_engine_generate(eng.h, PROMPTS[0].encode(), 0, 4, 0.0, 40, 0.95, 0.05, 0, 1.0, MTP, 4)
        assert got < 0
        assert "no MTP (nextn) layers" in c.sluice_engine_error(eng.h).decode()
    finally:
        eng.close()
