"""A Hugging Face model whose output has more rows than its tokenizer has tokens (Qwen3's configs
give 151,936 rows for 151,669 tokens): generation that picks a padding id goes on (the id has
no text, as in transformers and vLLM) instead of failing halfway, and drafted equals serial
through such ids. The model is the golden qwen3_gqa4 fixture with its tied embedding padded from
384 to 512 rows; the padding rows are long, so their logits dominate and greedy picks them."""
import json
import shutil
import struct

import numpy as np

from test_drafted_equals_serial import FIXTURES, Engine

N_TOKENS, N_ROWS = 384, 512
NGRAM = 1  # drafter id of sluice_engine_generate (tests/capi/capi_engine.cpp)


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())


def read_safetensors(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, h in header.items():
        if name == "__metadata__":
            continue
        assert h["dtype"] == "F32", (name, h["dtype"])
        b, e = h["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e], dtype="<f4").reshape(h["shape"])
    return out


def padded_model(tmp_path):
    src = FIXTURES / "qwen3_gqa4" / "hf"
    dst = tmp_path / "qwen3_padded"
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    assert config["vocab_size"] == N_TOKENS and config["tie_word_embeddings"]
    config["vocab_size"] = N_ROWS
    (dst / "config.json").write_text(json.dumps(config))
    tensors = read_safetensors(dst / "model.safetensors")
    embed = tensors["model.embed_tokens.weight"]
    pad = np.random.default_rng(5).standard_normal((N_ROWS - N_TOKENS, embed.shape[1])).astype(np.float32) * 4.0
    tensors["model.embed_tokens.weight"] = np.concatenate([embed, pad])
    write_safetensors(dst / "model.safetensors", tensors)
    return dst


def test_generation_goes_on_through_padding_ids(capi, tmp_path):
    e = Engine(capi, padded_model(tmp_path))
    greedy = e.generate("def add(a, b):", chat=False, n=16)
    padding = [t for t in greedy["tokens"] if t >= N_TOKENS]
    assert len(greedy["tokens"]) == 16 and padding, greedy["tokens"]
    assert all(0 <= t < N_ROWS for t in greedy["tokens"])
    for temperature, seed in ((0.0, 0), (1.0, 3), (1.0, 11)):
        serial = e.generate("def add(a, b):", chat=False, temperature=temperature, seed=seed, n=16)
        drafted = e.generate("def add(a, b):", chat=False, temperature=temperature, seed=seed, n=16, drafter=NGRAM)
        assert drafted["tokens"] == serial["tokens"] and drafted["sha"] == serial["sha"], (temperature, seed)


def test_a_padding_id_among_the_top_logprobs_ends_nothing(sluice_bin, tmp_path):
    # fill_logprobs named the top ids with token_bytes, which throws past the tokenizer: the
    # exception left the step and ended every request in the batch with an error.
    import importlib.util
    import json as _json

    # tests/server/conftest.py's server helpers (a module named conftest is already tests/'s).
    spec = importlib.util.spec_from_file_location("server_conftest", FIXTURES.parents[1] / "server" / "conftest.py")
    helpers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helpers)
    server = helpers.start_server(sluice_bin, str(padded_model(tmp_path)), "-c", "256", name="padded_rows_server")
    try:
        status, body = server.post_json("/v1/completions", {"prompt": "def add(a, b):", "max_tokens": 4,
                                                            "logprobs": 5, "temperature": 0})
        assert status == 200, body
        top = body["choices"][0]["logprobs"]["top_logprobs"]
        assert len(top) == 4 and all(len(t) >= 1 for t in top), _json.dumps(body)[:500]
    finally:
        assert server.stop() == 0, server.log_tail()
