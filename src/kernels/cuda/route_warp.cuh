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

// x: the row's n_expert logits (global memory; overwritten with the probabilities); rid, rwt:
// its n_used ids and weights; se: shared memory of 32 * k_route_per_lane floats for this warp.
// Every lane of the warp calls it.
__device__ inline void route_topk_warp(const kernels::router_params& p, float* x, int32_t* rid, float* rwt, int lane,
                                       float* se) {
    const int n = p.n_expert;
    float v[k_route_per_lane];
    bool nan = false;
#pragma unroll
    for (int k = 0; k < k_route_per_lane; ++k) {
        const int i = 32 * k + lane;
        v[k] = i < n ? __ldcg(x + i) : 0.0f;
        nan = nan || v[k] != v[k];
    }
    if (__any_sync(0xffffffffu, nan)) {
        if (lane == 0) route_topk_row(n, p.n_used, p.renormalize, x, rid, rwt);
        return;
    }
    // Max, ties to the lower index.
    float mv = v[0];
    int mi = lane;   // lane < 32 <= ... : element `lane` exists when n > lane
#pragma unroll
    for (int k = 1; k < k_route_per_lane; ++k) {
        const int i = 32 * k + lane;
        if (i < n && v[k] > mv) {
            mv = v[k];
            mi = i;
        }
    }
    if (lane >= n) mi = 0x7fffffff;   // a lane with no element never wins
    for (int off = 16; off > 0; off >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, mv, off);
        const int oi = __shfl_xor_sync(0xffffffffu, mi, off);
        if (oi != 0x7fffffff && (mi == 0x7fffffff || ov > mv || (ov == mv && oi < mi))) {
            mv = ov;
            mi = oi;
        }
    }
    const float mx = mv;
    // exp, the sum in index order, the division.
#pragma unroll
    for (int k = 0; k < k_route_per_lane; ++k)
        if (32 * k + lane < n) v[k] = kernels::exp_f32(v[k] - mx);
    // The sum in index order by every lane, from shared memory: a chain of adds whose loads are
    // issued ahead (a shuffle per term put its latency in the chain: 128 x ~30 cycles).
#pragma unroll
    for (int k = 0; k < k_route_per_lane; ++k)
        if (32 * k + lane < n) se[32 * k + lane] = v[k];
    __syncwarp();
    float sum = 0.0f;
#pragma unroll 8
    for (int i = 0; i < n; ++i) sum = sum + se[i];
    nan = false;
#pragma unroll
    for (int k = 0; k < k_route_per_lane; ++k) {
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
    // Top-k: lane k keeps rank k's id and weight.
    uint32_t taken = 0;   // bit k: this lane's element 32k + lane is taken
    int my_id = 0;
    float my_wt = 0.0f;
    for (int k = 0; k < p.n_used; ++k) {
        float bv = 0.0f;
        int bi = 0x7fffffff;
#pragma unroll
        for (int u = 0; u < k_route_per_lane; ++u) {
            const int i = 32 * u + lane;
            if (i < n && !((taken >> u) & 1u) && (bi == 0x7fffffff || v[u] > bv)) {
                bv = v[u];
                bi = i;
            }
        }
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
            if (oi != 0x7fffffff && (bi == 0x7fffffff || ov > bv || (ov == bv && oi < bi))) {
                bv = ov;
                bi = oi;
            }
        }
        if ((bi & 31) == lane) taken |= 1u << (bi / 32);
        if (lane == k) {
            my_id = bi;
            my_wt = bv;
        }
    }
    if (p.renormalize) {
        float s = 0.0f;
        for (int k = 0; k < p.n_used; ++k) s = s + __shfl_sync(0xffffffffu, my_wt, k);
        my_wt = my_wt / s;
    }
    if (lane < p.n_used) {
        rid[lane] = my_id;
        rwt[lane] = my_wt;
    }
}

}  // namespace sluice::cuda
