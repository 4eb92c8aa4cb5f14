"""Hugging Face directories built here with numpy + the safetensors package, read through
libsluice: names, shapes, dtypes and bytes must be what llama.cpp's converter would write.
The expected values are computed independently in numpy (the converter's permute written
as reshape/swapaxes, experts stacked with np.stack)."""
import json
import pathlib

import numpy as np
import pytest
from safetensors.numpy import save_file

from hf_capi import GGML_BF16, GGML_F16, GGML_F32, META_BOOL, META_F32, META_STRING, META_U32
from hf_capi import HfError, HfModel, parse_bytes

RNG = np.random.default_rng(7)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def write_dir(path: pathlib.Path, config: dict, tensors: dict, shards: int = 1) -> pathlib.Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    if shards == 1:
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
        return path
    names = sorted(tensors)
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        save_file(part, str(path / fname))
        weight_map.update({n: fname for n in part})
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return path


def llama_permute(w, n_head):
    """convert_hf_to_gguf.py LlamaModel.permute, for weights [rows, cols] and biases [rows]."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LLAMA = dict(architectures=["LlamaForCausalLM"], hidden_size=32, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, intermediate_size=48, vocab_size=40,
             rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=256,
             tie_word_embeddings=False, attention_bias=True)


def llama_tensors(cfg, lm_head=True):
    d, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = d // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    t = {"model.embed_tokens.weight": rand(v, d), "model.norm.weight": rand(d)}
    if lm_head:
        t["lm_head.weight"] = rand(v, d)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": rand(d), p + "post_attention_layernorm.weight": rand(d),
                  p + "self_attn.q_proj.weight": rand(d, d), p + "self_attn.k_proj.weight": rand(kv, d),
                  p + "self_attn.v_proj.weight": rand(kv, d), p + "self_attn.o_proj.weight": rand(d, d),
                  p + "self_attn.q_proj.bias": rand(d), p + "self_attn.k_proj.bias": rand(kv),
                  p + "self_attn.v_proj.bias": rand(kv),
                  p + "mlp.gate_proj.weight": rand(f, d), p + "mlp.up_proj.weight": rand(f, d),
                  p + "mlp.down_proj.weight": rand(d, f)})
    return t


def test_llama_names_shapes_and_permuted_qk_match_the_converter(capi, tmp_path):
    t = llama_tensors(LLAMA)
    d = write_dir(tmp_path / "tiny-llama", LLAMA, t)
    nh, nkv = LLAMA["num_attention_heads"], LLAMA["num_key_value_heads"]
    with HfModel(capi, d) as m:
        assert m.format == "safetensors"
        assert m.order[0] == "token_embd.weight"
        expect = {"token_embd.weight": t["model.embed_tokens.weight"],
                  "output_norm.weight": t["model.norm.weight"], "output.weight": t["lm_head.weight"]}
        for i in range(2):
            p, b = f"model.layers.{i}.", f"blk.{i}."
            expect.update({
                b + "attn_norm.weight": t[p + "input_layernorm.weight"],
                b + "ffn_norm.weight": t[p + "post_attention_layernorm.weight"],
                b + "attn_q.weight": llama_permute(t[p + "self_attn.q_proj.weight"], nh),
                b + "attn_k.weight": llama_permute(t[p + "self_attn.k_proj.weight"], nkv),
                b + "attn_q.bias": llama_permute(t[p + "self_attn.q_proj.bias"], nh),
                b + "attn_k.bias": llama_permute(t[p + "self_attn.k_proj.bias"], nkv),
                b + "attn_v.weight": t[p + "self_attn.v_proj.weight"],
                b + "attn_v.bias": t[p + "self_attn.v_proj.bias"],
                b + "attn_output.weight": t[p + "self_attn.o_proj.weight"],
                b + "ffn_gate.weight": t[p + "mlp.gate_proj.weight"],
                b + "ffn_up.weight": t[p + "mlp.up_proj.weight"],
                b + "ffn_down.weight": t[p + "mlp.down_proj.weight"]})
        assert sorted(m.tensors) == sorted(expect)
        for name, want in expect.items():
            got = m.tensors[name]
            assert got.type == GGML_F32, name
            assert got.ne == list(reversed(want.shape)), name
            assert got.raw == want.tobytes(), name
        # The permutation moved rows: the test would pass for an identity copy otherwise.
        assert m.tensors["blk.0.attn_q.weight"].raw != t["model.layers.0.self_attn.q_proj.weight"].tobytes()
        assert m.meta("general.architecture") == "llama"
        assert m.meta("general.name") == "tiny-llama"
        assert m.meta("llama.attention.head_count_kv") == 2
        assert m.meta_type("llama.attention.head_count_kv") == META_U32
        assert m.meta("llama.rope.freq_base") == 500000.0
        assert m.meta_type("llama.rope.freq_base") == META_F32
        assert m.meta("llama.attention.layer_norm_rms_epsilon") == float(np.float32(1e-5))
        assert m.meta("llama.context_length") == 256
        assert m.meta("llama.rope.dimension_count") == 8
        assert m.meta("llama.vocab_size") == 40


def test_tied_embeddings_make_no_output_tensor(capi, tmp_path):
    cfg = dict(LLAMA, tie_word_embeddings=True)
    d = write_dir(tmp_path / "tied", cfg, llama_tensors(cfg, lm_head=False))
    with HfModel(capi, d) as m:
        assert "output.weight" not in m.tensors
        assert "token_embd.weight" in m.tensors
        assert m.meta("sluice.hf.tie_word_embeddings") is True


def test_sharded_directory_reads_like_one_file(capi, tmp_path):
    t = llama_tensors(LLAMA)
    one = write_dir(tmp_path / "one", LLAMA, t)
    three = write_dir(tmp_path / "three", LLAMA, t, shards=3)
    assert (three / "model.safetensors.index.json").exists()
    with HfModel(capi, one) as a, HfModel(capi, three) as b:
        assert sorted(a.tensors) == sorted(b.tensors)
        for n in a.tensors:
            assert (a.tensors[n].ne, a.tensors[n].raw) == (b.tensors[n].ne, b.tensors[n].raw), n


def test_model_file_open_routes_directories_to_the_hf_reader(capi, tmp_path):
    d = write_dir(tmp_path / "routed", LLAMA, llama_tensors(LLAMA))
    with HfModel(capi, d, via_model_file=True) as m:
        assert m.format == "safetensors"
        assert "blk.1.ffn_down.weight" in m.tensors


def test_bf16_and_f16_are_exposed_as_stored(capi, tmp_path):
    cfg = dict(LLAMA, num_hidden_layers=1, tie_word_embeddings=True)
    t = {k: v for k, v in llama_tensors(cfg, lm_head=False).items()}
    t["model.norm.weight"] = t["model.norm.weight"].astype(np.float16)
    d = write_dir(tmp_path / "halves", cfg, t)
    # BF16 has no numpy dtype: rewrite the embedding's entry by hand as the same bytes, BF16 bits.
    emb_bits = RNG.integers(0, 1 << 16, size=(40, 32), dtype=np.uint16)
    blob = (d / "model.safetensors").read_bytes()
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    e = header["model.embed_tokens.weight"]
    begin, end = e["data_offsets"]
    assert end - begin == emb_bits.nbytes * 2  # F32 -> BF16 halves the bytes: shrink the range
    e["dtype"], e["data_offsets"] = "BF16", [begin, begin + emb_bits.nbytes]
    data = bytearray(blob[8 + n:])
    data[begin:begin + emb_bits.nbytes] = emb_bits.tobytes()
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    (d / "model.safetensors").write_bytes(len(h).to_bytes(8, "little") + h + bytes(data))
    with HfModel(capi, d) as m:
        emb = m.tensors["token_embd.weight"]
        assert emb.type == GGML_BF16 and emb.ne == [32, 40]
        assert np.array_equal(emb.array(), emb_bits)
        norm = m.tensors["output_norm.weight"]
        assert norm.type == GGML_F16
        assert norm.raw == t["model.norm.weight"].tobytes()


QWEN3MOE = dict(architectures=["Qwen3MoeForCausalLM"], hidden_size=16, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=32,
                moe_intermediate_size=12, num_experts=5, num_experts_per_tok=2, norm_topk_prob=True,
                vocab_size=24, rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=128,
                tie_word_embeddings=False)


def qwen3moe_tensors(cfg, fused: bool):
    d, f, e, hd = cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["num_experts"], cfg["head_dim"]
    rng = np.random.default_rng(11)  # the same weights for both layouts

    def r(*s):
        return rng.standard_normal(s).astype(np.float32)

    t = {"model.embed_tokens.weight": r(24, d), "model.norm.weight": r(d), "lm_head.weight": r(24, d)}
    experts = {}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": r(d), p + "post_attention_layernorm.weight": r(d),
                  p + "self_attn.q_proj.weight": r(4 * hd, d), p + "self_attn.k_proj.weight": r(2 * hd, d),
                  p + "self_attn.v_proj.weight": r(2 * hd, d), p + "self_attn.o_proj.weight": r(d, 4 * hd),
                  p + "self_attn.q_norm.weight": r(hd), p + "self_attn.k_norm.weight": r(hd),
                  p + "mlp.gate.weight": r(e, d)})
        gate, up, down = r(e, f, d), r(e, f, d), r(e, d, f)
        experts[i] = (gate, up, down)
        if fused:  # transformers 5 in memory: gate_up_proj [E, 2F, D], gate rows first
            t[p + "mlp.experts.gate_up_proj"] = np.concatenate([gate, up], axis=1)
            t[p + "mlp.experts.down_proj"] = down
        else:
            for x in range(e):
                t[p + f"mlp.experts.{x}.gate_proj.weight"] = gate[x]
                t[p + f"mlp.experts.{x}.up_proj.weight"] = up[x]
                t[p + f"mlp.experts.{x}.down_proj.weight"] = down[x]
    return t, experts


@pytest.mark.parametrize("fused", [False, True], ids=["per_expert", "fused"])
def test_qwen3moe_experts_are_stacked_as_the_converter_stacks_them(capi, tmp_path, fused):
    t, experts = qwen3moe_tensors(QWEN3MOE, fused)
    d = write_dir(tmp_path / "moe", QWEN3MOE, t, shards=2)
    with HfModel(capi, d) as m:
        for i, (gate, up, down) in experts.items():
            b = f"blk.{i}."
            g, u, dn = (m.tensors[b + n] for n in ("ffn_gate_exps.weight", "ffn_up_exps.weight",
                                                   "ffn_down_exps.weight"))
            assert g.ne == [16, 12, 5] and u.ne == [16, 12, 5] and dn.ne == [12, 16, 5]
            assert g.raw == gate.tobytes() and u.raw == up.tobytes() and dn.raw == down.tobytes()
            assert m.tensors[b + "ffn_gate_inp.weight"].ne == [16, 5]
            # NeoX rope in llama.cpp's qwen3moe: q/k are not permuted.
            assert m.tensors[b + "attn_q.weight"].raw == t[f"model.layers.{i}.self_attn.q_proj.weight"].tobytes()
            assert m.tensors[b + "attn_q_norm.weight"].ne == [8]
        assert not any("experts" in n for n in m.tensors)
        assert m.meta("general.architecture") == "qwen3moe"
        assert m.meta("qwen3moe.expert_count") == 5
        assert m.meta("qwen3moe.expert_used_count") == 2
        assert m.meta("qwen3moe.expert_feed_forward_length") == 12
        assert m.meta("qwen3moe.expert_weights_norm") is True
        assert m.meta_type("qwen3moe.expert_weights_norm") == META_BOOL
        assert m.meta("qwen3moe.attention.key_length") == 8


def test_qwen2moe_shared_expert_and_biases_map(capi, tmp_path):
    cfg = dict(architectures=["Qwen2MoeForCausalLM"], hidden_size=16, num_hidden_layers=1,
               num_attention_heads=4, num_key_value_heads=4, intermediate_size=32,
               moe_intermediate_size=8, shared_expert_intermediate_size=24, num_local_experts=3,
               num_experts_per_tok=2, vocab_size=20, rms_norm_eps=1e-6, rope_theta=1e6,
               max_position_embeddings=64, tie_word_embeddings=False,
               rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
                                "rope_theta": 1e6})
    p = "model.layers.0."
    t = {"model.embed_tokens.weight": rand(20, 16), "model.norm.weight": rand(16), "lm_head.weight": rand(20, 16),
         p + "input_layernorm.weight": rand(16), p + "post_attention_layernorm.weight": rand(16),
         p + "self_attn.q_proj.weight": rand(16, 16), p + "self_attn.q_proj.bias": rand(16),
         p + "self_attn.k_proj.weight": rand(16, 16), p + "self_attn.k_proj.bias": rand(16),
         p + "self_attn.v_proj.weight": rand(16, 16), p + "self_attn.v_proj.bias": rand(16),
         p + "self_attn.o_proj.weight": rand(16, 16), p + "mlp.gate.weight": rand(3, 16),
         p + "mlp.shared_expert.gate_proj.weight": rand(24, 16),
         p + "mlp.shared_expert.up_proj.weight": rand(24, 16),
         p + "mlp.shared_expert.down_proj.weight": rand(16, 24),
         p + "mlp.shared_expert_gate.weight": rand(1, 16)}
    for x in range(3):
        for n, s in (("gate_proj", (8, 16)), ("up_proj", (8, 16)), ("down_proj", (16, 8))):
            t[p + f"mlp.experts.{x}.{n}.weight"] = rand(*s)
    d = write_dir(tmp_path / "q2", cfg, t)
    with HfModel(capi, d) as m:
        assert m.tensors["blk.0.ffn_gate_inp_shexp.weight"].ne == [16, 1]
        assert m.tensors["blk.0.ffn_up_shexp.weight"].raw == t[p + "mlp.shared_expert.up_proj.weight"].tobytes()
        assert m.tensors["blk.0.ffn_down_shexp.weight"].ne == [24, 16]
        assert m.tensors["blk.0.attn_q.bias"].raw == t[p + "self_attn.q_proj.bias"].tobytes()
        assert m.tensors["blk.0.attn_k.bias"].raw == t[p + "self_attn.k_proj.bias"].tobytes()
        down = np.stack([t[p + f"mlp.experts.{x}.down_proj.weight"] for x in range(3)])
        assert m.tensors["blk.0.ffn_down_exps.weight"].raw == down.tobytes()
        assert m.meta("qwen2moe.expert_count") == 3
        assert m.meta("qwen2moe.expert_shared_feed_forward_length") == 24
        assert m.meta("qwen2moe.rope.scaling.type") == "yarn"
        assert m.meta_type("qwen2moe.rope.scaling.type") == META_STRING
        assert m.meta("qwen2moe.rope.scaling.factor") == 4.0
        assert m.meta("qwen2moe.rope.scaling.original_context_length") == 32
        assert m.meta("qwen2moe.rope.freq_base") == 1e6


def test_unknown_architecture_error_lists_the_supported_ones(capi, tmp_path):
    d = write_dir(tmp_path / "gpt2", dict(LLAMA, architectures=["GPT2LMHeadModel"]), llama_tensors(LLAMA))
    with pytest.raises(HfError, match="GPT2LMHeadModel.*supported: LlamaForCausalLM.*Qwen3MoeForCausalLM"):
        HfModel(capi, d)


def test_header_parser_rejects_every_flipped_length_byte(capi):
    """Bytes from the safetensors package's own writer parse; flipping the length breaks them."""
    from safetensors.numpy import save

    blob = save({"a": rand(3, 4), "b": rand(5)})
    assert parse_bytes(capi, blob) == 2
    for i in range(8):
        bad = bytearray(blob)
        bad[i] ^= 0x40
        with pytest.raises(HfError):
            parse_bytes(capi, bytes(bad))


HYBRID_FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "tests/golden/fixtures"


def fixture_variant(tmp_path, fixture, name, edit_config=None, edit_tensors=None):
    """A copy of a golden fixture's HF directory with its config or tensors edited."""
    from safetensors.numpy import load_file

    src = HYBRID_FIXTURES / fixture / "hf"
    cfg = json.loads((src / "config.json").read_text())
    t = load_file(str(src / "model.safetensors"))
    if edit_config:
        edit_config(cfg)
    if edit_tensors:
        edit_tensors(t)
    return write_dir(tmp_path / name, cfg, t)


@pytest.mark.parametrize("fixture,edit,match", [
    ("qwen35moe_e4_k2_mtp", lambda c: c.update(mtp_num_hidden_layers=100000), "MTP layers"),
    ("qwen3next_e4_k2_mtp", lambda c: c.update(layer_types=["linear_attention"]), "layer_types"),
    ("qwen3next_e4_k2_mtp", lambda c: c.update(linear_num_value_heads=3), "multiple of linear_num_key_heads"),
    ("qwen35moe_e4_k2_mtp", lambda c: c.pop("linear_key_head_dim"), "linear_key_head_dim"),
    # Values the model would silently compute some other way: another mixer run as attention,
    # another activation run as SiLU.
    ("qwen3next_e4_k2_mtp", lambda c: c.update(layer_types=["mamba"] + c["layer_types"][1:]), "'linear_attention' or"),
    ("qwen35moe_e4_k2_mtp", lambda c: c.update(hidden_act="gelu"), "uses SiLU"),
])
def test_hybrid_config_errors_name_the_field(capi, tmp_path, fixture, edit, match):
    d = fixture_variant(tmp_path, fixture, "bad", edit_config=edit)
    with pytest.raises(HfError, match=match):
        HfModel(capi, d)


@pytest.mark.parametrize("edit", [lambda c: c.update(use_sliding_window=True, sliding_window=16),
                                  lambda c: c.update(layer_types=["full_attention", "sliding_attention"])])
def test_sliding_window_attention_is_refused(capi, tmp_path, edit):
    # It is not built: the layers would attend to the whole context, as far as transformers'
    # window lets them only in short prompts.
    d = fixture_variant(tmp_path, "qwen3_gqa4", "sliding", edit_config=edit)
    with pytest.raises(HfError, match="sliding-window attention"):
        HfModel(capi, d)


@pytest.mark.parametrize("fixture,tensor,shape,match", [
    ("qwen3next_e4_k2_mtp", "model.layers.0.linear_attn.in_proj_qkvz.weight", (190, 32), "in_proj_qkvz"),
    ("qwen35moe_e4_k2_mtp", "model.layers.1.linear_attn.in_proj_qkv.weight", (100, 32), "in_proj_qkv"),
    ("qwen35moe_e4_k2_mtp", "model.layers.2.linear_attn.out_proj.weight", (32, 60), "columns"),
    ("qwen3next_e4_k2_mtp", "model.layers.0.linear_attn.conv1d.weight", (128, 2, 4), "channels, 1, kernel"),
])
def test_hybrid_tensor_of_the_wrong_shape_is_refused_by_name(capi, tmp_path, fixture, tensor, shape, match):
    def edit(t):
        t[tensor] = rand(*shape)
    d = fixture_variant(tmp_path, fixture, "bad", edit_tensors=edit)
    with pytest.raises(HfError, match=match):
        HfModel(capi, d)


def test_hybrid_a_log_in_bf16_is_negated_exp_rounded_to_bf16(capi, tmp_path):
    """Released checkpoints keep some tensors in BF16: -exp(A_log) and the norms' +1 are computed
    in f32 and rounded to BF16 (round to nearest even), as torch computes them on a BF16 tensor."""
    def to_bf16_bits(x):
        u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

    a_log = np.array([-2.0, -0.5, 0.25, 1.5], dtype=np.float32)
    norm = np.array(RNG.standard_normal(32), dtype=np.float32)
    a_bits, n_bits = to_bf16_bits(a_log), to_bf16_bits(norm)

    def edit(t):
        # safetensors' numpy writer has no bfloat16: store the bits and patch the dtype below.
        t["model.layers.0.linear_attn.A_log"] = a_bits
        t["model.layers.0.input_layernorm.weight"] = n_bits
    d = fixture_variant(tmp_path, "qwen3next_e4_k2_mtp", "bf16", edit_tensors=edit)
    raw = (d / "model.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    for k in ("model.layers.0.linear_attn.A_log", "model.layers.0.input_layernorm.weight"):
        header[k]["dtype"] = "BF16"
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (n - len(text))
    assert len(text) == n
    (d / "model.safetensors").write_bytes(raw[:8] + text + raw[8 + n:])
    with HfModel(capi, d) as m:
        want_a = to_bf16_bits(-np.exp((a_bits.astype(np.uint32) << 16).view(np.float32)))
        want_n = to_bf16_bits((n_bits.astype(np.uint32) << 16).view(np.float32) + np.float32(1))
        assert m.tensors["blk.0.ssm_a"].type == GGML_BF16
        assert np.frombuffer(m.tensors["blk.0.ssm_a"].raw, dtype=np.uint16).tolist() == want_a.tolist()
        assert np.frombuffer(m.tensors["blk.0.attn_norm.weight"].raw, dtype=np.uint16).tolist() == want_n.tolist()
