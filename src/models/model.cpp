// The architecture registry and the scratch/KV sizing every architecture shares.
#include "models/model.h"

#include "core/error.h"
#include "io/model_file.h"
#include "kernels/cpu/ops.h"

#include <algorithm>

namespace sluice {

// One factory per architecture file.
std::unique_ptr<model> make_llama(const model_file& f, const load_options& o);
std::unique_ptr<model> make_qwen3(const model_file& f, const load_options& o);
std::unique_ptr<model> make_qwen3moe(const model_file& f, const load_options& o);
std::unique_ptr<model> make_qwen2moe(const model_file& f, const load_options& o);
std::unique_ptr<model> make_qwen3next(const model_file& f, const load_options& o);
std::unique_ptr<model> make_qwen35moe(const model_file& f, const load_options& o);

model::~model() = default;

void model::forward(std::span<const token_id> tokens, int32_t pos0, kv_cache& kv, forward_scratch& scratch,
                    float* logits) {
    batch_segment seg;
    seg.tokens = tokens;
    seg.pos0 = pos0;
    seg.kv = &kv;
    seg.n_logits = scratch.last_row_logits_only ? 1 : static_cast<int32_t>(tokens.size());
    forward_batch(std::span<const batch_segment>(&seg, 1), scratch, logits);
}

std::unique_ptr<model> load_model(const model_file& f, const load_options& o) {
    const std::string arch = f.architecture();
    if (arch == "llama") return make_llama(f, o);
    if (arch == "qwen3") return make_qwen3(f, o);
    if (arch == "qwen3moe") return make_qwen3moe(f, o);
    if (arch == "qwen2moe") return make_qwen2moe(f, o);
    if (arch == "qwen3next") return make_qwen3next(f, o);
    if (arch == "qwen35moe") return make_qwen35moe(f, o);
    fail("model: general.architecture '{}': expected one of llama, qwen3, qwen3moe, qwen2moe, qwen3next, qwen35moe",
         arch);
}

forward_scratch model::make_scratch(int max_rows, thread_pool& pool) const {
    const model_hparams& hp = hparams();
    if (max_rows < 1 || max_rows > 4096) fail("forward_scratch: max_rows: expected 1..4096, got {}", max_rows);
    const size_t R = static_cast<size_t>(max_rows);
    const size_t E = static_cast<size_t>(hp.n_embd);
    const size_t nq = static_cast<size_t>(hp.n_head) * static_cast<size_t>(hp.head_dim);
    const size_t nkv = static_cast<size_t>(hp.n_kv_head) * static_cast<size_t>(hp.head_dim);
    const size_t ff = static_cast<size_t>(std::max({hp.n_ff, hp.n_ff_exp, hp.n_ff_shexp, 1}));
    const size_t K = static_cast<size_t>(std::max(hp.n_expert_used, 1));
    forward_scratch s;
    s.pool = &pool;
    s.max_rows = max_rows;
    s.x.resize(R * E);
    if (!forward_on_host()) return s;
    s.xn.resize(R * E);
    s.q.resize(R * nq);
    s.k.resize(R * nkv);
    s.v.resize(R * nkv);
    s.attn.resize(R * nq);
    if (hp.n_head > 0 && hp.head_dim > 0)
        s.attn_split.resize(kernels::attention_split_floats({hp.n_head, hp.n_kv_head, hp.head_dim, 1.0f}));
    s.out.resize(R * E);
    s.gate.resize(R * ff);
    s.up.resize(R * ff);
    s.expert.resize(E);
    s.shexp.resize(hp.n_ff_shexp > 0 ? R * E : 0);
    s.router.resize(R * static_cast<size_t>(std::max(hp.n_expert, 1)));
    s.expert_ids.resize(R * K);
    s.expert_w.resize(R * K);
    s.shexp_gate.resize(R);
    // f32 activations (a copy) are the largest form of an activation row: 4 bytes a value.
    s.act.resize(R * 4 * std::max({E, nq, ff, static_cast<size_t>(hp.ssm_d_inner)}));
    s.arch.resize(R * static_cast<size_t>(hp.arch_floats_per_row));
    if (hp.n_expert > 0)
        s.experts = moe::make_expert_scratch(max_rows, hp.n_expert_used, hp.n_expert, hp.n_embd, hp.n_ff_exp);
    return s;
}

void model::sync_kv_to_host(kv_cache&) {}
void model::load_kv_from_host(kv_cache&) {}

kv_shape model::kv_shape_for(int n_ctx) const {
    const model_hparams& hp = hparams();
    kv_shape k;
    k.n_layer = hp.n_layer;
    k.n_ctx = n_ctx;
    k.n_kv_head = hp.n_kv_head;
    k.head_dim = hp.head_dim;
    if (hp.n_rec_layer > 0) k.rec = {hp.n_rec_layer, hp.rec_conv_floats, hp.rec_ssm_floats, k_recurrent_ckpt_rows};
    return k;
}

}  // namespace sluice
