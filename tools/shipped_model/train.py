#!/usr/bin/env python3
"""Train the shipped MoE (transformers Qwen3MoeForCausalLM layout) and its dense Qwen3 draft.

Runs on one GPU in ~6-7 minutes (or on the CPU with --smoke, to test the pipeline). Needs only
torch, numpy and safetensors: the model is written here in plain PyTorch with exactly the
parameter names and the arithmetic of transformers 5's Qwen3Moe/Qwen3 modules (checked by
export_gguf.py --check-equivalence, which loads the weights into transformers and compares
logits), because transformers' MoE loops over experts in Python and is slow to train.

MoE block in training: every expert is computed for every token and multiplied by its routing
weight, which is 0 for the experts outside the top-k, so outputs and gradients are the sparse
block's; at this size (32 experts of 96) the dense einsum is faster than gathering tokens.

Load balancing: Switch-style aux loss  n_expert * sum_e f_e * P_e  (f_e = share of top-k slots
given to expert e, P_e = mean router probability), coefficient AUX_COEF, small so that the
routing keeps the skew real models show (DESIGN.md "Routing realism").

Schedule by wall clock: each model trains for a time budget; the learning rate follows linear
warm-up then cosine decay over the budget's fraction elapsed, the held-out loss is measured
every EVAL_EVERY_S seconds, and the best checkpoint is kept (the corpus is small: ~10M tokens).

  python3 tools/shipped_model/train.py --data .shipped/data --out OUT [--moe-seconds 270]
      [--draft-seconds 75] [--smoke]
writes OUT/moe-0000{i}.safetensors (bf16 shards, transformers' internal names), OUT/draft.safetensors,
OUT/result.json (both configs, held-out perplexity, routing statistics, loss curves, timings).
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 16384
EOT_ID = VOCAB - 3
AUX_COEF = 0.005
EVAL_EVERY_S = 30.0

# transformers config kwargs (Qwen3MoeConfig / Qwen3Config); export_gguf.py builds the HF models from these.
MOE_CONFIG = dict(
    vocab_size=VOCAB, hidden_size=320, num_hidden_layers=6, num_attention_heads=6, num_key_value_heads=2,
    head_dim=64, intermediate_size=768, moe_intermediate_size=96, num_experts=32, num_experts_per_tok=4,
    norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=AUX_COEF,
    rms_norm_eps=1e-6, max_position_embeddings=2048, tie_word_embeddings=True,
    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    bos_token_id=EOT_ID, eos_token_id=VOCAB - 1, pad_token_id=EOT_ID, hidden_act="silu",
    attention_bias=False, attention_dropout=0.0)
DRAFT_CONFIG = dict(
    vocab_size=VOCAB, hidden_size=192, num_hidden_layers=4, num_attention_heads=3, num_key_value_heads=1,
    head_dim=64, intermediate_size=576, rms_norm_eps=1e-6, max_position_embeddings=2048,
    tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    bos_token_id=EOT_ID, eos_token_id=VOCAB - 1, pad_token_id=EOT_ID, hidden_act="silu",
    attention_bias=False, attention_dropout=0.0)


# ----------------------------------------------------------------------------------------------
# Model: transformers' Qwen3 / Qwen3Moe arithmetic, parameter names as transformers 5 has them
# ----------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))  # [n]
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rope_tables(head_dim: int, n_pos: int, theta: float, device):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))
    t = torch.arange(n_pos, device=device).float()
    f = torch.outer(t, inv)
    emb = torch.cat((f, f), dim=-1)  # [n_pos, head_dim], rotate_half layout
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        d, hd = c["hidden_size"], c["head_dim"]
        self.n_head, self.n_kv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], hd
        self.q_proj = nn.Linear(d, self.n_head * hd, bias=False)   # [n_head*hd, d]
        self.k_proj = nn.Linear(d, self.n_kv * hd, bias=False)     # [n_kv*hd, d]
        self.v_proj = nn.Linear(d, self.n_kv * hd, bias=False)     # [n_kv*hd, d]
        self.o_proj = nn.Linear(self.n_head * hd, d, bias=False)   # [d, n_head*hd]
        self.q_norm = RMSNorm(hd, c["rms_norm_eps"])               # [hd]
        self.k_norm = RMSNorm(hd, c["rms_norm_eps"])               # [hd]

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.n_head, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, self.n_kv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.hd).transpose(1, 2)
        cos, sin = cos[:t].to(q.dtype), sin[:t].to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if self.n_kv != self.n_head:
            rep = self.n_head // self.n_kv
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, d: int, ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(d, ff, bias=False)  # [ff, d]
        self.up_proj = nn.Linear(d, ff, bias=False)    # [ff, d]
        self.down_proj = nn.Linear(ff, d, bias=False)  # [d, ff]

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    def __init__(self, n_expert: int, d: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_expert, d))  # [n_expert, d]


class Experts(nn.Module):
    def __init__(self, n_expert: int, d: int, ff: int):
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(n_expert, 2 * ff, d))  # [E, 2*ff, d]: gate rows then up rows
        self.down_proj = nn.Parameter(torch.empty(n_expert, d, ff))         # [E, d, ff]


class SparseMoe(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.k, self.n_expert = c["num_experts_per_tok"], c["num_experts"]
        self.gate = Router(self.n_expert, c["hidden_size"])
        self.experts = Experts(self.n_expert, c["hidden_size"], c["moe_intermediate_size"])

    def route(self, x):
        """x [N, d] -> probs [N, E] fp32, top-k weights [N, k] (renormalised), top-k ids [N, k]."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            logits = F.linear(x.float(), self.gate.weight.float())
        probs = logits.softmax(dim=-1)
        w, idx = torch.topk(probs, self.k, dim=-1)
        w = w / w.sum(dim=-1, keepdim=True)
        return probs, w, idx

    def forward(self, x):
        b, t, d = x.shape
        x = x.reshape(-1, d)
        probs, w, idx = self.route(x)
        dense_w = torch.zeros_like(probs).scatter(1, idx, w)  # [N, E], zero outside the top-k
        gu = torch.einsum("nd,efd->enf", x, self.experts.gate_up_proj.to(x.dtype))  # [E, N, 2ff]
        g, u = gu.chunk(2, dim=-1)
        h = F.silu(g) * u * dense_w.t().unsqueeze(-1).to(x.dtype)  # [E, N, ff]
        y = torch.einsum("enf,edf->nd", h, self.experts.down_proj.to(x.dtype))
        # aux load balancing (Switch): E * sum_e f_e * P_e
        f = torch.zeros_like(probs[0]).scatter_add(0, idx.reshape(-1), torch.ones_like(idx.reshape(-1), dtype=probs.dtype))
        f = f / idx.numel()
        aux = self.n_expert * (f * probs.mean(0)).sum()
        return y.view(b, t, d), aux, idx


class Layer(nn.Module):
    def __init__(self, c: dict, moe: bool, dropout: float):
        super().__init__()
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.mlp = SparseMoe(c) if moe else MLP(c["hidden_size"], c["intermediate_size"])
        self.moe, self.dropout = moe, dropout

    def forward(self, x, cos, sin):
        x = x + F.dropout(self.self_attn(self.input_layernorm(x), cos, sin), self.dropout, self.training)
        h = self.post_attention_layernorm(x)
        if self.moe:
            y, aux, idx = self.mlp(h)
        else:
            y, aux, idx = self.mlp(h), h.new_zeros((), dtype=torch.float32), None
        return x + F.dropout(y, self.dropout, self.training), aux, idx


class Inner(nn.Module):
    def __init__(self, c: dict, moe: bool, dropout: float):
        super().__init__()
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])  # [vocab, d], tied to the output
        self.layers = nn.ModuleList([Layer(c, moe, dropout) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class CausalLM(nn.Module):
    def __init__(self, c: dict, moe: bool, dropout: float = 0.0):
        super().__init__()
        self.c, self.moe = c, moe
        self.model = Inner(c, moe, dropout)
        self.rope = None

    def init_weights(self, seed: int):
        g = torch.Generator().manual_seed(seed)
        n_layer = self.c["num_hidden_layers"]
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                nn.init.ones_(p)
                continue
            std = 0.02
            if name.endswith("o_proj.weight") or name.endswith("down_proj.weight") or name.endswith("down_proj"):
                std = 0.02 / math.sqrt(2 * n_layer)
            if name.endswith("gate.weight") and self.moe:
                std = 0.01
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * std)

    def forward(self, ids):
        """ids [B, T] -> logits [B, T, vocab] (fp32), aux loss, per-layer top-k ids [B*T, k] (MoE)."""
        if self.rope is None or self.rope[0].device != ids.device or self.rope[0].shape[0] < ids.shape[1]:
            self.rope = rope_tables(self.c["head_dim"], max(ids.shape[1], 2048),
                                    self.c["rope_parameters"]["rope_theta"], ids.device)
        cos, sin = self.rope
        x = self.model.embed_tokens(ids)
        aux_total, routes = x.new_zeros((), dtype=torch.float32), []
        for layer in self.model.layers:
            x, aux, idx = layer(x, cos, sin)
            aux_total = aux_total + aux
            routes.append(idx)
        x = self.model.norm(x)
        logits = F.linear(x, self.model.embed_tokens.weight.to(x.dtype))
        return logits.float(), aux_total / len(self.model.layers), routes


def hf_state_dict(model: CausalLM) -> dict[str, torch.Tensor]:
    """bf16 tensors under transformers 5's internal names (lm_head tied: not stored)."""
    return {k: v.detach().to(torch.bfloat16).contiguous().cpu() for k, v in model.state_dict().items()}


# ----------------------------------------------------------------------------------------------
# Data, evaluation, statistics
# ----------------------------------------------------------------------------------------------
def batches(data: np.ndarray, batch: int, seq: int, device, gen: np.random.Generator):
    n = data.size - seq - 1
    while True:
        starts = gen.integers(0, n, size=batch)
        x = np.stack([data[s:s + seq + 1] for s in starts]).astype(np.int64)
        t = torch.from_numpy(x).to(device, non_blocking=True)
        yield t[:, :-1], t[:, 1:]


@torch.no_grad()
def evaluate(model: CausalLM, held: np.ndarray, seq: int, device, max_windows: int, stats: bool = False):
    """Held-out mean NLL over non-overlapping windows; with stats, the routing statistics too."""
    model.eval()
    n_win = min((held.size - 1) // seq, max_windows)
    nll, count = 0.0, 0
    n_layer = model.c["num_hidden_layers"]
    E = model.c.get("num_experts", 0)
    freq = np.zeros((n_layer, max(E, 1)), dtype=np.int64)
    reuse_hits = np.zeros(n_layer)
    reuse_pairs = 0
    bs = 16
    for w0 in range(0, n_win, bs):
        ws = range(w0, min(w0 + bs, n_win))
        x = torch.from_numpy(np.stack([held[w * seq:w * seq + seq + 1] for w in ws]).astype(np.int64)).to(device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits, _, routes = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        nll += float(loss)
        count += x[:, 1:].numel()
        if stats and model.moe:
            b, t = x.shape[0], seq
            for li, idx in enumerate(routes):
                idx = idx.view(b, t, -1)
                freq[li] += np.bincount(idx.reshape(-1).cpu().numpy(), minlength=E)
                cur = F.one_hot(idx, E).sum(2)  # [b, t, E] 0/1
                reuse_hits[li] += float((cur[:, 1:] * cur[:, :-1]).sum())
            reuse_pairs += b * (t - 1)
    model.train()
    out = {"heldout_tokens": count, "heldout_nll": nll / count, "heldout_ppl": math.exp(nll / count)}
    if stats and model.moe:
        k = model.c["num_experts_per_tok"]
        top = max(1, E // 4)
        srt = -np.sort(-freq, axis=1)
        share = srt[:, :top].sum(1) / srt.sum(1)
        reuse = reuse_hits / (reuse_pairs * k)
        out["routing"] = {
            "top25pct_share_per_layer": [round(float(s), 4) for s in share],
            "top25pct_share_mean": round(float(share.mean()), 4),
            "reuse_per_layer": [round(float(r), 4) for r in reuse],
            "reuse_mean": round(float(reuse.mean()), 4),
            "reuse_if_independent_uniform": round(k / E, 4),
            "expert_counts": freq.tolist(),
            "definition": ("top25pct_share: share of routed lookups served by the most-used 25% of a layer's "
                           "experts; reuse: fraction of a token's k experts also chosen for the previous token "
                           "(same layer, same window)"),
        }
    return out


def train_one(name: str, cfg: dict, moe: bool, train: np.ndarray, held: np.ndarray, device, seconds: float,
              batch: int, seq: int, lr: float, seed: int, dropout: float, eval_windows: int, log) -> tuple:
    torch.manual_seed(seed)
    model = CausalLM(cfg, moe, dropout)
    model.init_weights(seed)
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"{name}: {n_params:,} parameters")
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2 or "embed" in n]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    gen = np.random.default_rng(seed)
    it = batches(train, batch, seq, device, gen)
    t0 = time.time()
    step, last_eval = 0, t0
    best = (float("inf"), None, 0)
    curve = []
    warm = 0.03
    while True:
        frac = (time.time() - t0) / seconds
        if frac >= 1.0:
            break
        cur_lr = lr * (frac / warm if frac < warm else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (frac - warm) / (1 - warm))))
        for g in opt.param_groups:
            g["lr"] = cur_lr
        x, y = next(it)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits, aux, _ = model(x)
        ce = F.cross_entropy(logits.view(-1, logits.shape[-1]), y.reshape(-1))
        loss = ce + AUX_COEF * aux if moe else ce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 100 == 0:
            log(f"{name} step {step} t={time.time() - t0:.0f}s lr={cur_lr:.2e} ce={float(ce):.4f} aux={float(aux):.4f}")
        now = time.time()
        if now - last_eval >= EVAL_EVERY_S or (seconds < EVAL_EVERY_S and step % 5 == 0):
            last_eval = now
            ev = evaluate(model, held, seq, device, eval_windows)
            curve.append({"step": step, "t": round(now - t0, 1), "train_ce": round(float(ce), 4),
                          "heldout_nll": round(ev["heldout_nll"], 4)})
            log(f"{name} eval step {step}: held-out nll {ev['heldout_nll']:.4f} ppl {ev['heldout_ppl']:.2f}")
            if ev["heldout_nll"] < best[0]:
                best = (ev["heldout_nll"], {k: v.detach().clone() for k, v in model.state_dict().items()}, step)
    train_s = time.time() - t0
    ev = evaluate(model, held, seq, device, eval_windows)
    curve.append({"step": step, "t": round(train_s, 1), "heldout_nll": round(ev["heldout_nll"], 4)})
    if best[1] is not None and best[0] < ev["heldout_nll"]:
        model.load_state_dict(best[1])
        log(f"{name}: kept the best checkpoint (step {best[2]}, nll {best[0]:.4f}) over the last ({ev['heldout_nll']:.4f})")
        kept = best[2]
    else:
        kept = step
    final = evaluate(model, held, seq, device, 10 ** 9, stats=True)
    log(f"{name}: {step} steps in {train_s:.0f}s; final held-out ppl {final['heldout_ppl']:.3f} over "
        f"{final['heldout_tokens']} tokens")
    info = {"parameters": n_params, "steps": step, "kept_step": kept, "train_seconds": round(train_s, 1),
            "tokens_seen": step * batch * seq, "batch": batch, "seq": seq, "lr": lr, "dropout": dropout,
            "curve": curve, **final}
    return model, info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=pathlib.Path, required=True)
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--moe-seconds", type=float, default=270)
    ap.add_argument("--draft-seconds", type=float, default=75)
    ap.add_argument("--smoke", action="store_true", help="CPU pipeline test: tiny batches, seconds of training")
    args = ap.parse_args()
    t_start = time.time()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    args.out.mkdir(parents=True, exist_ok=True)
    logf = open(args.out / "train.log", "w")

    def log(msg: str) -> None:
        line = f"[{time.time() - t_start:6.1f}s] {msg}"
        print(line, flush=True)
        logf.write(line + "\n")
        logf.flush()

    train = np.load(args.data / "train.npy")
    held = np.load(args.data / "heldout.npy")
    log(f"device {device} ({torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}), torch {torch.__version__}; "
        f"train {train.size:,} tokens, held-out {held.size:,}")
    if args.smoke:
        kw = dict(batch=2, seq=64, eval_windows=4)
        held = held[:64 * 8 + 1]
    else:
        kw = dict(batch=16, seq=1024, eval_windows=48)
    moe, moe_info = train_one("moe", MOE_CONFIG, True, train, held, device, args.moe_seconds, lr=2e-3, seed=1,
                              dropout=0.1, log=log, **kw)
    draft, draft_info = train_one("draft", DRAFT_CONFIG, False, train, held, device, args.draft_seconds, lr=3e-3,
                                  seed=2, dropout=0.1, log=log, **kw)

    from safetensors.torch import save_file
    sd = hf_state_dict(moe)
    shards, cur, cur_bytes = [], {}, 0
    for k in sorted(sd):
        nb = sd[k].numel() * 2
        if cur and cur_bytes + nb > 13 * 2 ** 20:  # the device returns files of at most 16 MiB
            shards.append(cur)
            cur, cur_bytes = {}, 0
        cur[k] = sd[k]
        cur_bytes += nb
    shards.append(cur)
    for i, s in enumerate(shards):
        save_file(s, str(args.out / f"moe-{i:05d}.safetensors"))
    save_file(hf_state_dict(draft), str(args.out / "draft.safetensors"))
    result = {"moe": {"config": MOE_CONFIG, **moe_info}, "draft": {"config": DRAFT_CONFIG, **draft_info},
              "aux_coef": AUX_COEF, "moe_shards": len(shards), "total_seconds": round(time.time() - t_start, 1),
              "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "torch": torch.__version__}
    (args.out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    log(f"done in {time.time() - t_start:.0f}s: {len(shards)} MoE shards")


if __name__ == "__main__":
    main()
