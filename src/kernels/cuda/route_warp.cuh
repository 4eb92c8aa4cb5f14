// route_topk's one-warp form as a device function, for the top-k kernel (ops.cu: a warp per row)
// and for the router's matmul, whose last block runs it on the row it made (matmul.cu:
// router_topk). Device code only (nvcc).
#pragma once

#include "kernels/cpu/ops.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/router.cuh"
#include "kernels/math.h"

#include <cstdint>

namespace sluice::cuda {

// One warp per row, the row in registers (lane l holds experts l, l + 32, ...): route_topk_row's
// bits with the serial chains only where the order matters.
//   - max: each lane's first maximum, then the warp's, ties to the lower index: the element the
//     serial scan (x[i] > mx) keeps, so the same value bits;
//   - exp_f32(x - max) per element (independent), the sum added in index order (every lane
//     adds the same shuffled values in the same order), the division per element;
//   - top-k: each round the warp's largest not-yet-taken probability, ties to the lower id:
//     with no NaN this is the serial repeated argmax's pick;
//   - renormalisation: the weights summed in rank order, then divided.
// A NaN anywhere (logits or probabilities) makes the order of comparisons matter: lane 0 then
// runs the serial code itself, so the result is route_topk_row's in every case.
constexpr int k_route_per_lane = 16;   // experts per lane: rows of up to 512 experts
// The row's experts a lane holds in a given launch (PL <= k_route_per_lane, n_expert <= 32 * PL):
// each pick of the top-k walks a lane's PL slots as one chain of compare-and-selects, so a
// 128-expert router (Qwen3-30B-A3B) takes 4 slots rather than 16. The router's one-warp tail ran
// its 9 picks through 16 slots; with 4, the fused norm + router + top-k took 13.6 us a layer of a
// decode step instead of 15.5 (bench/gpu/step_trace on the H200, session 27, the 30B shape).

// A non-NaN float as an unsigned key in its numeric order, +0 and -0 the same key (they compare
// equal, so the serial scan keeps the first of them).
__device__ inline uint32_t order_key(float f) {
    const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct picked {
    float value;   // the element's own bits
    int index;
};

// The largest of the row's elements not yet taken (lane l holds elements 32k + l in v[k]; bit k
// of `taken` marks element 32k + l taken), ties to the lowest index: the pick of the serial
// scan with a strict '>'. No NaN (the callers fall back to the serial code first). Two warp
// reductions (__reduce_max_sync on the keys, then __reduce_min_sync on the indices holding the
// maximum) instead of five rounds of two shuffles and a comparison: the router's top-8 of 128
// made 8 such rounds a decode step and layer. Every lane gets the result.
template <int PL>
__device__ inline picked warp_pick(const float (&v)[PL], int n, uint32_t taken, int lane) {
    uint32_t bk = 0;   // below every element's key (the smallest, -inf's, is 0x007fffff)
    int bi = -1;
#pragma unroll
    for (int u = 0; u < PL; ++u) {
        const int i = 32 * u + lane;
        if (i < n && !((taken >> u) & 1u)) {
            const uint32_t key = order_key(v[u]);
            if (bi < 0 || key > bk) {   // indices rise with u: the first of equal keys stays
                bk = key;
                bi = i;
            }
        }
    }
    const uint32_t m = __reduce_max_sync(0xffffffffu, bk);
    const int idx = static_cast<int>(__reduce_min_sync(0xffffffffu, bi >= 0 && bk == m ? static_cast<uint32_t>(bi) : 0xffffffffu));
    float mine = 0.0f;
#pragma unroll
    for (int u = 0; u < PL; ++u)
        if (32 * u + lane == idx) mine = v[u];
    return picked{__shfl_sync(0xffffffffu, mine, idx & 31), idx};
}

// Top-k of the probabilities v (lane l holds experts l, l + 32, ...; no NaN) by repeated warp
// picks: lane k keeps rank k's id and weight; every lane adds the picked weights in rank order as
// they come (the renormalisation's sum). Every lane of the warp calls it.
template <int PL>
__device__ inline void warp_select_topk(const kernels::router_params& p, const float (&v)[PL], int32_t* rid, float* rwt,
                                        int lane) {
    const int n = p.n_expert;
    uint32_t taken = 0;   // bit k: this lane's element 32k + lane is taken
    int my_id = 0;
    float my_wt = 0.0f, s = 0.0f;
    for (int k = 0; k < p.n_used; ++k) {
        const picked pk = warp_pick(v, n, taken, lane);
        const float bv = pk.value;
        const int bi = pk.index;
        if ((bi & 31) == lane) taken |= 1u << (bi / 32);
        if (lane == k) {
            my_id = bi;
            my_wt = bv;
        }
        s = s + bv;
    }
    if (p.renormalize) my_wt = my_wt / s;
    if (lane < p.n_used) {
        rid[lane] = my_id;
        rwt[lane] = my_wt;
    }
}

// The phases both forms share, each called by every lane of a warp (lane l holds experts l,
// l + 32, ... in v). route_row_exponentials: the row x loaded (0 past n) and, when it holds no
// NaN, exp_f32(x - max) in place (max: warp_pick, ties to the lower index: the serial scan's
// element); returns whether a NaN was found (the same answer in every lane). route_row_sum: the
// exponentials added in index order from shared memory se (a chain of adds whose loads are issued
// ahead; a shuffle per term put its latency in the chain: 128 x ~30 cycles).
// route_row_probabilities: v / sum written to x; returns whether one is NaN (any lane), after a
// __syncwarp that makes them visible to lane 0.
// In STEP_TRACE builds the top-k's phases are marked (launch.cuh's trace_mark, thread 0 only):
// 6 the exponentials, 7 the sum (and, in the block form, the ranks), 8 the probabilities; the
// router kernel's 4 (the last block knows it is) comes before them and its 5 after the picks.
template <int PL>
__device__ inline bool route_row_exponentials(const float* x, int n, int lane, float (&v)[PL]) {
    bool nan = false;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
        const int i = 32 * k + lane;
        v[k] = i < n ? __ldcg(x + i) : 0.0f;
        nan = nan || v[k] != v[k];
    }
    if (__any_sync(0xffffffffu, nan)) return true;
    const float mx = warp_pick(v, n, 0u, lane).value;
#pragma unroll
    for (int k = 0; k < PL; ++k)
        if (32 * k + lane < n) v[k] = kernels::exp_f32(v[k] - mx);
    return false;
}
__device__ inline float route_row_sum(const float* se, int n) {
    float sum = 0.0f;
#pragma unroll 8
    for (int i = 0; i < n; ++i) sum = sum + se[i];
    return sum;
}
template <int PL>
__device__ inline bool route_row_probabilities(float (&v)[PL], int n, float sum, float* x, int lane) {
    bool nan = false;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
        const int i = 32 * k + lane;
        if (i < n) {
            v[k] = v[k] / sum;
            x[i] = v[k];
            nan = nan || v[k] != v[k];
        }
    }
    const bool any = __any_sync(0xffffffffu, nan);
    __syncwarp();
    return any;
}

// x: the row's n_expert logits (global memory; overwritten with the probabilities); rid, rwt:
// its n_used ids and weights; se: shared memory of 32 * k_route_per_lane floats for this warp.
// Every lane of the warp calls it. PL: see k_route_per_lane (the launch picks it: route_slots).
template <int PL>
__device__ inline void route_topk_warp_pl(const kernels::router_params& p, float* x, int32_t* rid, float* rwt, int lane,
                                          float* se) {
    const int n = p.n_expert;
    float v[PL];
    if (route_row_exponentials(x, n, lane, v)) {
        if (lane == 0) route_topk_row(n, p.n_used, p.renormalize, x, rid, rwt);
        return;
    }
    trace_mark(6);   // the exponentials
#pragma unroll
    for (int k = 0; k < PL; ++k)
        if (32 * k + lane < n) se[32 * k + lane] = v[k];
    __syncwarp();
    const float sum = route_row_sum(se, n);
    trace_mark(7);   // the sum
    if (route_row_probabilities(v, n, sum, x, lane)) {
        if (lane == 0) route_select_row(n, p.n_used, p.renormalize, x, rid, rwt);
        return;
    }
    trace_mark(8);   // the probabilities
    warp_select_topk<PL>(p, v, rid, rwt, lane);
}

// The block form of route_topk_warp_pl for the router's last block (all of its >= 128 threads call
// it; n_expert <= k_route_block_experts, n_used < 32): the same bits, the top-k found beside the
// softmax's sum instead of after it. Every warp holds the row (its max and exponentials as above);
// warp 0 adds the exponentials in index order while the other warps rank them: expert i's rank is
// the number of experts j with e_j >= e_i, less one. Without two equal exponentials, ranks
// 0 .. n_used are the serial repeated argmax's picks over the exponentials; two equal ones take
// the same rank and leave the rank below it empty, so an empty candidate slot sends warp 0 to the
// warp form's picks (an exact tie among the top exponentials: rare). The probabilities
// p = e / sum keep the candidates' order unless the division makes two of them equal, which would
// hand the tie to the lower id: the picks stand when the n_used + 1 candidates' p strictly
// decrease (an expert outside them has e, hence p, at most the last candidate's), else warp 0
// picks over the probabilities as the warp form does. Why: the warp form's 8 picks (two warp
// reductions each) came after the 128-term sum, ~4 us of the router launch's 11.3 us a layer
// (bench/gpu/step_trace marks, H100, session 38; kernel_bench's router 3.78 us alone, 7.45 with
// the arrival and the top-k). The ranking compares the exponentials' bits as integers (exponentials
// lie in [0, 1], where the bits keep the order) a sign bit each, 4 from one 16-byte load: the first
// form, a float compare and a tie test per term from one 4-byte load whose latency each compare
// waited on, took the launch to 11.97 us (kernel_bench, H100, session 40).
// se: 16-byte aligned shared memory of n_expert floats rounded up to 4; cand: shared memory of 32 ints.
constexpr int k_route_block_experts = 256;
constexpr int k_route_rankers = 96;   // warps 1-3 of the router's 128 threads
constexpr float k_route_rank_pad = -2.0f;   // past n: its bits less any exponential's keep the sign bit

// Experts first, first + k_route_rankers, ... (R of them, those < n) ranked over se[0, n4) and
// written to cand[rank] where rank < n_cand.
template <int R>
__device__ inline void route_rank_candidates(const float* se, int n, int n4, int first, int n_cand, int* cand) {
    uint32_t key[R];
    int below[R];   // experts whose exponential is below this one's, the padding included
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int i = first + r * k_route_rankers;
        key[r] = i < n ? __float_as_uint(se[i]) : 0u;
        below[r] = 0;
    }
    const float4* s4 = reinterpret_cast<const float4*>(se);
#pragma unroll 4
    for (int q = 0; q < n4 / 4; ++q) {
        const float4 f = s4[q];
        const uint32_t w[4] = {__float_as_uint(f.x), __float_as_uint(f.y), __float_as_uint(f.z), __float_as_uint(f.w)};
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int r = 0; r < R; ++r) below[r] += static_cast<int>((w[u] - key[r]) >> 31);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int i = first + r * k_route_rankers;
        const int rank = n4 - below[r] - 1;
        if (i < n && rank < n_cand) cand[rank] = i;
    }
}

template <int PL>
__device__ inline void route_topk_block(const kernels::router_params& p, float* x, int32_t* rid, float* rwt, float* se,
                                        int* cand) {
    const int n = p.n_expert, n4 = (n + 3) & ~3;
    const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid / 32;
    const int nc = p.n_used < n ? p.n_used + 1 : p.n_used;   // the picks and the one after them
    float v[PL];
    if (route_row_exponentials(x, n, lane, v)) {   // every warp reads the same row: all leave here together
        if (tid == 0) route_topk_row(n, p.n_used, p.renormalize, x, rid, rwt);
        return;
    }
    trace_mark(6);   // the exponentials
    if (warp == 0) {
#pragma unroll
        for (int k = 0; k < PL; ++k)
            if (32 * k + lane < n4) se[32 * k + lane] = 32 * k + lane < n ? v[k] : k_route_rank_pad;
        cand[lane] = -1;
    }
    __syncthreads();
    float sum = 0.0f;
    if (warp == 0) sum = route_row_sum(se, n);
    else if (warp <= k_route_rankers / 32) {
        const int first = tid - 32;
        if (n <= k_route_rankers) route_rank_candidates<1>(se, n, n4, first, nc, cand);
        else if (n <= 2 * k_route_rankers) route_rank_candidates<2>(se, n, n4, first, nc, cand);
        else route_rank_candidates<3>(se, n, n4, first, nc, cand);
    }
    __syncthreads();
    trace_mark(7);   // the sum and the ranks
    if (warp != 0) return;
    if (route_row_probabilities(v, n, sum, x, lane)) {
        if (lane == 0) route_select_row(n, p.n_used, p.renormalize, x, rid, rwt);
        return;
    }
    trace_mark(8);   // the probabilities
    // Lane k: candidate k (rank k over the exponentials) and its probability.
    const int cid = lane < nc ? cand[lane] : 0;
    const float pc = lane < nc && cid >= 0 ? se[cid] / sum : 0.0f;
    const float p_next = __shfl_down_sync(0xffffffffu, pc, 1);
    if (__all_sync(0xffffffffu, lane >= nc || (cid >= 0 && (lane + 1 == nc || pc > p_next)))) {
        float s = 0.0f;   // the picked weights in rank order
        for (int k = 0; k < p.n_used; ++k) s = s + __shfl_sync(0xffffffffu, pc, k);
        if (lane < p.n_used) {
            rid[lane] = cid;
            rwt[lane] = p.renormalize ? pc / s : pc;
        }
        return;
    }
    warp_select_topk<PL>(p, v, rid, rwt, lane);   // two exponentials or probabilities equal among the candidates
}

// The launch's choice between the block and the warp forms (uniform over the block).
__device__ inline bool route_block_form(const kernels::router_params& p) {
    return p.n_expert <= k_route_block_experts && p.n_used < 32 && blockDim.x >= 32 + k_route_rankers;
}

// The slots a lane for a row of n_expert experts (<= 32 * k_route_per_lane): 4 up to 128 experts,
// else 16; the same picks, so the same bits, either way. The launch picks the kernel's form: with
// the forms inlined side by side in one kernel behind a branch, ptxas for sm_90 spilled the router
// kernel's norm weights (68 bytes stored, 112 loaded; three forms) and the top-k kernel's rows
// (56 bytes; two forms); one form a kernel spills nothing.
inline constexpr int route_slots(int n_expert) { return n_expert <= 32 * 4 ? 4 : k_route_per_lane; }

}  // namespace sluice::cuda
