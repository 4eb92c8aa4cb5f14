// The CPU ops against straightforward double-precision references, and the properties the
// exactness contract needs from them: rows independent of the window (E1), bits independent
// of the thread count (E2).
#include "core/thread_pool.h"
#include "kernels/cpu/dot_ref.h"
#include "kernels/cpu/ops.h"
#include "kernels/math.h"
#include "quant/quant.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace sluice {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
}

double rel_err(const std::vector<float>& a, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += (a[i] - ref[i]) * (a[i] - ref[i]), den += ref[i] * ref[i];
    return std::sqrt(num / (den > 0 ? den : 1));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A tensor_view over host floats, GGML order: ne = {n_in, n_out}.
tensor_view f32_matrix(const std::vector<float>& w, int64_t n_in, int64_t n_out) {
    tensor_view t;
    t.name = "w";
    t.type = dtype::f32;
    t.n_dims = 2;
    t.ne = {n_in, n_out, 1, 1};
    t.data = reinterpret_cast<const std::byte*>(w.data());
    t.nbytes = static_cast<uint64_t>(n_in * n_out) * 4;
    return t;
}

TEST(ops, exp_is_faithful_to_two_ulp) {
    double worst = 0;
    for (float x = -87.0f; x < 88.5f; x += 0.0137f) {
        const float y = kernels::exp_f32(x);
        const double ref = std::exp(static_cast<double>(x));
        const float rf = static_cast<float>(ref);
        const double ulp = std::nextafter(rf, INFINITY) - rf;
        worst = std::max(worst, std::fabs(y - ref) / ulp);
    }
    EXPECT_LT(worst, 2.0);
    EXPECT_EQ(kernels::exp_f32(0.0f), 1.0f);
    EXPECT_EQ(kernels::exp_f32(-200.0f), 0.0f);
    EXPECT_TRUE(std::isinf(kernels::exp_f32(100.0f)));
    EXPECT_GT(kernels::exp_f32(-100.0f), 0.0f);  // subnormal, not flushed
    EXPECT_NEAR(kernels::exp_f32(-100.0f), std::exp(-100.0), 1e-45);
    EXPECT_NEAR(kernels::silu_f32(2.0f), 2.0 / (1.0 + std::exp(-2.0)), 1e-6);
    EXPECT_NEAR(kernels::sigmoid_f32(-3.0f), 1.0 / (1.0 + std::exp(3.0)), 1e-7);
}

// Distance from ref in units of the fp32 ulp at ref.
double ulps_from(float y, double ref) {
    const float rf = static_cast<float>(ref);
    return std::fabs(y - ref) / (std::nextafter(std::fabs(rf), INFINITY) - std::fabs(rf));
}

TEST(ops, log_log1p_softplus_are_faithful) {
    double worst_log = 0, worst_log1p = 0, worst_sp = 0;
    // Every 977th positive finite fp32 value, subnormals included.
    for (uint32_t u = 1; u < 0x7f800000u; u += 977) {
        const float x = kernels::bits_to_f32(u);
        const double ref = std::log(static_cast<double>(x));
        if (ref != 0.0) worst_log = std::max(worst_log, ulps_from(kernels::log_f32(x), ref));
    }
    for (int e = -40; e <= 31; ++e)
        for (float m = 1.0f; m < 2.0f; m += 0.0071f) {
            const float y = std::ldexp(m, e);
            worst_log1p = std::max(worst_log1p, ulps_from(kernels::log1p_f32(y), std::log1p(static_cast<double>(y))));
        }
    for (float x = -60.0f; x < 25.0f; x += 0.0031f) {
        const double ref = x > 20.0f ? x : std::log1p(std::exp(static_cast<double>(x)));
        worst_sp = std::max(worst_sp, ulps_from(kernels::softplus_f32(x), ref));
    }
    EXPECT_LT(worst_log, 1.0);
    EXPECT_LT(worst_log1p, 3.0);
    EXPECT_LT(worst_sp, 3.0);
    EXPECT_EQ(kernels::log_f32(1.0f), 0.0f);
    EXPECT_TRUE(std::isinf(kernels::log_f32(0.0f)) && kernels::log_f32(0.0f) < 0);
    EXPECT_TRUE(std::isnan(kernels::log_f32(-1.0f)));
    EXPECT_TRUE(std::isinf(kernels::log_f32(INFINITY)));
    EXPECT_EQ(kernels::log1p_f32(1e-30f), 1e-30f);
    EXPECT_EQ(kernels::softplus_f32(30.0f), 30.0f);
}

TEST(ops, rmsnorm_matches_double_reference) {
    const int n = 576;
    auto x = randn(n, 1), w = randn(n, 2);
    std::vector<float> out(n);
    kernels::rmsnorm(x.data(), w.data(), out.data(), n, 1e-5f);
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double scale = 1.0 / std::sqrt(ss / n + 1e-5);
    std::vector<double> ref(n);
    for (int i = 0; i < n; ++i) ref[i] = x[i] * scale * w[i];
    EXPECT_LT(rel_err(out, ref), 1e-6);
}

// The dispatched dot (SIMD where the CPU has it) gives the scalar rule's bits: every length's
// tail lanes, widths of the models' heads and rows, and values of wide range (the order of the
// 16 fmaf chains and the pairwise fold decide the rounding, so any reordering would show).
TEST(ops, dot_f32_lanes_gives_the_scalar_rule_bits) {
    std::mt19937 g(7);
    std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
    std::uniform_int_distribution<int> expo(-20, 20);
    auto wide = [&](int n) {
        std::vector<float> v(static_cast<size_t>(n));
        for (float& x : v) x = std::ldexp(mant(g), expo(g));
        return v;
    };
    std::vector<int> lengths;
    for (int n = 0; n <= 48; ++n) lengths.push_back(n);
    for (int n : {64, 128, 256, 576, 1000, 2048}) lengths.push_back(n);
    for (int n : lengths) {
        const auto a = wide(n), b = wide(n);
        const float got = kernels::dot_f32_lanes(a.data(), b.data(), n);
        const float ref = kernels::dot_f32_lanes_ref(a.data(), b.data(), n);
        uint32_t gu, ru;
        std::memcpy(&gu, &got, 4);
        std::memcpy(&ru, &ref, 4);
        EXPECT_EQ(gu, ru) << "n " << n << ": " << got << " against " << ref;
    }
}

TEST(ops, softmax_matches_double_reference) {
    auto x = randn(1000, 3, 4.0f);
    std::vector<double> ref(x.size());
    double mx = -1e300, sum = 0;
    for (float v : x) mx = std::max(mx, double(v));
    for (size_t i = 0; i < x.size(); ++i) sum += ref[i] = std::exp(x[i] - mx);
    for (auto& r : ref) r /= sum;
    kernels::softmax(x.data(), static_cast<int64_t>(x.size()));
    EXPECT_LT(rel_err(x, ref), 1e-6);
}

// Rotates like Hugging Face's rotate_half (neox) or llama.cpp's adjacent pairs (normal), with
// YaRN's inverse frequencies computed as transformers' _compute_yarn_parameters does: an
// independent formulation of the same equations.
std::vector<double> rope_reference(const std::vector<float>& x, int n_head, int hd, int n_rot, int pos,
                                   bool neox, double base, double factor, int n_ctx_orig, bool yarn) {
    std::vector<double> inv(n_rot / 2);
    double attn = 1.0;
    for (int i = 0; i < n_rot / 2; ++i) inv[i] = 1.0 / std::pow(base, 2.0 * i / n_rot);
    if (yarn) {
        auto corr = [&](double rot) { return n_rot * std::log(n_ctx_orig / (rot * 2 * M_PI)) / (2 * std::log(base)); };
        double low = std::max(0.0, std::floor(corr(32.0))), high = std::min(n_rot - 1.0, std::ceil(corr(1.0)));
        if (low == high) high += 0.001;
        for (int i = 0; i < n_rot / 2; ++i) {
            const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
            const double extrap = 1.0 - ramp;
            inv[i] = (inv[i] / factor) * (1 - extrap) + inv[i] * extrap;
        }
        attn = 0.1 * std::log(factor) + 1.0;
    } else {
        for (auto& f : inv) f /= factor;
    }
    std::vector<double> out(x.begin(), x.end());
    for (int h = 0; h < n_head; ++h)
        for (int i = 0; i < n_rot / 2; ++i) {
            const int a = h * hd + (neox ? i : 2 * i), b = h * hd + (neox ? i + n_rot / 2 : 2 * i + 1);
            const double c = std::cos(pos * inv[i]) * attn, s = std::sin(pos * inv[i]) * attn;
            out[a] = x[a] * c - x[b] * s;
            out[b] = x[a] * s + x[b] * c;
        }
    return out;
}

void check_rope(kernels::rope_mode mode, bool yarn, int n_rot) {
    const int n_head = 3, hd = 64;
    kernels::rope_params p;
    p.mode = mode;
    p.n_rot = n_rot;
    p.freq_base = 1000000.0f;
    p.n_ctx_orig = 4096;
    double factor = 1.0;
    if (yarn) {
        factor = 4.0;
        p.freq_scale = 0.25f;
        p.ext_factor = 1.0f;
    }
    for (int pos : {0, 1, 17, 5000, 30000}) {
        auto x = randn(n_head * hd, 10 + pos);
        std::vector<float> cs(n_rot);
        kernels::rope_table(p, pos, cs.data());
        auto ref = rope_reference(x, n_head, hd, n_rot, pos, mode == kernels::rope_mode::neox, p.freq_base, factor,
                                  p.n_ctx_orig, yarn);
        kernels::rope_apply(p, cs.data(), x.data(), n_head, hd);
        EXPECT_LT(rel_err(x, ref), 1e-6) << "pos " << pos;
    }
}

TEST(ops, rope_normal_matches_reference) { check_rope(kernels::rope_mode::normal, false, 64); }
TEST(ops, rope_neox_matches_reference) { check_rope(kernels::rope_mode::neox, false, 64); }
TEST(ops, rope_partial_rotation_leaves_the_rest) { check_rope(kernels::rope_mode::neox, false, 32); }
TEST(ops, rope_yarn_matches_transformers_formulation) {
    check_rope(kernels::rope_mode::neox, true, 64);
    check_rope(kernels::rope_mode::normal, true, 64);
}

// Double-precision causal GQA attention for rows at positions pos0..pos0+n-1.
std::vector<double> attention_reference(const kernels::attention_params& p, const std::vector<float>& q,
                                        const std::vector<float>& k, const std::vector<float>& v, int pos0, int n) {
    const int hd = p.head_dim, kvs = p.n_kv_head * hd;
    std::vector<double> out(static_cast<size_t>(n) * p.n_head * hd);
    for (int r = 0; r < n; ++r)
        for (int h = 0; h < p.n_head; ++h) {
            const int kvh = h / (p.n_head / p.n_kv_head), n_kv = pos0 + r + 1;
            std::vector<double> s(n_kv);
            double mx = -1e300, sum = 0;
            for (int j = 0; j < n_kv; ++j) {
                double d = 0;
                for (int i = 0; i < hd; ++i) d += double(q[(r * p.n_head + h) * hd + i]) * k[j * kvs + kvh * hd + i];
                s[j] = d * p.scale;
                mx = std::max(mx, s[j]);
            }
            for (auto& e : s) sum += e = std::exp(e - mx);
            for (int i = 0; i < hd; ++i) {
                double o = 0;
                for (int j = 0; j < n_kv; ++j) o += s[j] * v[j * kvs + kvh * hd + i];
                out[(r * p.n_head + h) * hd + i] = o / sum;
            }
        }
    return out;
}

TEST(ops, attention_with_gqa_matches_double_reference) {
    kernels::attention_params p{8, 2, 32, 1.0f / std::sqrt(32.0f)};
    const int n_ctx = 80, pos0 = 60, n = 10;  // rows span three KV chunks
    auto k = randn(n_ctx * 2 * 32, 5), v = randn(n_ctx * 2 * 32, 6), q = randn(n * 8 * 32, 7, 2.0f);
    std::vector<float> out(q.size());
    thread_pool pool(2);
    kernels::attention(pool, p, q.data(), k.data(), v.data(), pos0, n, out.data());
    EXPECT_LT(rel_err(out, attention_reference(p, q, k, v, pos0, n)), 1e-6);
}

TEST(ops, attention_row_does_not_depend_on_window) {
    kernels::attention_params p{4, 4, 16, 0.25f};
    const int n_ctx = 100, pos0 = 37, n = 16;
    auto k = randn(n_ctx * 4 * 16, 8), v = randn(n_ctx * 4 * 16, 9), q = randn(n * 4 * 16, 10, 3.0f);
    thread_pool pool(3);
    std::vector<float> window(q.size());
    kernels::attention(pool, p, q.data(), k.data(), v.data(), pos0, n, window.data());
    for (int r = 0; r < n; ++r) {
        std::vector<float> one(4 * 16);
        kernels::attention(pool, p, q.data() + r * 64, k.data(), v.data(), pos0 + r, 1, one.data());
        EXPECT_EQ(0, std::memcmp(one.data(), window.data() + r * 64, 64 * sizeof(float))) << "row " << r;
    }
}

TEST(ops, matmul_f32_matches_double_reference_and_ignores_threads) {
    const int n_in = 100, n_out = 37, n_rows = 5;
    auto w = randn(n_in * n_out, 11), x = randn(n_in * n_rows, 12);
    const tensor_view tw = f32_matrix(w, n_in, n_out);
    std::vector<std::byte> act(kernels::matmul_act_bytes(tw, n_rows));
    std::vector<double> ref(n_rows * n_out);
    for (int r = 0; r < n_rows; ++r)
        for (int j = 0; j < n_out; ++j)
            for (int i = 0; i < n_in; ++i) ref[r * n_out + j] += double(w[j * n_in + i]) * x[r * n_in + i];
    std::vector<float> y1(n_rows * n_out);
    thread_pool p1(1);
    kernels::matmul(p1, tw, x.data(), n_rows, y1.data(), act.data());
    EXPECT_LT(rel_err(y1, ref), 1e-6);
    for (int t : {2, 3, 5}) {
        thread_pool pt(t);
        std::vector<float> yt(y1.size());
        kernels::matmul(pt, tw, x.data(), n_rows, yt.data(), act.data());
        EXPECT_TRUE(same_bits(y1, yt)) << t << " threads";
    }
    // E1: row 3 alone gives the bits it had inside the window.
    std::vector<float> one(n_out);
    kernels::matmul(p1, tw, x.data() + 3 * n_in, 1, one.data(), act.data());
    EXPECT_EQ(0, std::memcmp(one.data(), y1.data() + 3 * n_out, n_out * sizeof(float)));
}

TEST(ops, matmul_q8_0_is_close_to_float_and_row_exact) {
    const int n_in = 256, n_out = 48, n_rows = 4;
    auto w = randn(n_in * n_out, 13), x = randn(n_in * n_rows, 14);
    std::vector<std::byte> wq(static_cast<size_t>(n_out) * (n_in / 32) * 34);
    for (int j = 0; j < n_out; ++j)
        quant::quantize_row(dtype::q8_0, w.data() + j * n_in, wq.data() + j * (n_in / 32) * 34, n_in);
    tensor_view tw = f32_matrix(w, n_in, n_out);
    tw.type = dtype::q8_0;
    tw.data = wq.data();
    tw.nbytes = wq.size();
    std::vector<double> ref(n_rows * n_out);
    for (int r = 0; r < n_rows; ++r)
        for (int j = 0; j < n_out; ++j)
            for (int i = 0; i < n_in; ++i) ref[r * n_out + j] += double(w[j * n_in + i]) * x[r * n_in + i];
    std::vector<std::byte> act(kernels::matmul_act_bytes(tw, n_rows));
    std::vector<float> y(n_rows * n_out), one(n_out);
    thread_pool pool(2);
    kernels::matmul(pool, tw, x.data(), n_rows, y.data(), act.data());
    EXPECT_LT(rel_err(y, ref), 2e-2);   // two 8-bit roundings
    kernels::matmul(pool, tw, x.data() + 2 * n_in, 1, one.data(), act.data());
    EXPECT_EQ(0, std::memcmp(one.data(), y.data() + 2 * n_out, n_out * sizeof(float)));
}

// matmul may use any kernel (SIMD, windows of rows) but every element must be dot_ref's bits.
TEST(ops, matmul_gives_dot_ref_bits_for_every_element) {
    const int n_in = 256, n_out = 24, n_rows = 21;   // 21 rows: a full 16-row group and a rest
    auto w = randn(n_in * n_out, 16), x = randn(n_in * n_rows, 17);
    thread_pool pool(3);
    for (dtype t : {dtype::f32, dtype::q8_0, dtype::q4_0, dtype::q4_1, dtype::q5_0}) {
        const auto& inf = info(t);
        const size_t wrow = n_in / inf.block_elems * inf.block_bytes;
        std::vector<std::byte> wq(wrow * n_out);
        for (int j = 0; j < n_out; ++j) quant::quantize_row(t, w.data() + j * n_in, wq.data() + j * wrow, n_in);
        tensor_view tw = f32_matrix(w, n_in, n_out);
        tw.type = t;
        tw.data = wq.data();
        tw.nbytes = wq.size();
        std::vector<std::byte> act(kernels::matmul_act_bytes(tw, n_rows));
        std::vector<float> y(n_rows * n_out);
        kernels::matmul(pool, tw, x.data(), n_rows, y.data(), act.data());
        const size_t arow = act.size() / n_rows;
        for (int r = 0; r < n_rows; ++r)
            for (int j = 0; j < n_out; ++j) {
                const float ref = kernels::dot_ref(t, tw.row(j), act.data() + r * arow, n_in);
                ASSERT_EQ(0, std::memcmp(&ref, &y[r * n_out + j], 4)) << name(t) << " row " << r << " col " << j;
            }
    }
}

TEST(ops, expert_slice_views_one_expert) {
    const int n_in = 16, n_out = 4, n_exp = 3;
    auto w = randn(n_in * n_out * n_exp, 15);
    tensor_view t = f32_matrix(w, n_in, n_out);
    t.n_dims = 3;
    t.ne = {n_in, n_out, n_exp, 1};
    t.nbytes = w.size() * 4;
    const tensor_view e2 = kernels::expert_slice(t, 2);
    EXPECT_EQ(e2.ne[1], n_out);
    EXPECT_EQ(e2.ne[2], 1);
    EXPECT_EQ(reinterpret_cast<const float*>(e2.row(1))[0], w[(2 * n_out + 1) * n_in]);
}

TEST(ops, router_picks_top_k_with_and_without_renormalisation) {
    std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f, 1.5f};
    for (bool renorm : {false, true}) {
        auto l = logits;
        kernels::router_params p{6, 3, renorm};
        int32_t ids[3];
        float w[3];
        kernels::route_topk(p, l.data(), ids, w);
        EXPECT_EQ(ids[0], 1);   // tie with 3: the lower id first
        EXPECT_EQ(ids[1], 3);
        EXPECT_EQ(ids[2], 5);
        double z = 0;
        for (float v : logits) z += std::exp(double(v));
        const double p1 = std::exp(2.0) / z, p5 = std::exp(1.5) / z;
        const double s = renorm ? 2 * p1 + p5 : 1.0;
        EXPECT_NEAR(w[0], p1 / s, 1e-6);
        EXPECT_NEAR(w[2], p5 / s, 1e-6);
    }
}

// The greedy pick: the SIMD scan gives the strict scan's index on ties (+0/-0, repeated maxima),
// NaN, -inf and +inf, at every length around the vector widths and at a vocabulary's length.
TEST(ops, argmax_first_matches_the_strict_scan) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    std::mt19937 g(7);
    auto check = [](const std::vector<float>& v, const char* what) {
        const int64_t n = static_cast<int64_t>(v.size());
        ASSERT_EQ(kernels::argmax_first(v.data(), n), kernels::argmax_first_ref(v.data(), n)) << what << ", n " << n;
    };
    // Every value NaN or -inf: index 0, wherever the first -inf is.
    check({nan, -inf, nan}, "NaN then -inf");
    check(std::vector<float>(40, nan), "all NaN");
    check(std::vector<float>(33, -inf), "all -inf");
    EXPECT_EQ(kernels::argmax_first_ref(std::vector<float>{nan, -inf, 1.0f}.data(), 3), 2);
    EXPECT_EQ(kernels::argmax_first_ref(std::vector<float>{-0.0f, 0.0f}.data(), 2), 0);
    for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 151936}) {
        for (int trial = 0; trial < 12; ++trial) {
            std::vector<float> v = randn(static_cast<size_t>(n), static_cast<uint32_t>(n * 31 + trial));
            std::uniform_int_distribution<int64_t> at(0, n - 1);
            switch (trial % 6) {
            case 0: break;
            case 1:   // repeated maxima: the first wins
                for (int k = 0; k < 3; ++k) v[static_cast<size_t>(at(g))] = 9.0f;
                break;
            case 2:   // signed zeros as the maximum
                for (auto& x : v) x = -std::fabs(x) - 1.0f;
                v[static_cast<size_t>(at(g))] = -0.0f;
                v[static_cast<size_t>(at(g))] = 0.0f;
                break;
            case 3:   // NaN scattered (never wins), one at index 0
                for (int k = 0; k < 5; ++k) v[static_cast<size_t>(at(g))] = nan;
                v[0] = nan;
                break;
            case 4:   // +inf twice
                v[static_cast<size_t>(at(g))] = inf;
                v[static_cast<size_t>(at(g))] = inf;
                break;
            default:   // mostly -inf (banned ids) with a few finite values
                for (auto& x : v) x = -inf;
                for (int k = 0; k < 2; ++k) v[static_cast<size_t>(at(g))] = -5.0f;
                break;
            }
            check(v, "trial");
        }
    }
}

TEST(ops, thread_pool_covers_every_index_once) {
    for (int t : {1, 2, 3, 7}) {
        thread_pool pool(t);
        for (int64_t n : {0, 1, 2, 5, 100, 1001}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            for (int rep = 0; rep < 3; ++rep)
                pool.parallel_for(n, [&](int64_t b, int64_t e) {
                    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
                });
            for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 3) << t << " threads, n " << n;
        }
    }
}

}  // namespace
}  // namespace sluice
