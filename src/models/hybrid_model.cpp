// The forward loop both hybrid Qwen MoEs share (hybrid_model.h).
#include "models/hybrid_model.h"

#include "core/error.h"
#include "io/model_file.h"

namespace sluice {

hybrid_variant hybrid_variant_of(const model_file& f) {
    const std::string arch = f.architecture();
    if (arch == "qwen3next") return qwen3next_variant(f);
    if (arch == "qwen35moe") return qwen35moe_variant(f);
    fail("model: general.architecture '{}': expected qwen3next or qwen35moe", arch);
}

hybrid_model::hybrid_model(const model_file& f, const hybrid_variant& v) {
    // Hyperparameters.
    hy_ = read_hybrid_hparams(f, v.arch, v.v_tiled, hp_);
    // Weights.
    weight_binder b(f);
    out_ = bind_output(b, hp_);
    for (int il = 0; il < hp_.n_layer; ++il) {
        hybrid_layer l;
        l.recurrent = hy_.rec_index[static_cast<size_t>(il)] >= 0;
        if (l.recurrent)
            l.dn = bind_delta_net(f, b, hp_, hy_.dn, il, v.separate_beta_alpha);
        else
            l.attn = bind_gated_attention(b, hp_, il);
        l.post_norm = b.vec(blk(il, "post_attention_norm.weight"), hp_.n_embd);
        l.moe = bind_moe(b, hp_, il, /*shared_expert=*/true);
        layers_.push_back(std::move(l));
    }
    if (hy_.n_nextn > 0) mtp_ = bind_mtp(b, hp_, hp_.n_layer);
}

void hybrid_model::forward_batch(std::span<const batch_segment> batch, forward_scratch& s, float* logits) {
    const int64_t n = check_batch(hp_, batch, s);
    check_recurrent(batch);
    begin_recurrent(batch);
    embed_batch(out_, hp_, batch, s);
    for (int il = 0; il < hp_.n_layer; ++il) {
        const hybrid_layer& l = layers_[static_cast<size_t>(il)];
        if (l.recurrent)
            delta_net_block(l.dn, hp_, hy_.dn, hy_.rec_index[static_cast<size_t>(il)], batch, n, s);
        else
            gated_attention_block(l.attn, hp_, il, batch, n, s);
        moe_ffn_block(l.post_norm, l.moe, hp_, n, s);
    }
    end_recurrent(batch);
    commit_batch(batch);
    output_block(out_, hp_, batch, s, logits);
}

}  // namespace sluice
