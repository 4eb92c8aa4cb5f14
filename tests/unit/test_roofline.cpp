// The roofline's compute bound (issue 7): operations per token from multiply-adds (weights once
// per row, attention per attended position, causal), the ceiling as the smaller of the memory and
// compute bounds with the binding one named, the GPU tensor-rate table against the vendors'
// published peaks, and the CPU peak measured with the engine's own dot kernel.
#include "core/thread_pool.h"
#include "runtime/roofline.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

namespace sluice {
namespace {

TEST(roofline_compute, forward_ops_count_weights_per_row_and_causal_attention) {
    compute_model m;
    m.weight_macs_per_row = 1000.0;
    m.attn_macs_per_position = 10.0;
    // One row after 5 cached positions attends 6: 2 x (1000 + 10 x 6).
    EXPECT_DOUBLE_EQ(forward_ops(m, 1, 5), 2.0 * (1000.0 + 60.0));
    // Three rows after 5: they attend 6, 7 and 8 positions.
    EXPECT_DOUBLE_EQ(forward_ops(m, 3, 5), 2.0 * (3000.0 + 10.0 * (6 + 7 + 8)));
    EXPECT_DOUBLE_EQ(forward_ops(m, 0, 5), 0.0);
    // A forward of R rows is R one-row forwards at increasing depth (the arithmetic, unlike the
    // bytes, does not shrink with the window).
    double sum = 0.0;
    for (int i = 0; i < 16; ++i) sum += forward_ops(m, 1, 100 + i);
    EXPECT_DOUBLE_EQ(forward_ops(m, 16, 100), sum);
}

TEST(roofline_compute, prefill_and_decode_ops_per_token) {
    compute_model m;
    m.weight_macs_per_row = 500.0;
    m.attn_macs_per_position = 4.0;
    // Prefill of 4 tokens: positions attended 1 + 2 + 3 + 4 = 10.
    EXPECT_DOUBLE_EQ(prefill_ops_per_token(m, 4), 2.0 * (4 * 500.0 + 4.0 * 10) / 4);
    // Decode of 3 tokens after 10 cached: they attend 11, 12 and 13.
    EXPECT_DOUBLE_EQ(decode_ops_per_token(m, 10, 3), 2.0 * (500.0 + 4.0 * 12));
    EXPECT_DOUBLE_EQ(decode_ops_per_token(m, 10, 0), 0.0);
    EXPECT_DOUBLE_EQ(prefill_ops_per_token(m, 0), 0.0);
    // A dense model without attention cost: 2 x active weights per token, whatever the depth.
    compute_model w;
    w.weight_macs_per_row = 3e9;
    EXPECT_DOUBLE_EQ(decode_ops_per_token(w, 4096, 64), 6e9);
    EXPECT_DOUBLE_EQ(compute_ceiling_tok_s(6e12, 6e9), 1000.0);
    EXPECT_DOUBLE_EQ(compute_ceiling_tok_s(0.0, 6e9), 0.0);
    EXPECT_DOUBLE_EQ(compute_ceiling_tok_s(6e12, 0.0), 0.0);
}

TEST(roofline_compute, ceiling_is_the_smaller_bound_and_names_it) {
    roofline_bound b = bind_ceiling(200.0, 50.0);
    EXPECT_DOUBLE_EQ(b.ceiling_tok_s, 50.0);
    EXPECT_STREQ(b.binds, "compute");
    b = bind_ceiling(40.0, 50.0);
    EXPECT_DOUBLE_EQ(b.ceiling_tok_s, 40.0);
    EXPECT_STREQ(b.binds, "memory");
    // An unknown bound (0) never binds; both unknown: no ceiling.
    b = bind_ceiling(0.0, 50.0);
    EXPECT_DOUBLE_EQ(b.ceiling_tok_s, 50.0);
    EXPECT_STREQ(b.binds, "compute");
    b = bind_ceiling(40.0, 0.0);
    EXPECT_STREQ(b.binds, "memory");
    b = bind_ceiling(0.0, 0.0);
    EXPECT_DOUBLE_EQ(b.ceiling_tok_s, 0.0);
    EXPECT_STREQ(b.binds, "none");
}

TEST(roofline_compute, prefill_on_a_fast_gpu_is_compute_bound_and_decode_memory_bound) {
    // A 30B-A3B-like shape: ~3.3e9 active multiply-adds per row, 48 layers x 32 heads x 128.
    compute_model m;
    m.weight_macs_per_row = 3.3e9;
    m.attn_macs_per_position = 48.0 * 2 * 32 * 128;
    traffic_model t;
    t.shared_bytes = uint64_t(1.0e9);
    t.routed_bytes_total = uint64_t(16.0e9);
    t.n_expert = 128;
    t.n_expert_used = 8;
    const double hbm = 4000.0;   // GB/s
    const double peak = gpu_peak_ops_s(132, 1.83, gpu_tensor_rate_for(9, 0)->int8_ops_per_clk_sm);
    const roofline_bound decode =
        bind_ceiling(ceiling_tok_s(hbm, decode_bytes_per_token(t, 0, 64)), compute_ceiling_tok_s(peak, decode_ops_per_token(m, 0, 64)));
    EXPECT_STREQ(decode.binds, "memory");
    // A 4096-token prompt in one chunk reads the weights once for 4096 rows.
    const roofline_bound prefill = bind_ceiling(ceiling_tok_s(hbm, prefill_bytes_per_token(t, 4096, 4096)),
                                                compute_ceiling_tok_s(peak, prefill_ops_per_token(m, 4096)));
    EXPECT_STREQ(prefill.binds, "compute");
    EXPECT_LT(prefill.ceiling_tok_s, prefill.memory_tok_s);
}

TEST(roofline_compute, gpu_table_reproduces_the_published_peaks) {
    // SM count x clock x rate per SM per clock = the datasheet's dense figure.
    const gpu_tensor_rate* h100 = gpu_tensor_rate_for(9, 0);
    ASSERT_NE(h100, nullptr);
    EXPECT_NEAR(gpu_peak_ops_s(132, 1.83, h100->int8_ops_per_clk_sm) / 1e12, 1978.9, 1.0);
    EXPECT_NEAR(gpu_peak_ops_s(132, 1.83, h100->fp16_flops_per_clk_sm) / 1e12, 989.4, 1.0);
    const gpu_tensor_rate* a100 = gpu_tensor_rate_for(8, 0);
    ASSERT_NE(a100, nullptr);
    EXPECT_NEAR(gpu_peak_ops_s(108, 1.41, a100->int8_ops_per_clk_sm) / 1e12, 624.0, 1.0);
    EXPECT_NEAR(gpu_peak_ops_s(108, 1.41, a100->fp16_flops_per_clk_sm) / 1e12, 312.0, 0.5);
    const gpu_tensor_rate* l40s = gpu_tensor_rate_for(8, 9);
    ASSERT_NE(l40s, nullptr);
    EXPECT_NEAR(gpu_peak_ops_s(142, 2.52, l40s->int8_ops_per_clk_sm) / 1e12, 733.0, 1.0);
    for (const gpu_tensor_rate* r : {h100, a100, l40s}) EXPECT_GT(std::strlen(r->source), 10u);
    // Unknown architectures give no compute bound rather than a guess.
    EXPECT_EQ(gpu_tensor_rate_for(7, 5), nullptr);
    EXPECT_EQ(gpu_tensor_rate_for(12, 0), nullptr);
    EXPECT_DOUBLE_EQ(gpu_peak_ops_s(0, 1.8, 8192.0), 0.0);
    EXPECT_DOUBLE_EQ(gpu_peak_ops_s(132, 0.0, 8192.0), 0.0);
}

TEST(roofline_compute, cpu_int8_peak_is_measured_and_plausible) {
    thread_pool pool(2);
    const cpu_peak_probe p = measure_cpu_int8_peak(pool, 0.05);
    EXPECT_EQ(p.threads, 2);
    EXPECT_FALSE(p.isa.empty());
    EXPECT_GE(p.seconds, 0.05);
    // Above a scalar loop's rate, below what any core can do: 2 threads x 6 GHz x 2048 int8 ops
    // per cycle (two AVX-512 VNNI units: 2 x 64 multiply-adds x 2 ops, with margin).
    EXPECT_GT(p.int8_ops_s, 1e8);
    EXPECT_LT(p.int8_ops_s, 2.0 * 6e9 * 2048.0);
    EXPECT_THROW(measure_cpu_int8_peak(pool, 0.0), std::exception);
}

}  // namespace
}  // namespace sluice
