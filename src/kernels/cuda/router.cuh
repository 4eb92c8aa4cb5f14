// kernels::route_topk's serial algorithm for one row, written once for the host and the device
// (SLUICE_HD), so that the host can check it against the CPU op without a GPU
// (tests/gpu/ops_parity.cu does). Softmax: the max, then exp_f32(x - max) summed in index
// order, then the division; top-k by repeated argmax with the strict '>' (ties: lower id).
// Each operation is one IEEE operation rounded on its own (nvcc --fmad=false, host
// -ffp-contract=off), so the device gives the CPU's bits.
#pragma once

#include "core/hd.h"
#include "kernels/math.h"

#include <cstdint>

namespace sluice::cuda {

// The selection half of route_topk_row: top-n_used of the probabilities x by repeated argmax
// (strict '>', ties to the lower id), then the optional renormalisation.
SLUICE_HD inline void route_select_row(int n_expert, int n_used, bool renormalize, const float* x, int32_t* id, float* wt) {
    for (int k = 0; k < n_used; ++k) {
        int best = -1;
        for (int e = 0; e < n_expert; ++e) {
            bool taken = false;
            for (int j = 0; j < k; ++j) taken = taken || id[j] == e;
            if (taken) continue;
            if (best < 0 || x[e] > x[best]) best = e;
        }
        id[k] = best;
        wt[k] = x[best];
    }
    if (renormalize) {
        float s = 0.0f;
        for (int k = 0; k < n_used; ++k) s = s + wt[k];
        for (int k = 0; k < n_used; ++k) wt[k] = wt[k] / s;
    }
}

// x: [n_expert] logits, overwritten with the probabilities; id, wt: [n_used].
SLUICE_HD inline void route_topk_row(int n_expert, int n_used, bool renormalize, float* x, int32_t* id, float* wt) {
    float mx = x[0];
    for (int i = 1; i < n_expert; ++i) mx = x[i] > mx ? x[i] : mx;
    float sum = 0.0f;
    for (int i = 0; i < n_expert; ++i) {
        x[i] = kernels::exp_f32(x[i] - mx);
        sum = sum + x[i];
    }
    for (int i = 0; i < n_expert; ++i) x[i] = x[i] / sum;
    route_select_row(n_expert, n_used, renormalize, x, id, wt);
}

}  // namespace sluice::cuda
