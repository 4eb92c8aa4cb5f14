// The join of a split MoE layer (issue 10): the GPU wrote its (row, rank) pairs' expert outputs
// into the layer's [pairs, n] buffer; the CPU lane wrote the other pairs' rows into host memory.
// This copies the CPU's rows into the device buffer, so the combine kernel then sums each row in
// rank order exactly as for an all-GPU layer. A copy moves bits unchanged: no float arithmetic.
// Host-only declarations: included by C++ code compiled without nvcc.
#pragma once

#include <cstdint>

namespace sluice::cuda {

// dst[p, :] = src[p, :] for every pair p < n_pairs with slot[p] < 0 (a CPU pair); other rows of
// dst are left alone.
//   dst:  device [n_pairs, n] f32
//   src:  [n_pairs, n] f32 the device can read: device memory, or mapped pinned host memory
//         (cudaHostAllocMapped; read over PCIe by the kernel, only the rows it copies)
//   slot: device [n_pairs] the pair's GPU cache slot, or < 0 when the CPU computed it
// Enqueued on `stream` (a cudaStream_t).
void copy_cpu_pair_rows(float* dst, const float* src, const int32_t* slot, int64_t n_pairs, int64_t n, void* stream);

// The doorbell of a split layer (issue 10, part 3): the routed ids and the normalised input
// written by a kernel into mapped pinned host memory, then a counter the host polls, so the host
// learns the routing while the stream goes on (the resident experts and the shared expert)
// instead of waiting for the stream with a blocking sync. It also maps each pair's expert to its
// resident slot on the device, so the resident lane's launches need nothing from the host.
struct routing_bell {
    const int32_t* ids = nullptr;          // device [pairs] routed expert ids
    const float* xn = nullptr;             // device [rows, n_embd] normalised input
    int64_t pairs = 0;                     // rows * k_used
    int64_t xn_count = 0;                  // rows * n_embd
    const int32_t* local_slot = nullptr;   // device [n_expert] the layer's slot per expert, -1: not resident
    int n_expert = 0;
    int32_t* host_ids = nullptr;           // mapped host [pairs] (the device's address of it)
    float* host_xn = nullptr;              // mapped host [rows, n_embd]
    int32_t* mm_ids = nullptr;             // device [pairs]: local_slot[id], or -1 (an id outside
                                           // 0..n_expert-1 too: the host rejects it)
    uint32_t* state = nullptr;             // device [2]: blocks done this ring, rings so far
    uint32_t* bell = nullptr;              // mapped host [1]: the rings so far, written last
};
// Enqueued on `stream`: when the host reads bell = r (the r-th ring), every value above is in
// host memory (each block fences its writes system-wide before the last block writes the bell).
void ring_routing_bell(const routing_bell& b, void* stream);

// A streamed split layer's pairs (a prefill chunk, issue 10 part 5) by where their expert is:
// resident ones from their cache slot, the others from the layer buffer the copy stream filled.
//   ids:        device [pairs] routed expert ids
//   local_slot: device [n_expert] the layer's slot per expert, -1: not resident (the only
//               negative value; the lanes' map never holds another)
//   slot_ids:   device [pairs] out: local_slot[id], or -1
//   rest_ids:   device [pairs] out: id where it is not resident, else -1
// An id outside 0..n_expert-1 gets -1 in both (the router never makes one). Enqueued on `stream`.
void split_streamed_pairs(const int32_t* ids, int64_t pairs, const int32_t* local_slot, int n_expert, int32_t* slot_ids,
                          int32_t* rest_ids, void* stream);

}  // namespace sluice::cuda
