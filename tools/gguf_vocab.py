"""tokenizer.ggml.* from a Hugging Face tokenizer.json, as llama.cpp's convert_hf_to_gguf writes a
BPE vocabulary: tokens by id, token types, merges. Shared by the fixture and model exporters."""
from __future__ import annotations

import json
import pathlib


def gguf_vocab(tokenizer_json: pathlib.Path):
    """Returns (tokens, types, merges, vocab): tokens by id, types 1 NORMAL / 3 CONTROL (special
    added tokens), merges as "a b" strings, and the text -> id map."""
    tj = json.loads(tokenizer_json.read_text())
    vocab = dict(tj["model"]["vocab"])
    for added in tj["added_tokens"]:
        vocab[added["content"]] = added["id"]
    tokens = [None] * len(vocab)
    for text, idx in vocab.items():
        tokens[idx] = text
    assert all(t is not None for t in tokens), "tokenizer ids are not contiguous"
    specials = {a["content"] for a in tj["added_tokens"] if a["special"]}
    types = [3 if t in specials else 1 for t in tokens]  # 1 NORMAL, 3 CONTROL
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    return tokens, types, merges, vocab
