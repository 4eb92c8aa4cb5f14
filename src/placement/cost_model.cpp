#include "placement/cost_model.h"

#include "core/error.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace sluice::placement {

double measure_cpu_expert(thread_pool& pool, const moe::expert_bank& bank, int32_t expert, int reps) {
    if (!bank.gate || !bank.up || !bank.down) fail("cost model: measure_cpu_expert: the expert bank is incomplete");
    const int64_t E = bank.gate->ne[0], F = bank.gate->ne[1], n_expert = bank.gate->ne[2];
    if (expert < 0 || expert >= n_expert) fail("cost model: expert {}: expected 0..{}", expert, n_expert - 1);
    reps = std::max(reps, 1);
    moe::expert_scratch s = moe::make_expert_scratch(1, 1, static_cast<int>(n_expert), E, F);
    // A fixed, non-trivial input row: the time does not depend on the values, only the bits would.
    std::vector<float> x(static_cast<size_t>(E)), out(static_cast<size_t>(E));
    for (int64_t i = 0; i < E; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 101 - 50) / 50.0f;
    const int32_t id = expert;
    const float w = 1.0f;
    std::vector<double> t;
    for (int r = 0; r <= reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        moe::run_experts(pool, bank, x.data(), &id, &w, 1, s, out.data());
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) t.push_back(secs);   // the first run warms the caches and the pool
    }
    std::sort(t.begin(), t.end());
    const double median = t[t.size() / 2];
    const auto slice = [](const tensor_view& v) { return v.nbytes / static_cast<uint64_t>(v.ne[2]); };
    const double bytes = static_cast<double>(slice(*bank.gate) + slice(*bank.up) + slice(*bank.down));
    return median > 0 ? bytes / median / 1e9 : 0.0;
}

void calibrate_cpu(cost_model& m, thread_pool& pool, const moe::expert_bank& bank, int reps) {
    const double g = measure_cpu_expert(pool, bank, 0, reps);
    if (g > 0) m.set_cpu_gb_s(bank.gate->type, g);
}

}  // namespace sluice::placement
