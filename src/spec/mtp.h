// MTP heads: the small extra layers some models carry (qwen3next / qwen35moe's nextn block,
// later glm4moe and deepseek2) that read the target's final hidden state and predict the token
// after the next one, so drafting costs a fraction of a layer and needs no second model.
//
// The equations (Qwen3-Next / Qwen3.5 MTP as vLLM's qwen3_next_mtp runs it): the row at position
// p takes h_p, the target's final hidden state at p (after its output norm), and t, the token
// at p + 1 (the pick of row p), and computes
//     x  = eh_proj(concat(enorm(embed(t)), hnorm(h_p)))      embedding first, then the hidden
//     x' = decoder block(x) at position p, with the head's OWN KV cache
//     h' = head_norm(x'),   logits = output(h')               predicts the token at p + 2
// Chaining: the next row (position p + 1) takes h' in place of h_{p+1} and the token drafted
// from those logits.
//
// The head's KV cache follows the target's transaction: a row at a position is final once its
// hidden state and token are committed; drafts' rows are provisional and are overwritten (the
// cache is truncated back) before the real rows of those positions are folded in.
// mtp_drafter (spec/mtp_drafter.h) adapts a head to the drafter interface; as for every drafter
// its proposals can never change the output, only the speed.
#pragma once

#include <cstdint>
#include <span>

namespace sluice {

struct mtp_head {
    virtual ~mtp_head() = default;
    virtual int32_t n_vocab() const = 0;
    virtual int32_t n_embd() const = 0;
    virtual int32_t max_rows() const = 0;   // rows one forward() may carry
    virtual int32_t n_ctx() const = 0;      // positions the head's cache holds
    // Positions [0, n_past()) hold rows in the head's cache.
    virtual int32_t n_past() const = 0;
    // Forgets the rows at positions n.. (n <= n_past()).
    virtual void truncate(int32_t n) = 0;

    // The target's residual rows after its last layer (before output_norm) [n, n_embd] ->
    // its final hidden states [n, n_embd] (the output norm applied), what forward() reads.
    virtual void target_hidden(const float* residual, int64_t n, float* out) const = 0;

    // Rows at positions pos0 .. pos0 + n - 1 (pos0 <= n_past(); later rows are dropped first):
    // hidden [n, n_embd] the final hidden state at each position, tokens[i] the token at
    // pos0 + i + 1. Afterwards n_past() = pos0 + n, out_hidden(i) is row i's h' and, when
    // want_logits, logits() the last row's logits [n_vocab]. No allocation.
    virtual void forward(const float* hidden, std::span<const int32_t> tokens, int32_t pos0, bool want_logits) = 0;
    virtual const float* out_hidden(int32_t row) const = 0;   // [n_embd], valid until the next forward
    virtual const float* logits() const = 0;                 // [n_vocab], valid until the next forward

    // The head's cache rows as a prefix-cache checkpoint keeps them: row_floats() floats a
    // position (its K row and its V row). save_rows writes positions [0, n) (n <= n_past()) as
    // n K rows then n V rows; load_rows puts such rows back, and n_past() is then n.
    virtual int64_t row_floats() const = 0;
    virtual void save_rows(int32_t n, float* dst) const = 0;
    virtual void load_rows(const float* src, int32_t n) = 0;
};

}  // namespace sluice
