// The rule that route_topk_block (src/kernels/cuda/route_warp.cuh) rests on, checked on the host
// against route_topk_row, the serial top-k the CPU op and the warp form give: rank the
// exponentials (expert i's rank: the experts j with e_j >= e_i, less one), take ranks 0..n_used as
// the picks when every one of them is held and their n_used + 1 probabilities e / sum strictly
// decrease, else pick over the probabilities. The kernel itself is checked against the host on the GPU machine
// (tests/gpu/matmul_parity.cu, router_topk_parity); this test keeps the argument honest on every
// CI run, over rows with exact ties and with ties a few ulps apart, where the division can make
// two probabilities equal and the rule must fall back.
#include "kernels/cuda/router.cuh"
#include "kernels/math.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace sluice {
namespace {

// The block form's picks for one row of logits x (not overwritten); false when it fell back.
bool block_rule(int n, int k, bool renorm, const std::vector<float>& x, int32_t* id, float* wt) {
    float mx = x[0];
    for (int i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
    std::vector<float> e(n);
    for (int i = 0; i < n; ++i) e[i] = kernels::exp_f32(x[i] - mx);
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) sum = sum + e[i];
    const int nc = k < n ? k + 1 : k;
    std::vector<int> cand(nc, -1);
    for (int i = 0; i < n; ++i) {   // rank: the experts at or above e_i, less one (the kernel compares bits)
        int rank = -1;
        for (int j = 0; j < n; ++j) rank += e[j] >= e[i];
        if (rank < nc) cand[rank] = i;
    }
    bool keep = true;   // no empty slot (two equal exponentials share a rank) ...
    for (int c = 0; c < nc; ++c) keep = keep && cand[c] >= 0;
    std::vector<float> pc(nc);
    for (int c = 0; keep && c < nc; ++c) pc[c] = e[cand[c]] / sum;
    for (int c = 0; keep && c + 1 < nc; ++c) keep = pc[c] > pc[c + 1];   // ... and no two equal probabilities
    if (keep) {
        float s = 0.0f;
        for (int c = 0; c < k; ++c) s = s + pc[c];
        for (int c = 0; c < k; ++c) {
            id[c] = cand[c];
            wt[c] = renorm ? pc[c] / s : pc[c];
        }
        return true;
    }
    std::vector<float> p(n);
    for (int i = 0; i < n; ++i) p[i] = e[i] / sum;
    cuda::route_select_row(n, k, renorm, p.data(), id, wt);
    return false;
}

TEST(RouteTopkRule, BlockRankingGivesTheSerialPicks) {
    std::mt19937 rng(1);
    int differ = 0, fell_back = 0;
    constexpr int rows = 30000;
    for (int t = 0; t < rows; ++t) {
        const int n = t % 3 == 0 ? 128 : t % 3 == 1 ? 256 : 60;
        const int k = 1 + t % 31 < n ? 1 + t % 31 : n;
        const bool renorm = t % 2;
        const int mode = t % 5;   // 0, 1, 2: spreads 1, 1e-6, 30; 3: exact ties; 4: ties a few ulps apart
        std::normal_distribution<float> nd(0.0f, mode == 0 ? 1.0f : mode == 1 ? 1e-6f : mode == 2 ? 30.0f : 3.0f);
        std::vector<float> x(n);
        for (auto& v : x) {
            v = nd(rng);
            if (mode == 3) v = static_cast<float>(static_cast<int>(v * 4)) / 4;
            if (mode == 4) v = 5.0f + static_cast<float>(static_cast<int>(v * 1000)) * 1e-7f;
        }
        std::vector<float> xr = x;
        std::vector<int32_t> id_ref(k), id(k);
        std::vector<float> wt_ref(k), wt(k);
        cuda::route_topk_row(n, k, renorm, xr.data(), id_ref.data(), wt_ref.data());
        fell_back += block_rule(n, k, renorm, x, id.data(), wt.data()) ? 0 : 1;
        if (id != id_ref || std::memcmp(wt.data(), wt_ref.data(), sizeof(float) * k) != 0) {
            if (differ++ < 5) ADD_FAILURE() << "row " << t << " (n " << n << ", k " << k << ", mode " << mode << ") differs";
        }
    }
    EXPECT_EQ(differ, 0);
    // Both branches ran: the ties made the rule fall back on some rows and not on most.
    EXPECT_GT(fell_back, 0);
    EXPECT_LT(fell_back, rows / 2);
}

}  // namespace
}  // namespace sluice
