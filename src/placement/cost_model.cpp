#include "placement/cost_model.h"

#include "core/error.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

namespace sluice::placement {

namespace {

// What both measurements share: the bank checked, a fixed non-trivial input row (the time does
// not depend on the values, only the bits would), and one expert's bytes (gate + up + down).
struct expert_run {
    int64_t n_embd = 0, n_ff = 0, n_expert = 0;
    uint64_t expert_bytes = 0;
    std::vector<float> x, out;   // [n_embd]

    expert_run(const moe::expert_bank& bank, const char* what) {
        if (!bank.gate || !bank.up || !bank.down) fail("cost model: {}: the expert bank is incomplete", what);
        n_embd = bank.gate->ne[0];
        n_ff = bank.gate->ne[1];
        n_expert = bank.gate->ne[2];
        x.resize(static_cast<size_t>(n_embd));
        out.resize(static_cast<size_t>(n_embd));
        for (int64_t i = 0; i < n_embd; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 101 - 50) / 50.0f;
        const auto slice = [](const tensor_view& v) { return v.nbytes / static_cast<uint64_t>(v.ne[2]); };
        expert_bytes = slice(*bank.gate) + slice(*bank.up) + slice(*bank.down);
    }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double measure_cpu_expert(thread_pool& pool, const moe::expert_bank& bank, int32_t expert, int reps) {
    expert_run e(bank, "measure_cpu_expert");
    if (expert < 0 || expert >= e.n_expert) fail("cost model: expert {}: expected 0..{}", expert, e.n_expert - 1);
    reps = std::max(reps, 1);
    moe::expert_scratch s = moe::make_expert_scratch(1, 1, static_cast<int>(e.n_expert), e.n_embd, e.n_ff);
    const int32_t id = expert;
    const float w = 1.0f;
    std::vector<double> t;
    for (int r = 0; r <= reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        moe::run_experts(pool, bank, e.x.data(), &id, &w, 1, s, e.out.data());
        if (r > 0) t.push_back(seconds_since(t0));   // the first run warms the caches and the pool
    }
    std::sort(t.begin(), t.end());
    const double median = t[t.size() / 2];
    return median > 0 ? static_cast<double>(e.expert_bytes) / median / 1e9 : 0.0;
}

double measure_cpu_expert_batch(thread_pool& pool, const moe::expert_bank& bank, int32_t first, int32_t count,
                                int rows) {
    expert_run e(bank, "measure_cpu_expert_batch");
    if (count < 1 || first < 0 || first + count > e.n_expert)
        fail("cost model: experts {}..{}: expected a range inside 0..{}", first, first + count - 1, e.n_expert - 1);
    if (rows < 1 || rows > 64) fail("cost model: {} rows: expected 1..64", rows);
    moe::expert_scratch s = moe::make_expert_scratch(rows, count, static_cast<int>(e.n_expert), e.n_embd, e.n_ff);
    const size_t R = static_cast<size_t>(rows), C = static_cast<size_t>(count), E = static_cast<size_t>(e.n_embd);
    std::vector<float> x(R * E), out(R * E);
    for (size_t r = 0; r < R; ++r) std::copy(e.x.begin(), e.x.end(), x.begin() + static_cast<std::ptrdiff_t>(r * E));
    std::vector<int32_t> ids(R * C);
    std::vector<float> w(R * C, 1.0f / static_cast<float>(count));
    const auto route = [&](int32_t base) {
        for (size_t r = 0; r < R; ++r)
            for (size_t k = 0; k < C; ++k) ids[r * C + k] = static_cast<int32_t>((base + static_cast<int64_t>(k)) % e.n_expert);
    };
    // Warm-up on the experts after the timed ones (wrapping), so the pool's threads are awake
    // and the timed weights were not just read.
    route(first + count);
    moe::run_experts(pool, bank, x.data(), ids.data(), w.data(), rows, s, out.data());
    route(first);
    const auto t0 = std::chrono::steady_clock::now();
    moe::run_experts(pool, bank, x.data(), ids.data(), w.data(), rows, s, out.data());
    const double secs = seconds_since(t0);
    return secs > 0 ? static_cast<double>(e.expert_bytes) * count / secs / 1e9 : 0.0;
}

void calibrate_cpu(cost_model& m, thread_pool& pool, const moe::expert_bank& bank, int reps) {
    const int64_t n_expert = bank.gate ? bank.gate->ne[2] : 0;
    const int32_t k = static_cast<int32_t>(std::min<int64_t>(8, n_expert / 2));
    double g = k >= 1 ? measure_cpu_expert_batch(pool, bank, 0, k) : measure_cpu_expert(pool, bank, 0, reps);
    // Where the bank has them, two more batches over experts nothing has read ([4k, 5k) and
    // [6k, 7k), each warmed up on the k after it), and the best of the three: one batch is
    // ~0.3 ms, and a stall in it once put the figure at 8.6 GB/s against ~60 on the H200 machine
    // (2026-12-04), which sent 0.98 of the misses over PCIe.
    if (k >= 1 && n_expert >= 8 * k)
        for (const int32_t first : {4 * k, 6 * k}) g = std::max(g, measure_cpu_expert_batch(pool, bank, first, k));
    if (g > 0) m.set_cpu_gb_s(bank.gate->type, g);
    // 16 rows through other experts (as a prefill gives each expert many rows): the time of a
    // row beyond the first relative to one row. The one-row batch timed [0, k) after warming up
    // on [k, 2k); this one times [2k, 3k) (warm-up [3k, 4k)) where the bank has them, so that
    // its weights come from RAM too (a last-level cache can hold what the warm-up just read).
    if (k >= 1 && g > 0 && n_expert >= 2 * k) {
        constexpr int rows = 16;
        const int32_t first = n_expert >= 4 * k ? 2 * k : k;
        const double g16 =
            measure_cpu_expert_batch(pool, bank, first, std::min<int32_t>(k, static_cast<int32_t>(n_expert) - first), rows);
        if (g16 > 0) m.cpu_extra_row = std::max(0.0, (g / g16 - 1.0) / (rows - 1));
    }
}

layer_costs stream_layer_costs(const cost_model& m, const stream_layer& l) {
    layer_costs c;
    if (l.missing <= 0 || l.n_rows <= 0 || l.n_expert <= 0 || l.k_used <= 0) return c;
    const double N = l.n_expert, k = std::min<double>(l.k_used, N);
    const double used = 1.0 - std::pow(1.0 - k / N, static_cast<double>(l.n_rows));   // P(an expert is routed)
    const double u = l.missing * used;                                                // missing experts routed
    const double rows = static_cast<double>(l.n_rows) * k / (N * std::max(used, 1e-12));
    const double cpu_e = m.cpu_rows_seconds(l.blob_bytes, l.type, rows), pcie_e = m.pcie_seconds(l.blob_bytes);
    // The split path: s experts over PCIe (at most the slots), the rest on the CPU; the s that
    // balances the two lanes, tried rounded down and up.
    const double s_max = std::min<double>(l.staging_slots, u);
    const double s0 = std::min(s_max, std::floor(u * cpu_e / (cpu_e + pcie_e)));
    c.split_s = std::max((u - s0) * cpu_e, s0 * pcie_e);
    if (s0 + 1 <= s_max) c.split_s = std::min(c.split_s, std::max((u - s0 - 1) * cpu_e, (s0 + 1) * pcie_e));
    c.split_s += m.split_round_trip_s;
    c.stream_s = l.missing * m.pcie_seconds(l.blob_bytes);
    return c;
}

int64_t stream_cutover_rows(const cost_model& m, std::span<const stream_layer> layers) {
    const auto streams = [&](int64_t n) {
        double split = 0, stream = 0;
        for (stream_layer l : layers) {
            l.n_rows = n;
            const layer_costs c = stream_layer_costs(m, l);
            split += c.split_s;
            stream += c.stream_s;
        }
        return stream < split;
    };
    int64_t hi = 1;
    while (hi < k_never_streams && !streams(hi)) hi *= 2;
    if (hi >= k_never_streams) return k_never_streams;
    int64_t lo = hi / 2;   // does not stream (or 0)
    while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        (streams(mid) ? hi : lo) = mid;
    }
    return hi;
}

}  // namespace sluice::placement
