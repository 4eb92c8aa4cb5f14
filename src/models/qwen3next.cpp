// qwen3next (Qwen3-Next-80B-A3B): a hybrid of Gated DeltaNet layers and gated attention layers
// (3 to 1 in the released model: every full_attention_interval-th layer attends), each followed
// by a mixture-of-experts FFN (softmax top-k, renormalised) plus a sigmoid-gated shared expert.
//   DeltaNet layer:  x += ssm_out(gated_rmsnorm(delta_rule(silu(conv1d(qkv))), z))
//   attention layer: x += wo(attention(rope(qnorm(q)), rope(knorm(k)), v) * sigmoid(gate))
//   then:            x += moe(rmsnorm(x, attn_post_norm)) + sigmoid(g . x) * shared(x)
// Value heads map to key heads grouped (h / (n_v / n_k)), the HF order the converter keeps here;
// beta and alpha come from one projection, ssm_ba, interleaved per key head.
// An MTP block (blk.<n_layer>.nextn.*), when the file has one, is run by the MTP drafter
// (models/hybrid_mtp.h), never by the forward. The network itself is models/hybrid_model.h.
#include "models/hybrid_model.h"

namespace sluice {

hybrid_variant qwen3next_variant(const model_file&) {
    return hybrid_variant{"qwen3next", /*v_tiled=*/false, /*separate_beta_alpha=*/false};
}

std::unique_ptr<model> make_qwen3next(const model_file& f, const load_options&) {
    return std::make_unique<hybrid_model>(f, qwen3next_variant(f));
}

}  // namespace sluice
