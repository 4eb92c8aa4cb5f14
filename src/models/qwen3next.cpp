// qwen3next (Qwen3-Next-80B-A3B): a hybrid of Gated DeltaNet layers and gated attention layers
// (3 to 1 in the released model: every full_attention_interval-th layer attends), each followed
// by a mixture-of-experts FFN (softmax top-k, renormalised) plus a sigmoid-gated shared expert.
//   DeltaNet layer:  x += ssm_out(gated_rmsnorm(delta_rule(silu(conv1d(qkv))), z))
//   attention layer: x += wo(attention(rope(qnorm(q)), rope(knorm(k)), v) * sigmoid(gate))
//   then:            x += moe(rmsnorm(x, attn_post_norm)) + sigmoid(g . x) * shared(x)
// Value heads map to key heads grouped (h / (n_v / n_k)), the HF order the converter keeps here.
// An MTP block (blk.<n_layer>.nextn.*), when the file has one, is bound for the drafter only.
#include "models/hybrid_blocks.h"

#include "core/error.h"
#include "io/model_file.h"

#include <optional>

namespace sluice {
namespace {

struct qwen3next_layer {
    bool recurrent = false;
    delta_net_weights dn;          // recurrent layers (see hybrid_blocks.h for shapes)
    gated_attn_weights attn;       // attention layers
    std::vector<float> post_norm;  // post_attention_norm [n_embd]: the FFN's input norm
    moe_weights moe;               // router [n_embd, n_expert]; experts gate/up [n_embd, n_ff_exp, n_expert],
                                   // down [n_ff_exp, n_embd, n_expert]; shared expert [n_embd, n_ff_shexp]
                                   // x2, [n_ff_shexp, n_embd], gate [n_embd]
};

class qwen3next_model final : public model {
public:
    qwen3next_model(const model_file& f, const load_options&) {
        // Hyperparameters.
        hy_ = read_hybrid_hparams(f, "qwen3next", /*v_tiled=*/false, hp_);
        // Weights.
        weight_binder b(f);
        out_ = bind_output(b, hp_);
        for (int il = 0; il < hp_.n_layer; ++il) {
            qwen3next_layer l;
            l.recurrent = hy_.rec_index[static_cast<size_t>(il)] >= 0;
            if (l.recurrent)
                l.dn = bind_delta_net(f, b, hp_, hy_.dn, il, /*separate_beta_alpha=*/false);
            else
                l.attn = bind_gated_attention(b, hp_, il);
            l.post_norm = b.vec(blk(il, "post_attention_norm.weight"), hp_.n_embd);
            l.moe = bind_moe(b, hp_, il, /*shared_expert=*/true);
            layers_.push_back(std::move(l));
        }
        if (hy_.n_nextn > 0) mtp_ = bind_mtp(b, hp_, hp_.n_layer);
    }

    const model_hparams& hparams() const override { return hp_; }

    void forward_batch(std::span<const batch_segment> batch, forward_scratch& s, float* logits) override {
        const int64_t n = check_batch(hp_, batch, s);
        check_recurrent(batch);
        begin_recurrent(batch);
        embed_batch(out_, hp_, batch, s);
        for (int il = 0; il < hp_.n_layer; ++il) {
            const qwen3next_layer& l = layers_[static_cast<size_t>(il)];
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
    std::vector<qwen3next_layer> layers_;
    std::optional<mtp_weights> mtp_;   // kept for MTP drafting; unused by forward
};

}  // namespace

std::unique_ptr<model> make_qwen3next(const model_file& f, const load_options& o) {
    return std::make_unique<qwen3next_model>(f, o);
}

}  // namespace sluice
