// kernel_bench: the decode step's kernels one at a time, at the shapes of the synthetic
// Qwen3-30B-A3B file (n_embd 2048, 32 q / 4 kv heads of 128, 128 experts of width 768, top 8,
// vocabulary 151936), each launched REPS times back to back on one stream and timed with CUDA
// events: microseconds per launch, launch overhead included (as in a graph without PDL). Weights
// rotate over enough copies that each launch reads from HBM, not L2 (50 MB), unless the line
// says "L2". Prints one line per kernel; the sum of a layer's lines against the decode step's
// per-layer time (decode_bench) says what the step spends beyond its kernels.
//   kernel_bench [REPS]
#include "core/dtype.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/ops.cuh"
#include "quant/act.h"

#include <cuda_runtime.h>

#include <cmath>
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

// Device buffer of `bytes` random bytes.
template <class T = std::byte>
T* dev_random(size_t bytes, uint32_t seed) {
    std::vector<uint8_t> h(bytes);
    std::mt19937 g(seed);
    for (auto& b : h) b = static_cast<uint8_t>(g());
    void* d = nullptr;
    ck(cudaMalloc(&d, bytes), "cudaMalloc");
    ck(cudaMemcpy(d, h.data(), bytes, cudaMemcpyHostToDevice), "upload");
    return static_cast<T*>(d);
}

float* dev_floats(size_t n, uint32_t seed, float scale = 1.0f) {
    std::vector<float> h(n);
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0.0f, scale);
    for (auto& v : h) v = d(g);
    float* p = nullptr;
    ck(cudaMalloc(&p, n * 4), "cudaMalloc");
    ck(cudaMemcpy(p, h.data(), n * 4, cudaMemcpyHostToDevice), "upload");
    return p;
}

// Quantised weight rows of random bytes (a scale may be inf or NaN: the time is the same).
std::byte* dev_quant(dtype t, int64_t n_in, int64_t rows, uint32_t seed, size_t* row_bytes) {
    const size_t rb = static_cast<size_t>(*bytes_for(t, static_cast<uint64_t>(n_in)));
    *row_bytes = rb;
    return dev_random(rb * static_cast<size_t>(rows), seed);
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

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
    cuda::upload_tables();
    cudaStream_t s;
    ck(cudaStreamCreate(&s), "stream");
    const int64_t E = 2048, H = 32, KVH = 4, HD = 128, X = 128, K = 8, F = 768, V = 151936, CTX = 512;
    const int copies = 64;   // rotation depth: 64 x (1 MB router) > L2
    double layer_us = 0;
    auto report = [&](const char* name, double us, double bytes, bool in_layer) {
        std::printf("%-58s %9.2f us  %8.1f GB/s%s\n", name, us, bytes / (us * 1e-6) / 1e9, in_layer ? "" : "  (not per layer)");
        if (in_layer) layer_us += us;
    };

    // Activations and scratch.
    float* x = dev_floats(E, 1);
    float* xn = dev_floats(E, 2);
    float* w_norm = dev_floats(E, 3, 0.1f);
    std::byte* act = dev_random(1 << 20, 4);
    float* y = dev_floats(static_cast<size_t>(V), 5);
    float* y2 = dev_floats(static_cast<size_t>(K * F), 6);
    float* logits = dev_floats(X, 7);
    int32_t* ids = nullptr;
    float* ew = nullptr;
    ck(cudaMalloc(&ids, 64 * 4), "ids");
    ck(cudaMalloc(&ew, 64 * 4), "ew");
    cuda::quantize_act_rows(quant::act_format::q8_256, x, 1, E, act, s);

    // 1. rmsnorm + quantise (two per layer).
    {
        const double us = time_us(s, reps, [&](int) {
            cuda::rmsnorm_quant(x, w_norm, xn, 1, E, 1e-6f, quant::act_format::q8_256, act, s);
        });
        report("rmsnorm_quant n_embd 2048 (x2 per layer, L2)", 2 * us, 2 * 3.0 * E * 4, true);
    }
    // 2. The router: F32 [128, 2048], one row.
    // The model runs them as one launch (cuda::router_topk: the router's last block routes the
    // row); the two launches are timed below for comparison, outside the layer's sum.
    kernels::router_params rp;
    rp.n_expert = X;
    rp.n_used = K;
    rp.renormalize = true;
    unsigned* arrivals = nullptr;
    ck(cudaMalloc(&arrivals, 4), "arrivals");
    ck(cudaMemset(arrivals, 0, 4), "arrivals");
    {
        std::vector<float*> w;
        for (int c = 0; c < copies; ++c) w.push_back(dev_floats(static_cast<size_t>(X * E), 100 + c, 0.02f));
        auto args = [&](int i) {
            cuda::mm_args a;
            a.type = dtype::f32;
            a.w = reinterpret_cast<const std::byte*>(w[i % copies]);
            a.row_bytes = E * 4;
            a.n_in = E;
            a.n_out = X;
            a.act = reinterpret_cast<const std::byte*>(xn);
            a.act_stride = E * 4;
            a.n_rows = 1;
            a.y = logits;
            a.y_stride = X;
            return a;
        };
        const double us_fused = time_us(s, reps, [&](int i) { cuda::router_topk(args(i), rp, ids, ew, arrivals, s); });
        report("router F32 128 x 2048 + top-8, one launch, 1 row", us_fused, X * E * 4.0, true);
        const double us = time_us(s, reps, [&](int i) { cuda::matmul(args(i), s); });
        report("router F32 128 x 2048 alone, 1 row", us, X * E * 4.0, false);
        for (float* p : w) cudaFree(p);
    }
    // 3. Top-k of 128 (8 used) alone (the second launch of the unfused pair).
    {
        const double us = time_us(s, reps, [&](int) { cuda::route_topk(rp, logits, 1, ids, ew, s); });
        report("route_topk 128 experts, top 8, alone", us, X * 4.0, false);
    }
    cudaFree(arrivals);
    // 4. Attention: q/k norm + rope + store, then attention over 512 positions.
    {
        float* q = dev_floats(H * HD, 8);
        float* k = dev_floats(KVH * HD, 9);
        float* v = dev_floats(KVH * HD, 10);
        float* qn = dev_floats(HD, 11, 0.1f);
        float* kn = dev_floats(HD, 12, 0.1f);
        float* kc = dev_floats(static_cast<size_t>(CTX + 8) * KVH * HD, 13);
        float* vc = dev_floats(static_cast<size_t>(CTX + 8) * KVH * HD, 14);
        float* out = dev_floats(H * HD, 15);
        const int n_rot = HD;
        std::vector<float> cs(static_cast<size_t>(CTX + 8) * n_rot);
        for (size_t i = 0; i < cs.size(); ++i) cs[i] = (i % 2) ? 0.5f : 0.8660254f;
        float* d_cs = nullptr;
        ck(cudaMalloc(&d_cs, cs.size() * 4), "cs");
        cudaMemcpy(d_cs, cs.data(), cs.size() * 4, cudaMemcpyHostToDevice);
        kernels::rope_params rope;
        rope.mode = kernels::rope_mode::neox;
        rope.n_rot = n_rot;
        const double us_rope = time_us(s, reps, [&](int) {
            cuda::qk_norm_rope_store(rope, d_cs, CTX - 1, q, k, v, qn, kn, 1e-6f, 1, H, KVH, HD, kc, vc, s);
        });
        report("qk_norm_rope_store 32/4 heads", us_rope, (H + 3 * KVH) * HD * 4.0, true);
        kernels::attention_params ap;
        ap.n_head = H;
        ap.n_kv_head = KVH;
        ap.head_dim = HD;
        ap.scale = 0.0883883f;
        // The split decode kernel (what the model runs for a decode step) with records for a
        // 4,096-position cache, at 512 and at 4,096 positions; the one-block-per-head kernel at
        // 512 for comparison (not counted in the layer).
        const int64_t LONG = 4096;
        float* kc_long = dev_floats(static_cast<size_t>(LONG) * KVH * HD, 16);
        float* vc_long = dev_floats(static_cast<size_t>(LONG) * KVH * HD, 17);
        cuda::attention_split sp;
        sp.max_chunks = LONG / kernels::k_attn_chunk;
        ck(cudaMalloc(&sp.records, static_cast<size_t>(H * sp.max_chunks * cuda::attention_split_record_floats(HD)) * 4), "records");
        const double us_att = time_us(s, reps, [&](int) { cuda::attention(ap, q, kc, vc, CTX - 1, 1, out, s); });
        report("attention, one block a head, 512 positions (L2)", us_att, 2.0 * CTX * KVH * HD * 4, false);
        const double us_split = time_us(s, reps, [&](int) {
            cuda::attention(ap, q, kc_long, vc_long, CTX - 1, 1, out, s, nullptr, &sp);
        });
        report("attention, split, 512 positions, 32/4 heads of 128 (L2)", us_split, 2.0 * CTX * KVH * HD * 4, true);
        const double us_split_long = time_us(s, reps, [&](int) {
            cuda::attention(ap, q, kc_long, vc_long, LONG - 1, 1, out, s, nullptr, &sp);
        });
        report("attention, split, 4096 positions", us_split_long, 2.0 * LONG * KVH * HD * 4, false);
        const double us_long = time_us(s, reps, [&](int) { cuda::attention(ap, q, kc_long, vc_long, LONG - 1, 1, out, s); });
        report("attention, one block a head, 4096 positions", us_long, 2.0 * LONG * KVH * HD * 4, false);
        cudaFree(sp.records);
        for (float* p : {q, k, v, qn, kn, kc, vc, out, d_cs, kc_long, vc_long}) cudaFree(p);
    }
    // 5. Quantised matmuls of a layer, one row: wq (Q4_K 4096 x 2048), wk + wv (2 x 512 x 2048),
    // wo (2048 x 4096), the experts' gate + up (8 pairs, 768 x 2048 each, Q4_K) and down (8
    // pairs, 2048 x 768, Q6_K), each from rotating copies.
    struct mm_case {
        const char* name;
        dtype t;
        int64_t n_in, n_out;
        bool paired;   // a second matrix of the same shape in the same launch
        int experts;   // > 0: expert mode, 8 pairs over this many experts
    };
    const mm_case cases[] = {
        {"wq Q4_K 4096 x 2048, 1 row", dtype::q4_k, E, H * HD, false, 0},
        {"wk + wv Q4_K 2 x 512 x 2048 (one launch), 1 row", dtype::q4_k, E, KVH * HD, true, 0},
        {"wo Q4_K 2048 x 4096, accumulate, 1 row", dtype::q4_k, H * HD, E, false, 0},
        {"experts gate + up Q4_K 8 x 2 x 768 x 2048 (one launch)", dtype::q4_k, E, F, true, X},
        {"experts down Q6_K 8 x 2048 x 768", dtype::q6_k, F, E, false, X},
    };
    std::mt19937 g(42);
    for (const mm_case& c : cases) {
        size_t rb = 0;
        const int64_t mats = c.experts ? c.experts : 1;
        const size_t one = static_cast<size_t>(*bytes_for(c.t, static_cast<uint64_t>(c.n_in))) * static_cast<size_t>(c.n_out);
        // Dense: rotate over enough copies to exceed L2; experts: one bank, random ids per launch.
        const int n_copies = c.experts ? 1 : static_cast<int>(std::max<size_t>(2, (200u << 20) / one + 1));
        std::vector<std::byte*> w, w2;
        for (int i = 0; i < n_copies; ++i) {
            w.push_back(dev_quant(c.t, c.n_in, c.n_out * mats, 200 + i, &rb));
            if (c.paired) w2.push_back(dev_quant(c.t, c.n_in, c.n_out * mats, 300 + i, &rb));
        }
        std::vector<int32_t> h_ids(static_cast<size_t>(64 * K));
        for (auto& v : h_ids) v = static_cast<int32_t>(g() % X);
        int32_t* d_ids = nullptr;
        ck(cudaMalloc(&d_ids, h_ids.size() * 4), "ids");
        cudaMemcpy(d_ids, h_ids.data(), h_ids.size() * 4, cudaMemcpyHostToDevice);
        const quant::act_format f = quant::act_format_for(c.t);
        cuda::quantize_act_rows(f, x, 1, c.n_in, act, s);
        const double us = time_us(s, reps, [&](int i) {
            cuda::mm_args a;
            a.type = c.t;
            a.w = w[static_cast<size_t>(i % n_copies)];
            a.row_bytes = rb;
            a.n_in = c.n_in;
            a.n_out = c.n_out;
            a.act = act;
            a.act_stride = quant::act_row_bytes(f, c.n_in);
            a.y = y;
            a.y_stride = c.n_out;
            a.n_rows = 1;
            if (c.experts) {
                a.ids = d_ids + (i % 64) * K;
                a.expert_stride = one;
                a.act_div = K;
                a.n_rows = K;
            }
            if (c.paired) {
                a.w2 = w2[static_cast<size_t>(i % n_copies)];
                a.n_out2 = c.n_out;
                a.y2 = y2;
                a.y2_stride = c.n_out;
            }
            cuda::matmul(a, s);
        });
        const double bytes = static_cast<double>(one) * (c.paired ? 2 : 1) * (c.experts ? K : 1);
        report(c.name, us, bytes, true);
        for (auto* p : w) cudaFree(p);
        for (auto* p : w2) cudaFree(p);
        cudaFree(d_ids);
    }
    // 6. SwiGLU + quantise of 8 pairs, and the rank-order combine.
    {
        float* gate = dev_floats(static_cast<size_t>(K * F), 20);
        float* up = dev_floats(static_cast<size_t>(K * F), 21);
        float* ey = dev_floats(static_cast<size_t>(K * E), 22);
        const double us_sw = time_us(s, reps, [&](int) {
            cuda::swiglu_quant(gate, up, K, F, quant::act_format::q8_256, act, s);
        });
        report("swiglu_quant 8 x 768 (L2)", us_sw, 2.0 * K * F * 4, true);
        const double us_c = time_us(s, reps, [&](int) { cuda::moe_combine(ey, ew, K, 1, E, x, s, true); });
        report("moe_combine 8 x 2048, accumulate (L2)", us_c, K * E * 4.0, true);
        for (float* p : {gate, up, ey}) cudaFree(p);
    }
    std::printf("%-58s %9.2f us\n", "sum of a layer's kernels", layer_us);
    // 7. The LM head: Q6_K 151936 x 2048, one row (once per token).
    {
        size_t rb = 0;
        std::byte* w = dev_quant(dtype::q6_k, E, V, 400, &rb);
        cuda::quantize_act_rows(quant::act_format::q8_256, x, 1, E, act, s);
        const int r = std::max(10, reps / 10);
        const double us = time_us(s, r, [&](int) {
            cuda::mm_args a;
            a.type = dtype::q6_k;
            a.w = w;
            a.row_bytes = rb;
            a.n_in = E;
            a.n_out = V;
            a.act = act;
            a.act_stride = quant::act_row_bytes(quant::act_format::q8_256, E);
            a.y = y;
            a.y_stride = V;
            a.n_rows = 1;
            cuda::matmul(a, s);
        });
        report("LM head Q6_K 151936 x 2048, 1 row", us, static_cast<double>(rb) * V, false);
        cudaFree(w);
    }
    // 8. Prefill attention: a 2048-row chunk of a long prompt (the rows kernel), at the start and
    // at the end of a 32K prompt, for 32/4 heads of 128 (the MoE families) and 16/2 of 256 (the
    // hybrids' gated attention). The figure after the time is FP32 GFLOP/s (2 per multiply-add of
    // QK and of PV over the causal positions), not GB/s.
    {
        struct prefill_case {
            const char* name;
            int n_head, n_kv, hd;
            int32_t pos0;
        };
        const prefill_case cases[] = {{"prefill attention 32/4 x 128, 2048 rows at 0", 32, 4, 128, 0},
                                      {"prefill attention 32/4 x 128, 2048 rows at 30720", 32, 4, 128, 30720},
                                      {"prefill attention 16/2 x 256, 2048 rows at 0", 16, 2, 256, 0},
                                      {"prefill attention 16/2 x 256, 2048 rows at 30720", 16, 2, 256, 30720}};
        const int64_t rows = 2048, n_ctx = 32768;
        for (const prefill_case& c : cases) {
            kernels::attention_params ap;
            ap.n_head = c.n_head;
            ap.n_kv_head = c.n_kv;
            ap.head_dim = c.hd;
            ap.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
            float* q = dev_floats(static_cast<size_t>(rows) * c.n_head * c.hd, 30);
            float* kc = dev_floats(static_cast<size_t>(n_ctx) * c.n_kv * c.hd, 31);
            float* vc = dev_floats(static_cast<size_t>(n_ctx) * c.n_kv * c.hd, 32);
            float* out = dev_floats(static_cast<size_t>(rows) * c.n_head * c.hd, 33);
            const double us = time_us(s, 3, [&](int) { cuda::attention(ap, q, kc, vc, c.pos0, rows, out, s); });
            const double mean_kv = c.pos0 + (rows + 1) / 2.0;
            const double flops = 4.0 * rows * c.n_head * c.hd * mean_kv;
            std::printf("%-58s %9.2f us  %8.1f GFLOP/s  (not per layer)\n", c.name, us, flops / (us * 1e-6) / 1e9);
            for (float* p : {q, kc, vc, out}) cudaFree(p);
        }
    }
    ck(cudaDeviceSynchronize(), "end");
    std::printf("PASS: kernel_bench done\n");
    return 0;
}
