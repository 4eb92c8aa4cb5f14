// The Gated DeltaNet layer's row ops on the device (Qwen3-Next, Qwen3.5/3.6-MoE), each giving the
// bits of its scalar reference in src/kernels/cpu/delta_net.h: the same operations in the same
// order, every float operation rounded on its own, exp/SiLU/softplus from kernels/math.h. The
// recurrence runs the rows of one sequence in position order inside one launch; the state a row
// starts from is copied into its checkpoint slot first (kv/recurrent_state.h), so a verify window
// rolls back on the device as on the host. Host-only declarations; pointers are device pointers.
#pragma once

#include "kernels/cpu/delta_net.h"
#include "quant/act.h"

#include <cstddef>

#include <cstdint>

namespace sluice::cuda {

// Where a window's checkpoints of one layer's state go: row i of the window (i >= first) copies
// the state it starts from to slot0 + (i - first) * slot_stride before it updates it. first >=
// rows (or slot0 null): no row is checkpointed.
struct dn_checkpoints {
    float* slot0 = nullptr;
    int64_t slot_stride = 0;   // floats from one slot to the next
    int64_t first = 0;
};

// kernels::delta_net_conv_row for rows 0..rows-1 of one sequence, in order.
//   w: [C, d_conv]; state: [d_conv-1, C] (updated); x, out: [rows, C]; ck: of the conv state.
void delta_net_conv(const kernels::delta_net_shape& s, const float* w, float* state, const float* x, float* out,
                    int64_t rows, const dn_checkpoints& ck, void* stream);

// The decay and write-strength inputs of a row (hybrid_blocks.cpp's gate loop): per value head h,
// beta = sigmoid(b), g = softplus(a + dt_bias[h]) * a_coef[h], with (b, a) read from
//   ba [rows, 2*n_v] (alpha null; qwen3next: per key head, [beta x rep, alpha x rep]), or
//   ba [rows, n_v] the beta logits and alpha [rows, n_v] (qwen35moe).
struct dn_gates {
    const float* ba = nullptr;
    const float* alpha = nullptr;
    const float* dt_bias = nullptr;   // [n_v]
    const float* a_coef = nullptr;    // [n_v] ssm_a = -exp(A_log)
};

// kernels::delta_net_rule_row for rows 0..rows-1 of one sequence, in order, with the gates above.
//   qkv: [rows, C] the conv output (read only: q and k are normalised in shared memory);
//   state: [n_v, dk, dv] (updated); out: [rows, n_v * dv]; ck: of the DeltaNet state.
// Limits: dk <= 320 (a block's columns of the state in 48 KB of shared memory).
void delta_net_rule(const kernels::delta_net_shape& s, const float* qkv, const dn_gates& gates, float* state,
                    float* out, int64_t rows, const dn_checkpoints& ck, void* stream);

// delta_net_rule, then delta_net_gated_norm of its output with z and w, into out ([rows,
// n_v * dv]): one launch where the rule's register form takes the shape (dk 64 or 128, dv <= 256),
// else those two launches; the same bits either way. With act (f q8_32 or q8_256: the output
// projection's activation format), the same launch also writes the output rows' int8 activation
// blocks (quantize_act_rows' bits) where whole blocks fit a few heads; returns whether it did
// (else the caller quantises out itself).
bool delta_net_rule_norm(const kernels::delta_net_shape& s, const float* qkv, const dn_gates& gates, float* state,
                         const float* z, const float* w, float* out, int64_t rows, const dn_checkpoints& ck,
                         quant::act_format f, std::byte* act, void* stream);

// kernels::delta_net_gated_norm_row for n_rows rows: o, z, out [n_rows, n_v * dv] (out may
// alias o); w [dv].
void delta_net_gated_norm(const kernels::delta_net_shape& s, const float* o, const float* z, const float* w, float* out,
                          int64_t n_rows, void* stream);

}  // namespace sluice::cuda
