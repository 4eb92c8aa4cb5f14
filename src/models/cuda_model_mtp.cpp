// The hybrid Qwen MoEs' MTP head on the device (issue 11, part 3): the nextn block of
// hybrid_mtp.cpp, op for op, on the CUDA model's stream. The first head uploads the block, its
// routed experts whole and outside the VRAM budget (one layer: about 0.45 GB of Q4_K experts for
// the Qwen3.6-35B-A3B shape), so a draft never waits on the CPU lane. The host does what the CPU
// head does before the block (the embedding row, enorm and hnorm: the CPU's code, so its bits)
// and reads back h' and the logits; eh_proj, the gated attention against the head's own KV in
// VRAM, the MoE FFN, head_norm and the output projection are the trunk's kernels, which give
// the CPU's bits (E3), so a GPU head drafts exactly what a CPU head drafts.
#include "models/cuda_model.h"

#include "models/hybrid_mtp.h"

#ifdef SLUICE_HAVE_CUDA

#include "models/cuda_model_impl.h"

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.cuh"

#include <algorithm>
#include <cstring>
#include <limits>

namespace sluice::cuda_impl {

const dmtp& cuda_model::upload_mtp() {
    if (mtp_) return *mtp_;
    if (!mtp_host_) fail("cuda model: the file has no MTP (nextn) block");
    ck(cudaSetDevice(dev_), "cudaSetDevice");
    const mtp_weights& w = *mtp_host_;
    dmtp m;
    dlayer& l = m.block;
    upload_gated_attention(w.attn, l);
    l.ffn_norm = upload_vec(w.post_norm);
    l.router = upload_mat(*w.moe.router);
    l.gate_exps = upload_mat(*w.moe.gate_exps);
    l.up_exps = upload_mat(*w.moe.up_exps);
    l.down_exps = upload_mat(*w.moe.down_exps);
    l.sh_gate = upload_mat(*w.moe.shexp.gate);
    l.sh_up = upload_mat(*w.moe.shexp.up);
    l.sh_down = upload_mat(*w.moe.shexp.down);
    l.sh_inp = upload_mat(*w.moe.shexp_gate);
    m.eh_proj = upload_mat(*w.eh_proj);
    m.head_norm = w.head_norm.empty() ? output_norm_ : upload_vec(w.head_norm);
    m.head = w.head ? upload_mat(*w.head) : output_;   // shared_head_head, else the trunk's copy
    // Its VRAM: the block's own tensors (a head shared with the trunk's output costs nothing).
    for (const tensor_view* t : {w.attn.wq, w.attn.wk, w.attn.wv, w.attn.wo, w.moe.router, w.moe.gate_exps,
                                 w.moe.up_exps, w.moe.down_exps, w.moe.shexp.gate, w.moe.shexp.up, w.moe.shexp.down,
                                 w.moe.shexp_gate, w.eh_proj, w.head})
        if (t) m.bytes += t->nbytes;
    for (const std::vector<float>* v : {&w.attn.norm, &w.attn.q_norm, &w.attn.k_norm, &w.post_norm, &w.head_norm})
        m.bytes += v->size() * 4;
    mtp_ = std::move(m);
    return *mtp_;
}

void cuda_model::mtp_forward(const mtp_pass& p) {
    if (!mtp_) fail("cuda model: the file has no MTP (nextn) block");
    ck(cudaSetDevice(dev_), "cudaSetDevice");
    ensure_scratch(static_cast<int>(std::max<int64_t>(max_rows_, p.n)));
    ensure_rope(p.pos0 + static_cast<int32_t>(p.n));
    ensure_attention_split(p.n_ctx);
    const int64_t E = hp_.n_embd, n = p.n;
    // No residual add of the trunk left pending (an enqueue that threw), and the block's own add
    // made at once: its head norm below is not cuda_model::norm.
    defer_residual_ = false;
    pending_residual_ = {};
    ck(cudaMemcpyAsync(p.d_cat, p.h_cat, static_cast<size_t>(n * 2 * E) * 4, cudaMemcpyHostToDevice, stream_), "mtp rows");
    mm(mtp_->eh_proj, p.d_cat, n, x_, false);   // x = eh_proj(enorm(embed(t)) | hnorm(h))
    // One decoder block of the trunk's gated-attention kind against the head's own cache (its
    // layer 0), then the MoE FFN with every expert in VRAM.
    const attn_rows seg{p.pos0, n, p.n_ctx, p.kv};
    attention_block(mtp_->block, 0, std::span<const attn_rows>(&seg, 1), n, nullptr);
    moe_block(mtp_->block, -1, n);
    flush_residual();   // never pending (defer_residual_ is off): a guard
    cuda::rmsnorm(x_, mtp_->head_norm, p.d_hout, n, E, hp_.rms_eps, stream_);   // h' = head_norm(x')
    ck(cudaMemcpyAsync(p.h_hout, p.d_hout, static_cast<size_t>(n * E) * 4, cudaMemcpyDeviceToHost, stream_), "mtp h'");
    if (p.logits) {
        mm(*p.logits, p.d_hout + (n - 1) * E, 1, logits_, false);
        ck(cudaMemcpyAsync(p.h_logits, logits_, static_cast<size_t>(p.logits->n_out) * 4, cudaMemcpyDeviceToHost, stream_),
           "mtp logits");
    }
    ck(cudaStreamSynchronize(stream_), "mtp forward");
}

namespace {

// hybrid_mtp.h's head on a cuda_model: the same checks, host steps and contract.
class cuda_mtp_head final : public mtp_head {
public:
    cuda_mtp_head(cuda_model& m, int n_ctx, int max_rows, std::shared_ptr<const mtp_draft_rows> draft_rows)
        : m_(m), hp_(m.hparams()), host_w_(*m.mtp_host()), w_(m.upload_mtp()), n_ctx_(n_ctx), max_rows_(max_rows), draft_rows_(std::move(draft_rows)) {
        ck(cudaSetDevice(m_.device()), "cudaSetDevice");
        const size_t E = static_cast<size_t>(hp_.n_embd), R = static_cast<size_t>(max_rows);
        const size_t nkv = static_cast<size_t>(hp_.n_kv_head) * static_cast<size_t>(hp_.head_dim);
        try {
            kv_ = dev<float>(2 * static_cast<size_t>(n_ctx) * nkv);
            d_cat_ = dev<float>(R * 2 * E);
            d_hout_ = dev<float>(R * E);
            h_cat_ = pinned<float>(R * 2 * E);
            h_hout_ = pinned<float>(R * E);
            if (draft_rows_) {
                auto* bytes = dev<std::byte>(draft_rows_->bytes.size());
                ck(cudaMemcpy(bytes, draft_rows_->bytes.data(), draft_rows_->bytes.size(), cudaMemcpyHostToDevice),
                   "draft rows");
                trimmed_ = cuda_model::slot_mat(draft_rows_->matrix, bytes);
                h_logits_ = pinned<float>(draft_rows_->ids.size());
                // Ids outside the list stay -inf: no pick can choose them.
                logits_.assign(static_cast<size_t>(hp_.n_vocab), -std::numeric_limits<float>::infinity());
            } else {
                h_logits_ = pinned<float>(static_cast<size_t>(hp_.n_vocab));
            }
        } catch (...) {
            release();
            throw;
        }
        row_.resize(E);
    }
    ~cuda_mtp_head() override { release(); }
    cuda_mtp_head(const cuda_mtp_head&) = delete;
    cuda_mtp_head& operator=(const cuda_mtp_head&) = delete;

    int32_t n_vocab() const override { return hp_.n_vocab; }
    int32_t n_embd() const override { return hp_.n_embd; }
    int32_t max_rows() const override { return max_rows_; }
    int32_t n_ctx() const override { return n_ctx_; }
    int32_t n_past() const override { return n_past_; }
    void truncate(int32_t n) override { n_past_ = std::clamp(n, 0, n_past_); }

    // The cache is [2][n_ctx][n_kv_head * head_dim] in VRAM (K then V, as one trunk layer's).
    // Plain copies on the legacy stream, then a device sync: the model's stream is non-blocking,
    // so nothing else orders them with the head's next forward (which also ends synced).
    int64_t row_floats() const override { return 2 * nkv(); }
    void save_rows(int32_t n, float* dst) const override {
        if (n < 0 || n > n_past_) fail("mtp head: save of {} rows: the cache holds {}", n, n_past_);
        ck(cudaSetDevice(m_.device()), "cudaSetDevice");
        const size_t r = static_cast<size_t>(n) * nkv();
        ck(cudaMemcpy(dst, kv_, r * 4, cudaMemcpyDeviceToHost), "mtp head: K rows");
        ck(cudaMemcpy(dst + r, kv_ + static_cast<size_t>(n_ctx_) * nkv(), r * 4, cudaMemcpyDeviceToHost),
           "mtp head: V rows");
        ck(cudaDeviceSynchronize(), "mtp head: saved rows");
    }
    void load_rows(const float* src, int32_t n) override {
        if (n < 0 || n > n_ctx_) fail("mtp head: load of {} rows: the cache holds {} positions", n, n_ctx_);
        ck(cudaSetDevice(m_.device()), "cudaSetDevice");
        const size_t r = static_cast<size_t>(n) * nkv();
        ck(cudaMemcpy(kv_, src, r * 4, cudaMemcpyHostToDevice), "mtp head: K rows");
        ck(cudaMemcpy(kv_ + static_cast<size_t>(n_ctx_) * nkv(), src + r, r * 4, cudaMemcpyHostToDevice),
           "mtp head: V rows");
        ck(cudaDeviceSynchronize(), "mtp head: loaded rows");   // a pageable copy may return before it lands
        n_past_ = n;
    }

    void target_hidden(const float* residual, int64_t n, float* out) const override {
        const int64_t E = hp_.n_embd;
        for (int64_t r = 0; r < n; ++r)
            kernels::rmsnorm(residual + r * E, m_.output().norm.data(), out + r * E, E, hp_.rms_eps);
    }

    void forward(const float* hidden, std::span<const int32_t> tokens, int32_t pos0, bool want_logits) override {
        const int64_t n = static_cast<int64_t>(tokens.size()), E = hp_.n_embd;
        if (n < 1 || n > max_rows_) fail("mtp head: forward of {} rows: expected 1..{}", n, max_rows_);
        if (pos0 < 0 || pos0 > n_past_ || pos0 + n > n_ctx_)
            fail("mtp head: rows at {}..{}: the cache holds {} of {} positions", pos0, pos0 + n - 1, n_past_, n_ctx_);
        for (int32_t t : tokens)
            if (t < 0 || t >= hp_.n_vocab) fail("mtp head: token {}: expected an id in [0, {})", t, hp_.n_vocab);
        // enorm(embed(t)) | hnorm(h) per row, on the host as the CPU head makes them.
        const tensor_view& embd = host_w_.embed ? *host_w_.embed : *m_.output().tok_embd;
        for (int64_t r = 0; r < n; ++r) {
            float* cat = h_cat_ + r * 2 * E;
            kernels::get_row(embd, tokens[static_cast<size_t>(r)], row_.data());
            kernels::rmsnorm(row_.data(), host_w_.enorm.data(), cat, E, hp_.rms_eps);
            kernels::rmsnorm(hidden + r * E, host_w_.hnorm.data(), cat + E, E, hp_.rms_eps);
        }
        mtp_pass p;
        p.h_cat = h_cat_;
        p.d_cat = d_cat_;
        p.n = n;
        p.pos0 = pos0;
        p.n_ctx = n_ctx_;
        p.kv = kv_;
        p.d_hout = d_hout_;
        p.h_hout = h_hout_;
        if (want_logits) {
            p.logits = draft_rows_ ? &trimmed_ : &w_.head;
            p.h_logits = h_logits_;
        }
        n_past_ = pos0;   // a failed forward leaves no row past pos0 valid
        m_.mtp_forward(p);
        n_past_ = pos0 + static_cast<int32_t>(n);
        if (want_logits && draft_rows_)
            for (size_t i = 0; i < draft_rows_->ids.size(); ++i)
                logits_[static_cast<size_t>(draft_rows_->ids[i])] = h_logits_[i];
    }

    const float* out_hidden(int32_t row) const override { return h_hout_ + int64_t{row} * hp_.n_embd; }
    const float* logits() const override { return draft_rows_ ? logits_.data() : h_logits_; }

private:
    size_t nkv() const { return static_cast<size_t>(hp_.n_kv_head) * static_cast<size_t>(hp_.head_dim); }
    template <class T>
    T* dev(size_t count) {
        void* p = nullptr;
        ck(cudaMalloc(&p, std::max<size_t>(count * sizeof(T), 1)), "cudaMalloc (mtp head)");
        dev_.push_back(p);
        return static_cast<T*>(p);
    }
    template <class T>
    T* pinned(size_t count) {
        void* p = nullptr;
        ck(cudaMallocHost(&p, std::max<size_t>(count * sizeof(T), 1)), "cudaMallocHost (mtp head)");
        host_.push_back(p);
        return static_cast<T*>(p);
    }
    void release() {
        cudaSetDevice(m_.device());
        for (void* p : dev_) cudaFree(p);
        for (void* p : host_) cudaFreeHost(p);
        dev_.clear();
        host_.clear();
    }

    cuda_model& m_;
    const model_hparams& hp_;
    const mtp_weights& host_w_;     // the block's host views (embedding rows, enorm, hnorm)
    const dmtp& w_;                 // the block on the device
    int32_t n_ctx_, max_rows_;
    int32_t n_past_ = 0;
    std::shared_ptr<const mtp_draft_rows> draft_rows_;   // null: the whole vocabulary
    dmat trimmed_;                  // [n_embd, draft ids] the listed rows on the device
    std::vector<void*> dev_, host_; // what this head allocated
    float* kv_ = nullptr;           // device: K then V [n_ctx, n_kv_head * head_dim] each (one layer)
    float* d_cat_ = nullptr;        // device [max_rows, 2*n_embd]
    float* d_hout_ = nullptr;       // device [max_rows, n_embd]
    float* h_cat_ = nullptr;        // pinned [max_rows, 2*n_embd]
    float* h_hout_ = nullptr;       // pinned [max_rows, n_embd] h' per row
    float* h_logits_ = nullptr;     // pinned [n_vocab], or [draft ids] with a draft vocabulary
    std::vector<float> logits_;     // [n_vocab] with a draft vocabulary: the listed ids' logits, -inf elsewhere
    std::vector<float> row_;        // [n_embd] one embedding row
};

}  // namespace
}  // namespace sluice::cuda_impl

namespace sluice {

std::unique_ptr<mtp_head> make_cuda_mtp_head(model& m, int n_ctx, int max_rows,
                                             std::shared_ptr<const mtp_draft_rows> draft_rows) {
    auto* c = dynamic_cast<cuda_impl::cuda_model*>(&m);
    if (!c || !c->mtp_host()) return nullptr;
    if (n_ctx < 1 || max_rows < 1) fail("mtp head: n_ctx {} and max_rows {}: expected >= 1", n_ctx, max_rows);
    if (draft_rows && draft_rows->matrix.ne[0] != c->hparams().n_embd)
        fail("mtp head: draft rows {} wide, the model's rows {}", draft_rows->matrix.ne[0], c->hparams().n_embd);
    return std::make_unique<cuda_impl::cuda_mtp_head>(*c, n_ctx, max_rows, std::move(draft_rows));
}

const tensor_view* cuda_mtp_output(const model& m) {
    const auto* c = dynamic_cast<const cuda_impl::cuda_model*>(&m);
    if (!c || !c->mtp_host()) return nullptr;
    return c->mtp_host()->head ? c->mtp_host()->head : c->output().output;
}

uint64_t cuda_mtp_bytes(const model& m) {
    const auto* c = dynamic_cast<const cuda_impl::cuda_model*>(&m);
    return c && c->mtp() ? c->mtp()->bytes : 0;
}

}  // namespace sluice

#else  // no CUDA backend in this build: no model is a CUDA model

namespace sluice {
std::unique_ptr<mtp_head> make_cuda_mtp_head(model&, int, int, std::shared_ptr<const mtp_draft_rows>) { return nullptr; }
const tensor_view* cuda_mtp_output(const model&) { return nullptr; }
uint64_t cuda_mtp_bytes(const model&) { return 0; }
}  // namespace sluice

#endif
