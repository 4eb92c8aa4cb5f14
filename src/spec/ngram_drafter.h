// ngram_drafter: prompt lookup. Finds the most recent earlier occurrence of the context's last
// k tokens (k from max_ngram down to min_ngram: the longest match wins) and proposes what
// followed it. Code, quoted text and retrieval answers repeat their context, so this drafts
// well there at no model cost.
//
// The index is incremental: each committed token adds one entry per n-gram length, so a
// proposal costs O(max_ngram) hash probes whatever the context length. The entry for an
// n-gram is the position right after its most recent occurrence (later occurrences overwrite).
#pragma once

#include <cstdint>
#include <vector>

#include "spec/drafter.h"

namespace sluice {

struct ngram_drafter_params {
    int32_t min_ngram = 1;       // shortest suffix matched (1..max_ngram)
    int32_t max_ngram = 4;       // longest suffix matched (<= 8)
    int32_t max_draft = 16;      // proposals never exceed this
    int32_t initial_draft = 8;   // the adaptive limit at the start of a request
};

class ngram_drafter final : public drafter {
public:
    explicit ngram_drafter(ngram_drafter_params p = {});

    std::string_view name() const override { return "ngram"; }
    void reset() override;
    int32_t propose(std::span<const int32_t> context, int32_t max_n, std::span<int32_t> out) override;
    // Adapts the proposal limit: doubles it (up to max_draft) after a proposal was fully
    // accepted, drops it to accepted + 1 after a rejection (a run of rejections ends at 1).
    void observe(int32_t accepted, int32_t proposed) override;

    int32_t current_limit() const { return limit_; }
    // Context tokens indexed so far (tests check the index follows the context).
    int64_t indexed() const { return indexed_; }

private:
    void index(std::span<const int32_t> context);  // adds entries up to context.size() - 1
    void insert(uint64_t key, int32_t pos);
    int32_t lookup(uint64_t key) const;  // -1 when absent
    void grow();

    ngram_drafter_params p_;
    int32_t limit_;
    int64_t indexed_ = 0;          // n-grams ending before this index are in the table
    std::vector<uint64_t> keys_;   // [capacity] open addressing, 0 = empty; capacity a power of 2
    std::vector<int32_t> vals_;    // [capacity] position after the n-gram's latest occurrence
    size_t used_ = 0;
};

}  // namespace sluice
