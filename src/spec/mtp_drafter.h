// mtp_drafter: an MTP head (spec/mtp.h) as a drafter. The target's session runs through this
// drafter's target() (the verifier's verify_target) and prefill(), so every committed row's
// hidden state reaches the head, which folds it into its own KV cache:
//   - a target row at position p becomes the head's row p once the token at p + 1 is known:
//     at once for every committed row of a forward but the last; the last one's hidden state
//     waits (`pending_`) for the next window's first token, or for propose(), whose context ends
//     with that token;
//   - propose() runs the pending row (final: its hidden state and token are committed), whose
//     logits give draft 1, then chains drafts 2..n through provisional rows (the head's own h'
//     and the draft before), and truncates the head's cache back to the final rows.
// So the head's cache only ever holds rows of committed positions between calls, and the rows
// of rejected drafts are never kept: the head's rows, and so its drafts, are a function of the
// committed context alone (tested against a fresh head fed the same context).
//
// Two ways to feed it: through a session (`sluice run --spec mtp`: the constructor with the
// session, its target() and prefill()), or by the caller after each forward it runs itself (the
// serving engine's batched forward: the constructor without a session, then absorb() with the
// rows' residual stream). Either way one drafter and one head serve one sequence: the server
// gives every request its own, so no two requests share MTP state.
//
// Picks use a keyed_sampler with the request's parameters (temperature 0: greedy), as the
// draft-model drafter does, so sampled decoding drafts the target's keyed picks too.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "runtime/generate.h"
#include "runtime/sampler.h"
#include "spec/drafter.h"
#include "spec/mtp.h"
#include "spec/session_target.h"

namespace sluice {

// The drafts a window takes from the MTP head at most in `sluice run --spec mtp` and the server:
// the layer chains well for a few drafts.
constexpr int32_t k_mtp_max_drafts = 4;

struct mtp_drafter_params {
    int32_t max_draft = k_mtp_max_drafts;   // the most drafts one propose() makes (the head's chain: 1..15)
};

class mtp_drafter final : public drafter {
public:
    // target: the target's session (empty at the start of each request, like the head);
    // head: its MTP head, with n_ctx >= the session's and max_rows >= the session's.
    mtp_drafter(session& target, mtp_head& head, const sampling_params& sampling, mtp_drafter_params p = {});
    // Fed by the caller: absorb() after every forward of the sequence (prefill chunks included).
    mtp_drafter(mtp_head& head, const sampling_params& sampling, mtp_drafter_params p = {});

    std::string_view name() const override { return "mtp"; }
    // Forgets the pending row and empties the head's cache (the caller resets the session).
    void reset() override;
    int32_t propose(std::span<const int32_t> context, int32_t max_n, std::span<int32_t> out) override;

    // The session as the verifier's target: commit() feeds the kept rows to the head.
    // (The session constructor only.)
    verify_target& target();
    // Prompt prefill (logits of no row) through the session, in its chunks, feeding the head.
    // (The session constructor only.)
    void prefill(std::span<const int32_t> tokens);

    // The sequence just forwarded tokens at positions pos0.. and keeps the first n rows (n <=
    // tokens.size()): fold them in. residual: those rows' residual stream after the target's
    // last layer [>= n, n_embd] (what hybrid_model::forward_batch leaves in scratch.x). The
    // rows must continue the ones absorbed before (pos0 = the previous pos0 + n), or start a
    // new sequence at 0; anything else throws.
    void absorb(std::span<const int32_t> tokens, int32_t pos0, int32_t n, const float* residual);

    // A prefix-cache checkpoint of this drafter when the target holds n committed rows: the head's
    // final rows [0, n - 1) (head.save_rows) and the hidden state of row n - 1, still pending (the
    // token after it is not committed). Returns false, leaving `out` empty, when the drafter is
    // not at n (a request ended before its last rows were absorbed).
    bool save(int32_t n, std::vector<float>& out) const;
    // Back to such a checkpoint: the drafter of a sequence whose first n rows the target restored
    // from the same checkpoint, as if it had absorbed them (the head's rows are those bits, E1).
    // Throws when the size is not save()'s for n.
    void restore(std::span<const float> saved, int32_t n);

private:
    class adapter final : public verify_target {
    public:
        adapter(mtp_drafter& d, session& s);
        int32_t n_vocab() const override { return st_.n_vocab(); }
        int32_t n_past() const override { return st_.n_past(); }
        void forward(std::span<const int32_t> tokens, float* logits) override;
        void commit(int32_t n_rows_kept) override;

    private:
        mtp_drafter& d_;
        session_target st_;
        std::vector<int32_t> tokens_;   // [max_rows] the last forward's tokens
        int32_t pos0_ = 0;              // the last forward's first position
        int32_t rows_ = 0;
    };

    session* session_ = nullptr;         // null: fed by absorb()
    mtp_head& head_;
    keyed_sampler sampler_;
    mtp_drafter_params p_;
    std::unique_ptr<adapter> adapter_;   // with a session
    int64_t E_;
    std::vector<float> pending_;    // [n_embd] final hidden state of the last committed target row
    int32_t pending_pos_ = -1;      // its position, -1: none (nothing committed yet)
    int32_t final_ = 0;             // the head's rows [0, final_) are final (the rest provisional)
    std::vector<float> rows_;       // [max_rows, n_embd] final hidden states of the rows to fold in
    std::vector<float> chain_;      // [n_embd] h' of the last chained row
    std::vector<int32_t> next_;     // [max_rows] the token after each row to fold in
    std::vector<int32_t> seen_;     // context + drafts so far (the penalties' history)
};

}  // namespace sluice
