"""Golden tests of the forward pass (issue 3).

Against transformers (fixtures by tools/make_golden.py, tests/golden/fixtures/<name>/):
  - F32 GGUF and the Hugging Face directory: logits within 1e-4 relative L2 per position;
  - 64 greedy tokens identical to transformers' for every prompt;
  - the safetensors directory and the F32 GGUF of one model give the same bits.
Against llama.cpp (references by tools/peers/llama_reference.py, fixtures/llama_cpp/):
  - quantised GGUFs and the real SmolLM2-135M Q4_1: teacher-forced top-1 agreement over the
    fixed token sequence; every differing position is shown (with both margins) and must be a
    near-tie; greedy output printed side by side with llama.cpp's.

Why the llama.cpp bar is MIN_AGREE and not 99%: with the same dequantised weights, sluice's and
llama.cpp's logits are each 1-6% (relative L2) away from a float64 reference on SmolLM2 Q4_1 (the
int8 activation rounding, amplified over 30 layers), and 1-7% from each other (measured
2026-11-29 on 12 positions: sluice-llama.cpp 0.5%..7.2%, llama.cpp-float64 0.6%..5.0%,
sluice-float64 0.9%..6.1%). Over 512 teacher-forced SmolLM2 tokens that gave 95.9% top-1
agreement, every difference at a llama.cpp margin <= 0.34 logits; the random tiny fixtures
amplify the same noise more (llama_gqa2_tied Q8_0 is 23% from transformers) and gave 95%. So
the test holds the near-tie property and the agreement at what two correct int8
implementations reach (BARS); F32 files are held to 99%.
"""
import ctypes
import json
import pathlib

import numpy as np
import pytest

FIX = pathlib.Path(__file__).resolve().parent / "fixtures"
LLAMA = FIX / "llama_cpp"
REL_L2 = 1e-4
# (min top-1 agreement, near-tie bound as a fraction of max |logit|): F32 weights leave only
# float summation order between sluice and llama.cpp; int8 activations add the noise measured in
# the module docstring (llama.cpp's own quantised logits are up to 20-40% from transformers' on
# the same dequantised weights: fixtures/llama_cpp/manifest.json, vs_transformers_same_weights).
# For MoE models a differing position need not be a near-tie of the output: a near-tie in the
# ROUTER (two experts with almost equal probability) switches an expert and moves the logits by
# whole units (qwen2moe_shexp Q8_0 position 156: llama.cpp margin 0.74, ours 2.68), and llama.cpp
# does not publish its router margins, so for MoE the margins are printed, not bounded.
BARS = {"F32": (0.99, 0.01), "quantised": (0.93, 0.05), "quantised_moe": (0.93, None)}

N_CTX = 1024
WINDOW = 64


def _manifest(path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def model_fixtures():
    out = []
    for d in sorted(FIX.iterdir()) if FIX.is_dir() else []:
        m = _manifest(d / "manifest.json")
        if m and "prompts" in m and "gguf" in m:
            out.append(d.name)
    return out


def llama_files():
    """(fixture, type) pairs with llama.cpp references, F32 included. Fixtures whose F32 GGUF
    llama.cpp does not reproduce transformers on (llama.cpp's qwen3moe always renormalises the
    top-k weights, so norm_topk_prob = false fixtures differ by design) are left out."""
    m = _manifest(LLAMA / "manifest.json") or {}
    out = []
    for name, fx in sorted(m.get("fixtures", {}).items()):
        files = fx.get("files", {})
        if files.get("F32", {}).get("f32_matches_transformers") is False:
            continue
        for q, entry in sorted(files.items()):
            if entry.get("loads") and "top2_file" in entry and (FIX / name / entry["gguf"]).exists():
                out.append((name, q))
    return out


class Model:
    """One opened model through tests/capi/capi_fwd.cpp."""

    def __init__(self, lib, path, n_ctx=N_CTX, threads=2, window=WINDOW):
        lib.sluice_fwd_open.restype = ctypes.c_void_p
        lib.sluice_fwd_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.sluice_fwd_open_error.restype = ctypes.c_char_p
        lib.sluice_fwd_error.restype = ctypes.c_char_p
        lib.sluice_fwd_error.argtypes = [ctypes.c_void_p]
        lib.sluice_fwd_close.argtypes = [ctypes.c_void_p]
        lib.sluice_fwd_n_vocab.argtypes = [ctypes.c_void_p]
        lib.sluice_fwd_forward.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int,
                                           ctypes.c_int, ctypes.POINTER(ctypes.c_float)]
        lib.sluice_fwd_detokenize.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int,
                                              ctypes.c_char_p, ctypes.c_int]
        lib.sluice_fwd_greedy.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int32), ctypes.c_int,
                                          ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int32)]
        self.lib, self.window = lib, window
        self.h = lib.sluice_fwd_open(str(path).encode(), n_ctx, threads, window)
        if not self.h:
            raise AssertionError(f"sluice cannot open {path}: {lib.sluice_fwd_open_error().decode()}")
        self.n_vocab = lib.sluice_fwd_n_vocab(self.h)

    def close(self):
        if self.h:
            self.lib.sluice_fwd_close(self.h)
            self.h = None

    def _check(self, rc):
        if rc < 0:
            raise AssertionError(self.lib.sluice_fwd_error(self.h).decode())
        return rc

    def logits(self, ids):
        """Teacher-forced logits [len(ids), n_vocab], run in windows of self.window rows."""
        out = np.zeros((len(ids), self.n_vocab), dtype=np.float32)
        for i in range(0, len(ids), self.window):
            chunk = np.ascontiguousarray(ids[i:i + self.window], dtype=np.int32)
            part = np.zeros((len(chunk), self.n_vocab), dtype=np.float32)
            self._check(self.lib.sluice_fwd_forward(self.h, chunk.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                                                    len(chunk), i, part.ctypes.data_as(ctypes.POINTER(ctypes.c_float))))
            out[i:i + len(chunk)] = part
        return out

    def text(self, ids):
        a = np.ascontiguousarray(ids, dtype=np.int32)
        buf = ctypes.create_string_buffer(1 << 16)
        n = self._check(self.lib.sluice_fwd_detokenize(self.h, a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), len(a),
                                                       buf, len(buf)))
        return buf.raw[:n].decode("utf-8", errors="replace")

    def greedy(self, prompt, n, stop_at_eog=False):
        p = np.ascontiguousarray(prompt, dtype=np.int32)
        out = np.zeros(n, dtype=np.int32)
        k = self._check(self.lib.sluice_fwd_greedy(self.h, p.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)), len(p), n,
                                                   int(stop_at_eog), out.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))))
        return [int(t) for t in out[:k]]


@pytest.fixture
def open_model(capi):
    opened = []

    def make(path, **kw):
        m = Model(capi, path, **kw)
        opened.append(m)
        return m

    yield make
    for m in opened:
        m.close()


def fixture_paths(name, fmt=None):
    """The manifest and the paths of the F32 GGUF and the Hugging Face directory. Fixtures too
    large to commit twice carry no F32 GGUF (their manifest says so): the gguf case skips."""
    m = _manifest(FIX / name / "manifest.json")
    paths = {"hf": FIX / name / m["hf_dir"]}
    if "F32" in m["gguf"]:
        paths["gguf"] = FIX / name / m["gguf"]["F32"]["file"]
    if fmt and fmt not in paths:
        pytest.skip(f"{name}: no F32 GGUF committed ({m.get('note', '')})")
    return m, paths


def test_fixtures_exist():
    assert model_fixtures(), f"no golden fixtures under {FIX} (tools/make_golden.py writes them)"


@pytest.mark.parametrize("fmt", ["gguf", "hf"])
@pytest.mark.parametrize("name", model_fixtures())
def test_f32_logits_match_transformers(open_model, name, fmt):
    m, paths = fixture_paths(name, fmt)
    model = open_model(paths[fmt])
    worst = 0.0
    for p in m["prompts"]:
        ref = np.fromfile(FIX / name / p["logits_file"], dtype="<f4").reshape(p["logits_shape"])
        got = model.logits(p["ids"])
        rel = np.linalg.norm(got - ref, axis=1) / np.linalg.norm(ref, axis=1)
        worst = max(worst, float(rel.max()))
        assert rel.max() <= REL_L2, (f"{name} ({fmt}) prompt {p['kind']}: position {int(rel.argmax())} "
                                     f"relative L2 {rel.max():.3g} > {REL_L2}")
    print(f"{name} ({fmt}): worst per-position relative L2 vs transformers {worst:.3g}")


@pytest.mark.parametrize("fmt", ["gguf", "hf"])
@pytest.mark.parametrize("name", model_fixtures())
def test_greedy_64_tokens_match_transformers(open_model, name, fmt):
    m, paths = fixture_paths(name, fmt)
    model = open_model(paths[fmt])
    for p in m["prompts"]:
        want = p["greedy_ids"]
        got = model.greedy(p["ids"], len(want))
        first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        margin = p["greedy_margins"][first] if first is not None else None
        assert got == want, (f"{name} ({fmt}) prompt {p['kind']}: first difference at generated token {first} "
                             f"(transformers' top-2 margin there {margin})")


@pytest.mark.parametrize("name", model_fixtures())
def test_safetensors_and_gguf_give_the_same_bits(open_model, name):
    m, paths = fixture_paths(name, "gguf")
    a, b = open_model(paths["gguf"]), open_model(paths["hf"])
    for p in m["prompts"]:
        la, lb = a.logits(p["ids"]), b.logits(p["ids"])
        assert la.tobytes() == lb.tobytes(), f"{name} prompt {p['kind']}: max |diff| {np.abs(la - lb).max()}"


def teacher_agreement(label, got_logits, top2, margin, kind="quantised"):
    """Top-1 agreement with llama.cpp; every disagreement printed and required to be a near-tie."""
    min_agree, near_tie = BARS[kind]
    n = len(top2)
    top1 = got_logits.argmax(axis=1)
    differ = np.nonzero(top1 != top2[:, 0])[0]
    agree = 1.0 - len(differ) / n
    print(f"{label}: teacher-forced top-1 agreement with llama.cpp {agree * 100:.2f}% over {n} positions")
    for pos in differ:
        row = got_logits[pos]
        ours = float(row[top1[pos]] - row[top2[pos, 0]])   # our preference for our pick over llama's
        print(f"  position {pos}: sluice {top1[pos]} llama.cpp {top2[pos, 0]} (llama.cpp top-2 {top2[pos, 1]}); "
              f"llama.cpp margin {margin[pos]:.4f}, sluice margin for its pick {ours:.4f}")
        scale = float(np.abs(row).max())
        assert near_tie is None or margin[pos] <= near_tie * scale or ours <= near_tie * scale, (
            f"{label}: position {pos} differs but is no near-tie (llama.cpp margin {margin[pos]}, ours {ours}, "
            f"logit scale {scale})")
    assert agree >= min_agree, f"{label}: agreement {agree * 100:.2f}% < {min_agree * 100:.0f}%"


@pytest.mark.parametrize("name,qtype", llama_files())
def test_quantised_fixture_agrees_with_llama_cpp(open_model, name, qtype):
    man = _manifest(LLAMA / "manifest.json")
    entry = man["fixtures"][name]["files"][qtype]
    n = entry["n_pos"]
    seq = np.fromfile(LLAMA / man["tiny_seq_file"], dtype="<i4")[:n]
    top2 = np.fromfile(LLAMA / entry["top2_file"], dtype="<i4").reshape(n, 2)
    margin = np.fromfile(LLAMA / entry["margin_file"], dtype="<f4")
    model = open_model(FIX / name / entry["gguf"])
    fm = _manifest(FIX / name / "manifest.json")
    kind = "F32" if qtype == "F32" else "quantised_moe" if fm["hparams"].get("n_expert") else "quantised"
    teacher_agreement(f"{name} {qtype}", model.logits(seq), top2, margin, kind)
    for p, want in zip(fm["prompts"], entry.get("greedy", [])):
        got = model.greedy(p["ids"], len(want))
        same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), len(want))
        print(f"  greedy {p['kind']}: equal for the first {same} of {len(want)} tokens\n"
              f"    sluice    {got}\n    llama.cpp {want}")


def smollm2_refs():
    m = _manifest(LLAMA / "manifest.json") or {}
    if "smollm2" not in m:
        pytest.fail(f"no smollm2 references in {LLAMA / 'manifest.json'} (tools/peers/llama_reference.py)")
    return m["smollm2"]


def test_smollm2_agrees_with_llama_cpp_teacher_forced(open_model, smollm2_gguf):
    ref = smollm2_refs()
    t = ref["teacher"]
    n = t["n_pos"]
    ids = np.fromfile(LLAMA / ref["tokens_file"], dtype="<i4")[:n]
    top2 = np.fromfile(LLAMA / t["top2_file"], dtype="<i4").reshape(n, 2)
    margin = np.fromfile(LLAMA / t["margin_file"], dtype="<f4")
    model = open_model(smollm2_gguf)
    teacher_agreement("SmolLM2-135M Q4_1", model.logits(ids), top2, margin)


def test_smollm2_greedy_side_by_side_with_llama_cpp(open_model, smollm2_gguf):
    """Five prompts, 64 greedy tokens each, printed next to llama.cpp's. The first generated
    token must agree (a near-tie there would show in the teacher-forced test)."""
    ref = smollm2_refs()
    model = open_model(smollm2_gguf)
    eog = set(ref.get("eog_ids", []))
    first_ok = 0
    for g in ref["greedy"]:
        got = model.greedy(g["prompt_ids"], len(g["ids"]))
        same = next((i for i, (a, b) in enumerate(zip(got, g["ids"])) if a != b), len(g["ids"]))
        stop = next((i for i, t in enumerate(got) if t in eog), len(got))
        print(f"\n--- prompt ({g['kind']}): {g['prompt']!r}\n  equal for the first {same} of {len(g['ids'])} tokens"
              f"\n  llama.cpp: {g['text']!r}\n  sluice:    {model.text(got[:stop])!r}")
        first_ok += int(got[:1] == g["ids"][:1])
    assert first_ok == len(ref["greedy"]), f"first greedy token differs on {len(ref['greedy']) - first_ok} prompts"


def test_smollm2_window_rows_match_single_row(open_model, smollm2_gguf):
    """E1 on the real model: a 16-row window gives each row the bits of one-row decoding."""
    ids = list(range(1000, 1016))
    windowed = open_model(smollm2_gguf, n_ctx=64, window=16).logits(ids)
    single = open_model(smollm2_gguf, n_ctx=64, window=1).logits(ids)
    assert windowed.tobytes() == single.tobytes()
