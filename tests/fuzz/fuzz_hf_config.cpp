// libFuzzer target for config.json (io/hf_config.h): any text either becomes an hf_config whose
// counts are positive and consistent (the hybrids' included, with finish_hybrid_config run for
// no MTP block and for one), or is rejected with sluice::error. Anything else (a crash, a
// sanitizer report, another exception, an inconsistent result) is a bug.
#include "core/error.h"
#include "io/hf_config.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        sluice::hf_config c = sluice::parse_hf_config(text, "fuzz", "model");
        if (c.n_embd < 1 || c.n_layer < 1 || c.n_head < 1 || c.n_head_kv < 1 || c.head_dim < 1) std::abort();
        if (c.n_head % c.n_head_kv != 0) std::abort();
        if (c.hybrid) {
            if (c.linear_k_heads < 1 || c.linear_v_heads % c.linear_k_heads != 0) std::abort();
            if (!c.recurrent.empty() && static_cast<int64_t>(c.recurrent.size()) != c.n_layer) std::abort();
            for (int64_t n_mtp : {int64_t{0}, int64_t{1}}) {
                sluice::finish_hybrid_config(c, n_mtp);
                const auto* rl = c.meta.get_array(c.arch + ".attention.recurrent_layers");
                if (rl && static_cast<int64_t>(rl->ints.size()) != c.n_layer + n_mtp) std::abort();
                if (c.meta.get_int(c.arch + ".block_count") != c.n_layer + n_mtp) std::abort();
            }
        }
    } catch (const sluice::error&) {
    }
    return 0;
}
