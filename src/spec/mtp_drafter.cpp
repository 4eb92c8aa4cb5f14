#include "spec/mtp_drafter.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace sluice {

mtp_drafter::adapter::adapter(mtp_drafter& d, session& s)
    : d_(d), st_(s, s.max_rows()), tokens_(static_cast<size_t>(s.max_rows())) {}

void mtp_drafter::adapter::forward(std::span<const int32_t> tokens, float* logits) {
    pos0_ = st_.n_past();
    st_.forward(tokens, logits);   // checks 1..max_rows rows
    std::copy(tokens.begin(), tokens.end(), tokens_.begin());
    rows_ = static_cast<int32_t>(tokens.size());
}

void mtp_drafter::adapter::commit(int32_t n) {
    st_.commit(n);
    d_.absorb(std::span<const int32_t>(tokens_.data(), static_cast<size_t>(rows_)), pos0_, n,
              d_.session_->residual_rows());
    rows_ = 0;
}

mtp_drafter::mtp_drafter(mtp_head& head, const sampling_params& sampling, mtp_drafter_params p)
    : head_(head), sampler_(head.n_vocab(), sampling), p_(p), E_(head.n_embd()) {
    if (p_.max_draft < 1 || p_.max_draft > 15) fail("mtp drafter: max_draft: expected 1..15, got {}", p_.max_draft);
    if (head.max_rows() < 1) fail("mtp drafter: the head takes {} rows per forward: expected >= 1", head.max_rows());
    pending_.resize(static_cast<size_t>(E_));
    chain_.resize(static_cast<size_t>(E_));
    rows_.resize(static_cast<size_t>(head.max_rows() * E_));
    next_.resize(static_cast<size_t>(head.max_rows()));
    seen_.reserve(static_cast<size_t>(head.n_ctx()) + 16);
}

mtp_drafter::mtp_drafter(session& target, mtp_head& head, const sampling_params& sampling, mtp_drafter_params p)
    : mtp_drafter(head, sampling, p) {
    const model_hparams& hp = target.get_model().hparams();
    if (head.n_vocab() != hp.n_vocab || head.n_embd() != hp.n_embd)
        fail("mtp drafter: the head has {} logits of {} wide rows but the target {} of {}", head.n_vocab(),
             head.n_embd(), hp.n_vocab, hp.n_embd);
    if (head.n_ctx() < target.n_ctx())
        fail("mtp drafter: the head holds {} positions, the target {}", head.n_ctx(), target.n_ctx());
    session_ = &target;
    adapter_ = std::make_unique<adapter>(*this, target);
}

verify_target& mtp_drafter::target() {
    if (!adapter_) fail("mtp drafter: target(): this drafter is fed by absorb(), not through a session");
    return *adapter_;
}

// The decoder resets its drafter after its own prefill, which this drafter has already folded
// in: the head's cache is tied to the session's positions instead (a forward at position 0 is a
// new sequence, see absorb), so there is nothing to forget here.
void mtp_drafter::reset() {}

void mtp_drafter::prefill(std::span<const int32_t> tokens) {
    if (!session_) fail("mtp drafter: prefill(): this drafter is fed by absorb(), not through a session");
    session& s = *session_;
    const size_t chunk = static_cast<size_t>(s.max_rows());
    for (size_t i = 0; i < tokens.size(); i += chunk) {
        const std::span<const int32_t> part = tokens.subspan(i, std::min(chunk, tokens.size() - i));
        const int32_t pos0 = s.n_pos();
        s.prefill(part);   // one forward: part.size() <= the session's rows
        absorb(part, pos0, static_cast<int32_t>(part.size()), s.residual_rows());
    }
}

void mtp_drafter::absorb(std::span<const int32_t> tokens, int32_t pos0, int32_t n, const float* res) {
    if (n <= 0) return;
    if (n > static_cast<int32_t>(tokens.size()) || pos0 < 0 || pos0 + n > head_.n_ctx())
        fail("mtp drafter: absorb {} of {} rows at {}: expected n <= rows and positions below {}", n, tokens.size(),
             pos0, head_.n_ctx());
    if (pos0 == 0) {   // a new sequence
        head_.truncate(0);
        final_ = 0;
        pending_pos_ = -1;
    }
    // The rows to fold in: positions q .. pos0 + n - 2 (each one's next token is in `tokens`),
    // starting with the pending row at pos0 - 1 when propose() has not folded it in already.
    const int32_t q = final_;
    if (q < pos0 - 1 || q > pos0 || (q == pos0 - 1 && pending_pos_ != q))
        fail("mtp drafter: the head holds {} final rows but the target's rows start at {}: the session was fed "
             "outside the drafter",
             final_, pos0);
    const int32_t last = pos0 + n - 1;   // the new pending row
    for (int32_t c = q; c < last;) {
        const int32_t cnt = std::min(head_.max_rows(), last - c);
        for (int32_t k = 0; k < cnt; ++k) {
            const int32_t p = c + k;
            float* dst = rows_.data() + int64_t{k} * E_;
            if (p == pos0 - 1)
                std::memcpy(dst, pending_.data(), static_cast<size_t>(E_) * sizeof(float));
            else
                head_.target_hidden(res + int64_t{p - pos0} * E_, 1, dst);
            next_[static_cast<size_t>(k)] = tokens[static_cast<size_t>(p + 1 - pos0)];
        }
        head_.forward(rows_.data(), std::span<const int32_t>(next_.data(), static_cast<size_t>(cnt)), c, false);
        c += cnt;
    }
    final_ = last;
    head_.target_hidden(res + int64_t{n - 1} * E_, 1, pending_.data());
    pending_pos_ = last;
}

bool mtp_drafter::save(int32_t n, std::vector<float>& out) const {
    out.clear();
    if (n < 1 || pending_pos_ != n - 1 || final_ < n - 1 || head_.n_past() < n - 1) return false;
    const size_t rows = static_cast<size_t>(n - 1) * static_cast<size_t>(head_.row_floats());
    out.resize(rows + static_cast<size_t>(E_));
    head_.save_rows(n - 1, out.data());
    std::memcpy(out.data() + rows, pending_.data(), static_cast<size_t>(E_) * sizeof(float));
    return true;
}

void mtp_drafter::restore(std::span<const float> saved, int32_t n) {
    const size_t rows = n >= 1 ? static_cast<size_t>(n - 1) * static_cast<size_t>(head_.row_floats()) : 0;
    if (n < 1 || n > head_.n_ctx() || saved.size() != rows + static_cast<size_t>(E_))
        fail("mtp drafter: restore of {} floats at {} rows: expected {} (a checkpoint of {} rows, the head holding {})",
             saved.size(), n, rows + static_cast<size_t>(E_), n, head_.n_ctx());
    head_.load_rows(saved.data(), n - 1);
    std::memcpy(pending_.data(), saved.data() + rows, static_cast<size_t>(E_) * sizeof(float));
    pending_pos_ = n - 1;
    final_ = n - 1;
}

int32_t mtp_drafter::propose(std::span<const int32_t> ctx, int32_t max_n, std::span<int32_t> out) {
    ++stats_.calls;
    const int32_t len = static_cast<int32_t>(ctx.size());
    const int32_t want = std::min({max_n, p_.max_draft, static_cast<int32_t>(out.size())});
    if (want <= 0 || pending_pos_ < 0) {   // nothing committed yet (a one-token prompt)
        ++stats_.empty;
        return 0;
    }
    if (pending_pos_ != len - 2 || final_ < len - 2)
        fail("mtp drafter: the context has {} tokens but the last committed target row is at {} and the head "
             "holds {} final rows: the session was fed outside the drafter",
             len, pending_pos_, final_);
    if (len - 1 + want > head_.n_ctx()) {   // no room for the chain: draft less
        ++stats_.empty;
        return 0;
    }
    // The pending row is final: the token after it (the context's last) is committed. (Run again
    // when a second proposal for the same context comes: the same bits.)
    head_.forward(pending_.data(), ctx.subspan(static_cast<size_t>(len - 1), 1), pending_pos_, true);
    final_ = len - 1;
    seen_.assign(ctx.begin(), ctx.end());
    out[0] = sampler_.pick(head_.logits(), len, seen_);
    seen_.push_back(out[0]);
    for (int32_t k = 1; k < want; ++k) {
        std::memcpy(chain_.data(), head_.out_hidden(0), static_cast<size_t>(E_) * sizeof(float));
        head_.forward(chain_.data(), std::span<const int32_t>(&out[static_cast<size_t>(k - 1)], 1), len - 2 + k, true);
        out[static_cast<size_t>(k)] = sampler_.pick(head_.logits(), len + k, seen_);
        seen_.push_back(out[static_cast<size_t>(k)]);
    }
    head_.truncate(final_);   // the chained rows were provisional
    return want;
}

}  // namespace sluice
