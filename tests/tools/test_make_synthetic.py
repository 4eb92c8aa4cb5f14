"""tools/make_synthetic.py: synthetic GGUFs carry the real models' tensor set, valid random
blocks of the right scale, a loadable tokenizer and the router-realism metadata."""
import dataclasses
import pathlib
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import make_synthetic  # noqa: E402
import synthetic_shapes as S  # noqa: E402

gguf = pytest.importorskip("gguf")
Q = gguf.GGMLQuantizationType


def make(tmp_path: pathlib.Path, *extra: str, name: str = "m.gguf") -> pathlib.Path:
    """Runs the tool in this process (its CLI entry point; saves an interpreter start a file)."""
    out = tmp_path / name
    argv = ["--tiny", "--pool-mb", "1", "--threads", "2", "-o", str(out), *extra]
    assert make_synthetic.main(argv) == 0
    return out


# GGUFReader takes ~10 s to parse a 151936-string vocabulary on a loaded machine, so files
# read back here use a shrunk vocabulary; the llama.cpp test keeps the real-size one.
SMALL_VOCAB = "2048"


@pytest.fixture(scope="module")
def small_file(tmp_path_factory):
    """mix -> a 2-layer tiny file with a shrunk vocabulary, made once per module."""
    made: dict[str, pathlib.Path] = {}

    def get(mix: str) -> pathlib.Path:
        if mix not in made:
            made[mix] = make(tmp_path_factory.mktemp(mix), "--layers", "2", "--mix", mix,
                             "--vocab", SMALL_VOCAB)
        return made[mix]
    return get


def test_real_shapes_follow_published_configs():
    s = S.SHAPES["qwen3-30b-a3b"]
    specs = {t.name: t for t in S.tensor_specs(s, "q4_k_m")}
    assert len(specs) == 3 + 12 * 48
    assert specs["token_embd.weight"].ne == (2048, 151936)
    assert specs["blk.0.attn_q.weight"].ne == (2048, 32 * 128)
    assert specs["blk.0.attn_k.weight"].ne == (2048, 4 * 128)
    assert specs["blk.0.attn_output.weight"].ne == (4096, 2048)
    assert specs["blk.47.ffn_gate_exps.weight"].ne == (2048, 768, 128)
    assert specs["blk.47.ffn_down_exps.weight"].ne == (768, 2048, 128)
    assert specs["blk.47.ffn_gate_inp.weight"].ne == (2048, 128)
    assert specs["blk.5.attn_k_norm.weight"].ne == (128,)
    big = {t.name: t for t in S.tensor_specs(S.SHAPES["qwen3-235b-a22b"], "q4_k_m")}
    assert len(big) == 3 + 12 * 94
    assert big["blk.93.ffn_up_exps.weight"].ne == (4096, 1536, 128)
    assert big["blk.93.attn_q.weight"].ne == (4096, 64 * 128)


def test_q4_k_m_mix_gives_q6_k_where_llama_cpp_does():
    specs = {t.name: t.qtype for t in S.tensor_specs(S.SHAPES["qwen3-30b-a3b"], "q4_k_m")}
    # 48 layers: first and last 6 layers, and layers 8, 11, ..., 41 in between.
    more = set(range(6)) | set(range(42, 48)) | set(range(8, 42, 3))
    for il in range(48):
        want = Q.Q6_K if il in more else Q.Q4_K
        assert specs[f"blk.{il}.ffn_down_exps.weight"] == want, il
        assert specs[f"blk.{il}.attn_v.weight"] == want, il
        assert specs[f"blk.{il}.ffn_gate_exps.weight"] == Q.Q4_K
        assert specs[f"blk.{il}.ffn_gate_inp.weight"] == Q.F32
    assert specs["output.weight"] == Q.Q6_K and specs["token_embd.weight"] == Q.Q4_K


def test_q4_k_m_size_matches_published_files():
    # Published Q4_K_M GGUFs: Qwen3-30B-A3B 18.6 GB, Qwen3-235B-A22B 142 GB.
    for shape, gb in (("qwen3-30b-a3b", 18.6), ("qwen3-235b-a22b", 142.0)):
        specs = S.tensor_specs(S.SHAPES[shape], "q4_k_m")
        n = sum(np.prod(t.ne) // gguf.GGML_QUANT_SIZES[t.qtype][0] * gguf.GGML_QUANT_SIZES[t.qtype][1]
                for t in specs)
        assert abs(n / 1e9 - gb) / gb < 0.01, (shape, n / 1e9)


@pytest.mark.parametrize("mix", sorted(S.MIXES))
def test_file_has_spec_names_shapes_types_and_scaled_finite_weights(small_file, mix):
    path = small_file(mix)
    reader = gguf.GGUFReader(path)
    want = S.tensor_specs(dataclasses.replace(S.tiny(S.SHAPES["qwen3-30b-a3b"]), n_layer=2,
                                              n_vocab=int(SMALL_VOCAB)), mix)
    got = {t.name: t for t in reader.tensors}
    assert sorted(got) == sorted(t.name for t in want)
    for spec in want:
        t = got[spec.name]
        assert tuple(int(x) for x in t.shape) == spec.ne, spec.name
        assert t.tensor_type == spec.qtype, spec.name
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        assert np.isfinite(w).all(), spec.name
        if spec.role == "norm":
            assert abs(float(w.mean()) - 1.0) < 0.05, spec.name
        elif spec.role != "router":
            target = 0.05 if spec.role == "token_embd" else 1 / np.sqrt(spec.n_in)
            assert 0.8 < float(w.std()) / target < 1.25, (spec.name, float(w.std()), target)
            assert abs(float(w.mean())) < 0.1 * target, spec.name
            # Centred per 32 weights, as real quantised rows are (i.i.d. gives 1/sqrt(32) = 0.18).
            group_means = w.reshape(-1, 32).mean(axis=1)
            assert float(group_means.std()) < 0.3 * float(w.std()), spec.name
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    assert arch == "qwen3moe"
    assert int(reader.fields["qwen3moe.expert_count"].parts[-1][0]) == 8
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == int(SMALL_VOCAB)
    assert int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0]) == S.special_id("<|im_end|>", 2048)


def test_router_metadata_is_recorded_and_rows_favour_hot_experts(tmp_path):
    reader = gguf.GGUFReader(make(tmp_path, "--layers", "3", "--vocab", SMALL_VOCAB, "--router-skew",
                                  "1.0", "--router-locality", "0.4", "--router-seed", "7"))
    f = reader.fields
    assert float(f["sluice.synthetic.router.skew"].parts[-1][0]) == 1.0
    assert abs(float(f["sluice.synthetic.router.locality"].parts[-1][0]) - 0.4) < 1e-6
    assert int(f["sluice.synthetic.router.seed"].parts[-1][0]) == 7
    # Layer-0 router inputs are RMS-normalised embeddings: random unit-RMS vectors.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4000, 256))
    hot_share = []
    for il in range(3):
        t = next(t for t in reader.tensors if t.name == f"blk.{il}.ffn_gate_inp.weight")
        router = np.asarray(t.data, dtype=np.float32).reshape(8, 256)  # [n_expert, n_embd]
        top = np.argsort(-(x @ router.T), axis=1)[:, :2]
        rank = S.expert_ranks(7, il, 8)
        hot = np.isin(top, np.flatnonzero(rank < 2))  # the hottest quarter of the experts
        hot_share.append(hot.mean())
    assert min(hot_share) > 0.4, hot_share  # uniform routing would give 0.25


def test_routing_model_follows_skew_and_locality():
    rng = np.random.default_rng(3)
    even = S.simulate_routing(0.0, 0.0, 128, 8, 1500, rng)
    skewed = S.simulate_routing(1.2, 0.0, 128, 8, 1500, rng)
    local = S.simulate_routing(1.2, 0.5, 128, 8, 1500, rng)
    assert S.top_share(even, 128, 0.25) < 0.32
    assert S.top_share(skewed, 128, 0.25) > 0.7
    assert S.reuse_fraction(even) < 0.1
    assert S.reuse_fraction(local) > 0.55
    for picks in (even, skewed, local):  # a token never takes one expert twice
        assert all(len(set(row)) == 8 for row in picks)


def test_bad_arguments_are_rejected(tmp_path, capsys):
    for bad in (["--router-locality", "1.5"], ["--router-skew", "-1"], ["--layers", "0"],
                ["--mix", "q3_k_xl"], ["--vocab", "100"], ["--pool-mb", "0"], ["--seed", "-1"], ["--threads", "0"]):
        with pytest.raises(SystemExit) as e:
            make_synthetic.main(["--tiny", "-o", str(tmp_path / "x.gguf"), *bad])
        assert e.value.code != 0, bad
        assert not (tmp_path / "x.gguf").exists(), bad
    # The command line itself works (the in-process calls above skip the interpreter start).
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "make_synthetic.py"), "--plan"],
                       capture_output=True, text=True, check=True)
    assert "qwen3-30b-a3b q4_k_m: 579 tensors" in r.stdout


def test_llama_cpp_loads_tokenizes_and_decodes(tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    path = make(tmp_path, "--layers", "3", "--router-skew", "1.0")  # real vocabulary size
    m = llama_cpp.Llama(str(path), n_ctx=64, n_threads=2, logits_all=True, verbose=False)
    text = b"def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)"
    toks = m.tokenize(text, add_bos=False)
    assert m.detokenize(toks) == text
    assert len(toks) < len(text) * 0.7  # the filler merges do join bytes
    assert m.tokenize(b"<|im_start|>", add_bos=False, special=True) == [151644]
    assert m.token_eos() == 151645
    m.eval(toks)
    logits = np.asarray(m.scores[len(toks) - 1])
    assert np.isfinite(logits).all()
    assert 0.1 < float(logits.std()) < 100.0  # neither vanished nor blown up through the layers


@pytest.mark.parametrize("mix", ["q8_0", "iq4_xs", "iq3_s", "mxfp4"])
def test_llama_cpp_decodes_every_mix(small_file, mix):
    llama_cpp = pytest.importorskip("llama_cpp")
    path = small_file(mix)
    m = llama_cpp.Llama(str(path), n_ctx=32, n_threads=2, logits_all=True, verbose=False)
    toks = m.tokenize(b"for i in range(10): print(i)", add_bos=False)
    m.eval(toks)
    logits = np.asarray(m.scores[len(toks) - 1])
    assert np.isfinite(logits).all() and 0.1 < float(logits.std()) < 100.0, mix
