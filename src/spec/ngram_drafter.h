// ngram_drafter: prompt lookup. Finds where the context's recent tokens occurred before -- the
// longest backward match among the most recent occurrences of its last k tokens (k from
// max_ngram down to min_ngram) -- and proposes what followed there. Code being rewritten or
// patched, quoted text and retrieval answers repeat their context, so this drafts well there at
// no model cost.
//
// The index is incremental: each committed token adds one entry per n-gram length, so the work
// per proposal is bounded by max_candidates * max_match whatever the context length. For each
// n-gram the table keeps its latest occurrence and a chain back to the earlier ones, so the
// candidates are visited most recent first.
//
// Each proposal carries a confidence per draft (drafter::confidence): the probability that the
// verifier keeps it, learned during the request per match length (a draft j tokens into a
// proposal matched over L tokens sits L + j tokens into the match). A long match is a copy in
// progress and is kept almost always; a one-token match is a guess. The depth policy uses these
// to cut each proposal where another row no longer pays, so a rejection shortens the next
// proposals of that match length and a long match lengthens them at once.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "spec/drafter.h"

namespace sluice {

struct ngram_drafter_params {
    int32_t min_ngram = 1;          // shortest suffix matched (1..max_ngram)
    int32_t max_ngram = 4;          // the n-gram length the candidate chains are keyed on (<= 8)
    int32_t max_draft = 16;         // proposals never exceed this
    int32_t max_candidates = 64;    // earlier occurrences examined per proposal, most recent first
    int32_t max_match = 64;         // backward match lengths are counted up to this
    // A proposal ends where the probability that every draft so far is kept falls below this:
    // a further draft would add less than this many expected tokens. The depth policy cuts
    // deeper still where rows are costly.
    double min_chain_probability = 0.1;
    double prior_weight = 4.0;      // pseudo-verdicts behind the prior acceptance of each match length
};

class ngram_drafter final : public drafter {
public:
    // Match lengths 1..k_buckets-1 have their own acceptance estimate; longer ones share the last.
    static constexpr int32_t k_buckets = 17;

    explicit ngram_drafter(ngram_drafter_params p = {});

    std::string_view name() const override { return "ngram"; }
    void reset() override;
    int32_t propose(std::span<const int32_t> context, int32_t max_n, std::span<int32_t> out) override;
    // Learns the acceptance of each match length from the verdict on the last proposal.
    void observe(int32_t accepted, int32_t proposed) override;
    bool confidence(std::span<double> out) const override;
    bool cheap_proposals() const override { return true; }

    // The estimated probability that a draft sitting `match_length` tokens into a match is kept.
    double acceptance(int32_t match_length) const;
    // The last proposal's match length (0: it proposed nothing).
    int32_t last_match_length() const { return last_match_; }
    // Context tokens indexed so far (tests check the index follows the context).
    int64_t indexed() const { return indexed_; }

private:
    void index(std::span<const int32_t> context);  // adds entries up to context.size() - 1
    int32_t insert(uint64_t key, int32_t pos);     // returns the previous latest position, or -1
    int32_t lookup(uint64_t key) const;            // -1 when absent
    void grow();

    ngram_drafter_params p_;
    int64_t indexed_ = 0;          // n-grams ending before this index are in the table
    std::vector<uint64_t> keys_;   // [capacity] open addressing, 0 = empty; capacity a power of 2
    std::vector<int32_t> vals_;    // [capacity] position after the n-gram's latest occurrence
    size_t used_ = 0;
    // [max_ngram - min_ngram + 1][context positions] for the n-gram of each length that ends
    // just before position pos: the position after its previous occurrence, -1 for none.
    std::vector<std::vector<int32_t>> prev_;
    // Verdicts per match length in this request; with the prior they give acceptance().
    std::array<double, k_buckets> kept_{}, tried_{};
    int32_t last_match_ = 0;       // match length of the last proposal
    int32_t last_n_ = 0;           // its drafts
};

}  // namespace sluice
