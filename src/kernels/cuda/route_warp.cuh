// route_topk's one-warp form as a device function, for the top-k kernel (ops.cu: a warp per row)
// and for the router's matmul, whose last block runs it on the row it made (matmul.cu:
// router_topk). Device code only (nvcc).
#pragma once

#include "kernels/cpu/ops.h"
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

// x: the row's n_expert logits (global memory; overwritten with the probabilities); rid, rwt:
// its n_used ids and weights; se: shared memory of 32 * k_route_per_lane floats for this warp.
// Every lane of the warp calls it. PL: see k_route_per_lane (the launch picks it: route_slots).
template <int PL>
__device__ inline void route_topk_warp_pl(const kernels::router_params& p, float* x, int32_t* rid, float* rwt, int lane,
                                          float* se) {
    const int n = p.n_expert;
    float v[PL];
    bool nan = false;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
        const int i = 32 * k + lane;
        v[k] = i < n ? __ldcg(x + i) : 0.0f;
        nan = nan || v[k] != v[k];
    }
    if (__any_sync(0xffffffffu, nan)) {
        if (lane == 0) route_topk_row(n, p.n_used, p.renormalize, x, rid, rwt);
        return;
    }
    // Max, ties to the lower index (the serial scan's element).
    const float mx = warp_pick(v, n, 0u, lane).value;
    // exp, the sum in index order, the division.
#pragma unroll
    for (int k = 0; k < PL; ++k)
        if (32 * k + lane < n) v[k] = kernels::exp_f32(v[k] - mx);
    // The sum in index order by every lane, from shared memory: a chain of adds whose loads are
    // issued ahead (a shuffle per term put its latency in the chain: 128 x ~30 cycles).
#pragma unroll
    for (int k = 0; k < PL; ++k)
        if (32 * k + lane < n) se[32 * k + lane] = v[k];
    __syncwarp();
    float sum = 0.0f;
#pragma unroll 8
    for (int i = 0; i < n; ++i) sum = sum + se[i];
    nan = false;
#pragma unroll
    for (int k = 0; k < PL; ++k) {
        const int i = 32 * k + lane;
        if (i < n) {
            v[k] = v[k] / sum;
            x[i] = v[k];
            nan = nan || v[k] != v[k];
        }
    }
    if (__any_sync(0xffffffffu, nan)) {
        __syncwarp();   // the probabilities written above are visible to lane 0
        if (lane == 0) route_select_row(n, p.n_used, p.renormalize, x, rid, rwt);
        return;
    }
    // Top-k: lane k keeps rank k's id and weight; every lane adds the picked weights in rank order
    // as they come (the renormalisation's sum: a chain of shuffles after the picks before).
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

// The slots a lane for a row of n_expert experts (<= 32 * k_route_per_lane): 4 up to 128 experts,
// else 16; the same picks, so the same bits, either way. The launch picks the kernel's form: with
// the forms inlined side by side in one kernel behind a branch, ptxas for sm_90 spilled the router
// kernel's norm weights (68 bytes stored, 112 loaded; three forms) and the top-k kernel's rows
// (56 bytes; two forms); one form a kernel spills nothing.
inline constexpr int route_slots(int n_expert) { return n_expert <= 32 * 4 ? 4 : k_route_per_lane; }

}  // namespace sluice::cuda
