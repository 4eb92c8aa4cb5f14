#include "spec/draft_model_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace sluice {

void check_vocab_compatible(std::span<const std::string> target_vocab, std::span<const std::string> draft_vocab,
                            int32_t max_size_difference) {
    size_t nt = target_vocab.size(), nd = draft_vocab.size();
    size_t diff = nt > nd ? nt - nd : nd - nt;
    if (diff > size_t(std::max(0, max_size_difference)))
        fail("draft model: vocabulary size: expected the target's {} tokens (padding of up to {} allowed), got {}",
             nt, max_size_difference, nd);
    size_t n = std::min(nt, nd);
    for (size_t i = 0; i < n; ++i)
        if (target_vocab[i] != draft_vocab[i])
            fail("draft model: tokenizer does not match the target's: token {} is '{}' in the target and '{}' in "
                 "the draft model",
                 i, target_vocab[i], draft_vocab[i]);
}

draft_model_drafter::draft_model_drafter(verify_target& draft, const sampling_params& sampling, draft_model_params p)
    : draft_(draft), sampler_(draft.n_vocab(), sampling), p_(p) {
    if (p_.max_draft < 1 || p_.prompt_chunk < 1)
        fail("draft model drafter: expected max_draft >= 1 and prompt_chunk >= 1, got {} and {}", p_.max_draft,
             p_.prompt_chunk);
    logits_.assign(size_t(p_.max_draft) * size_t(draft_.n_vocab()), 0.0f);
}

void draft_model_drafter::reset() { seen_.clear(); }

void draft_model_drafter::check_prefix(std::span<const int32_t> ctx, bool strict) const {
    const int32_t np = draft_.n_past();
    if (np != int32_t(seen_.size()))
        fail("draft model drafter: the draft model holds {} positions but the drafter fed it {}: reset both between "
             "requests",
             np, seen_.size());
    // The draft state must be a prefix of the context; it is unless the caller changed requests
    // without resetting.
    const size_t len = ctx.size();
    if (size_t(np) > len || (strict && size_t(np) == len) || !std::equal(seen_.begin(), seen_.end(), ctx.begin()))
        fail("draft model drafter: the draft model's state ({} tokens) is not a prefix of the context ({} tokens): "
             "reset both between requests",
             np, len);
}

void draft_model_drafter::commit_unread(std::span<const int32_t> rows) {
    // A session target takes the rows without its output head and without a [prompt_chunk,
    // n_vocab] buffer (512 rows are 311 MB at Qwen3's vocabulary, which every request used to
    // allocate); another target forwards them in chunks, into a buffer grown once.
    if (rows.empty()) return;
    if (!draft_.prefill_without_logits(rows)) {
        const int64_t n = int64_t(rows.size());
        const size_t need = size_t(std::min<int64_t>(p_.prompt_chunk, n)) * size_t(draft_.n_vocab());
        if (logits_.size() < need) logits_.resize(need);
        for (int64_t next = 0; next < n;) {
            const int32_t chunk = int32_t(std::min<int64_t>(p_.prompt_chunk, n - next));
            draft_.forward(rows.subspan(size_t(next), size_t(chunk)), logits_.data());
            draft_.commit(chunk);
            next += chunk;
        }
    }
    seen_.insert(seen_.end(), rows.begin(), rows.end());
}

void draft_model_drafter::catch_up(std::span<const int32_t> ctx) {
    check_prefix(ctx, false);
    commit_unread(ctx.subspan(seen_.size()));
}

int32_t draft_model_drafter::propose(std::span<const int32_t> ctx, int32_t max_n, std::span<int32_t> out) {
    ++stats_.calls;
    const int64_t len = int64_t(ctx.size());
    int32_t want = std::min({max_n, p_.max_draft, int32_t(out.size())});
    check_prefix(ctx, true);
    if (want <= 0 || len == 0) {
        ++stats_.empty;
        return 0;
    }
    const int32_t nv = draft_.n_vocab();

    // Catch up on the unseen context tokens; the last row predicts the token at len. After a
    // window (its kept drafts and the bonus token) that is one forward into the buffer; beyond
    // the buffer's rows (a prompt not caught up by catch_up()) the rows before the last need no
    // logits.
    int64_t next = draft_.n_past();
    if (len - next > int64_t(logits_.size() / size_t(nv))) {
        commit_unread(ctx.subspan(size_t(next), size_t(len - 1 - next)));
        next = len - 1;
    }
    const int32_t rows = int32_t(len - next);
    draft_.forward(ctx.subspan(size_t(next), size_t(rows)), logits_.data());
    draft_.commit(rows);
    seen_.insert(seen_.end(), ctx.begin() + next, ctx.end());
    const float* last_row = logits_.data() + size_t(rows - 1) * size_t(nv);
    // seen_ = context now; drafts are appended provisionally so the penalties see them.
    int32_t n = 0;
    out[0] = sampler_.pick(last_row, len, seen_);
    seen_.push_back(out[0]);
    n = 1;
    while (n < want) {
        // Forward the drafts so far (provisional rows); the last row predicts draft n.
        draft_.forward(std::span<const int32_t>(out.data(), size_t(n)), logits_.data());
        out[size_t(n)] = sampler_.pick(logits_.data() + size_t(n - 1) * size_t(nv), len + n, seen_);
        seen_.push_back(out[size_t(n)]);
        ++n;
    }
    if (n > 1) draft_.commit(0);  // drop the provisional draft rows
    seen_.resize(size_t(len));
    return n;
}

}  // namespace sluice
