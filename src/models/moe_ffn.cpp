// The mixture-of-experts FFN block: softmax top-k router, SwiGLU experts combined in the
// router's rank order, and qwen2moe's sigmoid-gated shared expert.
#include "models/blocks.h"

#include "core/error.h"
#include "kernels/math.h"
#include "moe/expert_pool.h"

namespace sluice {

moe_weights bind_moe(const weight_binder& b, const model_hparams& hp, int il, bool shared_expert) {
    moe_weights w;
    w.layer = il;
    w.router = &b.matrix(blk(il, "ffn_gate_inp.weight"), hp.n_embd, hp.n_expert);
    w.gate_exps = &b.experts(blk(il, "ffn_gate_exps.weight"), hp.n_embd, hp.n_ff_exp, hp.n_expert);
    w.up_exps = &b.experts(blk(il, "ffn_up_exps.weight"), hp.n_embd, hp.n_ff_exp, hp.n_expert);
    w.down_exps = &b.experts(blk(il, "ffn_down_exps.weight"), hp.n_ff_exp, hp.n_embd, hp.n_expert);
    if (shared_expert) {
        w.shexp = bind_ffn(b, il, "_shexp", hp.n_embd, hp.n_ff_shexp);
        w.shexp_gate = &b.matrix(blk(il, "ffn_gate_inp_shexp.weight"), hp.n_embd, 1);
    }
    return w;
}

void moe_ffn_block(const std::vector<float>& norm, const moe_weights& w, const model_hparams& hp,
                   int64_t n, forward_scratch& s) {
    thread_pool& pool = *s.pool;
    const int64_t E = hp.n_embd, K = hp.n_expert_used;
    rmsnorm_rows(pool, s.x.data(), norm.data(), s.xn.data(), n, E, hp.rms_eps);

    // Router: logits [n, n_expert] -> top-k ids and weights per row.
    kernels::matmul(pool, *w.router, s.xn.data(), n, s.router.data(), s.act.data());
    kernels::router_params rp;
    rp.n_expert = hp.n_expert;
    rp.n_used = hp.n_expert_used;
    rp.renormalize = hp.expert_weights_norm;
    kernels::for_rows(pool, n, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            kernels::route_topk(rp, s.router.data() + r * hp.n_expert, s.expert_ids.data() + r * K, s.expert_w.data() + r * K);
    });
    if (s.on_route.fn) s.on_route.fn(s.on_route.ctx, w.layer, s.expert_ids.data(), n * K);

    // Routed experts on the CPU expert pool: the window's ids deduplicated (each expert's weights
    // read once for all rows routed to it), gate/up then down as flat batches of chunks, each
    // row combined in rank order, out = w_0 * y_0 + w_1 * y_1 + ...: the bits of the one-row
    // computation for every row (moe/expert_pool.h).
    const moe::expert_bank bank{w.gate_exps, w.up_exps, w.down_exps};
    moe::run_experts(pool, bank, s.xn.data(), s.expert_ids.data(), s.expert_w.data(), n, s.experts, s.out.data());

    if (w.shexp_gate) {
        // Shared expert: every row, scaled by sigmoid(gate . x), added after the routed sum.
        ffn_rows(w.shexp, hp.n_ff_shexp, E, n, s, s.shexp.data());
        kernels::matmul(pool, *w.shexp_gate, s.xn.data(), n, s.shexp_gate.data(), s.act.data());
        kernels::for_rows(pool, n, [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
                const float g = kernels::sigmoid_f32(s.shexp_gate[static_cast<size_t>(r)]);
                float* out = s.out.data() + r * E;
                const float* sh = s.shexp.data() + r * E;
                for (int64_t i = 0; i < E; ++i) out[i] = out[i] + g * sh[i];
            }
        });
    }
    add_rows(pool, s.x.data(), s.out.data(), n, E);
}

}  // namespace sluice
