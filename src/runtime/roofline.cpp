// Roofline arithmetic and the RAM read probe (runtime/roofline.h). The GPU probe is in
// roofline_cuda.cpp, compiled against the CUDA runtime only in SLUICE_HAVE_CUDA builds.
#include "runtime/roofline.h"

#include "core/cpu_count.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/dot.h"
#include "quant/act.h"

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

double forward_ops(const compute_model& m, int rows, int64_t depth) {
    if (rows <= 0) return 0.0;
    // Row i attends depth + i + 1 positions: the sum over rows is rows * depth + rows (rows + 1) / 2.
    const double d = double(std::max<int64_t>(depth, 0)), r = double(rows);
    const double positions = r * d + r * (r + 1.0) / 2.0;
    return 2.0 * (m.weight_macs_per_row * r + m.attn_macs_per_position * positions);
}

double prefill_ops_per_token(const compute_model& m, int n_prompt) {
    if (n_prompt <= 0) return 0.0;
    return forward_ops(m, n_prompt, 0) / double(n_prompt);
}

double decode_ops_per_token(const compute_model& m, int64_t depth, int n_gen) {
    if (n_gen <= 0) return 0.0;
    // Token i of the run attends depth + i + 1 positions: the mean is depth + (n_gen + 1) / 2.
    return forward_ops(m, n_gen, depth) / double(n_gen);
}

double compute_ceiling_tok_s(double peak_ops_s, double ops_per_token) {
    if (!(peak_ops_s > 0.0) || !(ops_per_token > 0.0)) return 0.0;
    return peak_ops_s / ops_per_token;
}

roofline_bound bind_ceiling(double memory_tok_s, double compute_tok_s) {
    roofline_bound b;
    b.memory_tok_s = memory_tok_s > 0.0 ? memory_tok_s : 0.0;
    b.compute_tok_s = compute_tok_s > 0.0 ? compute_tok_s : 0.0;
    if (b.memory_tok_s > 0.0 && (b.compute_tok_s == 0.0 || b.memory_tok_s <= b.compute_tok_s)) {
        b.ceiling_tok_s = b.memory_tok_s;
        b.binds = "memory";
    } else if (b.compute_tok_s > 0.0) {
        b.ceiling_tok_s = b.compute_tok_s;
        b.binds = "compute";
    }
    return b;
}

cpu_peak_probe measure_cpu_int8_peak(thread_pool& pool, double seconds) {
    if (!(seconds > 0.0) || seconds > 10.0) fail("cpu peak probe: seconds: expected (0, 10], got {}", seconds);
    // One Q8_0 weight row of 4096 (4.3 kB) against 16 int8 activation rows (70 kB): L2-resident,
    // the widest window dot_rows takes, so each weight block is decoded once for 16 rows.
    constexpr int64_t k_n = 4096;
    constexpr int k_rows = 16;
    const kernels::isa isa = kernels::best_isa();
    const dtype wt = dtype::q8_0;
    const quant::act_format af = quant::act_format_for(wt);
    const size_t act_bytes = quant::act_row_bytes(af, k_n);
    const size_t w_bytes = size_t(*bytes_for(wt, uint64_t(k_n)));
    const int nt = pool.n_threads();
    struct alignas(64) per_thread {   // a cache line of its own: `out` is written every call
        std::vector<std::byte> w, act;
        float out[k_rows] = {};
        int64_t calls = 0;
    };
    std::vector<per_thread> bufs(static_cast<size_t>(nt));
    std::vector<float> x(static_cast<size_t>(k_n));
    for (int t = 0; t < nt; ++t) {
        per_thread& b = bufs[size_t(t)];
        b.w.resize(w_bytes);
        b.act.resize(act_bytes * k_rows);
        // Weights: small fp16 scales (0x2C00 = 1/16) and int8 values in [-127, 127].
        const size_t block = info(wt).block_bytes;
        for (size_t i = 0; i < w_bytes; ++i)
            b.w[i] = std::byte((i % block) == 0 ? 0x00 : (i % block) == 1 ? 0x2C : uint8_t((i * 37 + size_t(t)) % 255) ^ 0x80);
        for (int r = 0; r < k_rows; ++r) {
            for (int64_t i = 0; i < k_n; ++i) x[size_t(i)] = float((i * 13 + r * 7 + t) % 61) - 30.0f;
            quant::quantize_act_row(af, x.data(), k_n, b.act.data() + size_t(r) * act_bytes);
        }
    }
    const kernels::dot_rows_fn fn = kernels::resolve_dot_rows(isa, wt);
    auto run = [&](per_thread& b) {
        if (fn)
            fn(b.w.data(), b.act.data(), act_bytes, k_rows, k_n, b.out);
        else
            kernels::dot_rows(isa, wt, b.w.data(), b.act.data(), act_bytes, k_rows, k_n, b.out);
        ++b.calls;
    };
    for (per_thread& b : bufs) run(b);   // warm-up: caches, and the AVX-512 clock
    for (per_thread& b : bufs) b.calls = 0;
    // Every thread loops until the shared deadline; the rate is the calls made over the time.
    const auto t0 = std::chrono::steady_clock::now();
    const auto deadline = t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double>(seconds));
    pool.parallel_for(nt, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            per_thread& p = bufs[size_t(t)];
            do {
                for (int k = 0; k < 64; ++k) run(p);
            } while (std::chrono::steady_clock::now() < deadline);
        }
    });
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    int64_t calls = 0;
    float keep = 0.0f;
    for (const per_thread& b : bufs) {
        calls += b.calls;
        keep += b.out[0];
    }
    asm volatile("" : : "r"(keep) : "memory");
    cpu_peak_probe p;
    p.threads = nt;
    p.isa = std::string(kernels::name(isa));
    p.seconds = secs;
    p.int8_ops_s = secs > 0.0 ? 2.0 * double(k_n) * double(k_rows) * double(calls) / secs : 0.0;
    return p;
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
    const unsigned cores = static_cast<unsigned>(usable_cpus());
    return fmt::format("{}, {} cores", model, cores);
}

}  // namespace sluice
