"""The llama-bpe (Llama 3) and gpt2 pre-tokenizers on a real 151k vocabulary (Qwen's, from
dashscope): sluice against Hugging Face `tokenizers` (Split(Llama 3 regex) + ignore_merges, or
plain ByteLevel) and against llama.cpp reading a GGUF whose tokenizer.ggml.pre names them."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tok_fixtures as fx  # noqa: E402
from sluice_tok import SluiceTokenizer  # noqa: E402

VARIANTS = {
    # name: (tokenizer.ggml.pre, HF pre_tokenizer, HF model.ignore_merges)
    "llama-bpe": ("llama-bpe", fx.LLAMA3_PRE, True),
    "gpt2": ("gpt-2", fx.GPT2_PRE, False),  # llama.cpp knows GPT-2 as "gpt-2"
}


@pytest.fixture(scope="module")
def vocab():
    try:
        fx.qwen_tiktoken_path()
    except RuntimeError as e:
        pytest.fail(str(e))
    return fx.qwen_vocab()


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request, vocab, capi, tmp_path_factory):
    from tokenizers import Tokenizer

    try:  # llama.cpp (the llama-cpp-python package) is a second oracle where it is installed
        import llama_cpp
    except ImportError:
        llama_cpp = None

    pre, hf_pre, ignore_merges = VARIANTS[request.param]
    d = tmp_path_factory.mktemp(f"pre_{request.param}")
    meta = fx.qwen_meta(vocab, pre)
    hf_dir = fx.qwen_hf_dir(vocab, d / "hf", hf_pre, ignore_merges)
    gguf_path = fx.write_vocab_gguf(meta, d / "vocab.gguf")
    ours = SluiceTokenizer.from_meta(capi, meta)
    ours_hf = SluiceTokenizer.from_hf_dir(capi, hf_dir)
    yield {
        "name": request.param, "sluice": ours, "sluice_hf": ours_hf,
        "hf": Tokenizer.from_file(str(hf_dir / "tokenizer.json")),
        "llama": llama_cpp.Llama(str(gguf_path), vocab_only=True, verbose=False) if llama_cpp else None,
    }
    ours.close()
    ours_hf.close()


@pytest.fixture(scope="module")
def strings(vocab):
    return fx.corpus(3, 2000, [t for _, t, _ in vocab["added"]])


def test_pre_variant_ids_equal_hf_tokenizers(variant, strings):
    t, hf = variant["sluice"], variant["hf"]
    bad = [s for s in strings if t.encode(s) != hf.encode(s, add_special_tokens=False).ids]
    assert not bad, f"{variant['name']}: {len(bad)} of {len(strings)} differ, first: {bad[:3]!r}"


def test_pre_variant_ids_equal_llama_cpp(variant, strings):
    t, llama = variant["sluice"], variant["llama"]
    if llama is None:
        pytest.skip("llama_cpp is not installed (pip install llama-cpp-python builds llama.cpp from source)")
    bad = [s for s in strings if t.encode(s) != llama.tokenize(s.encode(), add_bos=False, special=True)]
    assert not bad, f"{variant['name']}: {len(bad)} of {len(strings)} differ, first: {bad[:3]!r}"


def test_pre_variant_tokenizer_json_is_recognised(variant, strings):
    t, t_hf = variant["sluice"], variant["sluice_hf"]
    bad = [s for s in strings if t.encode(s) != t_hf.encode(s)]
    assert not bad, bad[:3]
