"""Qwen's real vocabulary (qwen.tiktoken from the dashscope package, 151,643 ranks + Qwen2.5's
added tokens), made at test time into a tokenizer.json and a vocab-only GGUF: sluice (from the
GGUF metadata, from the GGUF file opened as a model, from tokenizer.json) against Hugging Face
`tokenizers` and against llama.cpp reading the same GGUF."""
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tok_fixtures as fx  # noqa: E402
from sluice_tok import SluiceTokenizer  # noqa: E402

N_STRINGS = 2500


@pytest.fixture(scope="module")
def vocab():
    try:
        fx.qwen_tiktoken_path()
    except RuntimeError as e:
        pytest.fail(str(e))
    return fx.qwen_vocab()


@pytest.fixture(scope="module")
def meta(vocab):
    return fx.qwen_meta(vocab)


@pytest.fixture(scope="module")
def files(vocab, meta, tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen")
    hf_dir = fx.qwen_hf_dir(vocab, d / "hf")
    gguf_path = fx.write_vocab_gguf(meta, d / "qwen-vocab.gguf")
    return hf_dir, gguf_path


@pytest.fixture(scope="module")
def sluice(capi, meta):
    t = SluiceTokenizer.from_meta(capi, meta)
    yield t
    t.close()


@pytest.fixture(scope="module")
def hf(files):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(files[0] / "tokenizer.json"))


@pytest.fixture(scope="module")
def llama(files):
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(str(files[1]), vocab_only=True, verbose=False)


@pytest.fixture(scope="module")
def strings(vocab):
    return fx.corpus(151643, N_STRINGS, [t for _, t, _ in vocab["added"]])


def test_qwen_ids_equal_hf_tokenizers(sluice, hf, strings):
    assert len(strings) >= 2000
    bad = [s for s in strings if sluice.encode(s) != hf.encode(s, add_special_tokens=False).ids]
    assert not bad, f"{len(bad)} of {len(strings)} differ, first: {bad[:3]!r}"


def test_qwen_ids_equal_llama_cpp(sluice, llama, strings):
    bad = [s for s in strings if sluice.encode(s) != llama.tokenize(s.encode(), add_bos=False, special=True)]
    assert not bad, f"{len(bad)} differ, first: {bad[:3]!r}"
    # Without parse_special, llama.cpp still splits user-defined tokens out, except those its
    # load-time fixes made control tokens (<|fim_*|>, <|repo_name|>, <|file_sep|>): GGUF
    # metadata follows llama.cpp here.
    bad = [s for s in strings
           if sluice.encode(s, parse_special=False) != llama.tokenize(s.encode(), add_bos=False, special=False)]
    assert not bad, f"{len(bad)} differ (no parse_special), first: {bad[:3]!r}"


def test_qwen_tokenizer_json_and_gguf_file_load_to_the_same_ids(capi, files, sluice, strings):
    for t in (SluiceTokenizer.from_hf_dir(capi, files[0]), SluiceTokenizer.for_model(capi, files[1])):
        try:
            assert (t.n_vocab, t.eos) == (sluice.n_vocab, 151645)
            bad = [s for s in strings if t.encode(s) != sluice.encode(s)]
            assert not bad, bad[:3]
        finally:
            t.close()


def test_qwen_user_defined_tokens_split_even_without_parse_special(capi, files, hf):
    # <tool_call> is an added, non-special token: both libraries always match it.
    t = SluiceTokenizer.from_hf_dir(capi, files[0])
    try:
        text = "<tool_call>{}</tool_call><|im_end|>"
        ids = t.encode(text, parse_special=False)
        assert ids[0] == 151657 and 151658 in ids and 151645 not in ids
        assert t.encode(text) == hf.encode(text, add_special_tokens=False).ids
    finally:
        t.close()


def test_qwen_decode_round_trips(sluice, hf, strings):
    for s in strings:
        ids = sluice.encode(s)
        assert sluice.decode(ids) == s.encode()
        assert hf.decode(ids, skip_special_tokens=False) == s
    for data in fx.invalid_corpus(11, 500):  # Qwen has all 256 byte tokens: every byte string round-trips
        assert sluice.decode(sluice.encode(data, parse_special=False)) == data


def test_qwen_end_of_generation_matches_llama_cpp(sluice, llama):
    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llama._model.model)
    assert (sluice.bos, sluice.eos) == (llama_cpp.llama_vocab_bos(vocab), llama_cpp.llama_vocab_eos(vocab))
    ours = [i for i in range(sluice.n_vocab) if sluice.is_eog(i)]
    theirs = [i for i in range(sluice.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    assert ours == theirs
    assert 151645 in ours and 151643 in ours  # <|im_end|>, <|endoftext|>
