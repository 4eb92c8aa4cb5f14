// moe::run_expert_pairs (src/moe/expert_pool.h): the CPU lane of a split layer. Each selected
// (row, rank) pair's y has the bits
// run_experts computes for that pair (its scratch's y row), whatever the selection, the window
// and the thread count; pairs not selected are never written; the rank-order sum of the
// per-pair rows equals run_experts' combined output (what the GPU's combine kernel then does).
#include "core/thread_pool.h"
#include "moe/expert_pool.h"
#include "moe/expert_pool.h"
#include "quant/quant.h"

#include <gtest/gtest.h>

#include "random_experts.h"

#include <cstring>
#include <random>
#include <vector>

namespace sluice {
namespace {

using test_support::expert_tensor;

expert_tensor make_experts(dtype t, int64_t n_in, int64_t n_out, int64_t n_expert, std::mt19937& g) {
    return test_support::make_experts(t, n_in, n_out, n_expert, g, 16);
}

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

struct subset_case {
    dtype gate_up, down;
};

class expert_subset : public ::testing::TestWithParam<subset_case> {};

TEST_P(expert_subset, cpu_pair_bits_equal_run_experts_pair_bits) {
    const auto [tgu, td] = GetParam();
    constexpr int64_t E = 256, F = 512;
    constexpr int n_expert = 8, K = 2;
    std::mt19937 g(1234);
    const expert_tensor gate = make_experts(tgu, E, F, n_expert, g), up = make_experts(tgu, E, F, n_expert, g),
                        down = make_experts(td, F, E, n_expert, g);
    const moe::expert_bank bank{&gate.view, &up.view, &down.view};
    thread_pool pool1(1), pool3(3);
    for (int n_rows : {1, 3, 16, 20}) {
        SCOPED_TRACE(testing::Message() << "rows " << n_rows);
        std::normal_distribution<float> d(0.0f, 1.0f);
        std::vector<float> x(static_cast<size_t>(n_rows * E));
        for (auto& v : x) v = d(g);
        // Routed ids: K distinct experts a row; weights summing to about 1.
        std::vector<int32_t> ids(static_cast<size_t>(n_rows * K));
        std::vector<float> w(ids.size());
        std::uniform_int_distribution<int> pick(0, n_expert - 1);
        for (int r = 0; r < n_rows; ++r) {
            int a = pick(g), b = pick(g);
            while (b == a) b = pick(g);
            ids[static_cast<size_t>(r * K)] = a;
            ids[static_cast<size_t>(r * K + 1)] = b;
            w[static_cast<size_t>(r * K)] = 0.625f;
            w[static_cast<size_t>(r * K + 1)] = 0.375f;
        }
        // The reference: run_experts, its per-pair y rows (scratch y at the pair's sorted position)
        // and its combined output.
        moe::expert_scratch ref = moe::make_expert_scratch(n_rows, K, n_expert, E, F);
        std::vector<float> out(static_cast<size_t>(n_rows * E));
        moe::run_experts(pool3, bank, x.data(), ids.data(), w.data(), n_rows, ref, out.data());

        // Selections: every pair; every other pair; only rank 1; none.
        for (int sel = 0; sel < 4; ++sel) {
            SCOPED_TRACE(testing::Message() << "selection " << sel);
            std::vector<int32_t> pick_ids(ids);
            for (size_t p = 0; p < pick_ids.size(); ++p) {
                const bool take = sel == 0 || (sel == 1 && p % 2 == 0) || (sel == 2 && p % K == 1);
                if (!take) pick_ids[p] = -1;
            }
            for (thread_pool* pool : {&pool1, &pool3}) {
                moe::expert_scratch s = moe::make_expert_scratch(n_rows, K, n_expert, E, F);
                // A sentinel in every row: the pairs not selected must keep it.
                std::vector<float> y(ids.size() * static_cast<size_t>(E), -7.25f);
                moe::run_expert_pairs(*pool, bank, x.data(), pick_ids.data(), n_rows, s, y.data(), E);
                size_t differ = 0, touched = 0;
                for (size_t p = 0; p < ids.size(); ++p) {
                    const float* yp = y.data() + p * E;
                    if (pick_ids[p] < 0) {
                        for (int64_t j = 0; j < E; ++j) touched += bits(yp[j]) != bits(-7.25f);
                        continue;
                    }
                    const float* yr = ref.y.data() + static_cast<size_t>(ref.pos[p]) * E;
                    for (int64_t j = 0; j < E; ++j) differ += bits(yp[j]) != bits(yr[j]);
                }
                EXPECT_EQ(differ, 0u);
                EXPECT_EQ(touched, 0u);
                if (sel != 0) continue;
                // Rank-order sum of the pair rows (what cuda::moe_combine does) = run_experts' out.
                size_t sum_differ = 0;
                for (int r = 0; r < n_rows; ++r)
                    for (int64_t j = 0; j < E; ++j) {
                        float o = 0.0f;
                        for (int k = 0; k < K; ++k) o = o + w[static_cast<size_t>(r * K + k)] * y[static_cast<size_t>((r * K + k) * E + j)];
                        sum_differ += bits(o) != bits(out[static_cast<size_t>(r * E + j)]);
                    }
                EXPECT_EQ(sum_differ, 0u);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(formats, expert_subset,
                         ::testing::Values(subset_case{dtype::q8_0, dtype::q8_0}, subset_case{dtype::q4_k, dtype::q6_k},
                                           subset_case{dtype::q4_0, dtype::q8_0}));

}  // namespace
}  // namespace sluice
