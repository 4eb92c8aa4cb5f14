// The hybrid Qwen MoE network (qwen3next and qwen35moe share it; see qwen3next.cpp and
// qwen35moe.cpp for what differs in their files): layers of Gated DeltaNet or gated attention,
// each followed by the MoE FFN with the sigmoid-gated shared expert, then the output head.
// One forward loop for both architectures; the variant only says how the file lays out the
// DeltaNet's value heads and beta/alpha projections.
//
// It also exposes what the MTP head (models/hybrid_mtp.h) needs: the MTP (nextn) block's
// weights, the output weights it shares, and the hyperparameters.
#pragma once

#include "models/hybrid_blocks.h"

#include <optional>
#include <string_view>
#include <vector>

namespace sluice {

struct hybrid_variant {
    std::string_view arch;            // general.architecture: "qwen3next" or "qwen35moe"
    bool v_tiled = false;             // value head h reads key head h % n_k (qwen35moe's converter order)
    bool separate_beta_alpha = false; // ssm_beta + ssm_alpha (qwen35moe) instead of one ssm_ba
};

// The variant of file f (general.architecture qwen3next or qwen35moe; the architecture files
// define and check them), for the CPU and the CUDA model alike. Fails for any other architecture.
hybrid_variant qwen3next_variant(const model_file& f);
hybrid_variant qwen35moe_variant(const model_file& f);
hybrid_variant hybrid_variant_of(const model_file& f);

struct hybrid_layer {
    bool recurrent = false;
    delta_net_weights dn;          // recurrent layers (see hybrid_blocks.h for shapes)
    gated_attn_weights attn;       // attention layers
    std::vector<float> post_norm;  // post_attention_norm [n_embd]: the FFN's input norm
    moe_weights moe;               // router [n_embd, n_expert]; experts gate/up [n_embd, n_ff_exp, n_expert],
                                   // down [n_ff_exp, n_embd, n_expert]; shared expert [n_embd, n_ff_shexp]
                                   // x2, [n_ff_shexp, n_embd], gate [n_embd]
};

class hybrid_model final : public model {
public:
    hybrid_model(const model_file& f, const hybrid_variant& v);

    const model_hparams& hparams() const override { return hp_; }
    // After the call, scratch.x holds every row's residual stream after the last layer (before
    // output_norm): the MTP drafter reads the target's hidden states there.
    void forward_batch(std::span<const batch_segment> batch, forward_scratch& s, float* logits) override;

    const hybrid_hparams& hybrid() const { return hy_; }
    const output_weights& output() const { return out_; }
    // The MTP block, or null when the file has none (<arch>.nextn_predict_layers = 0).
    const mtp_weights* mtp() const { return mtp_ ? &*mtp_ : nullptr; }

private:
    model_hparams hp_;
    hybrid_hparams hy_;
    output_weights out_;
    std::vector<hybrid_layer> layers_;
    std::optional<mtp_weights> mtp_;   // run by the MTP head, never by forward_batch
};

}  // namespace sluice
