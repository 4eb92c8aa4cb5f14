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

double measure_cpu_expert_batch(thread_pool& pool, const moe::expert_bank& bank, int32_t first, int32_t count) {
    if (!bank.gate || !bank.up || !bank.down) fail("cost model: measure_cpu_expert_batch: the expert bank is incomplete");
    const int64_t E = bank.gate->ne[0], F = bank.gate->ne[1], n_expert = bank.gate->ne[2];
    if (count < 1 || first < 0 || first + count > n_expert)
        fail("cost model: experts {}..{}: expected a range inside 0..{}", first, first + count - 1, n_expert - 1);
    moe::expert_scratch s = moe::make_expert_scratch(1, count, static_cast<int>(n_expert), E, F);
    std::vector<float> x(static_cast<size_t>(E)), out(static_cast<size_t>(E));
    for (int64_t i = 0; i < E; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 101 - 50) / 50.0f;
    std::vector<int32_t> ids(static_cast<size_t>(count));
    std::vector<float> w(static_cast<size_t>(count), 1.0f / static_cast<float>(count));
    // Warm-up on the experts after the timed ones (wrapping), so the pool's threads are awake
    // and the timed weights were not just read.
    for (int32_t k = 0; k < count; ++k) ids[static_cast<size_t>(k)] = static_cast<int32_t>((first + count + k) % n_expert);
    moe::run_experts(pool, bank, x.data(), ids.data(), w.data(), 1, s, out.data());
    for (int32_t k = 0; k < count; ++k) ids[static_cast<size_t>(k)] = first + k;
    const auto t0 = std::chrono::steady_clock::now();
    moe::run_experts(pool, bank, x.data(), ids.data(), w.data(), 1, s, out.data());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto slice = [](const tensor_view& v) { return v.nbytes / static_cast<uint64_t>(v.ne[2]); };
    const double bytes = static_cast<double>(slice(*bank.gate) + slice(*bank.up) + slice(*bank.down)) * count;
    return secs > 0 ? bytes / secs / 1e9 : 0.0;
}

void calibrate_cpu(cost_model& m, thread_pool& pool, const moe::expert_bank& bank, int reps) {
    const int64_t n_expert = bank.gate ? bank.gate->ne[2] : 0;
    const int32_t k = static_cast<int32_t>(std::min<int64_t>(8, n_expert / 2));
    const double g = k >= 1 ? measure_cpu_expert_batch(pool, bank, 0, k) : measure_cpu_expert(pool, bank, 0, reps);
    if (g > 0) m.set_cpu_gb_s(bank.gate->type, g);
}

}  // namespace sluice::placement
