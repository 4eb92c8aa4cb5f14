"""Real-model shapes, quant mixes, a stand-in tokenizer and the synthetic routing model.

The tables here are the spec that tools/make_synthetic.py writes and tests/tools checks:
tensor names and shapes follow llama.cpp's qwen3moe, qwen3next and qwen35moe GGUF layouts
exactly (the hybrid ones as llama.cpp's conversion/qwen.py writes them: Qwen3NextModel and
Qwen3_5MoeTextModel, MTP block included; tests/tools compares them with the converter's own
output in tests/golden/fixtures/*_mtp), so a synthetic file is laid out like a converted one.

Shapes are given in ggml order (ne0 first: the row length, i.e. the input dimension).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import LlamaFileType as FT


@dataclasses.dataclass(frozen=True)
class ModelShape:
    name: str            # as the CLI takes it
    n_layer: int         # num_hidden_layers
    n_embd: int          # hidden_size
    n_head: int          # num_attention_heads
    n_head_kv: int       # num_key_value_heads
    head_dim: int        # head_dim (not n_embd / n_head in Qwen3)
    n_expert: int        # num_experts
    n_expert_used: int   # num_experts_per_tok
    n_ff_exp: int        # moe_intermediate_size
    n_ff: int            # intermediate_size (dense FFN size; unused by all-MoE layers, but recorded)
    n_vocab: int         # vocab_size (embedding rows; the tokenizer has exactly this many tokens)
    n_ctx_train: int     # max_position_embeddings
    rope_theta: float
    rms_eps: float
    # The hybrid Qwen MoEs (qwen3next, qwen35moe); the defaults describe qwen3moe.
    arch: str = "qwen3moe"      # general.architecture
    n_ff_shexp: int = 0         # shared_expert_intermediate_size (0: no shared expert)
    ssm_d_conv: int = 0         # linear_conv_kernel_dim
    ssm_n_k: int = 0            # linear_num_key_heads
    ssm_n_v: int = 0            # linear_num_value_heads
    ssm_head: int = 0           # linear_key_head_dim = linear_value_head_dim
    full_attn_interval: int = 0 # full_attention_interval: every n-th layer attends, the rest are DeltaNet
    n_rot: int = 0              # rotated dims per head: head_dim * partial_rotary_factor (0: all)
    n_nextn: int = 0            # MTP layers (mtp_num_hidden_layers; counted from mtp.* for Qwen3-Next)
    rope_sections: tuple[int, ...] = ()   # mrope_section, padded to 4 (qwen35moe)
    tied: bool = False          # tie_word_embeddings

    @property
    def hybrid(self) -> bool:
        return self.arch in ("qwen3next", "qwen35moe")

    def recurrent(self, il: int) -> bool:
        """llama.cpp's rule (and the configs' layer_types): every full_attention_interval-th
        layer attends, the others are Gated DeltaNet; MTP layers (il >= n_layer) attend."""
        return il < self.n_layer and (il + 1) % self.full_attn_interval != 0


# From the published config.json files of Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B
# (both: head_dim 128, 4 KV heads, 128 experts top-8, vocab 151936, rope_theta 1e6,
# rms_norm_eps 1e-6, max_position_embeddings 40960, norm_topk_prob true, no shared expert,
# every layer MoE, untied embeddings).
SHAPES: dict[str, ModelShape] = {
    "qwen3-30b-a3b": ModelShape("qwen3-30b-a3b", n_layer=48, n_embd=2048, n_head=32, n_head_kv=4,
                                head_dim=128, n_expert=128, n_expert_used=8, n_ff_exp=768,
                                n_ff=6144, n_vocab=151936, n_ctx_train=40960, rope_theta=1e6,
                                rms_eps=1e-6),
    "qwen3-235b-a22b": ModelShape("qwen3-235b-a22b", n_layer=94, n_embd=4096, n_head=64,
                                  n_head_kv=4, head_dim=128, n_expert=128, n_expert_used=8,
                                  n_ff_exp=1536, n_ff=12288, n_vocab=151936, n_ctx_train=40960,
                                  rope_theta=1e6, rms_eps=1e-6),
    # Qwen/Qwen3-Next-80B-A3B-Instruct config.json: hidden_size 2048, num_hidden_layers 48,
    # 16 heads / 2 KV heads of head_dim 256, partial_rotary_factor 0.25, rope_theta 1e7,
    # intermediate_size 5120, 512 experts top-10 of moe_intermediate_size 512, shared expert
    # 512, linear attention: conv kernel 4, 16 key heads and 32 value heads of 128,
    # full_attention_interval 4, vocab 151936, max_position_embeddings 262144, rms_norm_eps 1e-6,
    # untied. One MTP layer (mtp.* in the checkpoint; the converter counts it, config has no key).
    "qwen3-next-80b-a3b": ModelShape("qwen3-next-80b-a3b", n_layer=48, n_embd=2048, n_head=16,
                                     n_head_kv=2, head_dim=256, n_expert=512, n_expert_used=10,
                                     n_ff_exp=512, n_ff=5120, n_vocab=151936, n_ctx_train=262144,
                                     rope_theta=1e7, rms_eps=1e-6, arch="qwen3next", n_ff_shexp=512,
                                     ssm_d_conv=4, ssm_n_k=16, ssm_n_v=32, ssm_head=128,
                                     full_attn_interval=4, n_rot=64, n_nextn=1),
    # Qwen/Qwen3.6-35B-A3B (text model; Qwen3.5-MoE architecture): hidden_size 2048, 40 layers
    # (10 x (3 DeltaNet + 1 attention)), 16 heads / 2 KV heads of head_dim 256, rotary dims 64
    # (partial_rotary_factor 0.25), interleaved MRoPE mrope_section [11, 11, 10], rope_theta 1e7,
    # 256 experts top-8 of 512 plus a shared expert of 512, linear attention 16 key heads and 32
    # value heads of 128, conv kernel 4, vocab 248320 (padded), max_position_embeddings 262144,
    # rms_norm_eps 1e-6, untied, mtp_num_hidden_layers 1. No dense intermediate_size in the
    # GGUF (the converter writes no feed_forward_length for qwen35moe).
    "qwen3.6-35b-a3b": ModelShape("qwen3.6-35b-a3b", n_layer=40, n_embd=2048, n_head=16,
                                  n_head_kv=2, head_dim=256, n_expert=256, n_expert_used=8,
                                  n_ff_exp=512, n_ff=0, n_vocab=248320, n_ctx_train=262144,
                                  rope_theta=1e7, rms_eps=1e-6, arch="qwen35moe", n_ff_shexp=512,
                                  ssm_d_conv=4, ssm_n_k=16, ssm_n_v=32, ssm_head=128,
                                  full_attn_interval=4, n_rot=64, n_nextn=1,
                                  rope_sections=(11, 11, 10, 0)),
}


def tiny(shape: ModelShape) -> ModelShape:
    """A shrunk variant for tests: the same tensor set and GQA ratio of 2, every row a multiple
    of 256 so that K-quant and IQ blocks still tile it; the vocabulary stays full size because
    the tokenizer keeps Qwen's special tokens at their real ids (151643..)."""
    t = dataclasses.replace(shape, name=shape.name + "-tiny", n_embd=256, n_head=4, n_head_kv=2,
                            head_dim=64, n_expert=8, n_expert_used=2, n_ff_exp=256,
                            n_ff=512 if shape.n_ff else 0)
    if shape.hybrid:  # DeltaNet: 2 key heads, 4 value heads of 64; a quarter of each head rotated
        t = dataclasses.replace(t, n_ff_shexp=256, ssm_n_k=2, ssm_n_v=4, ssm_head=64, n_rot=16,
                                rope_sections=(3, 3, 2, 0) if shape.rope_sections else ())
    return t


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    name: str
    ne: tuple[int, ...]   # ggml order: ne[0] is the row length (input features)
    qtype: Q
    role: str             # what kind of weight: selects how its values are drawn

    @property
    def n_in(self) -> int:
        return self.ne[0]


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    """llama.cpp's Q4_K_M rule for which layers' attn_v / ffn_down get Q6_K: the first and last
    eighth of the layers, and every third layer in between."""
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


# A mix maps (role, layer index, layer count) to a block type; norms and the router are F32 in
# every mix (llama.cpp never quantises 1-D tensors or ffn_gate_inp).
def _mix_q4_k_m(role: str, il: int, n_layer: int) -> Q:
    if role in ("attn_v", "ffn_down_exps"):
        return Q.Q6_K if use_more_bits(il, n_layer) else Q.Q4_K
    if role == "output":
        return Q.Q6_K
    return Q.Q4_K


def _mix_q8_0(role: str, il: int, n_layer: int) -> Q:
    return Q.Q8_0


def _mix_iq4_xs(role: str, il: int, n_layer: int) -> Q:
    return Q.Q6_K if role == "output" else Q.IQ4_XS


def _mix_iq3_s(role: str, il: int, n_layer: int) -> Q:
    # llama.cpp keeps attn_v at Q4_K for IQ3_S when n_gqa >= 4 (Qwen3: 8 and 16).
    if role == "attn_v":
        return Q.Q4_K
    return Q.Q6_K if role == "output" else Q.IQ3_S


def _mix_mxfp4(role: str, il: int, n_layer: int) -> Q:
    # As gpt-oss files ship: routed experts MXFP4, everything else Q8_0.
    return Q.MXFP4 if role.endswith("_exps") else Q.Q8_0


MIXES = {
    "q4_k_m": (_mix_q4_k_m, FT.MOSTLY_Q4_K_M),
    "q8_0": (_mix_q8_0, FT.MOSTLY_Q8_0),
    "iq4_xs": (_mix_iq4_xs, FT.MOSTLY_IQ4_XS),
    "iq3_s": (_mix_iq3_s, FT.MOSTLY_IQ3_S),
    "mxfp4": (_mix_mxfp4, FT.MOSTLY_MXFP4_MOE),
}


def tensor_specs(shape: ModelShape, mix: str) -> list[TensorSpec]:
    """Every tensor of a qwen3moe GGUF, in the order llama.cpp's converter writes them."""
    if shape.hybrid:
        return hybrid_tensor_specs(shape, mix)
    pick, _ = MIXES[mix]
    L, E, H = shape.n_layer, shape.n_embd, shape.head_dim
    q_dim, kv_dim = shape.n_head * H, shape.n_head_kv * H
    specs = [TensorSpec("token_embd.weight", (E, shape.n_vocab), pick("token_embd", -1, L), "token_embd")]
    for il in range(L):
        b = f"blk.{il}."
        specs += [
            TensorSpec(b + "attn_norm.weight", (E,), Q.F32, "norm"),
            TensorSpec(b + "attn_q.weight", (E, q_dim), pick("attn_q", il, L), "attn_q"),
            TensorSpec(b + "attn_k.weight", (E, kv_dim), pick("attn_k", il, L), "attn_k"),
            TensorSpec(b + "attn_v.weight", (E, kv_dim), pick("attn_v", il, L), "attn_v"),
            TensorSpec(b + "attn_output.weight", (q_dim, E), pick("attn_output", il, L), "attn_output"),
            TensorSpec(b + "attn_q_norm.weight", (H,), Q.F32, "norm"),
            TensorSpec(b + "attn_k_norm.weight", (H,), Q.F32, "norm"),
            TensorSpec(b + "ffn_norm.weight", (E,), Q.F32, "norm"),
            TensorSpec(b + "ffn_gate_inp.weight", (E, shape.n_expert), Q.F32, "router"),
            TensorSpec(b + "ffn_gate_exps.weight", (E, shape.n_ff_exp, shape.n_expert),
                       pick("ffn_gate_exps", il, L), "ffn_gate_exps"),
            TensorSpec(b + "ffn_up_exps.weight", (E, shape.n_ff_exp, shape.n_expert),
                       pick("ffn_up_exps", il, L), "ffn_up_exps"),
            TensorSpec(b + "ffn_down_exps.weight", (shape.n_ff_exp, E, shape.n_expert),
                       pick("ffn_down_exps", il, L), "ffn_down_exps"),
        ]
    specs += [
        TensorSpec("output_norm.weight", (E,), Q.F32, "norm"),
        TensorSpec("output.weight", (E, shape.n_vocab), pick("output", -1, L), "output"),
    ]
    return specs


def hybrid_tensor_specs(shape: ModelShape, mix: str) -> list[TensorSpec]:
    """Every tensor of a qwen3next / qwen35moe GGUF as llama.cpp's converter writes them (names,
    ggml shapes and per-layer order as in its output, tests/golden/fixtures/*_mtp): DeltaNet
    layers (attn_qkv = q|k|v, attn_gate = z, ssm_ba interleaved per key head for qwen3next or
    ssm_alpha + ssm_beta for qwen35moe, ssm_conv1d [d_conv, channels] kept F32, ssm_a and
    ssm_dt.bias [n_v], ssm_norm [head_v], ssm_out), gated attention layers (attn_q carries the
    output gate: [n_embd, 2 * n_head * head_dim]), the MoE FFN with the shared expert and its
    gate ffn_gate_inp_shexp [n_embd, 1] (F32: one row), and the MTP block blk.<n_layer>
    (nextn.eh_proj [2 * n_embd, n_embd], nextn.enorm / hnorm / shared_head_norm, a full
    attention block and the MoE FFN; the embedding and head are the model's own).
    Quant mixes follow the same rules as qwen3moe's plus llama.cpp's: attn_qkv gets Q5_K in
    Q4_K_M, and attn_v's more-bits rule counts attention layers only. The more-bits rule for
    ffn_down counts layers (llama.cpp counts ffn_down tensors, shared experts included): sizes
    are close to, not exactly, a quantised release's."""
    pick, _ = MIXES[mix]
    L, E, H = shape.n_layer, shape.n_embd, shape.head_dim
    n_all = L + shape.n_nextn
    q_dim, kv_dim = shape.n_head * H, shape.n_head_kv * H
    hk, nk, nv = shape.ssm_head, shape.ssm_n_k, shape.ssm_n_v
    conv_ch, v_dim = 2 * nk * hk + nv * hk, nv * hk
    attn_layers = [il for il in range(n_all) if not shape.recurrent(il)]

    def qkv_type(il: int) -> Q:
        t = pick("attn_qkv", il, L)
        return Q.Q5_K if t == Q.Q4_K and mix == "q4_k_m" else t

    def v_type(il: int) -> Q:
        return pick("attn_v", attn_layers.index(il), len(attn_layers))

    specs = [TensorSpec("token_embd.weight", (E, shape.n_vocab), pick("token_embd", -1, L), "token_embd")]
    for il in list(range(L)) + [-1] + list(range(L, n_all)):
        if il < 0:  # the converter writes the output norm (and head) before the MTP block
            specs.append(TensorSpec("output_norm.weight", (E,), Q.F32, "norm"))
            if not shape.tied:
                specs.append(TensorSpec("output.weight", (E, shape.n_vocab), pick("output", -1, L), "output"))
            continue
        b = f"blk.{il}."
        ffn = [
            TensorSpec(b + "ffn_down_exps.weight", (shape.n_ff_exp, E, shape.n_expert),
                       pick("ffn_down_exps", il, n_all), "ffn_down_exps"),
            TensorSpec(b + "ffn_gate_exps.weight", (E, shape.n_ff_exp, shape.n_expert),
                       pick("ffn_gate_exps", il, n_all), "ffn_gate_exps"),
            TensorSpec(b + "ffn_up_exps.weight", (E, shape.n_ff_exp, shape.n_expert),
                       pick("ffn_up_exps", il, n_all), "ffn_up_exps"),
            TensorSpec(b + "ffn_gate_inp.weight", (E, shape.n_expert), Q.F32, "router"),
            TensorSpec(b + "ffn_down_shexp.weight", (shape.n_ff_shexp, E),
                       pick("ffn_down_exps", il, n_all), "ffn_down_shexp"),
            TensorSpec(b + "ffn_gate_shexp.weight", (E, shape.n_ff_shexp), pick("ffn_gate_exps", il, n_all),
                       "ffn_gate_shexp"),
            TensorSpec(b + "ffn_up_shexp.weight", (E, shape.n_ff_shexp), pick("ffn_up_exps", il, n_all),
                       "ffn_up_shexp"),
            TensorSpec(b + "ffn_gate_inp_shexp.weight", (E, 1), Q.F32, "router_shexp"),
            TensorSpec(b + "post_attention_norm.weight", (E,), Q.F32, "norm"),
        ]
        attn = [] if shape.recurrent(il) else [
            TensorSpec(b + "attn_k_norm.weight", (H,), Q.F32, "norm"),
            TensorSpec(b + "attn_k.weight", (E, kv_dim), pick("attn_k", il, L), "attn_k"),
            TensorSpec(b + "attn_output.weight", (q_dim, E), pick("attn_output", il, L), "attn_output"),
            TensorSpec(b + "attn_q_norm.weight", (H,), Q.F32, "norm"),
            TensorSpec(b + "attn_q.weight", (E, 2 * q_dim), pick("attn_q", il, L), "attn_q"),
            TensorSpec(b + "attn_v.weight", (E, kv_dim), v_type(il), "attn_v"),
        ]
        if il >= L:  # the MTP block: nextn.eh_proj first, its norms last
            specs.append(TensorSpec(b + "nextn.eh_proj.weight", (2 * E, E), pick("attn_output", il, L),
                                    "eh_proj"))
            specs.append(TensorSpec(b + "attn_norm.weight", (E,), Q.F32, "norm"))
            specs += ffn + attn
            specs += [TensorSpec(b + "nextn.shared_head_norm.weight", (E,), Q.F32, "norm"),
                      TensorSpec(b + "nextn.enorm.weight", (E,), Q.F32, "norm"),
                      TensorSpec(b + "nextn.hnorm.weight", (E,), Q.F32, "norm")]
        elif shape.recurrent(il):
            specs += [
                TensorSpec(b + "attn_norm.weight", (E,), Q.F32, "norm"),
                TensorSpec(b + "ssm_a", (nv,), Q.F32, "ssm_a"),
                TensorSpec(b + "ssm_conv1d.weight", (shape.ssm_d_conv, conv_ch), Q.F32, "ssm_conv1d"),
                TensorSpec(b + "ssm_dt.bias", (nv,), Q.F32, "ssm_dt"),
            ]
            if shape.arch == "qwen3next":
                specs.append(TensorSpec(b + "ssm_ba.weight", (E, 2 * nv), pick("ssm_ba", il, L), "ssm_ba"))
            else:
                specs += [TensorSpec(b + "ssm_alpha.weight", (E, nv), pick("ssm_alpha", il, L), "ssm_alpha"),
                          TensorSpec(b + "ssm_beta.weight", (E, nv), pick("ssm_beta", il, L), "ssm_beta")]
            specs += [
                TensorSpec(b + "attn_qkv.weight", (E, conv_ch), qkv_type(il), "attn_qkv"),
                TensorSpec(b + "attn_gate.weight", (E, v_dim), pick("attn_gate", il, L), "attn_gate"),
                TensorSpec(b + "ssm_norm.weight", (hk,), Q.F32, "norm"),
                TensorSpec(b + "ssm_out.weight", (v_dim, E), pick("ssm_out", il, L), "ssm_out"),
            ]
            specs += ffn
        else:
            specs.append(TensorSpec(b + "attn_norm.weight", (E,), Q.F32, "norm"))
            specs += ffn + attn
    return specs


# ---------------------------------------------------------------------------------------------
# Tokenizer stand-in. The real Qwen vocabulary is not available offline, so the file carries a
# valid byte-level BPE ("gpt2" model, "qwen2" pre-tokenizer) of the same size: the 256 byte
# tokens, filler tokens made of 2- and 3-byte merges (so text tokenizes to ~2-3 bytes a token,
# as with real BPE), Qwen's special tokens at their real ids, and "[PADn]" up to n_vocab, as
# llama.cpp's converter pads Qwen's 151669 tokens to the 151936 embedding rows.

QWEN_N_REGULAR = 151643   # ids 0..151642 are ordinary BPE tokens in Qwen2/2.5/3
QWEN_SPECIALS = [          # (text, is_control) at ids 151643.. in order
    ("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
    ("<|object_ref_start|>", True), ("<|object_ref_end|>", True), ("<|box_start|>", True),
    ("<|box_end|>", True), ("<|quad_start|>", True), ("<|quad_end|>", True),
    ("<|vision_start|>", True), ("<|vision_end|>", True), ("<|vision_pad|>", True),
    ("<|image_pad|>", True), ("<|video_pad|>", True), ("<tool_call>", False),
    ("</tool_call>", False), ("<|fim_prefix|>", False), ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False), ("<|fim_pad|>", False), ("<|repo_name|>", False),
    ("<|file_sep|>", False), ("<tool_response>", False), ("</tool_response>", False),
    ("<think>", False), ("</think>", False),
]
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED = 1, 3, 4, 5


def bytes_to_unicode() -> list[str]:
    """GPT-2's byte-level alphabet: byte b is written as one printable character; printable
    Latin-1 bytes stand for themselves, the other 68 are shifted to U+0100 and up."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in keep] + [chars[b] for b in range(256) if b not in keep]


def n_regular(n_vocab: int) -> int:
    """Ordinary tokens before the specials: Qwen's 151643 at full size; a shrunk vocabulary
    (--vocab, for tests) keeps the specials right after fewer fillers."""
    return min(QWEN_N_REGULAR, n_vocab - len(QWEN_SPECIALS))


def special_id(text: str, n_vocab: int) -> int:
    return n_regular(n_vocab) + [t for t, _ in QWEN_SPECIALS].index(text)


def make_vocab(n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) for the stand-in tokenizer."""
    if n_vocab < 512:
        raise ValueError(f"vocab: n_vocab {n_vocab} is below 512 (256 bytes, fillers, specials)")
    alphabet = bytes_to_unicode()
    # Rank characters by how common their byte is in English text and code, so the earliest
    # merges join frequent bytes (space, lowercase, newline...).
    common = " etaoinsrhldcumfpgwybvkxjqz\nETAOINSRHLDCUMFPGWYBVKXJQZ0123456789_.,:;()[]{}=\"'-+*/#<>!?\t"
    order = [_byte_chars()[ord(ch)] for ch in common]
    order += [c for c in alphabet if c not in order]
    rank = {c: i for i, c in enumerate(order)}
    pairs = sorted(((a, b) for a in order for b in order),
                   key=lambda p: (max(rank[p[0]], rank[p[1]]), rank[p[0]], rank[p[1]]))
    n_fill = n_regular(n_vocab) - 256
    fillers, merges = [], []
    for a, b in pairs[:n_fill]:
        fillers.append(a + b)
        merges.append(f"{a} {b}")
    top = order[:64]
    if len(fillers) < n_fill:
        triples = sorted(((a, b, c) for a in top for b in top for c in top),
                         key=lambda t: (max(rank[t[0]], rank[t[1]], rank[t[2]]), t))
        for a, b, c in triples[: n_fill - len(fillers)]:
            fillers.append(a + b + c)
            merges.append(f"{a}{b} {c}")
    tokens = alphabet + fillers
    types = [TOKEN_NORMAL] * len(tokens)
    for text, control in QWEN_SPECIALS:
        tokens.append(text)
        types.append(TOKEN_CONTROL if control else TOKEN_USER_DEFINED)
    for i in range(len(tokens), n_vocab):
        tokens.append(f"[PAD{i}]")
        types.append(TOKEN_UNUSED)
    assert len(tokens) == n_vocab and len(set(tokens)) == n_vocab
    return tokens, types, merges


def _byte_chars() -> list[str]:
    """Byte value -> its GPT-2 character."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


# ---------------------------------------------------------------------------------------------
# Synthetic routing model (the engine's benchmark routing override implements this; the writer
# records its parameters and biases the router weights toward the same skew).
#
# Expert popularity ranks per layer: expert e of layer l has rank = its position when the
# layer's experts are sorted by splitmix64(seed * 2^32 + l * 2^16 + e) (ties impossible in
# practice; then by e). The expert of rank r (0 = hottest) has weight (r + 1)^-skew.
# A token picks n_used distinct experts: slot by slot, with probability `locality` it takes a
# not-yet-picked expert of the previous token's set (uniformly; if none is left it falls
# through), otherwise it draws from the weights of the experts not yet picked.

MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def expert_ranks(seed: int, layer: int, n_expert: int) -> np.ndarray:
    """rank[e] for one layer: 0 is the most popular expert."""
    keys = [(splitmix64(((seed & 0xFFFFFFFF) << 32) + (layer << 16) + e), e) for e in range(n_expert)]
    order = [e for _, e in sorted(keys)]
    rank = np.empty(n_expert, dtype=np.int64)
    rank[order] = np.arange(n_expert)
    return rank


def rank_weights(skew: float, n_expert: int) -> np.ndarray:
    w = (np.arange(n_expert) + 1.0) ** -skew
    return w / w.sum()


def simulate_routing(skew: float, locality: float, n_expert: int, n_used: int, n_tokens: int,
                     rng: np.random.Generator) -> np.ndarray:
    """[n_tokens, n_used] expert ranks picked under the model above (reference for tests and
    the README's calibration table)."""
    w = rank_weights(skew, n_expert)
    out = np.empty((n_tokens, n_used), dtype=np.int64)
    prev: list[int] = []
    for t in range(n_tokens):
        picked: list[int] = []
        for _ in range(n_used):
            left_prev = [e for e in prev if e not in picked]
            if left_prev and rng.random() < locality:
                picked.append(left_prev[rng.integers(len(left_prev))])
                continue
            p = w.copy()
            p[picked] = 0.0
            picked.append(int(rng.choice(n_expert, p=p / p.sum())))
        out[t] = picked
        prev = picked
    return out


def top_share(picks: np.ndarray, n_expert: int, fraction: float) -> float:
    """Share of all picks served by the most-picked `fraction` of experts."""
    counts = np.sort(np.bincount(picks.ravel(), minlength=n_expert))[::-1]
    k = max(1, int(round(fraction * n_expert)))
    return float(counts[:k].sum() / counts.sum())


def reuse_fraction(picks: np.ndarray) -> float:
    """Share of a token's experts that the previous token also used."""
    same = [len(set(picks[t]) & set(picks[t - 1])) for t in range(1, len(picks))]
    return float(np.mean(same) / picks.shape[1])


MAX_ROW_PICK = 0.45   # most often one scaled router row can be in a token's top k (< 1/2)


def capped_shares(share: np.ndarray, cap: float) -> np.ndarray:
    """Shares summing to 1 with none above cap; the excess goes to the others in proportion."""
    s = share / share.sum()
    for _ in range(64):
        over = s > cap
        if not over.any():
            break
        excess = (s[over] - cap).sum()
        s[over] = cap
        free = ~over & (s < cap)
        s[free] += excess * s[free] / s[free].sum()
    return s


def router_row_scales(skew: float, n_expert: int, n_used: int, iters: int = 60,
                      samples: int = 8192, seed: int = 1234) -> np.ndarray:
    """Per-rank factors for router rows so that plain top-k over the router's logits (what
    llama.cpp computes) picks each rank about as often as the routing model does. With random
    router rows the logits of one token are roughly independent normals whose spread is the row
    norm, so a longer row lands in the top k more often. Fitted by fixed-sample Monte Carlo;
    1.0 everywhere when skew is 0. The achievable share of the hottest expert is below 1/2
    (a scaled row is as often very low as very high), enough for the published skews."""
    if skew == 0:
        return np.ones(n_expert)
    rng = np.random.default_rng(seed)
    target = np.bincount(simulate_routing(skew, 0.0, n_expert, n_used, 4096, rng).ravel(),
                         minlength=n_expert) / (4096 * n_used)
    target = capped_shares(np.maximum(target, 1e-4), MAX_ROW_PICK / n_used)
    z = rng.standard_normal((samples, n_expert))
    f = np.ones(n_expert)
    for _ in range(iters):
        top = np.argpartition(-(z * f), n_used - 1, axis=1)[:, :n_used]
        got = np.maximum(np.bincount(top.ravel(), minlength=n_expert) / (samples * n_used), 1e-5)
        # A damped step: 0.5 oscillates once the hottest ranks sit at the cap (measured: skew
        # 1.5 fitted to a top-quarter share of 0.58 against 0.80 wanted; 0.25 reaches 0.80).
        f = np.clip(f * (target / got) ** 0.25, 1e-3, 1e3)
        f = f / math.exp(np.log(f).mean())
    return f
