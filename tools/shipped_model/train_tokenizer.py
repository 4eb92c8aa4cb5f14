#!/usr/bin/env python3
"""Train the shipped model's tokenizer and tokenise the corpus for training.

Byte-level BPE (Hugging Face `tokenizers`, pinned in tools/requirements.txt) trained on
corpus.py's train.txt: VOCAB_SIZE tokens = 256 byte tokens + merges + 3 ChatML specials appended
last (as in Qwen's vocabulary): <|endoftext|>, <|im_start|>, <|im_end|>. Pre-tokenizer: Qwen2's
split regex then ByteLevel without its own regex, which is GGUF tokenizer.ggml.pre = "qwen2" for
llama.cpp and sluice (src/tokenizer/hf.cpp recognises the same Split pattern).

  python3 tools/shipped_model/train_tokenizer.py --corpus .shipped/corpus --out .shipped
writes OUT/tokenizer/{tokenizer.json,tokenizer_config.json} and OUT/data/{train,heldout}.npy
(uint16 token ids, documents separated by <|endoftext|>).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

VOCAB_SIZE = 16384
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
EOT_ID, IM_START_ID, IM_END_ID = VOCAB_SIZE - 3, VOCAB_SIZE - 2, VOCAB_SIZE - 1
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen's ChatML template without tools: what `sluice run --chat` and the server render.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def tokenizer_config() -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "model_max_length": 2048,
        "chat_template": CHAT_TEMPLATE,
    }


def train(docs: list[str]):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE - len(SPECIALS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer)
    tok.add_special_tokens(SPECIALS)
    if tok.get_vocab_size() != VOCAB_SIZE or tok.token_to_id("<|im_end|>") != IM_END_ID:
        sys.exit(f"tokenizer: expected {VOCAB_SIZE} tokens with <|im_end|> last, got {tok.get_vocab_size()}")
    return tok


def encode(tok, text: str) -> np.ndarray:
    """Documents joined by <|endoftext|> (a special token, so encode() keeps it whole)."""
    docs = text.split(SPECIALS[0])
    ids: list[int] = []
    for enc in tok.encode_batch(docs):
        ids.extend(enc.ids)
        ids.append(EOT_ID)
    arr = np.asarray(ids, dtype=np.uint16)
    assert int(arr.max()) < VOCAB_SIZE
    return arr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=pathlib.Path, required=True)
    ap.add_argument("--out", type=pathlib.Path, required=True)
    args = ap.parse_args()
    from tokenizers import Tokenizer

    train_text = (args.corpus / "train.txt").read_text(encoding="utf-8")
    held_text = (args.corpus / "heldout.txt").read_text(encoding="utf-8")
    tdir = args.out / "tokenizer"
    tdir.mkdir(parents=True, exist_ok=True)
    tok = train(train_text.split(SPECIALS[0]))
    tok.save(str(tdir / "tokenizer.json"))
    (tdir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(), indent=2) + "\n")
    tok = Tokenizer.from_file(str(tdir / "tokenizer.json"))

    ddir = args.out / "data"
    ddir.mkdir(parents=True, exist_ok=True)
    stats = {}
    for name, text in (("train", train_text), ("heldout", held_text)):
        arr = encode(tok, text)
        np.save(ddir / f"{name}.npy", arr)
        stats[name] = {"tokens": int(arr.size), "bytes": len(text.encode()),
                       "bytes_per_token": round(len(text.encode()) / arr.size, 3)}
        print(f"{name}: {arr.size:,} tokens, {stats[name]['bytes_per_token']} bytes/token", flush=True)
    (ddir / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")


if __name__ == "__main__":
    main()
