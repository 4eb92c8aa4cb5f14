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
// NUMA (pool.n_nodes() > 1, core/numa_topology.h): node k owns a contiguous range of expert ids
// (first_expert_of_node, in proportion to its threads); moe/numa_placement.h binds those
// experts' pages to node k, and here every job touches one expert: gate/up as above, down as
// (expert, 64 columns), the combine of a column chunk done by the job that finishes its last
// expert. Node k's threads claim node k's jobs first (a claim counter per node), then steal
// from the other nodes, so the tail stays one job long. The jobs are the same functions on
// both paths and the combine order is unchanged, so the bits are those of one node (E1, E2).
// On one node (every machine measured so far) the path is the flat batches above: the only
// cost of NUMA there is one test of pool.n_nodes() per call.
#pragma once

#include "core/tensor.h"
#include "core/thread_pool.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
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
    std::vector<int32_t> sorted_row;   // [max_rows * k_used] pair (r * k_used + k) of the s-th sorted slot
    std::vector<int32_t> pos;          // [max_rows * k_used] sorted position of slot r * k_used + k
    std::vector<std::byte> act_x;      // [max_rows, act row of n_embd] each row quantised once
    std::vector<std::byte> act_gate;   // [max_rows * k_used, act row of n_embd for gate's format]
    std::vector<std::byte> act_up;     // same for up's format (unused when it equals gate's)
    std::vector<std::byte> act_down;   // [max_rows * k_used, act row of n_ff for down's format]
    std::vector<float> gate, up;       // [max_rows * k_used, n_ff] sorted slots
    std::vector<float> y;              // [max_rows * k_used, n_embd] each slot's expert output
    std::unique_ptr<std::atomic<int32_t>[]> left;   // [active] gate/up chunks not yet finished
    // Several NUMA nodes only: each node's next unclaimed job (one cache line each), the node
    // ranges of the current phase's jobs, and each 64-column down chunk's experts not yet done.
    struct alignas(64) node_counter {
        std::atomic<int64_t> next{0};
    };
    std::unique_ptr<node_counter[]> node_next;           // [k_max_numa_nodes]
    std::vector<int64_t> node_begin;                     // [k_max_numa_nodes + 1]
    std::unique_ptr<std::atomic<int32_t>[]> down_left;   // [ceil(n_embd / 64)]
};

// Sizes the scratch. Activation buffers hold 4 bytes a value (the largest activation form).
expert_scratch make_expert_scratch(int max_rows, int k_used, int n_expert, int64_t n_embd, int64_t n_ff);

// The first expert id of node `node` (node == n_nodes: n_expert): node k owns experts
// [n_expert * T_<k / T, n_expert * T_<=k / T), T_<k the threads of the nodes before it, T all of
// them: contiguous ranges, every expert exactly once, sizes in proportion to the node's threads.
// A layer's experts all have the same shapes and formats, so this is also the split by bytes.
// The expert pool (who computes first) and moe/numa_placement.h (where the pages go) both use it.
int32_t first_expert_of_node(int32_t n_expert, std::span<const int> threads_per_node, int node);

// out[r] = sum_k w[r, k] * SwiGLU-expert ids[r, k] (x[r]) for r < n_rows, the sum in rank order.
//   x:   [n_rows, n_embd] f32 (the normalised block input)
//   ids: [n_rows, k_used] expert ids in [0, n_expert); w: [n_rows, k_used] router weights
//   out: [n_rows, n_embd]
// n_rows <= s.max_rows; ids are validated by the router (route_topk), not here.
void run_experts(thread_pool& pool, const expert_bank& bank, const float* x, const int32_t* ids,
                 const float* w, int64_t n_rows, expert_scratch& s, float* out);

// The CPU lane of a split layer (issue 10): some of a window's (row, rank) pairs are computed by
// the GPU from its VRAM cache, the rest here, from host memory. Unlike run_experts, which sums
// each row's experts itself, this writes every computed pair's expert output y to its own row,
// so that the device can place it beside the GPU's pairs and combine each row in rank order with
// the kernel it uses for an all-GPU layer (DESIGN.md "One decode step").
//
// The same plan and jobs as run_experts (one implementation: the dedup of the selected pairs by
// expert, the gate/up phase whose last job per expert applies SwiGLU and requantises, the down
// phase by output columns; NUMA claiming included), only the combine left out, so a pair's y has
// the bits of run_experts' y for that pair, and of the GPU's y for it (E3), whatever the other
// pairs, the selection or the thread count (E1, E2); tests/unit/test_expert_subset.cpp checks it.
//
// y[p] = SwiGLU-expert ids[p] (x[p / k_used]) for every pair p < n_rows * k_used with
// ids[p] >= 0; rows of y whose id is negative are not written (another lane computes them).
//   x:   [n_rows, n_embd] f32 (the normalised block input)
//   ids: [n_rows, k_used] expert ids in [0, n_expert), or < 0 for a pair this lane skips
//   y:   [n_rows * k_used, y_stride] f32, y_stride >= n_embd (floats between pair rows)
// Returns the number of distinct experts computed. s: make_expert_scratch's, for at least
// n_rows rows (its y buffer is not used). Allocates nothing.
int run_expert_pairs(thread_pool& pool, const expert_bank& bank, const float* x, const int32_t* ids, int64_t n_rows,
                     expert_scratch& s, float* y, int64_t y_stride);

}  // namespace sluice::moe
