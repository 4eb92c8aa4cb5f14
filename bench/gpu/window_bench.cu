// window_bench: a verify window's dense matrix products, dp4a kernel against the tensor-core
// window kernel (matmul_window_mma.cuh, what 2..16-row windows take) and the prefill one,
// at the shapes of the synthetic Qwen3.6-35B-A3B file (n_embd 2048; DeltaNet qkv 8192, gate
// 4096, out 4096 -> 2048; gated attention q+gate 8192, k/v 512, out 4096 -> 2048; shared expert
// 512; vocabulary 248320; F32 router of 256 experts), for windows of 1..16 rows. Both kernels
// give the same bits (tests/gpu/matmul_parity.cu); the figures say from how many rows the
// tensor-core kernel is the faster (mm_args::mma_from_rows). Each launch reads its weights from
// HBM (copies rotated past the 50 MB L2). Microseconds per launch, launch overhead included.
//   window_bench [REPS]
#include "core/dtype.h"
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/matmul.cuh"
#include "quant/act.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

using namespace sluice;

namespace {

void ck(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::printf("FAIL: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

std::byte* dev_random(size_t bytes, uint32_t seed) {
    std::vector<uint8_t> h(bytes);
    std::mt19937 g(seed);
    for (auto& b : h) b = static_cast<uint8_t>(g() & 0x3f);   // small bytes: finite scales
    void* d = nullptr;
    ck(cudaMalloc(&d, bytes), "cudaMalloc");
    ck(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice), "upload");
    return static_cast<std::byte*>(d);
}

double time_us(cudaStream_t s, int reps, const std::function<void(int)>& launch) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 3; ++i) launch(i);
    cudaEventRecord(a, s);
    for (int i = 0; i < reps; ++i) launch(i);
    cudaEventRecord(b, s);
    ck(cudaEventSynchronize(b), "kernel run");
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return 1e3 * ms / reps;
}

struct shape {
    const char* name;
    dtype type;
    int64_t n_in, n_out;
};

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    const int reps = argc > 1 ? std::atoi(argv[1]) : 50;
    cuda::upload_tables();
    cudaStream_t s;
    ck(cudaStreamCreate(&s), "stream");
    const shape shapes[] = {
        {"dn qkv", dtype::q4_k, 2048, 8192},    {"dn gate z", dtype::q4_k, 2048, 4096},
        {"dn out", dtype::q4_k, 4096, 2048},    {"attn q+gate", dtype::q4_k, 2048, 8192},
        {"attn k", dtype::q4_k, 2048, 512},     {"attn out", dtype::q4_k, 4096, 2048},
        {"shexp gate", dtype::q4_k, 2048, 512}, {"shexp down", dtype::q6_k, 512, 2048},
        {"lm head", dtype::q6_k, 2048, 248320}, {"dn qkv q8_0", dtype::q8_0, 2048, 8192},
        {"router f32", dtype::f32, 2048, 256},
    };
    const int rows_list[] = {1, 2, 3, 4, 6, 8, 12, 16};
    const int64_t max_in = 4096, max_rows = 16;
    std::vector<float> hx(static_cast<size_t>(max_in * max_rows));
    std::mt19937 g(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : hx) v = nd(g);
    float* x = nullptr;
    ck(cudaMalloc(&x, hx.size() * 4), "x");
    ck(cudaMemcpy(x, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice), "x");
    std::byte* act = nullptr;
    ck(cudaMalloc(&act, static_cast<size_t>(max_in * max_rows) * 4 + 4096), "act");
    float* y = nullptr;
    ck(cudaMalloc(&y, static_cast<size_t>(248320) * max_rows * 4), "y");
    std::printf("%-14s %-6s %6s %6s %4s %10s %10s %10s %10s  %s\n", "matrix", "type", "n_in", "n_out", "rows", "dp4a us",
                "mma us", "wmma us", "split us", "fastest");
    for (const shape& sh : shapes) {
        const size_t rb = static_cast<size_t>(*bytes_for(sh.type, static_cast<uint64_t>(sh.n_in)));
        const size_t bytes = rb * static_cast<size_t>(sh.n_out);
        const int copies = static_cast<int>(std::clamp<size_t>((size_t{160} << 20) / bytes + 1, 1, 64));
        std::vector<std::byte*> w;
        for (int c = 0; c < copies; ++c) w.push_back(dev_random(bytes, 100u + static_cast<uint32_t>(c)));
        const quant::act_format f = quant::act_format_for(sh.type);
        const bool is_float = f == quant::act_format::f32;
        for (int rows : rows_list) {
            if (!is_float) cuda::quantize_act_rows(f, x, rows, sh.n_in, act, s);
            cuda::mm_args a;
            a.type = sh.type;
            a.row_bytes = rb;
            a.n_in = sh.n_in;
            a.n_out = sh.n_out;
            a.act = is_float ? reinterpret_cast<const std::byte*>(x) : act;
            a.act_stride = is_float ? static_cast<size_t>(sh.n_in) * 4 : quant::act_row_bytes(f, sh.n_in);
            a.n_rows = rows;
            a.y = y;
            a.y_stride = sh.n_out;
            // k 0: the dp4a kernel; 1: the prefill tensor-core kernel; 2: the window one (2..16
            // rows); 3: its split form.
            using wk = cuda::mm_args::window_kernel;
            const wk kernel_of[4] = {wk::dp4a, wk::dp4a, wk::tensor_cores, wk::tensor_cores_split};
            double us[4] = {0, 0, 0, 0};
            const int kinds = is_float ? 1 : rows >= 2 ? 4 : 2;
            for (int k = 0; k < kinds; ++k) {
                a.mma_from_rows = k == 1 ? 1 : 1 << 20;
                a.window = kernel_of[k];
                us[k] = time_us(s, reps, [&](int i) {
                    a.w = w[static_cast<size_t>(i % copies)];
                    cuda::matmul(a, s);
                });
            }
            if (is_float)
                std::printf("%-14s %-6s %6lld %6lld %4d %10.2f %10s\n", sh.name, std::string(name(sh.type)).c_str(),
                            static_cast<long long>(sh.n_in), static_cast<long long>(sh.n_out), rows, us[0], "-");
            else {
                int best = 0;
                for (int k = 1; k < kinds; ++k)
                    if (us[k] < us[best]) best = k;
                char wmma[16] = "-", split[16] = "-";
                if (kinds == 4) {
                    std::snprintf(wmma, sizeof wmma, "%.2f", us[2]);
                    std::snprintf(split, sizeof split, "%.2f", us[3]);
                }
                const char* names[4] = {"dp4a", "mma", "wmma", "split"};
                std::printf("%-14s %-6s %6lld %6lld %4d %10.2f %10.2f %10s %10s  %s\n", sh.name, std::string(name(sh.type)).c_str(),
                            static_cast<long long>(sh.n_in), static_cast<long long>(sh.n_out), rows, us[0], us[1], wmma, split,
                            names[best]);
            }
        }
        for (std::byte* p : w) cudaFree(p);
    }

    // A window's routed experts (gate of the 35B shape: 256 experts of 512 x 2048 Q4_K, top 8):
    // one pair at a time (what a window runs now) against pairs grouped by expert in tiles of 16
    // (the dp4a kernel) or 64 (tensor cores), for rows routed to the same 8 experts (decode_bench's
    // window of one token repeated) and to distinct experts (8 x rows of 256).
    {
        const int64_t X = 256, F = 512, Kx = 8;
        const size_t rb = static_cast<size_t>(*bytes_for(dtype::q4_k, 2048));
        const size_t bank = rb * static_cast<size_t>(F) * static_cast<size_t>(X);   // 151 MB: past L2
        std::byte* w = dev_random(bank, 900);
        int32_t *ids = nullptr, *perm = nullptr, *tiles = nullptr, *n_tiles = nullptr;
        ck(cudaMalloc(&ids, 16 * Kx * 4), "ids");
        ck(cudaMalloc(&perm, 16 * Kx * 4), "perm");
        ck(cudaMalloc(&tiles, static_cast<size_t>(3 * cuda::group_tiles_max(16 * Kx, X, cuda::k_tile_rows_window)) * 4), "tiles");
        ck(cudaMalloc(&n_tiles, 4), "n_tiles");
        std::printf("\n%-28s %4s %10s %10s %10s\n", "routed experts (gate 512)", "rows", "per pair", "grouped16", "grouped64");
        for (const bool same : {true, false}) {
            for (int rows : {2, 4, 8, 16}) {
                const int64_t pairs = rows * Kx;
                std::vector<int32_t> h(static_cast<size_t>(pairs));
                std::mt19937 rg(static_cast<uint32_t>(rows));
                std::vector<int32_t> all(static_cast<size_t>(X));
                for (int64_t e = 0; e < X; ++e) all[static_cast<size_t>(e)] = static_cast<int32_t>(e);
                std::shuffle(all.begin(), all.end(), rg);
                for (int64_t p = 0; p < pairs; ++p)
                    h[static_cast<size_t>(p)] = same ? all[static_cast<size_t>(p % Kx)] : all[static_cast<size_t>(p % X)];
                ck(cudaMemcpy(ids, h.data(), h.size() * 4, cudaMemcpyHostToDevice), "ids");
                cuda::quantize_act_rows(quant::act_format::q8_256, x, rows, 2048, act, s);
                cuda::mm_args a;
                a.type = dtype::q4_k;
                a.w = w;
                a.row_bytes = rb;
                a.n_in = 2048;
                a.n_out = F;
                a.ids = ids;
                a.expert_stride = rb * static_cast<size_t>(F);
                a.act = act;
                a.act_stride = quant::act_row_bytes(quant::act_format::q8_256, 2048);
                a.act_div = static_cast<int>(Kx);
                a.n_rows = pairs;
                a.y = y;
                a.y_stride = F;
                const double per_pair = time_us(s, reps, [&](int) { cuda::matmul(a, s); });
                double grouped[2] = {0, 0};
                for (int k = 0; k < 2; ++k) {
                    const int tr = k == 0 ? cuda::k_tile_rows_window : cuda::k_tile_rows_mma;
                    cuda::mm_args g = a;
                    g.perm = perm;
                    g.tiles = tiles;
                    g.n_tiles = n_tiles;
                    g.max_tiles = cuda::group_tiles_max(pairs, static_cast<int>(X), tr);
                    g.tile_rows = tr;
                    grouped[k] = time_us(s, reps, [&](int) {   // the grouping launch counted too
                        cuda::group_pairs(ids, pairs, static_cast<int>(X), tr, perm, tiles, n_tiles, s);
                        cuda::matmul(g, s);
                    });
                }
                std::printf("%-28s %4d %10.2f %10.2f %10.2f\n", same ? "same 8 experts a row" : "distinct experts",
                            rows, per_pair, grouped[0], grouped[1]);
            }
        }
        cudaFree(w);
    }
    return 0;
}
