// Roofline arithmetic and the RAM read probe (runtime/roofline.h). The GPU probe is in
// roofline_cuda.cpp, compiled against the CUDA runtime only in SLUICE_HAVE_CUDA builds.
#include "runtime/roofline.h"

#include "core/error.h"
#include "core/thread_pool.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sluice {

double expected_distinct_experts(int64_t n_expert, int64_t n_used, int rows) {
    if (n_expert <= 0 || n_used <= 0 || rows <= 0) return 0.0;
    if (rows == 1) return double(std::min(n_used, n_expert));
    const double miss = 1.0 - double(n_used) / double(n_expert);  // one row leaves an expert out
    return double(n_expert) * (1.0 - std::pow(std::max(miss, 0.0), rows));
}

double forward_bytes(const traffic_model& m, int rows, int64_t depth) {
    if (rows <= 0) return 0.0;
    double b = double(m.shared_bytes) + double(m.embd_row_bytes) * rows;
    if (m.n_expert > 0)
        b += double(m.routed_bytes_total) / double(m.n_expert) *
             expected_distinct_experts(m.n_expert, m.n_expert_used, rows);
    b += double(m.kv_bytes_per_position) * double(std::max<int64_t>(depth, 0) + rows);
    return b;
}

double prefill_bytes_per_token(const traffic_model& m, int n_prompt, int chunk) {
    if (n_prompt <= 0 || chunk <= 0) return 0.0;
    double total = 0.0;
    for (int done = 0; done < n_prompt; done += chunk) total += forward_bytes(m, std::min(chunk, n_prompt - done), done);
    return total / n_prompt;
}

double decode_bytes_per_token(const traffic_model& m, int64_t depth, int n_gen) {
    if (n_gen <= 0) return 0.0;
    // forward_bytes is affine in depth: the mean over the run is the value at its middle.
    const double one = forward_bytes(m, 1, depth);
    return one + double(m.kv_bytes_per_position) * double(n_gen - 1) / 2.0;
}

double ceiling_tok_s(double bandwidth_gb_s, double bytes_per_token) {
    if (!(bandwidth_gb_s > 0.0) || !(bytes_per_token > 0.0)) return 0.0;
    return bandwidth_gb_s * 1e9 / bytes_per_token;
}

double expected_window_tokens(double accept, int rows) {
    double sum = 0.0, p = 1.0;
    for (int i = 0; i < rows; ++i, p *= accept) sum += p;
    return sum;
}

namespace {

// Sums a slice so the loads cannot be optimised away; four independent accumulators keep
// several cache lines in flight per thread.
uint64_t read_slice_scalar(const uint64_t* p, size_t n) {
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        a += p[i] ^ p[i + 4];
        b += p[i + 1] ^ p[i + 5];
        c += p[i + 2] ^ p[i + 6];
        d += p[i + 3] ^ p[i + 7];
    }
    for (; i < n; ++i) a += p[i];
    return a + b + c + d;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t read_slice_avx2(const uint64_t* p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {  // 128 bytes: two cache lines per iteration
        a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
        b = _mm256_add_epi64(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
        c = _mm256_add_epi64(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
        d = _mm256_add_epi64(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
    }
    alignas(32) uint64_t lanes[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes),
                       _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    uint64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
    for (; i < n; ++i) s += p[i];
    return s;
}
#endif

uint64_t sysfs_llc_bytes() {
    // The largest cache level listed for cpu0 ("32768K", "300M").
    uint64_t best = 0;
    for (int idx = 0; idx < 8; ++idx) {
        std::ifstream in(fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/size", idx));
        std::string s;
        if (!(in >> s) || s.empty()) continue;
        uint64_t mult = 1;
        if (s.back() == 'K') mult = 1024, s.pop_back();
        else if (s.back() == 'M') mult = 1024 * 1024, s.pop_back();
        try {
            best = std::max<uint64_t>(best, std::stoull(s) * mult);
        } catch (...) {
        }
    }
    return best;
}

}  // namespace

uint64_t default_ram_probe_bytes() {
    uint64_t llc = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    if (long v = ::sysconf(_SC_LEVEL3_CACHE_SIZE); v > 0) llc = uint64_t(v);
#endif
    llc = std::max(llc, sysfs_llc_bytes());
    uint64_t bytes = std::max<uint64_t>(uint64_t(512) << 20, 4 * llc);
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) bytes = std::min<uint64_t>(bytes, uint64_t(pages) * uint64_t(page) / 8);
    return bytes & ~uint64_t((1 << 20) - 1);
}

ram_probe measure_ram_read(thread_pool& pool, uint64_t buffer_bytes, int reps) {
    if (buffer_bytes == 0) buffer_bytes = default_ram_probe_bytes();
    if (buffer_bytes < (uint64_t(1) << 20)) fail("ram probe: buffer of {} bytes: expected at least 1 MiB", buffer_bytes);
    if (reps < 1) fail("ram probe: reps: expected >= 1, got {}", reps);
    const size_t n = size_t(buffer_bytes / sizeof(uint64_t));
    // Uninitialised on purpose: each thread first-touches its own slice (the pages land on its
    // NUMA node, as the model's pages do for the threads that read them).
    std::unique_ptr<uint64_t[], void (*)(uint64_t*)> buf(
        static_cast<uint64_t*>(::operator new[](n * sizeof(uint64_t), std::align_val_t(64))),
        [](uint64_t* p) { ::operator delete[](p, std::align_val_t(64)); });
    // Slices of whole 4 KiB pages, so no two threads share a page.
    constexpr int64_t k_page = 4096 / sizeof(uint64_t);
    const int64_t n_pages = int64_t(n) / k_page;
    pool.parallel_for(n_pages, [&](int64_t b, int64_t e) {
        for (int64_t i = b * k_page; i < e * k_page; ++i) buf[size_t(i)] = uint64_t(i) * 0x9E3779B97F4A7C15ull;
    });
#if defined(__x86_64__)
    const bool avx2 = __builtin_cpu_supports("avx2");
#endif
    std::vector<uint64_t> sinks(size_t(pool.n_threads()) * 8);  // one cache line per thread's result
    std::atomic<int> slot{0};
    double best = 0.0;
    for (int r = 0; r < reps; ++r) {
        slot = 0;
        const auto t0 = std::chrono::steady_clock::now();
        pool.parallel_for(n_pages, [&](int64_t b, int64_t e) {
            const uint64_t* p = buf.get() + b * k_page;
            const size_t len = size_t((e - b) * k_page);
#if defined(__x86_64__)
            const uint64_t s = avx2 ? read_slice_avx2(p, len) : read_slice_scalar(p, len);
#else
            const uint64_t s = read_slice_scalar(p, len);
#endif
            sinks[size_t(slot.fetch_add(1) % pool.n_threads()) * 8] += s;
        });
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::max(best, double(n_pages) * 4096.0 / secs / 1e9);
    }
    uint64_t keep = 0;
    for (uint64_t s : sinks) keep ^= s;
    asm volatile("" : : "r"(keep) : "memory");  // the sums are used: the loads stay
    return ram_probe{best, uint64_t(n_pages) * 4096, pool.n_threads(), reps};
}

std::string machine_description() {
    std::ifstream in("/proc/cpuinfo");
    std::string line, model = "unknown CPU";
    while (std::getline(in, line))
        if (line.rfind("model name", 0) == 0) {
            if (auto c = line.find(':'); c != std::string::npos) {
                model = line.substr(c + 1);
                model.erase(0, model.find_first_not_of(" \t"));
            }
            break;
        }
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    return fmt::format("{}, {} cores", model, cores);
}

}  // namespace sluice
