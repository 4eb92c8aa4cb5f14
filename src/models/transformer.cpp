// The forward loop shared by the plain transformer architectures (transformer.h).
#include "models/transformer.h"

#include "core/error.h"
#include "io/model_file.h"
#include "models/blocks.h"

#include <string>

namespace sluice {
namespace {

struct transformer_layer {
    attn_weights attn;            // attn_norm [n_embd]; q/k/v/o; biases and q/k norms as the arch has them
    std::vector<float> ffn_norm;  // [n_embd]
    ffn_weights ffn;              // dense: gate/up [n_embd, n_ff], down [n_ff, n_embd]
    moe_weights moe;              // MoE: router [n_embd, n_expert]; gate/up [n_embd, n_ff_exp, n_expert];
                                  // down [n_ff_exp, n_embd, n_expert]; shared expert gate/up
                                  // [n_embd, n_ff_shexp], down [n_ff_shexp, n_embd], gate [n_embd]
};

class transformer_model final : public model {
public:
    transformer_model(const model_file& f, const transformer_arch& a) : arch_(a) {
        const std::string name = a.name;
        // Hyperparameters.
        hp_ = read_transformer_hparams(f, name, a.rope);
        if (a.ffn == ffn_kind::dense) {
            if (hp_.n_ff < 1) fail("model: {}.feed_forward_length: expected >= 1, got {}", name, hp_.n_ff);
        } else {
            read_moe_hparams(f, hp_, a.default_expert_norm);
        }
        if (a.ffn == ffn_kind::moe_shared) {
            const int64_t shexp = f.meta().require_int(name + ".expert_shared_feed_forward_length");
            if (shexp < 1 || shexp > (1 << 20))
                fail("model: {}.expert_shared_feed_forward_length: expected 1..{}, got {}", name, 1 << 20, shexp);
            hp_.n_ff_shexp = static_cast<int>(shexp);
        }
        // Weights.
        weight_binder b(f);
        out_ = bind_output(b, hp_);
        layers_.reserve(static_cast<size_t>(hp_.n_layer));
        for (int il = 0; il < hp_.n_layer; ++il) {
            transformer_layer l;
            l.attn = bind_attention(b, hp_, il, a.qkv_bias, a.qk_norm);
            l.ffn_norm = b.vec(blk(il, "ffn_norm.weight"), hp_.n_embd);
            if (a.ffn == ffn_kind::dense)
                l.ffn = bind_ffn(b, il, "", hp_.n_embd, hp_.n_ff);
            else
                l.moe = bind_moe(b, hp_, il, a.ffn == ffn_kind::moe_shared);
            layers_.push_back(std::move(l));
        }
    }

    const model_hparams& hparams() const override { return hp_; }

    // Forward: embed, then per layer x += attn(norm(x)); x += ffn(norm(x)) (dense or MoE); then
    // the LM head, for the stacked rows of every segment (see model::forward_batch).
    void forward_batch(std::span<const batch_segment> batch, forward_scratch& s, float* logits) override {
        const int64_t n = check_batch(hp_, batch, s);
        embed_batch(out_, hp_, batch, s);
        for (int il = 0; il < hp_.n_layer; ++il) {
            const transformer_layer& l = layers_[static_cast<size_t>(il)];
            attention_block(l.attn, hp_, il, batch, n, s);
            if (arch_.ffn == ffn_kind::dense)
                dense_ffn_block(l.ffn_norm, l.ffn, hp_, n, s);
            else
                moe_ffn_block(l.ffn_norm, l.moe, hp_, n, s);
        }
        commit_batch(batch);
        output_block(out_, hp_, batch, s, logits);
    }

private:
    transformer_arch arch_;
    model_hparams hp_;
    output_weights out_;
    std::vector<transformer_layer> layers_;
};

}  // namespace

std::unique_ptr<model> make_transformer(const model_file& f, const load_options&, const transformer_arch& a) {
    return std::make_unique<transformer_model>(f, a);
}

}  // namespace sluice
