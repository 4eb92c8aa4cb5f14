// libFuzzer target for the trimmed draft vocabulary's parser (src/spec/draft_vocab.h): any bytes
// give a vocabulary or a sluice::error, never a crash; an accepted one keeps the parser's
// promises (1..n_vocab ids, each in [0, n_vocab), none twice). The model's vocabulary size comes
// from the input's first byte so that mismatched and matching files are both reached.
#include "core/error.h"
#include "spec/draft_vocab.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const int32_t n_vocab = 1 + data[0] * 3;   // 1..766
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
    sluice::draft_vocab v;
    try {
        v = sluice::parse_draft_vocab(text, n_vocab, "fuzz");
    } catch (const sluice::error&) {
        return 0;
    }
    if (v.n_vocab != n_vocab || v.ids.empty() || v.ids.size() > static_cast<size_t>(n_vocab)) std::abort();
    std::vector<bool> seen(static_cast<size_t>(n_vocab), false);
    for (const int32_t id : v.ids) {
        if (id < 0 || id >= n_vocab || seen[static_cast<size_t>(id)]) std::abort();
        seen[static_cast<size_t>(id)] = true;
    }
    return 0;
}
