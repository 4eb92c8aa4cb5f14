#!/usr/bin/env python3
"""Write the trimmed draft vocabulary of a model with an MTP head: the N token ids most frequent
in a text, most frequent first, in the file `sluice run/serve --spec mtp` reads beside the model
(src/spec/draft_vocab.h has the format). The MTP head's output projection then computes only
those rows when it drafts; the verifier still checks every draft against the whole vocabulary,
so the file changes the speed, never a token.

    python3 tools/make_draft_vocab.py MODEL.gguf --text corpus.txt --top 32768
    # writes MODEL.gguf.draft-vocab (a Hugging Face directory: DIR/draft-vocab); -o to choose

Tokenisation: a Hugging Face directory's tokenizer.json, or --tokenizer FILE; a GGUF file's own
byte-level BPE (tokenizer.ggml.model "gpt2": its tokens and merges, with the GPT-2 pre-tokenizer,
which can split a few strings differently from the model's own pre-tokenizer: good enough to
count frequencies). Ties are broken by the smaller id, so the file is a function of the text.
Needs the `tokenizers` and (for GGUF) `gguf` packages.
"""
from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys

HEADER = "sluice-draft-vocab 1"


def gguf_vocab(path: pathlib.Path):
    """(n_vocab, tokenizer) of a GGUF file: n_vocab is the head's logits per row."""
    import gguf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    r = gguf.GGUFReader(str(path))
    shapes = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    emb = shapes.get("output.weight") or shapes.get("token_embd.weight")
    if emb is None:
        raise SystemExit(f"{path}: neither output.weight nor token_embd.weight: not a model file?")

    def strings(key):
        f = r.fields.get(key)
        return [] if f is None else [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    kind = strings("tokenizer.ggml.model")
    if kind != ["gpt2"]:
        raise SystemExit(f"{path}: tokenizer.ggml.model is {kind or 'absent'}: only byte-level BPE ('gpt2') "
                         "is read here; pass --tokenizer tokenizer.json")
    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return emb[1], tok


def hf_vocab(path: pathlib.Path):
    from tokenizers import Tokenizer

    cfg = json.loads((path / "config.json").read_text())
    n_vocab = cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size")
    if not n_vocab:
        raise SystemExit(f"{path}/config.json: no vocab_size")
    return int(n_vocab), Tokenizer.from_file(str(path / "tokenizer.json"))


def top_ids(ids, n_vocab: int, top: int):
    """The `top` most frequent ids in [0, n_vocab), most frequent first, ties by the smaller id."""
    counts = collections.Counter(i for i in ids if 0 <= i < n_vocab)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return [i for i, _ in ranked[:top]], counts


def write(out: pathlib.Path, n_vocab: int, ids, source: str) -> None:
    lines = [HEADER, f"# the {len(ids)} most frequent ids of {source}, most frequent first",
             f"n_vocab {n_vocab}", f"count {len(ids)}", *map(str, ids)]
    out.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="GGUF file or Hugging Face directory")
    p.add_argument("--text", required=True, help="calibration text (UTF-8)")
    p.add_argument("--top", type=int, default=32768, help="ids to keep (default 32768)")
    p.add_argument("--tokenizer", help="a tokenizer.json to use instead of the model's")
    p.add_argument("-o", "--out", help="output file (default: beside the model)")
    a = p.parse_args(argv)
    model = pathlib.Path(a.model)
    if a.top < 1:
        raise SystemExit(f"--top {a.top}: expected >= 1")
    n_vocab, tok = hf_vocab(model) if model.is_dir() else gguf_vocab(model)
    if a.tokenizer:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(a.tokenizer)
    text = pathlib.Path(a.text).read_text(encoding="utf-8")
    ids = tok.encode(text, add_special_tokens=False).ids
    if not ids:
        raise SystemExit(f"{a.text}: no tokens")
    kept, counts = top_ids(ids, n_vocab, min(a.top, n_vocab))
    out = pathlib.Path(a.out) if a.out else (model / "draft-vocab" if model.is_dir()
                                             else model.with_name(model.name + ".draft-vocab"))
    write(out, n_vocab, kept, pathlib.Path(a.text).name)
    covered = sum(counts[i] for i in kept)
    print(f"{out}: {len(kept)} of {n_vocab} ids cover {covered}/{len(ids)} tokens "
          f"({100.0 * covered / len(ids):.1f}%) of {a.text}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
