// Device versions of the forward-pass ops of src/kernels/cpu/ops.h, each giving the CPU op's
// bits (same operation order, every float operation rounded on its own, exp/SiLU from
// kernels/math.h) and row-exact (E1): a row's result depends only on that row's inputs.
// Host-only declarations; all pointers are device pointers; every call enqueues on `stream`.
// Ops that take a position (rope, kv_store, attention) take it either as the host value pos0 or,
// when pos_dev is not null, from device memory (*pos_dev): a captured CUDA graph then replays
// for any position with its kernel arguments unchanged.
#pragma once

#include "core/hd.h"
#include "kernels/cpu/ops.h"
#include "quant/act.h"

#include <cstddef>
#include <cstdint>

namespace sluice::cuda {

// out[r, :] = rmsnorm(x[r, :]) * w (kernels::rmsnorm), rows of n floats, contiguous.
// x, out: [n_rows, n] (may alias); w: [n] or nullptr.
void rmsnorm(const float* x, const float* w, float* out, int64_t n_rows, int64_t n, float eps, void* stream);

// rmsnorm (as above) and, in the same launch, the int8 activation rows of its output for a
// matmul (cuda::quantize_act_rows' bits): out [n_rows, n] f32 and act [n_rows,
// act_row_bytes(f, n)]. f is q8_32 or q8_256, n a multiple of its block width. x may alias out.
void rmsnorm_quant(const float* x, const float* w, float* out, int64_t n_rows, int64_t n, float eps,
                   quant::act_format f, std::byte* act, void* stream);

// The MoE block's residual add folded into the next layer's rmsnorm_quant (one launch instead of
// up to four): x[r, :] = x[r, :] + s[r, :] where s is moe_combine's rank-order sum of the experts'
// rows, and, with a shared expert, s + sigmoid(sh_gate[r]) * sh[r, :] (moe_combine into a buffer,
// add_gated, add: the same operations in that order, so the same bits); then rmsnorm_quant of the
// new x. x is written back (the residual stream) and must not alias out; n <= 8192.
struct moe_residual {
    const float* ey = nullptr;        // [n_rows * K, n] the experts' rows, rank order
    const float* weights = nullptr;   // [n_rows, K] their routing weights
    int K = 0;
    const float* sh = nullptr;        // [n_rows, n] the shared expert's rows, or null
    const float* sh_gate = nullptr;   // [n_rows] its gate logits (with sh)
    // A device counter, zero before and after the launch: one row's combine is then spread over
    // blocks, the last one to finish taking the norm (null: one block a row).
    unsigned* arrivals = nullptr;
};
void moe_residual_rmsnorm_quant(const moe_residual& m, float* x, const float* w, float* out, int64_t n_rows, int64_t n,
                                float eps, quant::act_format f, std::byte* act, void* stream);

// kernels::rope_apply for rows at positions pos0..pos0+n_rows-1. cs_table: [n_pos, n_rot]
// rows made by kernels::rope_table on the host (uploaded), row p for position p.
// x: [n_rows, n_head, head_dim], in place.
void rope(const kernels::rope_params& p, const float* cs_table, int32_t pos0, float* x, int64_t n_rows, int n_head,
          int head_dim, void* stream, const int32_t* pos_dev = nullptr);

// What attention needs after the q/k/v matmuls, in one launch, per row at positions pos0..:
// the per-head RMSNorm of q and k (when q_norm / k_norm are given: rmsnorm over head_dim with
// those weights), RoPE on q and k (rope above), and k, v stored into the cache (kv_store below).
// The same operations as those calls in that order, so the same bits.
//   q: [n_rows, n_head, head_dim], k, v: [n_rows, n_kv_head, head_dim] (q, k in place);
//   kc, vc: [n_ctx, n_kv_head, head_dim].
void qk_norm_rope_store(const kernels::rope_params& p, const float* cs_table, int32_t pos0, float* q, float* k, const float* v,
                        const float* q_norm, const float* k_norm, float eps, int64_t n_rows, int n_head, int n_kv_head,
                        int head_dim, float* kc, float* vc, void* stream, const int32_t* pos_dev = nullptr);

// Copies rows k, v [n_rows, row_floats] into the cache kc, vc [n_ctx, row_floats] at pos0.
void kv_store(const float* k, const float* v, float* kc, float* vc, int32_t pos0, int64_t n_rows, int64_t row_floats,
              void* stream, const int32_t* pos_dev = nullptr);

// kernels::attention: chunks of k_attn_chunk KV positions in order, each softmaxed against its
// own max and merged online, the same operations in the same order.
//   q: [n_rows, n_head, head_dim]; kc, vc: [n_ctx, n_kv_head, head_dim]; out: [n_rows, n_head, head_dim]
// A decode step or a verify window (n_rows <= 16) given `split` runs over every SM: blocks per
// (KV head, chunk lane, row) write each chunk's (max, exp sum, V sum) to split->records and a
// second launch merges each head's chunks in chunk order: the same bits (head_dim <= 256, <= 16
// query heads a KV head; otherwise, and for prefill chunks, the one-block-per-head or rows
// kernel). A window of more rows than the records hold runs as groups of max_rows rows.
struct attention_split {
    float* records = nullptr;      // [max_rows, n_head, max_chunks, attention_split_record_floats(head_dim)]
    int64_t max_chunks = 0;        // chunks of k_attn_chunk positions the records hold per head
    int64_t max_rows = 1;          // rows the records hold (a launch pair's rows)
};
// The widest window the split pair takes (wider: prefill chunks, the rows kernel).
inline constexpr int64_t k_split_max_rows = 16;
// Floats of one chunk's record: its max and exp sum, two unused, then its V sum, padded so every
// record starts on a 16-byte boundary.
SLUICE_HD constexpr int64_t attention_split_record_floats(int head_dim) { return 4 + (static_cast<int64_t>(head_dim) + 3) / 4 * 4; }
// Blocks per KV head the split kernel launches for records of max_chunks (0: p can't split).
int64_t attention_split_blocks(const kernels::attention_params& p, int64_t max_chunks);
// Query heads a merge block of the split decode attention covers so that its outputs are whole
// int8 activation blocks of `width` floats (32 or 256): width / head_dim where head_dim divides
// width, 1 where width divides head_dim; 0 where blocks would straddle two merge blocks (or
// width is neither): then the output projection quantises its input itself.
int attention_split_act_heads(const kernels::attention_params& p, int width);
// The output rows' int8 activation blocks (the output projection's input), made by the split
// attention's merge launch where it runs (rows with split records) and its blocks' heads hold
// whole blocks of width floats (32 or 256: act_format q8_32 or q8_256; attention_split_act_heads);
// null act: none.
struct attention_act {
    std::byte* act = nullptr;   // [n_rows, act_row_bytes(format, n_head * head_dim)]: the rows' blocks
    int width = 0;
    // The hybrids' gated attention: the rows' query|gate projection [n_rows, n_head, 2 * head_dim]; where
    // the blocks are written, the output was first multiplied by the sigmoid of its gate half
    // (output_gate's bits); where they are not, neither was the gate applied.
    const float* gate = nullptr;
};
// Returns true when act_out's blocks were written (the caller quantises otherwise, and applies
// act_out's gate).
bool attention(const kernels::attention_params& p, const float* q, const float* kc, const float* vc, int32_t pos0,
               int64_t n_rows, float* out, void* stream, const int32_t* pos_dev = nullptr,
               const attention_split* split = nullptr, const attention_act* act_out = nullptr);

// kernels::route_topk for each of n_rows rows. logits: [n_rows, n_expert] (overwritten with the
// probabilities); ids, weights: [n_rows, n_used].
void route_topk(const kernels::router_params& p, float* logits, int64_t n_rows, int32_t* ids, float* weights,
                void* stream);

// The gated attention's query projection qg [n_rows, n_head, 2 * head_dim] (query then gate per
// head): q [n_rows, n_head, head_dim] gets the query halves.
void gated_query(const float* qg, float* q, int64_t n_rows, int n_head, int head_dim, void* stream);
// The gated attention's output gate: y[r, h, d] = y[r, h, d] * sigmoid(qg[r, h, head_dim + d])
// (hybrid_blocks.cpp). y: [n_rows, n_head, head_dim].
void output_gate(float* y, const float* qg, int64_t n_rows, int n_head, int head_dim, void* stream);

// out[i] = silu(gate[i]) * up[i] (kernels::swiglu); out may alias gate or up.
void swiglu(const float* gate, const float* up, float* out, int64_t n, void* stream);
// The int8 activation rows of swiglu(gate, up) (rows of n values; f q8_32 or q8_256), without
// writing the float product: the same bits as swiglu then quantize_act_rows.
void swiglu_quant(const float* gate, const float* up, int64_t n_rows, int64_t n, quant::act_format f, std::byte* act,
                  void* stream);
// y[i] = y[i] + b[i].
void add(float* y, const float* b, int64_t n, void* stream);
// y[r, i] = y[r, i] + b[i] for r < n_rows, i < n (biases).
void add_rows(float* y, const float* b, int64_t n_rows, int64_t n, void* stream);
// out[r, i] = ((0 + w[r,0] * ey[r*K+0, i]) + w[r,1] * ey[r*K+1, i]) + ... (moe_ffn.cpp's
// rank-order sum). ey: [n_rows * K, n]; w: [n_rows, K]; out: [n_rows, n].
// accumulate: out[r, i] = out[r, i] + (that sum) instead (the residual add in the same launch).
void moe_combine(const float* ey, const float* w, int K, int64_t n_rows, int64_t n, float* out, void* stream,
                 bool accumulate = false);
// out[r, i] = out[r, i] + sigmoid(gate[r]) * sh[r, i] (qwen2moe's shared expert).
void add_gated(float* out, const float* sh, const float* gate, int64_t n_rows, int64_t n, void* stream);

}  // namespace sluice::cuda
