#!/usr/bin/env python3
"""Golden fixtures for the hybrid Qwen MoEs (Gated DeltaNet + gated attention + shared expert):
tiny random Qwen3NextForCausalLM and Qwen3_5MoeForCausalLM built with transformers' own classes,
their float32 logits and greedy tokens, and the F32 GGUF written by llama.cpp's own
convert_hf_to_gguf.py (not by us: the file is what users' converters produce).

Output, per fixture (tests/golden/fixtures/<name>/):
  hf/                 save_pretrained (F32 safetensors) + the shared test tokenizer
  converted-F32.gguf  llama.cpp's converter, --outtype f32
  logits_p<i>.bin     f32 LE [n_pos, n_vocab], transformers float32, row t = logits after ids[0..t]
  manifest.json       prompts, greedy ids, shapes, files (key "hybrid_gguf", so test_golden.py,
                      which wants "gguf", leaves these to tests/golden/test_hybrid_golden.py)

Both fixtures also carry an MTP (nextn) block: transformers' classes have no `mtp.*` weights, so
random ones are added to the safetensors file the way released checkpoints store them (the
converter requires them for Qwen3-Next, whose config does not say how many MTP layers there
are); the converter turns them into blk.<n_layer>.nextn.* tensors.

Reuses tools/make_golden.py (tokenizer, weight init, prompts, greedy). CPU only, ~1 min.
  python3 tools/make_hybrid_golden.py [--only NAME] [--converter PATH/convert_hf_to_gguf.py]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import make_golden as mg  # noqa: E402

ROOT = mg.ROOT
FIXTURES = mg.FIXTURES

HYBRID_COMMON = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                     linear_conv_kernel_dim=4, linear_key_head_dim=16, linear_value_head_dim=16,
                     linear_num_key_heads=2, linear_num_value_heads=4, num_experts=4,
                     num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
                     tie_word_embeddings=True)

SPECS = [
    mg.Spec("qwen3next_e4_k2_mtp", "Qwen3NextForCausalLM", "qwen3next",
            dict(HYBRID_COMMON, intermediate_size=64, norm_topk_prob=True, decoder_sparse_step=1,
                 mlp_only_layers=[],
                 layer_types=["linear_attention"] * 3 + ["full_attention"],
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}),
            seed=201, quants=(),
            note="Qwen3-Next: 3 Gated DeltaNet layers then 1 gated attention layer; 2 key heads / 4 value "
                 "heads (GQA-like repeat), partial RoPE 4 of 16 dims, 4 experts top-2 renormalised, "
                 "sigmoid-gated shared expert, zero-centred RMSNorm (+1 folded in by the converter), "
                 "one MTP block (blk.4.nextn.*, random, not used by the logits), tied"),
    mg.Spec("qwen35moe_e4_k2_mtp", "Qwen3_5MoeForCausalLM", "qwen35moe",
            dict(HYBRID_COMMON,
                 layer_types=["linear_attention"] * 3 + ["full_attention"],
                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                                  "mrope_section": [1, 1, 0], "mrope_interleaved": True}),
            seed=202, quants=(),
            note="Qwen3.5/3.6-MoE: as qwen3next but separate in_proj_qkv/z/b/a (V heads reordered to tiled "
                 "order by the converter), interleaved MRoPE (text positions: plain NeoX rope), one MTP "
                 "block (blk.4.nextn.*) bound but not used by the forward, tied"),
]


def find_converter(explicit: str | None, scratch: pathlib.Path) -> pathlib.Path:
    if explicit:
        return pathlib.Path(explicit)
    archive = ROOT / ".peers/llama.cpp-slim.tar.gz"
    wanted = ("llama.cpp/convert_hf_to_gguf.py", "llama.cpp/conversion/", "llama.cpp/gguf-py/")
    with tarfile.open(archive) as t:
        members = [m for m in t.getmembers() if m.name.startswith(wanted)]
        t.extractall(scratch, members=members, filter="data")
    return scratch / "llama.cpp/convert_hf_to_gguf.py"


def add_mtp_weights(hf_dir: pathlib.Path, config, seed: int, write_config_key: bool) -> list[str]:
    """Random mtp.* tensors in the layout of released Qwen3.5-MoE checkpoints (one MTP layer: a
    full-attention decoder layer with the MoE FFN, plus fc / pre-fc norms / final norm)."""
    from safetensors.numpy import load_file, save_file

    E, nh, nkv, hd = config.hidden_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim
    ne, ff, sff = config.num_experts, config.moe_intermediate_size, config.shared_expert_intermediate_size
    rng = np.random.default_rng(seed)

    def mat(*shape):
        return (rng.standard_normal(shape) * (1.5 / shape[-1] ** 0.5)).astype(np.float32)

    def norm(n):
        return (0.1 * rng.standard_normal(n)).astype(np.float32)  # zero-centred: effective 1 + w

    p = "mtp.layers.0."
    t = {
        "mtp.fc.weight": mat(E, 2 * E),
        "mtp.pre_fc_norm_embedding.weight": norm(E),
        "mtp.pre_fc_norm_hidden.weight": norm(E),
        "mtp.norm.weight": norm(E),
        p + "input_layernorm.weight": norm(E),
        p + "post_attention_layernorm.weight": norm(E),
        p + "self_attn.q_proj.weight": mat(2 * nh * hd, E),
        p + "self_attn.k_proj.weight": mat(nkv * hd, E),
        p + "self_attn.v_proj.weight": mat(nkv * hd, E),
        p + "self_attn.o_proj.weight": mat(E, nh * hd),
        p + "self_attn.q_norm.weight": norm(hd),
        p + "self_attn.k_norm.weight": norm(hd),
        p + "mlp.gate.weight": (0.3 * rng.standard_normal((ne, E))).astype(np.float32),
        p + "mlp.experts.gate_up_proj": mat(ne, 2 * ff, E),
        p + "mlp.experts.down_proj": mat(ne, E, ff),
        p + "mlp.shared_expert.gate_proj.weight": mat(sff, E),
        p + "mlp.shared_expert.up_proj.weight": mat(sff, E),
        p + "mlp.shared_expert.down_proj.weight": mat(E, sff),
        p + "mlp.shared_expert_gate.weight": (0.3 * rng.standard_normal((1, E))).astype(np.float32),
    }
    path = hf_dir / "model.safetensors"
    sd = load_file(str(path))
    sd.update(t)
    save_file(sd, str(path), metadata={"format": "pt"})
    if write_config_key:  # Qwen3.5 configs say mtp_num_hidden_layers; Qwen3-Next's do not (the
        cfg = json.loads((hf_dir / "config.json").read_text())  # converter counts mtp.layers.*)
        cfg["mtp_num_hidden_layers"] = 1
        (hf_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return sorted(t)


def convert(converter: pathlib.Path, hf_dir: pathlib.Path, out: pathlib.Path) -> None:
    runner = ROOT / "tests/io_hf/run_llama_cpp_converter.py"
    r = subprocess.run([sys.executable, str(runner), str(converter), f"{hf_dir}:{out}"],
                       capture_output=True, text=True)
    if r.returncode != 0 or not out.exists():
        sys.exit(f"converter failed on {hf_dir}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


def make_fixture(spec: mg.Spec, tok_dir, tok, converter: pathlib.Path) -> dict:
    import torch
    import transformers

    out = FIXTURES / spec.name
    if out.exists():
        shutil.rmtree(out)
    hf_dir = out / "hf"
    model, config = mg.build_model(spec)
    model.save_pretrained(str(hf_dir), safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / f, hf_dir / f)
    gen_cfg = hf_dir / "generation_config.json"
    if gen_cfg.exists():
        gen_cfg.unlink()
    mtp = add_mtp_weights(hf_dir, config, spec.seed, write_config_key=spec.arch == "qwen35moe")

    reloaded = getattr(transformers, spec.cls).from_pretrained(str(hf_dir), dtype=torch.float32,
                                                               attn_implementation="eager").eval()
    sd = {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
    for k, v in reloaded.state_dict().items():
        if not np.array_equal(v.detach().cpu().numpy(), sd[k]):
            sys.exit(f"{spec.name}: reloaded weight {k} differs from the saved one")

    prompts = mg.make_prompts(spec, tok)
    manifest_prompts = []
    for i, pr in enumerate(prompts):
        logits, greedy, margins = mg.hf_logits_and_greedy(reloaded, pr["ids"])
        fname = f"logits_p{i}.bin"
        logits.tofile(out / fname)
        top = np.sort(logits, axis=1)
        manifest_prompts.append({
            "kind": pr["kind"], "text": pr["text"], "ids": pr["ids"], "n_pos": len(pr["ids"]),
            "logits_file": fname, "logits_shape": [len(pr["ids"]), config.vocab_size],
            "logits_argmax": [int(x) for x in logits.argmax(axis=1)],
            "min_top1_top2_margin": float((top[:, -1] - top[:, -2]).min()),
            "greedy_ids": greedy, "greedy_text": tok.decode(greedy, skip_special_tokens=False),
            "greedy_margins": [round(m, 6) for m in margins],
        })

    # Not model-F32.gguf: tests that glob that name expect our own writer's layout and the HF reader.
    gguf_path = out / "converted-F32.gguf"
    convert(converter, hf_dir, gguf_path)
    manifest = {
        "name": spec.name, "note": spec.note, "hf_class": spec.cls, "gguf_arch": spec.arch,
        "seed": spec.seed, "config": json.loads((hf_dir / "config.json").read_text()),
        "mtp_tensors_added": mtp,
        "hf_dir": "hf", "hf_safetensors_sha256": mg.sha256(hf_dir / "model.safetensors"),
        "hybrid_gguf": {"F32": {"file": gguf_path.name, "bytes": gguf_path.stat().st_size,
                                "sha256": mg.sha256(gguf_path),
                                "made_by": "llama.cpp convert_hf_to_gguf.py --outtype f32"}},
        "logits_format": "little-endian float32, row-major [n_pos, n_vocab]; row t = logits after ids[0..t]",
        "greedy": f"{mg.N_GREEDY} argmax tokens after the prompt, full recompute each step, no stop on EOS",
        "prompts": manifest_prompts,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="fixture name (repeatable)")
    ap.add_argument("--converter", help="path of llama.cpp's convert_hf_to_gguf.py (default: from .peers)")
    args = ap.parse_args()
    from tokenizers import Tokenizer

    tok_dir = mg.load_or_train_tokenizer(False)
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    with tempfile.TemporaryDirectory() as scratch:
        converter = find_converter(args.converter, pathlib.Path(scratch))
        for spec in SPECS:
            if args.only and spec.name not in args.only:
                continue
            m = make_fixture(spec, tok_dir, tok, converter)
            print(f"{spec.name}: {m['hybrid_gguf']['F32']['bytes']} bytes GGUF, "
                  f"greedy p0 {m['prompts'][0]['greedy_ids'][:8]}")


if __name__ == "__main__":
    main()
