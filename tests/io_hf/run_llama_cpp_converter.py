#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py (--outtype f32) over several HF directories in one
process (torch is imported once). The test tokenizer's BPE pre-tokenizer hash is not in the
converter's list, so get_vocab_base_pre is answered with "qwen2"; and the SentencePiece path
(which needs the sentencepiece package just to find out that there is no tokenizer.model) reports
the missing file as the converter expects, so llama falls through to the BPE vocabulary.

usage: run_llama_cpp_converter.py CONVERTER DIR:OUT.gguf [DIR:OUT.gguf ...]
"""
import pathlib
import runpy
import sys


def main():
    conv = pathlib.Path(sys.argv[1])
    sys.path.insert(0, str(conv.parent))
    import conversion.base as base  # the converter's own package, next to the script

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    sentencepiece = base.TextModel._set_vocab_sentencepiece

    def no_sentencepiece_model(self, *args, **kwargs):
        if not (self.dir_model / "tokenizer.model").is_file():
            raise FileNotFoundError("no tokenizer.model")
        return sentencepiece(self, *args, **kwargs)

    base.TextModel._set_vocab_sentencepiece = no_sentencepiece_model
    for job in sys.argv[2:]:
        src, out = job.split(":", 1)
        sys.argv = [str(conv), "--outtype", "f32", "--outfile", out, src]
        runpy.run_path(str(conv), run_name="__main__")


if __name__ == "__main__":
    main()
