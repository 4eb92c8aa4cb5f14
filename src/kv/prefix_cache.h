// prefix_cache: KV checkpoints of finished requests, keyed by the tokens whose rows they hold,
// kept within a byte budget (least recently used evicted first). A new request restores the
// rows of the longest prefix it shares with a checkpoint and prefills only the rest.
//
// Why this is exact (E5): the K/V of position i depend only on tokens 0..i (causal attention,
// row-exact kernels, E1), so the rows of a shared prefix are the bits a fresh prefill of the
// new prompt would write; prefilling the suffix after them writes the rest exactly as a fresh
// prefill does (a prefill's chunking never changes a row). The match need not end on a whole
// checkpoint: any common prefix of the two token lists is reusable.
//
// Hybrid models (a recurrent state beside the attention rows): the state depends on every token
// folded into it and exists only at the checkpoint's length, so a checkpoint keeps the state
// after its last token and is restored only when all its tokens begin the new prompt (a
// conversation's next turn): the rows and the state are then the bits a fresh prefill of those
// tokens leaves (E1), and the rest is prefilled as before. The serving engine checkpoints a
// hybrid's prompt (less its last token) as well as the whole request, so that a prompt sent
// again, or a next turn whose template rewrites the reply, finds a state to start from.
#pragma once

#include "kv/kv_cache.h"

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <vector>

namespace sluice {

struct prefix_cache_stats {
    int64_t lookups = 0, hits = 0;
    int64_t rows_restored = 0;   // summed over hits
    int64_t stored = 0, evicted = 0;
};

class prefix_cache {
public:
    explicit prefix_cache(size_t max_bytes) : max_bytes_(max_bytes) {}

    // Keeps rows [0, tokens.size()) of kv (tokens.size() <= kv.n_pos()) keyed by tokens; with a
    // recurrent state, tokens.size() must be the state's length (else nothing is kept) and the
    // state is kept too. Checkpoints whose tokens are a prefix of these are dropped (this one
    // covers them), except those with a state or a drafter's state (theirs is at their own
    // length). When these tokens are a prefix of a checkpoint already kept, that one is only
    // marked used (attention rows only: a longer one has no state at this length, and none
    // stands in for a drafter's state). Least recently used checkpoints go until the new one
    // fits; one larger than the whole budget is not kept, and removes nothing. Returns whether
    // the rows are held afterwards.
    // aux: a drafter's own state at this length (the MTP head's rows, mtp_drafter::save), kept
    // beside the rows; a checkpoint with aux replaces one of the same tokens without.
    bool store(std::span<const int32_t> tokens, const kv_cache& kv, std::vector<float> aux = {});
    // Whether a checkpoint of n rows of this shape (no drafter's state) fits the budget at all.
    bool can_hold(size_t n, const kv_shape& s) const { return entry_bytes(n, s) <= max_bytes_; }

    // Finds the checkpoint sharing the longest prefix with `tokens` (same KV shape), copies
    // min(common prefix, max_rows) rows into kv (whose previous contents are dropped) and sets
    // kv.n_pos() to that; marks the checkpoint used. With a recurrent state only checkpoints
    // whose every token begins `tokens`, at most max_rows of them, qualify, and their state is
    // restored with the rows. Returns the rows restored, 0 on a miss (kv then holds nothing).
    // With `aux` only checkpoints that kept one qualify, and it is copied there.
    int32_t restore(std::span<const int32_t> tokens, int32_t max_rows, kv_cache& kv, std::vector<float>* aux = nullptr);

    size_t bytes() const { return bytes_; }
    size_t max_bytes() const { return max_bytes_; }
    size_t entries() const { return entries_.size(); }
    const prefix_cache_stats& stats() const { return stats_; }
    void clear();

private:
    struct entry {
        std::vector<int32_t> tokens;  // [n] the sequence whose rows are kept
        kv_shape shape;               // n_layer, n_kv_head, head_dim of the rows (n_ctx unused)
        std::vector<float> rows;      // per layer: K rows [n, row_floats] then V rows [n, row_floats]
        std::vector<float> state;     // [rec layers, conv + ssm floats] after token n-1 (hybrid models), else empty
        std::vector<float> aux;       // a drafter's state at n (the MTP head's rows), else empty
        size_t bytes() const {
            return tokens.size() * sizeof(int32_t) + (rows.size() + state.size() + aux.size()) * sizeof(float);
        }
    };
    static size_t entry_bytes(size_t n_tokens, const kv_shape& s);
    void erase(std::list<entry>::iterator it);

    size_t max_bytes_;
    size_t bytes_ = 0;
    std::list<entry> entries_;   // most recently used first
    prefix_cache_stats stats_;
};

}  // namespace sluice
