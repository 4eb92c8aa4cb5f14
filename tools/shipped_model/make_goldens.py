#!/usr/bin/env python3
"""Golden fixtures for the shipped models, made by transformers and llama.cpp (never by sluice).

For each committed GGUF (models/sluice-moe-*-Q8_0.gguf, models/sluice-draft-*-Q8_0.gguf):
  - transformers loads the GGUF itself (from_pretrained(gguf_file=...): the Q8_0 weights
    dequantised, i.e. exactly the weights sluice reads) and computes float32 logits, eager
    attention, for a few prompts; per position the top-K ids and logits are kept (small files),
    with the top-1/top-2 margin, then GREEDY_N greedy tokens (full recompute each step) and
    their margins;
  - the prompts' token ids come from the Hugging Face tokenizer (.shipped/tokenizer/tokenizer.json,
    the one the GGUF vocabulary was written from), and llama.cpp's tokenisation of the same texts
    is checked equal before anything is written;
  - llama.cpp (llama-cpp-python, CPU) gives its greedy tokens for the same prompts, kept for a
    side-by-side print and a first-token check.

  python3 tools/shipped_model/make_goldens.py [--tokenizer .shipped/tokenizer]
writes tests/golden/fixtures/shipped_{moe,draft}/ (manifest.json, top_ids_p<i>.i32, top_logits_p<i>.f32).
The manifest has "cases", not "prompts", so tests/golden/test_golden.py (which wants an hf/ folder
and an F32 GGUF) does not pick these up; tests/golden/test_shipped_model.py reads them.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "golden" / "fixtures"
TOP_K = 16
GREEDY_N = 32
PROMPTS = [
    ("code", "def fibonacci(n):"),
    ("code", "import os\n\n\ndef read_lines(path):\n    \"\"\"Return the lines of a file.\"\"\"\n"),
    ("chatml", "<|im_start|>user\nWhat does the function os.path.join do?<|im_end|>\n<|im_start|>assistant\n"),
    ("prose", "The :mod:`json` module provides"),
]


def sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hf_from_gguf(path: pathlib.Path):
    import torch
    import transformers
    import gguf
    reader = gguf.GGUFReader(str(path))
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    head_dim = int(reader.fields[f"{arch}.attention.key_length"].parts[-1][0])
    # transformers 5.17 reads {arch}.attention.key_length for qwen3moe but not for qwen3 (it then
    # takes Qwen3Config's default head_dim of 128): pass it explicitly.
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager",
        head_dim=head_dim).eval()
    assert model.config.head_dim == head_dim
    cfg = model.config
    if getattr(cfg, "num_experts", 0):
        # The GGUF has no key for it and llama.cpp's qwen3moe always renormalises the top-k weights
        # (as the model was trained: norm_topk_prob = true); say so to transformers explicitly.
        cfg.norm_topk_prob = True
        for layer in model.model.layers:
            layer.mlp.gate.norm_topk_prob = True
    return model


def logits_and_greedy(model, ids: list[int]):
    import torch
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
        seq, greedy, margins = list(ids), [], []
        last = logits[-1]
        for _ in range(GREEDY_N):
            nxt = int(np.argmax(last))
            top2 = np.sort(last)[-2:]
            greedy.append(nxt)
            margins.append(round(float(top2[1] - top2[0]), 5))
            seq.append(nxt)
            last = model(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1].float().numpy()
    return logits, greedy, margins


def llama_cpp_greedy(path: pathlib.Path, prompts_ids: list[list[int]], texts: list[str]):
    from llama_cpp import Llama
    llm = Llama(model_path=str(path), n_ctx=512, n_threads=2, verbose=False, logits_all=True)
    outs = []
    for ids, text in zip(prompts_ids, texts):
        got = llm.tokenize(text.encode(), add_bos=False, special=True)
        if got != ids:
            sys.exit(f"{path.name}: llama.cpp tokenises {text!r} as {got}, the HF tokenizer as {ids}")
        llm.reset()
        llm.eval(ids)
        out = []
        for _ in range(GREEDY_N):
            nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
            out.append(nxt)
            llm.eval([nxt])
        outs.append(out)
    return outs


EDGE_TEXTS = [
    "x = {'a': 1, \"b\": [2, 3.5e-7]}  # 12345678901234567890\r\n\tprint(f\"{x!r:>10}\")\n\n\n",
    "naïve café – “quotes” — 日本語のテキスト 🙂👍🏽 Ünïcödé ÀÉÎÕÜ ß ﬁ",
    "I'm sure they'll say it's fine; WE'RE DONE, you've seen it, he'd know.",
    "   leading spaces\n\n    \n\t\tmixed\t \n trailing   ",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|endoftext|>",
    "0x1F 0o17 0b1010 1_000_000 -3.14 1e10 ２３４ ١٢٣",
]


def make_tokenizer_cases(gguf_path: pathlib.Path, tok, corpus: pathlib.Path) -> None:
    """fixtures/shipped_moe/tokenizer_cases.json: texts and the HF tokenizer's ids for them, each
    checked equal to llama.cpp's tokenisation: edge cases plus 1,500-character pieces of the
    held-out corpus (PSF-licensed Python sources and docs)."""
    from llama_cpp import Llama
    llm = Llama(model_path=str(gguf_path), n_ctx=64, n_threads=2, verbose=False, vocab_only=True)
    held = (corpus / "heldout.txt").read_text(encoding="utf-8").split("<|endoftext|>")
    texts = list(EDGE_TEXTS) + [d[:1500] for d in held[::6]]
    cases = []
    for t in texts:
        ids = tok.encode(t).ids
        got = llm.tokenize(t.encode(), add_bos=False, special=True)
        if got != ids:
            sys.exit(f"llama.cpp tokenises {t[:60]!r}... differently from the HF tokenizer")
        cases.append({"text": t, "ids": ids})
    out = FIX / "shipped_moe" / "tokenizer_cases.json"
    out.write_text(json.dumps({"note": "HF tokenizers ids, equal to llama.cpp's for every text", "cases": cases},
                              indent=0, ensure_ascii=False) + "\n")
    print(f"{out}: {len(cases)} texts, {sum(len(c['ids']) for c in cases)} tokens")


def make(name: str, gguf_path: pathlib.Path, tok) -> dict:
    import torch
    import transformers
    out = FIX / name
    out.mkdir(parents=True, exist_ok=True)
    for f in out.glob("*"):
        if f.name != "tokenizer_cases.json":
            f.unlink()
    model = hf_from_gguf(gguf_path)
    texts = [t for _, t in PROMPTS]
    ids_list = [tok.encode(t).ids for t in texts]
    llama = llama_cpp_greedy(gguf_path, ids_list, texts)
    cases = []
    for i, ((kind, text), ids) in enumerate(zip(PROMPTS, ids_list)):
        logits, greedy, margins = logits_and_greedy(model, ids)
        order = np.argsort(-logits, axis=1, kind="stable")[:, :TOP_K]
        top_logits = np.take_along_axis(logits, order, axis=1)
        order.astype("<i4").tofile(out / f"top_ids_p{i}.i32")
        top_logits.astype("<f4").tofile(out / f"top_logits_p{i}.f32")
        cases.append({
            "kind": kind, "text": text, "ids": ids, "n_pos": len(ids),
            "top_ids_file": f"top_ids_p{i}.i32", "top_logits_file": f"top_logits_p{i}.f32",
            "max_abs_logit": [round(float(x), 5) for x in np.abs(logits).max(axis=1)],
            "top1_top2_margin": [round(float(x), 5) for x in top_logits[:, 0] - top_logits[:, 1]],
            "greedy_ids": greedy, "greedy_margins": margins,
            "greedy_text": tok.decode(greedy, skip_special_tokens=False),
            "llama_cpp_greedy_ids": llama[i], "llama_cpp_greedy_text": tok.decode(llama[i], skip_special_tokens=False),
        })
        print(f"{name} [{kind}] {text!r}\n  transformers: {cases[-1]['greedy_text']!r}\n"
              f"  llama.cpp:    {cases[-1]['llama_cpp_greedy_text']!r}", flush=True)
    import llama_cpp
    manifest = {
        "name": name, "model": str(gguf_path.relative_to(ROOT)), "model_sha256": sha256(gguf_path),
        "reference": ("transformers float32, eager attention, loading the GGUF itself (gguf_file=): the Q8_0 "
                      "weights dequantised; greedy = argmax with a full recompute each step, no stop on EOS"),
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "llama_cpp_python": llama_cpp.__version__},
        "top_k": TOP_K, "top_format": "little-endian [n_pos, top_k]: ids int32 and logits float32, best first",
        "cases": cases,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", type=pathlib.Path, default=ROOT / ".shipped" / "tokenizer")
    ap.add_argument("--only", choices=["shipped_moe", "shipped_draft", "tokenizer"],
                    help="remake one fixture (tokenizer: shipped_moe/tokenizer_cases.json only)")
    ap.add_argument("--corpus", type=pathlib.Path, default=ROOT / ".shipped" / "corpus")
    args = ap.parse_args()
    import torch
    from tokenizers import Tokenizer
    torch.set_num_threads(2)
    tok = Tokenizer.from_file(str(args.tokenizer / "tokenizer.json"))
    if args.only in (None, "tokenizer"):
        make_tokenizer_cases(sorted((ROOT / "models").glob("sluice-moe-*-Q8_0.gguf"))[0], tok, args.corpus)
    if args.only == "tokenizer":
        return
    for name, pattern in (("shipped_moe", "sluice-moe-*-Q8_0.gguf"), ("shipped_draft", "sluice-draft-*-Q8_0.gguf")):
        if args.only and name != args.only:
            continue
        found = sorted((ROOT / "models").glob(pattern))
        if len(found) != 1:
            sys.exit(f"models/: expected one {pattern}, found {[f.name for f in found]}")
        make(name, found[0], tok)


if __name__ == "__main__":
    main()
