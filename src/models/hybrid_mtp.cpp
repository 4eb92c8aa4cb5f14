// The hybrid Qwen MoEs' MTP head (hybrid_mtp.h, equations in spec/mtp.h).
#include "models/hybrid_mtp.h"

#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "models/cuda_model.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace sluice {
namespace {

// The head's output projection: its own (nextn shared_head_head) or the trunk's.
const tensor_view& head_matrix_of(const hybrid_model& m) {
    return m.mtp()->head ? *m.mtp()->head : *m.output().output;
}

class hybrid_mtp_head final : public mtp_head {
public:
    hybrid_mtp_head(const hybrid_model& m, thread_pool& pool, int n_ctx, int max_rows,
                    std::shared_ptr<const mtp_draft_rows> draft_rows)
        : hp_(m.hparams()), w_(*m.mtp()), out_(m.output()), kv_(kv_shape{1, n_ctx, hp_.n_kv_head, hp_.head_dim, {}}),
          s_(m.make_scratch(max_rows, pool)), draft_rows_(std::move(draft_rows)) {
        const size_t E = static_cast<size_t>(hp_.n_embd), R = static_cast<size_t>(max_rows);
        cat_.resize(R * 2 * E);
        hout_.resize(R * E);
        logits_.resize(static_cast<size_t>(hp_.n_vocab));
        if (draft_rows_) {   // ids outside the list stay -inf: no pick can choose them
            std::fill(logits_.begin(), logits_.end(), -std::numeric_limits<float>::infinity());
            trimmed_.resize(draft_rows_->ids.size());
        }
        // The eh_proj input is 2*n_embd wide and the head reads one row: the trunk's scratch
        // may size its activation buffer for narrower rows.
        s_.act.resize(std::max({s_.act.size(), kernels::matmul_act_bytes(*w_.eh_proj, max_rows),
                                kernels::matmul_act_bytes(head_matrix(), 1)}));
    }

    int32_t n_vocab() const override { return hp_.n_vocab; }
    int32_t n_embd() const override { return hp_.n_embd; }
    int32_t max_rows() const override { return s_.max_rows; }
    int32_t n_ctx() const override { return kv_.shape().n_ctx; }
    int32_t n_past() const override { return kv_.n_pos(); }
    void truncate(int32_t n) override { kv_.truncate(n); }

    void target_hidden(const float* residual, int64_t n, float* out) const override {
        const int64_t E = hp_.n_embd;
        for (int64_t r = 0; r < n; ++r) kernels::rmsnorm(residual + r * E, out_.norm.data(), out + r * E, E, hp_.rms_eps);
    }

    void forward(const float* hidden, std::span<const int32_t> tokens, int32_t pos0, bool want_logits) override {
        const int64_t n = static_cast<int64_t>(tokens.size()), E = hp_.n_embd;
        if (n < 1 || n > s_.max_rows) fail("mtp head: forward of {} rows: expected 1..{}", n, s_.max_rows);
        if (pos0 < 0 || pos0 > kv_.n_pos() || pos0 + n > kv_.shape().n_ctx)
            fail("mtp head: rows at {}..{}: the cache holds {} of {} positions", pos0, pos0 + n - 1, kv_.n_pos(),
                 kv_.shape().n_ctx);
        for (int32_t t : tokens)
            if (t < 0 || t >= hp_.n_vocab) fail("mtp head: token {}: expected an id in [0, {})", t, hp_.n_vocab);
        kv_.truncate(pos0);
        // x = eh_proj(concat(enorm(embed(t)), hnorm(h))), row by row.
        const tensor_view& embd = w_.embed ? *w_.embed : *out_.tok_embd;
        for (int64_t r = 0; r < n; ++r) {
            float* cat = cat_.data() + r * 2 * E;
            kernels::get_row(embd, tokens[static_cast<size_t>(r)], s_.xn.data());
            kernels::rmsnorm(s_.xn.data(), w_.enorm.data(), cat, E, hp_.rms_eps);
            kernels::rmsnorm(hidden + r * E, w_.hnorm.data(), cat + E, E, hp_.rms_eps);
        }
        kernels::matmul(*s_.pool, *w_.eh_proj, cat_.data(), n, s_.x.data(), s_.act.data());
        // One decoder block of the trunk's attention kind, against the head's own cache.
        const batch_segment g{tokens, pos0, &kv_, 0};
        const std::span<const batch_segment> batch(&g, 1);
        gated_attention_block(w_.attn, hp_, /*il=*/0, batch, n, s_);
        moe_ffn_block(w_.post_norm, w_.moe, hp_, n, s_);
        commit_batch(batch);
        // h' = head_norm(x'); logits of the last row.
        const std::vector<float>& hn = w_.head_norm.empty() ? out_.norm : w_.head_norm;
        for (int64_t r = 0; r < n; ++r)
            kernels::rmsnorm(s_.x.data() + r * E, hn.data(), hout_.data() + r * E, E, hp_.rms_eps);
        if (!want_logits) return;
        const float* h = hout_.data() + (n - 1) * E;
        if (!draft_rows_) {
            kernels::matmul(*s_.pool, head_matrix(), h, 1, logits_.data(), s_.act.data());
            return;
        }
        kernels::matmul(*s_.pool, draft_rows_->matrix, h, 1, trimmed_.data(), s_.act.data());
        for (size_t i = 0; i < trimmed_.size(); ++i) logits_[static_cast<size_t>(draft_rows_->ids[i])] = trimmed_[i];
    }

    const float* out_hidden(int32_t row) const override { return hout_.data() + int64_t{row} * hp_.n_embd; }
    const float* logits() const override { return logits_.data(); }

    int64_t row_floats() const override { return 2 * kv_.row_floats(); }
    void save_rows(int32_t n, float* dst) const override {
        if (n < 0 || n > kv_.n_pos()) fail("mtp head: save of {} rows: the cache holds {}", n, kv_.n_pos());
        const size_t r = static_cast<size_t>(n) * static_cast<size_t>(kv_.row_floats());
        std::memcpy(dst, kv_.k(0), r * sizeof(float));
        std::memcpy(dst + r, kv_.v(0), r * sizeof(float));
    }
    void load_rows(const float* src, int32_t n) override {
        if (n < 0 || n > kv_.shape().n_ctx) fail("mtp head: load of {} rows: the cache holds {} positions", n, kv_.shape().n_ctx);
        const size_t r = static_cast<size_t>(n) * static_cast<size_t>(kv_.row_floats());
        std::memcpy(kv_.k(0), src, r * sizeof(float));
        std::memcpy(kv_.v(0), src + r, r * sizeof(float));
        kv_.set_n_pos(n);
    }

private:
    const tensor_view& head_matrix() const { return w_.head ? *w_.head : *out_.output; }

    const model_hparams& hp_;
    const mtp_weights& w_;
    const output_weights& out_;
    kv_cache kv_;                  // one layer [n_ctx, n_kv_head, head_dim]: the head's own attention rows
    forward_scratch s_;            // the trunk's buffers for max_rows rows (act widened for eh_proj)
    std::vector<float> cat_;       // [max_rows, 2*n_embd] enorm(embed(t)) | hnorm(h)
    std::vector<float> hout_;      // [max_rows, n_embd] h' per row
    std::vector<float> logits_;    // [n_vocab] the last row's logits
    std::shared_ptr<const mtp_draft_rows> draft_rows_;   // null: the whole vocabulary
    std::vector<float> trimmed_;   // [draft ids] the listed rows' logits
};

}  // namespace

namespace {
// The head's output matrix of a CPU or CUDA hybrid model with an MTP block, else null.
const tensor_view* mtp_output_of(const model& m) {
    if (const auto* h = dynamic_cast<const hybrid_model*>(&m); h && h->mtp()) return &head_matrix_of(*h);
    return cuda_mtp_output(m);
}
}  // namespace

bool has_mtp_head(const model& m) { return mtp_output_of(m) != nullptr; }

std::shared_ptr<const mtp_draft_rows> gather_mtp_draft_rows(const model& m, const draft_vocab& v) {
    const tensor_view* out = mtp_output_of(m);
    if (!out) return nullptr;
    const tensor_view& w = *out;
    if (v.n_vocab != w.ne[1] || v.ids.empty())
        fail("mtp head: a draft vocabulary of {} ids out of {}, but the head's output '{}' {} has {} rows", v.ids.size(),
             v.n_vocab, w.name, w.shape_string(), w.ne[1]);
    auto r = std::make_shared<mtp_draft_rows>();
    r->ids = v.ids;
    const uint64_t rb = w.row_bytes();
    r->bytes.resize(static_cast<size_t>(rb * v.ids.size()));
    for (size_t i = 0; i < v.ids.size(); ++i) {
        if (v.ids[i] < 0 || v.ids[i] >= w.ne[1]) fail("mtp head: draft id {}: expected [0, {})", v.ids[i], w.ne[1]);
        std::memcpy(r->bytes.data() + i * rb, w.row(v.ids[i]), static_cast<size_t>(rb));
    }
    r->matrix = w;
    r->matrix.name = w.name + "[draft vocabulary]";
    r->matrix.n_dims = 2;
    r->matrix.ne = {w.ne[0], static_cast<int64_t>(v.ids.size()), 1, 1};
    r->matrix.data = r->bytes.data();
    r->matrix.nbytes = rb * v.ids.size();
    return r;
}

std::unique_ptr<mtp_head> make_mtp_head(model& m, thread_pool& pool, int n_ctx, int max_rows,
                                        std::shared_ptr<const mtp_draft_rows> draft_rows) {
    const auto* h = dynamic_cast<const hybrid_model*>(&m);
    if (!h || !h->mtp()) return make_cuda_mtp_head(m, n_ctx, max_rows, std::move(draft_rows));
    if (n_ctx < 1 || max_rows < 1) fail("mtp head: n_ctx {} and max_rows {}: expected >= 1", n_ctx, max_rows);
    if (draft_rows && draft_rows->matrix.ne[0] != head_matrix_of(*h).ne[0])
        fail("mtp head: draft rows {} wide, the head's output {}", draft_rows->matrix.ne[0], head_matrix_of(*h).ne[0]);
    return std::make_unique<hybrid_mtp_head>(*h, pool, n_ctx, max_rows, std::move(draft_rows));
}

}  // namespace sluice
