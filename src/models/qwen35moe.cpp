// qwen35moe (the Qwen3.5/3.6 MoE family, e.g. Qwen3.6-35B-A3B): the same hybrid as qwen3next
// (Gated DeltaNet layers and gated attention layers, MoE FFN with a sigmoid-gated shared
// expert) with three differences in the file: beta and alpha come from two projections
// (ssm_beta, ssm_alpha [n_embd, n_v]) instead of one interleaved ssm_ba; llama.cpp's converter
// reorders the value heads to tiled order, so value head h reads key head h % n_k; and the
// attention's RoPE is interleaved MRoPE, which for text (all position components equal) is the
// NeoX rotation of the first rope.dimension_count dims. Released files carry one MTP block
// (blk.<n_layer>.nextn.*, <arch>.nextn_predict_layers = 1): bound and validated here for the
// drafter, not run by forward.
#include "models/hybrid_blocks.h"

#include "core/error.h"
#include "io/model_file.h"

#include <optional>

namespace sluice {
namespace {

struct qwen35moe_layer {
    bool recurrent = false;
    delta_net_weights dn;          // recurrent layers (see hybrid_blocks.h for shapes)
    gated_attn_weights attn;       // attention layers
    std::vector<float> post_norm;  // post_attention_norm [n_embd]: the FFN's input norm
    moe_weights moe;               // router [n_embd, n_expert]; experts gate/up [n_embd, n_ff_exp, n_expert],
                                   // down [n_ff_exp, n_embd, n_expert]; shared expert [n_embd, n_ff_shexp]
                                   // x2, [n_ff_shexp, n_embd], gate [n_embd]
};

class qwen35moe_model final : public model {
public:
    qwen35moe_model(const model_file& f, const load_options&) {
        // Hyperparameters.
        hy_ = read_hybrid_hparams(f, "qwen35moe", /*v_tiled=*/true, hp_);
        // Weights.
        weight_binder b(f);
        out_ = bind_output(b, hp_);
        for (int il = 0; il < hp_.n_layer; ++il) {
            qwen35moe_layer l;
            l.recurrent = hy_.rec_index[static_cast<size_t>(il)] >= 0;
            if (l.recurrent)
                l.dn = bind_delta_net(f, b, hp_, hy_.dn, il, /*separate_beta_alpha=*/true);
            else
                l.attn = bind_gated_attention(b, hp_, il);
            l.post_norm = b.vec(blk(il, "post_attention_norm.weight"), hp_.n_embd);
            l.moe = bind_moe(b, hp_, il, /*shared_expert=*/true);
            layers_.push_back(std::move(l));
        }
        if (hy_.n_nextn > 0) mtp_ = bind_mtp(b, hp_, hp_.n_layer);
        if (const meta_array* sec = f.meta().get_array("qwen35moe.rope.dimension_sections"); sec && sec->ints.size() > 4)
            fail("model: qwen35moe.rope.dimension_sections: expected at most 4 entries, got {}", sec->ints.size());
    }

    const model_hparams& hparams() const override { return hp_; }

    void forward_batch(std::span<const batch_segment> batch, forward_scratch& s, float* logits) override {
        const int64_t n = check_batch(hp_, batch, s);
        check_recurrent(batch);
        begin_recurrent(batch);
        embed_batch(out_, hp_, batch, s);
        for (int il = 0; il < hp_.n_layer; ++il) {
            const qwen35moe_layer& l = layers_[static_cast<size_t>(il)];
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

private:
    model_hparams hp_;
    hybrid_hparams hy_;
    output_weights out_;
    std::vector<qwen35moe_layer> layers_;
    std::optional<mtp_weights> mtp_;   // kept for MTP drafting; unused by forward
};

}  // namespace

std::unique_ptr<model> make_qwen35moe(const model_file& f, const load_options& o) {
    return std::make_unique<qwen35moe_model>(f, o);
}

}  // namespace sluice
