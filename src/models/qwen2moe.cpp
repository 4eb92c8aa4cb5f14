// qwen2moe: GQA attention with q/k/v biases and NeoX RoPE, then a mixture-of-experts FFN:
// softmax over all experts, top-k WITHOUT renormalisation (Qwen1.5/Qwen2-MoE's
// norm_topk_prob = false; <arch>.expert_weights_norm overrides), SwiGLU experts, plus a shared
// expert that every token uses, scaled by sigmoid(ffn_gate_inp_shexp . x).
#include "models/blocks.h"

#include "core/error.h"
#include "io/model_file.h"

namespace sluice {
namespace {

struct qwen2moe_layer {
    attn_weights attn;           // attn_norm [n_embd]; q/k/v/o; biases bq [n_head*head_dim], bk/bv [n_kv*head_dim]
    std::vector<float> ffn_norm; // [n_embd]
    moe_weights moe;             // router [n_embd, n_expert]; gate/up [n_embd, n_ff_exp, n_expert];
                                 // down [n_ff_exp, n_embd, n_expert]; shared expert gate/up
                                 // [n_embd, n_ff_shexp], down [n_ff_shexp, n_embd], gate [n_embd]
};

class qwen2moe_model final : public model {
public:
    qwen2moe_model(const model_file& f, const load_options&) {
        // Hyperparameters.
        hp_ = read_transformer_hparams(f, "qwen2moe", kernels::rope_mode::neox);
        read_moe_hparams(f, hp_, /*default_norm=*/false);
        const int64_t shexp = f.meta().require_int("qwen2moe.expert_shared_feed_forward_length");
        if (shexp < 1 || shexp > (1 << 20))
            fail("model: qwen2moe.expert_shared_feed_forward_length: expected 1..{}, got {}", 1 << 20, shexp);
        hp_.n_ff_shexp = static_cast<int>(shexp);
        // Weights.
        weight_binder b(f);
        out_ = bind_output(b, hp_);
        for (int il = 0; il < hp_.n_layer; ++il) {
            qwen2moe_layer l;
            l.attn = bind_attention(b, hp_, il, /*bias=*/true, /*qk_norm=*/false);
            l.ffn_norm = b.vec(blk(il, "ffn_norm.weight"), hp_.n_embd);
            l.moe = bind_moe(b, hp_, il, /*shared_expert=*/true);
            layers_.push_back(std::move(l));
        }
    }

    const model_hparams& hparams() const override { return hp_; }

    // Forward: embed, then per layer x += attn(norm(x)); x += moe(norm(x)); then the LM head,
    // for the stacked rows of every segment (see model::forward_batch).
    void forward_batch(std::span<const batch_segment> batch, forward_scratch& s, float* logits) override {
        const int64_t n = check_batch(hp_, batch, s);
        embed_batch(out_, hp_, batch, s);
        for (int il = 0; il < hp_.n_layer; ++il) {
            const qwen2moe_layer& l = layers_[static_cast<size_t>(il)];
            attention_block(l.attn, hp_, il, batch, n, s);
            moe_ffn_block(l.ffn_norm, l.moe, hp_, n, s);
        }
        commit_batch(batch);
        output_block(out_, hp_, batch, s, logits);
    }

private:
    model_hparams hp_;
    output_weights out_;
    std::vector<qwen2moe_layer> layers_;
};

}  // namespace

std::unique_ptr<model> make_qwen2moe(const model_file& f, const load_options& o) {
    return std::make_unique<qwen2moe_model>(f, o);
}

}  // namespace sluice
