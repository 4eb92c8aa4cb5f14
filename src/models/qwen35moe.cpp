// qwen35moe (the Qwen3.5/3.6 MoE family, e.g. Qwen3.6-35B-A3B): the same hybrid as qwen3next
// (Gated DeltaNet layers and gated attention layers, MoE FFN with a sigmoid-gated shared
// expert) with three differences in the file: beta and alpha come from two projections
// (ssm_beta, ssm_alpha [n_embd, n_v]) instead of one interleaved ssm_ba; llama.cpp's converter
// reorders the value heads to tiled order, so value head h reads key head h % n_k; and the
// attention's RoPE is interleaved MRoPE, which for text (all position components equal) is the
// NeoX rotation of the first rope.dimension_count dims. Released files carry one MTP block
// (blk.<n_layer>.nextn.*, <arch>.nextn_predict_layers = 1), run by the MTP drafter
// (models/hybrid_mtp.h). The network itself is models/hybrid_model.h.
#include "models/hybrid_model.h"

#include "core/error.h"
#include "io/model_file.h"

namespace sluice {

hybrid_variant qwen35moe_variant(const model_file& f) {
    if (const meta_array* sec = f.meta().get_array("qwen35moe.rope.dimension_sections"); sec && sec->ints.size() > 4)
        fail("model: qwen35moe.rope.dimension_sections: expected at most 4 entries, got {}", sec->ints.size());
    return hybrid_variant{"qwen35moe", /*v_tiled=*/true, /*separate_beta_alpha=*/true};
}

std::unique_ptr<model> make_qwen35moe(const model_file& f, const load_options&) {
    return std::make_unique<hybrid_model>(f, qwen35moe_variant(f));
}

}  // namespace sluice
