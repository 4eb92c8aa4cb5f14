// llama: dense GQA transformer (Llama 2/3, SmolLM2, Mistral-shaped dense models).
// RoPE in the normal (adjacent-pair) ordering: llama.cpp's converter permutes q/k so that it
// applies (the hf reader does the same for safetensors directories).
#include "models/blocks.h"

#include "core/error.h"
#include "io/model_file.h"

namespace sluice {
namespace {

struct llama_layer {
    attn_weights attn;           // attn_norm [n_embd]; q/k/v/o; no biases, no q/k norm
    std::vector<float> ffn_norm; // [n_embd]
    ffn_weights ffn;             // gate/up [n_embd, n_ff], down [n_ff, n_embd]
};

class llama_model final : public model {
public:
    llama_model(const model_file& f, const load_options&) {
        // Hyperparameters.
        hp_ = read_transformer_hparams(f, "llama", kernels::rope_mode::normal);
        if (hp_.n_ff < 1) fail("model: llama.feed_forward_length: expected >= 1, got {}", hp_.n_ff);
        // Weights.
        weight_binder b(f);
        out_ = bind_output(b, hp_);
        for (int il = 0; il < hp_.n_layer; ++il) {
            llama_layer l;
            l.attn = bind_attention(b, hp_, il, /*bias=*/false, /*qk_norm=*/false);
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
            const llama_layer& l = layers_[static_cast<size_t>(il)];
            attention_block(l.attn, hp_, il, batch, n, s);
            dense_ffn_block(l.ffn_norm, l.ffn, hp_, n, s);
        }
        commit_batch(batch);
        output_block(out_, hp_, batch, s, logits);
    }

private:
    model_hparams hp_;
    output_weights out_;
    std::vector<llama_layer> layers_;
};

}  // namespace

std::unique_ptr<model> make_llama(const model_file& f, const load_options& o) {
    return std::make_unique<llama_model>(f, o);
}

}  // namespace sluice
