// The Gated DeltaNet row kernels (kernels/cpu/delta_net.h) against a plain double-precision
// transcription of the published recurrence, run over a sequence of random rows: causal conv1d
// with zero history + SiLU, L2-normalised q/k, S = exp(g) S; S += k (beta (v - S^T k))^T;
// o = S^T q / sqrt(dk), then the gated RMSNorm. Both key-head mappings (grouped, tiled).
#include "kernels/cpu/delta_net.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace sluice {
namespace {

using kernels::delta_net_shape;

struct reference {
    const delta_net_shape& s;
    std::vector<std::vector<double>> hist;   // every input row so far
    std::vector<double> S;                   // [n_v, dk, dv]
    explicit reference(const delta_net_shape& sh) : s(sh), S(static_cast<size_t>(sh.ssm_state_floats()), 0.0) {}

    std::vector<double> step(const std::vector<float>& w, const std::vector<float>& x, const std::vector<float>& g,
                             const std::vector<float>& beta, const std::vector<float>& z, const std::vector<float>& nw) {
        const int64_t C = s.conv_channels();
        hist.emplace_back(x.begin(), x.end());
        std::vector<double> c(static_cast<size_t>(C), 0.0);
        const int64_t t = static_cast<int64_t>(hist.size()) - 1;
        for (int64_t ch = 0; ch < C; ++ch) {
            double acc = 0;
            for (int j = 0; j < s.d_conv; ++j) {
                const int64_t src = t - (s.d_conv - 1) + j;   // zero history before the first row
                if (src >= 0) acc += double(w[size_t(ch * s.d_conv + j)]) * hist[size_t(src)][size_t(ch)];
            }
            c[size_t(ch)] = acc / (1.0 + std::exp(-acc));
        }
        const int dk = s.head_k_dim, dv = s.head_v_dim;
        auto l2 = [&](int64_t off, int n) {
            double ss = 0;
            for (int i = 0; i < n; ++i) ss += c[size_t(off + i)] * c[size_t(off + i)];
            for (int i = 0; i < n; ++i) c[size_t(off + i)] /= std::sqrt(ss + s.eps);
        };
        for (int h = 0; h < s.n_k_heads; ++h) l2(h * dk, dk), l2(s.key_dim() + h * dk, dk);
        std::vector<double> out(static_cast<size_t>(s.value_dim()), 0.0);
        for (int h = 0; h < s.n_v_heads; ++h) {
            const int kh = s.v_tiled ? h % s.n_k_heads : h / (s.n_v_heads / s.n_k_heads);
            const double* q = &c[size_t(kh * dk)];
            const double* k = &c[size_t(s.key_dim() + kh * dk)];
            const double* v = &c[size_t(2 * s.key_dim() + h * dv)];
            double* Sh = &S[size_t(h) * dk * dv];
            for (int i = 0; i < dk * dv; ++i) Sh[i] *= std::exp(double(g[size_t(h)]));
            for (int j = 0; j < dv; ++j) {
                double kv = 0;
                for (int i = 0; i < dk; ++i) kv += Sh[i * dv + j] * k[i];
                const double d = (v[j] - kv) * beta[size_t(h)];
                for (int i = 0; i < dk; ++i) Sh[i * dv + j] += k[i] * d;
            }
            double ms = 0;
            std::vector<double> o(static_cast<size_t>(dv), 0.0);
            for (int j = 0; j < dv; ++j) {
                for (int i = 0; i < dk; ++i) o[size_t(j)] += Sh[i * dv + j] * q[i] / std::sqrt(double(dk));
                ms += o[size_t(j)] * o[size_t(j)];
            }
            ms /= dv;
            for (int j = 0; j < dv; ++j) {
                const double zz = z[size_t(h * dv + j)];
                out[size_t(h * dv + j)] = o[size_t(j)] / std::sqrt(ms + s.eps) * nw[size_t(j)] * (zz / (1.0 + std::exp(-zz)));
            }
        }
        return out;
    }
};

void run_against_reference(bool tiled) {
    delta_net_shape s;
    s.n_k_heads = 2;
    s.n_v_heads = 6;
    s.head_k_dim = 8;
    s.head_v_dim = 8;
    s.d_conv = 4;
    s.v_tiled = tiled;
    s.eps = 1e-6f;
    const int64_t C = s.conv_channels(), vd = s.value_dim();
    std::mt19937 rng(7 + tiled);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto randv = [&](int64_t n, float sc) {
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = sc * nd(rng);
        return v;
    };
    const std::vector<float> w = randv(C * s.d_conv, 0.7f), nw = randv(s.head_v_dim, 0.1f);
    std::vector<float> norm_w(nw.size());
    for (size_t i = 0; i < nw.size(); ++i) norm_w[i] = 1.0f + nw[i];
    std::vector<float> conv_state(static_cast<size_t>(s.conv_state_floats()), 0.0f), ssm(static_cast<size_t>(s.ssm_state_floats()), 0.0f);
    reference ref(s);
    thread_pool pool(2, {.pin = false});
    for (int t = 0; t < 12; ++t) {
        const std::vector<float> x = randv(C, 1.0f), z = randv(vd, 1.0f);
        std::vector<float> g(static_cast<size_t>(s.n_v_heads)), beta(g.size());
        for (size_t h = 0; h < g.size(); ++h) {
            g[h] = -kernels::softplus_f32(nd(rng)) * 0.5f;
            beta[h] = 1.0f / (1.0f + std::exp(-nd(rng)));
        }
        std::vector<float> conv(static_cast<size_t>(C)), out(static_cast<size_t>(vd));
        kernels::delta_net_conv_row(s, w.data(), conv_state.data(), x.data(), conv.data());
        kernels::delta_net_rule_row(pool, s, conv.data(), g.data(), beta.data(), ssm.data(), out.data());
        kernels::delta_net_gated_norm_row(s, out.data(), z.data(), norm_w.data(), out.data());
        const std::vector<double> want = ref.step(w, x, g, beta, z, norm_w);
        double err = 0, mag = 0;
        for (int64_t i = 0; i < vd; ++i) {
            err = std::max(err, std::abs(double(out[size_t(i)]) - want[size_t(i)]));
            mag = std::max(mag, std::abs(want[size_t(i)]));
        }
        EXPECT_LT(err, 1e-5 * std::max(mag, 1.0)) << "row " << t << (tiled ? " (tiled)" : " (grouped)");
    }
}

TEST(delta_net, rows_follow_the_gated_delta_rule_grouped_heads) { run_against_reference(false); }
TEST(delta_net, rows_follow_the_gated_delta_rule_tiled_heads) { run_against_reference(true); }

TEST(delta_net, softplus_is_log1p_exp) {
    for (float x : {-30.0f, -3.0f, -0.5f, 0.0f, 0.7f, 5.0f, 19.9f, 25.0f})
        EXPECT_NEAR(kernels::softplus_f32(x), std::log1p(std::exp(double(x))), 1e-6 * std::max(1.0, double(x))) << x;
}

}  // namespace
}  // namespace sluice
