// Pieces the hybrid Qwen MoEs share (qwen3next: Qwen3-Next; qwen35moe: Qwen3.5/3.6-MoE):
// hyperparameters (llama.cpp's ssm.* and recurrent-layer keys), the Gated DeltaNet block, the
// gated attention block (output gate, partial RoPE, q/k RMSNorm) and the MTP (nextn) block's
// weights. The FFN is moe_ffn_block with the sigmoid-gated shared expert (blocks.h). The HF
// zero-centred RMSNorm weights (1 + w) arrive with the 1 already added by llama.cpp's converter,
// so every norm here is the plain rmsnorm.
#pragma once

#include "kernels/cpu/delta_net.h"
#include "models/blocks.h"

#include <vector>

namespace sluice {

struct hybrid_hparams {
    kernels::delta_net_shape dn;   // the DeltaNet layers' shape
    std::vector<int> rec_index;    // [n_layer] index of the layer's recurrent state, -1: attention
    int n_nextn = 0;               // MTP layers after the trunk (<arch>.nextn_predict_layers)
};

// Reads the transformer, MoE (+ shared expert) and ssm.* keys; hp.n_layer is the trunk (block_count
// minus the MTP layers). v_tiled: how value heads map to key heads (see delta_net_shape).
// Sets hp's recurrent-state and scratch sizes.
hybrid_hparams read_hybrid_hparams(const model_file& f, std::string_view arch, bool v_tiled, model_hparams& hp);

// Gated DeltaNet layer.
struct delta_net_weights {
    std::vector<float> norm;                 // attn_norm [n_embd]
    const tensor_view* wqkv = nullptr;       // attn_qkv [n_embd, conv_channels]: q | k | v
    const tensor_view* wz = nullptr;         // attn_gate [n_embd, value_dim]: the output gate z
    // qwen3next: ssm_ba [n_embd, 2*n_v], per key head [beta x r, alpha x r] (r = n_v / n_k);
    // qwen35moe: ssm_beta and ssm_alpha [n_embd, n_v] each.
    const tensor_view* w_ba = nullptr;
    const tensor_view* w_beta = nullptr;
    const tensor_view* w_alpha = nullptr;
    std::vector<float> conv;                 // ssm_conv1d [conv_channels, d_conv]
    std::vector<float> dt_bias;              // ssm_dt.bias [n_v]
    std::vector<float> a;                    // ssm_a [n_v] = -exp(A_log) (converter)
    std::vector<float> out_norm;             // ssm_norm [head_v_dim]
    const tensor_view* wo = nullptr;         // ssm_out [value_dim, n_embd]
};
delta_net_weights bind_delta_net(const model_file& f, const weight_binder& b, const model_hparams& hp, const kernels::delta_net_shape& dn,
                                 int il, bool separate_beta_alpha);

// Gated attention layer: attn_q yields [n_head, 2*head_dim] per row, query then gate per head.
struct gated_attn_weights {
    std::vector<float> norm;                  // attn_norm [n_embd]
    const tensor_view* wq = nullptr;          // [n_embd, 2*n_head*head_dim]
    const tensor_view* wk = nullptr;          // [n_embd, n_kv_head*head_dim]
    const tensor_view* wv = nullptr;          // [n_embd, n_kv_head*head_dim]
    const tensor_view* wo = nullptr;          // [n_head*head_dim, n_embd]
    std::vector<float> q_norm, k_norm;        // [head_dim]
};
gated_attn_weights bind_gated_attention(const weight_binder& b, const model_hparams& hp, int il);

// The MTP (nextn) block at blk.<n_layer>: bound and validated for the drafter; the forward does
// not run it.
struct mtp_weights {
    const tensor_view* eh_proj = nullptr;      // nextn.eh_proj [2*n_embd, n_embd]
    std::vector<float> enorm, hnorm;           // nextn.enorm / hnorm [n_embd]
    const tensor_view* embed = nullptr;        // nextn.embed_tokens [n_embd, n_vocab] or null (token_embd)
    const tensor_view* head = nullptr;         // nextn.shared_head_head [n_embd, n_vocab] or null (output)
    std::vector<float> head_norm;              // nextn.shared_head_norm [n_embd] or empty (output_norm)
    gated_attn_weights attn;
    std::vector<float> post_norm;              // post_attention_norm [n_embd]
    moe_weights moe;
};
mtp_weights bind_mtp(const weight_binder& b, const model_hparams& hp, int il);

// Throws (before any work) when a segment's recurrent state cannot be rolled back to its pos0.
void check_recurrent(std::span<const batch_segment> batch);
// Rewinds each segment's recurrent state to pos0 and marks the window's checkpoint rows.
// host_slots: the CPU forward writes the host checkpoints; false for a model that keeps the state
// elsewhere (recurrent_state::begin_window).
void begin_recurrent(std::span<const batch_segment> batch, bool host_slots = true);
// After the last layer (before commit_batch): the states hold pos0 + rows positions.
void end_recurrent(std::span<const batch_segment> batch);

// s.x += DeltaNet(rmsnorm(s.x)) for the stacked rows; the recurrence runs per segment, row by row,
// against recurrent layer `ir` of the segment's cache.
void delta_net_block(const delta_net_weights& w, const model_hparams& hp, const kernels::delta_net_shape& dn, int ir,
                     std::span<const batch_segment> batch, int64_t n, forward_scratch& s);
// s.x += gated attention(rmsnorm(s.x)) (KV layer il of each segment's cache).
void gated_attention_block(const gated_attn_weights& w, const model_hparams& hp, int il,
                           std::span<const batch_segment> batch, int64_t n, forward_scratch& s);

}  // namespace sluice
