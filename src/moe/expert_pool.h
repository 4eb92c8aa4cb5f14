// The CPU expert pool: one MoE layer's routed experts for a window of rows, computed as flat
// batches of jobs on the thread pool (DESIGN.md "One decode step": the CPU lane).
//
// A layer is a barrier. The window's routed ids are deduplicated first, so each expert's weights
// are read once for all rows routed to it (dot_rows decodes a weight block once for up to 16
// rows). Then two phases, each one parallel_for whose chunks are claimed with an atomic counter:
//   1. gate/up: a job is (expert, chunk of n_ff columns) for every row routed to the expert; the
//      job that finishes an expert's last chunk applies SwiGLU to that expert's rows and
//      requantises them for the down matrix (no barrier of its own);
//   2. down + combine: a job is a chunk of n_embd output columns for every active expert, then,
//      for those columns, each row's sum over its experts in the router's rank order.
// Nothing is allocated per call: every buffer lives in expert_scratch, sized once.
//
// Exactness: dot_rows returns each row's dot_ref bits whatever the other rows of its call, SwiGLU
// and requantisation are per row, and the combine is out = ((0 + w0*y0) + w1*y1) + ... per row
// in rank order, exactly the one-row code path: a row's output bits do not depend on which rows
// share the window or an expert (E1), nor on the thread count or the chunking (E2).
//
// NUMA: the machines measured so far have one node, where placement costs nothing and is not
// done; per-node expert placement is future work (see the report of issue 4).
#pragma once

#include "core/tensor.h"
#include "core/thread_pool.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sluice::moe {

// One layer's routed experts (3-D tensors, the expert index outermost).
struct expert_bank {
    const tensor_view* gate = nullptr;   // [n_embd, n_ff, n_expert]
    const tensor_view* up = nullptr;     // [n_embd, n_ff, n_expert]
    const tensor_view* down = nullptr;   // [n_ff, n_embd, n_expert]
    // Optional, the placement arena (placement/expert_arena.h): expert e's gate, up and down
    // matrices live at blobs + e * blob_stride + {gate_offset, up_offset, down_offset}, each laid
    // out as its slice of the tensor above (same format, rows and row size). Null: the slices of
    // the tensors. Same bytes through the same kernels, so the same bits either way.
    const std::byte* blobs = nullptr;
    uint64_t blob_stride = 0, gate_offset = 0, up_offset = 0, down_offset = 0;
};

// Every buffer run_experts needs, for windows of up to max_rows rows with k_used experts each.
struct expert_scratch {
    int max_rows = 0, k_used = 0, n_expert = 0;
    int64_t n_embd = 0, n_ff = 0;
    // Slots are (row, rank) pairs, r * k_used + k; "sorted" order groups them by expert id, rows
    // in order within an expert.
    std::vector<int32_t> count;        // [n_expert] slots routed to each expert
    std::vector<int32_t> active;       // [min(n_expert, max_rows * k_used)] active expert ids, ascending
    std::vector<int32_t> start;        // [active + 1] first sorted slot of each active expert
    std::vector<int32_t> sorted_row;   // [max_rows * k_used] row of the s-th sorted slot
    std::vector<int32_t> pos;          // [max_rows * k_used] sorted position of slot r * k_used + k
    std::vector<std::byte> act_x;      // [max_rows, act row of n_embd] each row quantised once
    std::vector<std::byte> act_gate;   // [max_rows * k_used, act row of n_embd for gate's format]
    std::vector<std::byte> act_up;     // same for up's format (unused when it equals gate's)
    std::vector<std::byte> act_down;   // [max_rows * k_used, act row of n_ff for down's format]
    std::vector<float> gate, up;       // [max_rows * k_used, n_ff] sorted slots
    std::vector<float> y;              // [max_rows * k_used, n_embd] each slot's expert output
    std::unique_ptr<std::atomic<int32_t>[]> left;   // [active] gate/up chunks not yet finished
};

// Sizes the scratch. Activation buffers hold 4 bytes a value (the largest activation form).
expert_scratch make_expert_scratch(int max_rows, int k_used, int n_expert, int64_t n_embd, int64_t n_ff);

// out[r] = sum_k w[r, k] * SwiGLU-expert ids[r, k] (x[r]) for r < n_rows, the sum in rank order.
//   x:   [n_rows, n_embd] f32 (the normalised block input)
//   ids: [n_rows, k_used] expert ids in [0, n_expert); w: [n_rows, k_used] router weights
//   out: [n_rows, n_embd]
// n_rows <= s.max_rows; ids are validated by the router (route_topk), not here.
void run_experts(thread_pool& pool, const expert_bank& bank, const float* x, const int32_t* ids,
                 const float* w, int64_t n_rows, expert_scratch& s, float* out);

}  // namespace sluice::moe
