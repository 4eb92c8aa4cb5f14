// qwen3: dense GQA transformer with per-head RMSNorm on q and k before RoPE (Qwen3-0.6B..32B).
// RoPE in the NeoX ordering (halves rotated together); head_dim from attention.key_length.
#include "models/blocks.h"

#include "core/error.h"
#include "io/model_file.h"

namespace sluice {
namespace {

struct qwen3_layer {
    attn_weights attn;           // attn_norm [n_embd]; q/k/v/o; q_norm/k_norm [head_dim], no biases
    std::vector<float> ffn_norm; // [n_embd]
    ffn_weights ffn;             // gate/up [n_embd, n_ff], down [n_ff, n_embd]
};

class qwen3_model final : public model {
public:
    qwen3_model(const model_file& f, const load_options&) {
        // Hyperparameters.
        hp_ = read_transformer_hparams(f, "qwen3", kernels::rope_mode::neox);
        if (hp_.n_ff < 1) fail("model: qwen3.feed_forward_length: expected >= 1, got {}", hp_.n_ff);
        // Weights.
        weight_binder b(f);
        out_ = bind_output(b, hp_);
        for (int il = 0; il < hp_.n_layer; ++il) {
            qwen3_layer l;
            l.attn = bind_attention(b, hp_, il, /*bias=*/false, /*qk_norm=*/true);
            l.ffn_norm = b.vec(blk(il, "ffn_norm.weight"), hp_.n_embd);
            l.ffn = bind_ffn(b, il, "", hp_.n_embd, hp_.n_ff);
            layers_.push_back(std::move(l));
        }
    }

    const model_hparams& hparams() const override { return hp_; }

    // Forward: embed, then per layer x += attn(norm(x)); x += ffn(norm(x)); then the LM head,
    // for the stacked rows of every segment (see model::forward_batch).
    void forward_batch(std::span<const batch_segment> batch, forward_scratch& s, float* logits) override {
        const int64_t n = check_batch(hp_, batch, s);
        embed_batch(out_, hp_, batch, s);
        for (int il = 0; il < hp_.n_layer; ++il) {
            const qwen3_layer& l = layers_[static_cast<size_t>(il)];
            attention_block(l.attn, hp_, il, batch, n, s);
            dense_ffn_block(l.ffn_norm, l.ffn, hp_, n, s);
        }
        commit_batch(batch);
        output_block(out_, hp_, batch, s, logits);
    }

private:
    model_hparams hp_;
    output_weights out_;
    std::vector<qwen3_layer> layers_;
};

}  // namespace

std::unique_ptr<model> make_qwen3(const model_file& f, const load_options& o) {
    return std::make_unique<qwen3_model>(f, o);
}

}  // namespace sluice
