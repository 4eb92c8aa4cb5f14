#!/usr/bin/env python3
"""Turn train.py's output into Hugging Face directories and the shipped GGUF files.

  python3 tools/shipped_model/export_gguf.py --trained DIR --tokenizer .shipped/tokenizer \
      --hf-out .shipped/hf --models models [--check-equivalence]

1. Hugging Face directories (not committed: 50 MB of bf16): DIR's bf16 tensors loaded into
   transformers' Qwen3MoeForCausalLM / Qwen3ForCausalLM (strict: every parameter named), saved
   with save_pretrained plus tokenizer.json / tokenizer_config.json:  HF_OUT/moe, HF_OUT/draft.
   --check-equivalence first compares transformers' logits with train.py's own module on the same
   weights (the training model must be the transformers model, or the goldens mean nothing).
2. GGUF, written the way llama.cpp's convert_hf_to_gguf.py writes qwen3moe / qwen3: tensor names
   (token_embd, blk.N.attn_q/k/v/output, attn_q_norm/attn_k_norm, ffn_gate_inp, ffn_{gate,up,down}_exps
   stacked per layer, output_norm; tied embeddings so no output.weight), metadata keys
   ({arch}.context_length ... expert_count, expert_used_count, expert_feed_forward_length,
   key_length/value_length because config.json has head_dim), and the tokenizer: ggml.model gpt2,
   pre qwen2, tokens, token_type (specials CONTROL), merges, bos = pad = <|endoftext|> (Qwen's
   convention, never added: add_bos_token false), eos = <|im_end|>, chat_template.
   Q8_0 through gguf.quants.quantize (1-D tensors and the router stay F32, as the converter does).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import sys

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import train as T  # noqa: E402  (configs and the training module)
import train_tokenizer as TT  # noqa: E402

sys.path.insert(0, str(HERE.parent))
from gguf_vocab import gguf_vocab  # noqa: E402

MOE_NAME = "sluice-moe-25m"
DRAFT_NAME = "sluice-draft-5m"


def load_trained(d: pathlib.Path, which: str) -> dict:
    from safetensors.torch import load_file
    files = sorted(d.glob("moe-*.safetensors")) if which == "moe" else [d / "draft.safetensors"]
    sd = {}
    for f in files:
        sd.update(load_file(str(f)))
    return sd


def hf_model(which: str, sd: dict):
    """transformers model (float32, eager attention) holding the trained bf16 weights."""
    import torch
    import transformers
    cfg = T.MOE_CONFIG if which == "moe" else T.DRAFT_CONFIG
    cls = transformers.Qwen3MoeForCausalLM if which == "moe" else transformers.Qwen3ForCausalLM
    config = cls.config_class(**cfg)
    config._attn_implementation = "eager"
    model = cls(config).to(torch.float32).eval()
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=False)
    if unexpected or [m for m in missing if m != "lm_head.weight"]:
        sys.exit(f"{which}: state dict does not match transformers: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return model, config


def check_equivalence(which: str, sd: dict, hf) -> float:
    import torch
    cfg = T.MOE_CONFIG if which == "moe" else T.DRAFT_CONFIG
    ours = T.CausalLM(cfg, which == "moe").float().eval()
    ours.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    ids = torch.randint(0, cfg["vocab_size"], (2, 96), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a = ours(ids)[0]
        b = hf(input_ids=ids, use_cache=False).logits.float()
    rel = float((a - b).norm() / b.norm())
    print(f"{which}: train.py module vs transformers, relative L2 of logits {rel:.3g}")
    if rel > 1e-4:
        sys.exit(f"{which}: the training module is not transformers' model (relative L2 {rel})")
    return rel


def add_legacy_config_keys(hf_dir: pathlib.Path) -> None:
    """Released Qwen3 checkpoints carry rope_theta / rope_scaling / num_experts; write both spellings."""
    p = hf_dir / "config.json"
    cfg = json.loads(p.read_text())
    rp = dict(cfg.get("rope_parameters") or {})
    if rp:
        cfg["rope_theta"] = rp.pop("rope_theta")
        cfg["rope_scaling"] = None if rp.get("rope_type") == "default" else dict(rp, type=rp["rope_type"])
    if "num_local_experts" in cfg:
        cfg["num_experts"] = cfg["num_local_experts"]
    p.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def save_hf(model, out: pathlib.Path, tok_dir: pathlib.Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(str(out), safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tok_dir / f, out / f)
    add_legacy_config_keys(out)
    g = out / "generation_config.json"
    if g.exists():
        g.unlink()


def gguf_tensors(arch: str, config, sd: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """(GGUF name, float32 array in HF [out, in] order = ggml ne [in, out]) from save_pretrained's
    per-expert names (model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight)."""
    out = [("token_embd.weight", sd["model.embed_tokens.weight"])]
    for i in range(config.num_hidden_layers):
        p, b = f"model.layers.{i}.", f"blk.{i}."
        out += [(b + "attn_norm.weight", sd[p + "input_layernorm.weight"]),
                (b + "attn_q.weight", sd[p + "self_attn.q_proj.weight"]),
                (b + "attn_k.weight", sd[p + "self_attn.k_proj.weight"]),
                (b + "attn_v.weight", sd[p + "self_attn.v_proj.weight"]),
                (b + "attn_output.weight", sd[p + "self_attn.o_proj.weight"]),
                (b + "attn_q_norm.weight", sd[p + "self_attn.q_norm.weight"]),
                (b + "attn_k_norm.weight", sd[p + "self_attn.k_norm.weight"]),
                (b + "ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])]
        if arch == "qwen3":
            out += [(b + f"ffn_{x}.weight", sd[p + f"mlp.{x}_proj.weight"]) for x in ("gate", "up", "down")]
            continue
        out.append((b + "ffn_gate_inp.weight", sd[p + "mlp.gate.weight"]))  # [n_expert, n_embd]
        for x in ("gate", "up", "down"):
            # gate/up (n_expert, n_ff, n_embd) = ne [n_embd, n_ff, n_expert]; down (n_expert, n_embd, n_ff)
            out.append((b + f"ffn_{x}_exps.weight",
                        np.stack([sd[p + f"mlp.experts.{e}.{x}_proj.weight"] for e in range(config.num_experts)])))
    out.append(("output_norm.weight", sd["model.norm.weight"]))
    return out


def write_gguf(path: pathlib.Path, arch: str, name: str, config, tensors, qname: str, vocab, description: str):
    import gguf
    qtype = gguf.GGMLQuantizationType[qname]
    ftype = {"F32": gguf.LlamaFileType.ALL_F32, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[qname]
    tokens, types, merges = vocab
    w = gguf.GGUFWriter(str(path), arch)
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(name)
    w.add_description(description)
    w.add_license("PSF-2.0 (training data); model weights: same terms as the sluice project")
    w.add_context_length(config.max_position_embeddings)
    w.add_embedding_length(config.hidden_size)
    w.add_block_count(config.num_hidden_layers)
    w.add_feed_forward_length(config.intermediate_size)
    w.add_head_count(config.num_attention_heads)
    w.add_head_count_kv(config.num_key_value_heads)
    w.add_rope_freq_base(config.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(config.rms_norm_eps)
    w.add_file_type(ftype)
    w.add_key_length(config.head_dim)
    w.add_value_length(config.head_dim)
    if arch == "qwen3moe":
        w.add_expert_count(config.num_experts)
        w.add_expert_used_count(config.num_experts_per_tok)
        w.add_expert_feed_forward_length(config.moe_intermediate_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(TT.EOT_ID)      # Qwen's convention: bos = <|endoftext|>, never added
    w.add_eos_token_id(TT.IM_END_ID)   # <|im_end|>
    w.add_pad_token_id(TT.EOT_ID)
    w.add_add_bos_token(False)
    w.add_chat_template(TT.CHAT_TEMPLATE)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for tname, arr in tensors:
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if qtype == gguf.GGMLQuantizationType.F32 or arr.ndim == 1 or "ffn_gate_inp" in tname:
            w.add_tensor(tname, arr)
        else:
            w.add_tensor(tname, gguf.quants.quantize(arr, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def dequantized_state_dict(gguf_path: pathlib.Path, hf_sd_keys: dict) -> dict:
    """The committed file's weights back in float32 under save_pretrained's names (for goldens)."""
    import gguf
    r = gguf.GGUFReader(str(gguf_path))
    by = {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        by[t.name] = gguf.quants.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
    return by


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trained", type=pathlib.Path, required=True)
    ap.add_argument("--tokenizer", type=pathlib.Path, required=True)
    ap.add_argument("--hf-out", type=pathlib.Path, required=True)
    ap.add_argument("--models", type=pathlib.Path, required=True)
    ap.add_argument("--check-equivalence", action="store_true")
    ap.add_argument("--f32", action="store_true", help="also write F32 GGUFs (not committed)")
    args = ap.parse_args()
    import torch
    from safetensors.numpy import load_file
    torch.set_num_threads(2)

    result = json.loads((args.trained / "result.json").read_text())
    vocab = gguf_vocab(args.tokenizer / "tokenizer.json")[:3]
    args.models.mkdir(parents=True, exist_ok=True)
    for which, arch, name in (("moe", "qwen3moe", MOE_NAME), ("draft", "qwen3", DRAFT_NAME)):
        sd = load_trained(args.trained, which)
        model, config = hf_model(which, sd)
        if args.check_equivalence:
            check_equivalence(which, sd, model)
        hf_dir = args.hf_out / which
        save_hf(model, hf_dir, args.tokenizer)
        disk = {}
        for f in sorted(hf_dir.glob("*.safetensors")):
            disk.update(load_file(str(f)))
        tensors = gguf_tensors(arch, config, disk)
        info = result[which]
        desc = (f"sluice's shipped {'MoE' if which == 'moe' else 'draft'} model: {info['parameters']:,} parameters "
                f"trained {info['train_seconds']:.0f} s on Python 3.11's standard library, tests and docs "
                f"(tools/shipped_model); held-out perplexity {info['heldout_ppl']:.2f}")
        for q in ("Q8_0",) + (("F32",) if args.f32 else ()):
            dest = (args.models if q == "Q8_0" else args.hf_out) / f"{name}-{q}.gguf"
            write_gguf(dest, arch, name, config, tensors, q, vocab, desc)
            print(f"{dest}: {dest.stat().st_size:,} bytes", flush=True)


if __name__ == "__main__":
    main()
