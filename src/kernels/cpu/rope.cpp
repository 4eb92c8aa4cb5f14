// Rotary position embedding, normal and NeoX orderings, with llama.cpp's YaRN scaling
// (ggml's rope_yarn / ggml_rope_yarn_corr_dims, re-derived here from the YaRN paper's equations).
#include "kernels/cpu/ops.h"

#include <algorithm>
#include <cmath>

namespace sluice::kernels {
namespace {

// The dimension index whose wavelength makes n_rotations turns over the original context:
// n_rot * ln(n_ctx_orig / (n_rotations * 2 pi)) / (2 ln(base)).
double yarn_corr_dim(int n_rot, int n_ctx_orig, double n_rotations, double base) {
    return n_rot * std::log(n_ctx_orig / (n_rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
}

}  // namespace

void rope_table(const rope_params& p, int32_t pos, float* cs) {
    // YaRN's correction range [low, high] in pair indices: below low the dimension rotates
    // fast enough to extrapolate, above high it is interpolated, between the two it is mixed.
    double low = 0.0, high = 0.0;
    if (p.ext_factor != 0.0f) {
        low = std::max(0.0, std::floor(yarn_corr_dim(p.n_rot, p.n_ctx_orig, p.beta_fast, p.freq_base)));
        high = std::min(static_cast<double>(p.n_rot - 1),
                        std::ceil(yarn_corr_dim(p.n_rot, p.n_ctx_orig, p.beta_slow, p.freq_base)));
    }
    double mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) mscale *= 1.0 + 0.1 * std::log(1.0 / p.freq_scale);
    for (int i = 0; i < p.n_rot / 2; ++i) {
        const double theta_extrap = pos * std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_rot);
        const double theta_interp = p.freq_scale * theta_extrap;
        double theta = theta_interp;
        if (p.ext_factor != 0.0f) {
            const double y = (i - low) / std::max(0.001, high - low);
            const double ramp = 1.0 - std::min(1.0, std::max(0.0, y));
            const double mix = ramp * p.ext_factor;
            theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
        }
        cs[2 * i] = static_cast<float>(std::cos(theta) * mscale);
        cs[2 * i + 1] = static_cast<float>(std::sin(theta) * mscale);
    }
}

void rope_apply(const rope_params& p, const float* cs, float* x, int n_head, int head_dim) {
    const int half = p.n_rot / 2;
    for (int h = 0; h < n_head; ++h) {
        float* xh = x + static_cast<int64_t>(h) * head_dim;
        for (int i = 0; i < half; ++i) {
            const int i0 = p.mode == rope_mode::neox ? i : 2 * i;
            const int i1 = p.mode == rope_mode::neox ? i + half : 2 * i + 1;
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const float x0 = xh[i0], x1 = xh[i1];
            xh[i0] = x0 * c - x1 * s;
            xh[i1] = x0 * s + x1 * c;
        }
    }
}

}  // namespace sluice::kernels
