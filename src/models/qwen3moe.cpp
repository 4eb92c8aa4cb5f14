// qwen3moe: GQA attention with per-head q/k RMSNorm and NeoX RoPE (YaRN when the file asks),
// then a mixture-of-experts FFN: softmax over all experts, top-k, the chosen probabilities
// renormalised to sum to 1 (Qwen3's norm_topk_prob; <arch>.expert_weights_norm overrides),
// SwiGLU experts. Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder.
#include "models/blocks.h"

#include "core/error.h"
#include "io/model_file.h"

namespace sluice {
namespace {

struct qwen3moe_layer {
    attn_weights attn;           // attn_norm [n_embd]; q/k/v/o; q_norm/k_norm [head_dim]
    std::vector<float> ffn_norm; // [n_embd]
    moe_weights moe;             // router [n_embd, n_expert]; gate/up [n_embd, n_ff_exp, n_expert];
                                 // down [n_ff_exp, n_embd, n_expert]
};

class qwen3moe_model final : public model {
public:
    qwen3moe_model(const model_file& f, const load_options&) {
        // Hyperparameters.
        hp_ = read_transformer_hparams(f, "qwen3moe", kernels::rope_mode::neox);
        read_moe_hparams(f, hp_, /*default_norm=*/true);
        // Weights.
        weight_binder b(f);
        out_ = bind_output(b, hp_);
        for (int il = 0; il < hp_.n_layer; ++il) {
            qwen3moe_layer l;
            l.attn = bind_attention(b, hp_, il, /*bias=*/false, /*qk_norm=*/true);
            l.ffn_norm = b.vec(blk(il, "ffn_norm.weight"), hp_.n_embd);
            l.moe = bind_moe(b, hp_, il, /*shared_expert=*/false);
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
            const qwen3moe_layer& l = layers_[static_cast<size_t>(il)];
            attention_block(l.attn, hp_, il, batch, n, s);
            moe_ffn_block(l.ffn_norm, l.moe, hp_, n, s);
        }
        commit_batch(batch);
        output_block(out_, hp_, batch, s, logits);
    }

private:
    model_hparams hp_;
    output_weights out_;
    std::vector<qwen3moe_layer> layers_;
};

}  // namespace

std::unique_ptr<model> make_qwen3moe(const model_file& f, const load_options& o) {
    return std::make_unique<qwen3moe_model>(f, o);
}

}  // namespace sluice
