// The CUDA model: the forward of blocks.cpp / moe_ffn.cpp, op for op, on the device. Weights
// are bound by the same weight_binder (names, dtypes and shapes checked as on the CPU), then
// uploaded once. Per forward the host does two things only: it dequantises the window's
// embedding rows (kernels::get_row, the CPU's bits by construction) into pinned memory, and
// copies the logits back. Everything in between is enqueued on one stream. A split model
// (cuda_placement with a budget below the routed experts' size) adds one host step per MoE layer:
// the routed ids come to the host, the CPU lane computes the experts not in VRAM while the GPU
// computes the resident ones (cuda_expert_lanes.h), and the rows join before the same combine.
#include "models/cuda_model.h"

#include "core/error.h"

namespace sluice {
bool cuda_model_supports(const std::string& arch) {
    return arch == "llama" || arch == "qwen3" || arch == "qwen3moe" || arch == "qwen2moe";
}
}  // namespace sluice

#ifdef SLUICE_HAVE_CUDA

#include "io/model_file.h"
#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/ops.cuh"
#include "models/blocks.h"
#include "models/cuda_expert_lanes.h"
#include "quant/act.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace sluice {
namespace {

void ck(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("cuda model: {}: {}", what, cudaGetErrorString(e));
}

// A weight matrix (or a bank of experts) in device memory.
struct dmat {
    dtype type = dtype::f32;
    int64_t n_in = 0, n_out = 0;
    size_t row_bytes = 0;
    size_t expert_stride = 0;   // bytes per expert's matrix (expert banks)
    const std::byte* data = nullptr;
    explicit operator bool() const { return data != nullptr; }
};

struct dlayer {
    float* attn_norm = nullptr;                 // [n_embd]
    dmat wq, wk, wv, wo;                        // [n_embd, nq], [n_embd, nkv] x2, [nq, n_embd]
    float *bq = nullptr, *bk = nullptr, *bv = nullptr;   // [nq], [nkv], [nkv] (qwen2moe)
    float *q_norm = nullptr, *k_norm = nullptr;         // [head_dim] (qwen3*)
    float* ffn_norm = nullptr;                  // [n_embd]
    dmat gate, up, down;                        // dense FFN [n_embd, n_ff] x2, [n_ff, n_embd]
    dmat router;                                // [n_embd, n_expert]
    dmat gate_exps, up_exps, down_exps;         // [n_embd, n_ff_exp, n_expert] x2, [n_ff_exp, n_embd, n_expert]
    dmat sh_gate, sh_up, sh_down, sh_inp;       // shared expert [n_embd, n_ff_shexp] x2, [n_ff_shexp, n_embd], [n_embd, 1]
};

// A sequence's KV cache on the device: per layer K then V, each [n_ctx, n_kv_head, head_dim].
struct dkv {
    float* buf = nullptr;
    int n_ctx = 0;
};

struct arch_spec {
    kernels::rope_mode rope;
    bool bias, qk_norm, moe, shexp, default_norm;
};

arch_spec spec_for(const std::string& arch) {
    if (arch == "llama") return {kernels::rope_mode::normal, false, false, false, false, false};
    if (arch == "qwen3") return {kernels::rope_mode::neox, false, true, false, false, false};
    if (arch == "qwen3moe") return {kernels::rope_mode::neox, false, true, true, false, true};
    if (arch == "qwen2moe") return {kernels::rope_mode::neox, true, false, true, true, false};
    fail("cuda model: general.architecture '{}': expected one of llama, qwen3, qwen3moe, qwen2moe", arch);
}

class cuda_model final : public model {
public:
    // place: null, or the VRAM budget for routed experts (a budget below their total splits the
    // experts between the GPU's cache slots and the CPU lane: cuda_expert_lanes).
    cuda_model(const model_file& f, const load_options&, int device, const cuda_placement* place) : dev_(device) {
        int n_dev = 0;
        ck(cudaGetDeviceCount(&n_dev), "cudaGetDeviceCount");
        if (device < 0 || device >= n_dev) fail("cuda model: device {}: expected 0..{}", device, n_dev - 1);
        ck(cudaSetDevice(dev_), "cudaSetDevice");
        ck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
        cuda::upload_tables();

        // Hyperparameters, as the CPU architecture files read them.
        const std::string arch = f.architecture();
        spec_ = spec_for(arch);
        hp_ = read_transformer_hparams(f, arch, spec_.rope);
        if (spec_.moe) {
            read_moe_hparams(f, hp_, spec_.default_norm);
            if (spec_.shexp) {
                const int64_t sh = f.meta().require_int(arch + ".expert_shared_feed_forward_length");
                if (sh < 1 || sh > (1 << 20))
                    fail("model: {}.expert_shared_feed_forward_length: expected 1..{}, got {}", arch, 1 << 20, sh);
                hp_.n_ff_shexp = static_cast<int>(sh);
            }
        } else if (hp_.n_ff < 1) {
            fail("model: {}.feed_forward_length: expected >= 1, got {}", arch, hp_.n_ff);
        }

        // Weights: bound and checked by the CPU's binder, then uploaded.
        weight_binder b(f);
        std::vector<moe::expert_bank> banks;   // [n_layer] the routed experts in host memory (MoE)
        uint64_t expert_bytes = 0;
        out_ = bind_output(b, hp_);
        tok_embd_ = out_.tok_embd;
        output_norm_ = upload_vec(out_.norm);
        output_ = upload_mat(*out_.output);
        for (int il = 0; il < hp_.n_layer; ++il) {
            dlayer l;
            const attn_weights a = bind_attention(b, hp_, il, spec_.bias, spec_.qk_norm);
            l.attn_norm = upload_vec(a.norm);
            l.wq = upload_mat(*a.wq);
            l.wk = upload_mat(*a.wk);
            l.wv = upload_mat(*a.wv);
            l.wo = upload_mat(*a.wo);
            l.bq = upload_vec(a.bq);
            l.bk = upload_vec(a.bk);
            l.bv = upload_vec(a.bv);
            l.q_norm = upload_vec(a.q_norm);
            l.k_norm = upload_vec(a.k_norm);
            l.ffn_norm = upload_vec(b.vec(blk(il, "ffn_norm.weight"), hp_.n_embd));
            if (spec_.moe) {
                const moe_weights m = bind_moe(b, hp_, il, spec_.shexp);
                l.router = upload_mat(*m.router);
                banks.push_back({m.gate_exps, m.up_exps, m.down_exps});
                expert_bytes += m.gate_exps->nbytes + m.up_exps->nbytes + m.down_exps->nbytes;
                if (spec_.shexp) {
                    l.sh_gate = upload_mat(*m.shexp.gate);
                    l.sh_up = upload_mat(*m.shexp.up);
                    l.sh_down = upload_mat(*m.shexp.down);
                    l.sh_inp = upload_mat(*m.shexp_gate);
                }
            } else {
                const ffn_weights w = bind_ffn(b, il, "", hp_.n_embd, hp_.n_ff);
                l.gate = upload_mat(*w.gate);
                l.up = upload_mat(*w.up);
                l.down = upload_mat(*w.down);
            }
            layers_.push_back(l);
        }
        // Routed experts: all uploaded as they are, or, under a budget below their total, the
        // resident ones in cache slots (the expert matmuls read slot ids instead of expert ids).
        if (spec_.moe && place && place->vram_budget < expert_bytes) {
            lanes_ = std::make_unique<cuda_expert_lanes>(hp_, banks, *place, stream_);
            for (int il = 0; il < hp_.n_layer; ++il) {
                const cuda_expert_lanes::layer_slots& sl = lanes_->slots(il);
                const moe::expert_bank& k = banks[static_cast<size_t>(il)];
                dlayer& l = layers_[static_cast<size_t>(il)];
                l.gate_exps = slot_mat(*k.gate, sl.gate);
                l.up_exps = slot_mat(*k.up, sl.up);
                l.down_exps = slot_mat(*k.down, sl.down);
            }
        } else {
            for (size_t il = 0; il < banks.size(); ++il) {
                layers_[il].gate_exps = upload_mat(*banks[il].gate);
                layers_[il].up_exps = upload_mat(*banks[il].up);
                layers_[il].down_exps = upload_mat(*banks[il].down);
            }
        }
        ck(cudaStreamSynchronize(stream_), "weight upload");
    }

    ~cuda_model() override {
        cudaSetDevice(dev_);
        cudaStreamSynchronize(stream_);
        lanes_.reset();
        for (void* p : allocs_) cudaFree(p);
        for (auto& kv : kvs_) cudaFree(kv.second.buf);
        free_scratch();
        if (rope_) cudaFree(rope_);
        cudaStreamDestroy(stream_);
    }

    const model_hparams& hparams() const override { return hp_; }

    void forward_batch(std::span<const batch_segment> batch, forward_scratch& s, float* logits) override {
        const int64_t n = check_batch(hp_, batch, s);
        ck(cudaSetDevice(dev_), "cudaSetDevice");
        ensure_scratch(s.max_rows);
        if (lanes_) {
            lanes_->ensure(s.max_rows);
            pool_ = s.pool;
            lanes_->calibrate(*pool_);   // once: the CPU lane's figure for the planner
        }
        int32_t max_pos = 0;
        for (const batch_segment& g : batch) max_pos = std::max(max_pos, g.pos0 + static_cast<int32_t>(g.tokens.size()));
        ensure_rope(max_pos);
        std::vector<float*> kv_bufs;
        for (const batch_segment& g : batch) kv_bufs.push_back(kv_for(*g.kv));

        // Embeddings: dequantised on the host (the CPU's get_row) into pinned memory; the copy
        // up is the step's first operation.
        const int64_t E = hp_.n_embd;
        int64_t r = 0, m = 0;
        for (const batch_segment& g : batch) {
            for (token_id t : g.tokens) kernels::get_row(*tok_embd_, t, h_x_ + (r++) * E);
            m += g.n_logits;
        }
        try {
            if (lanes_) lanes_->begin_stream(n);   // a prefill chunk may stream its split layers
            enqueue_forward(batch, kv_bufs, n);
        } catch (...) {
            if (lanes_) lanes_->abandon_forward();
            throw;
        }
        for (const batch_segment& g : batch) g.kv->set_n_pos(g.pos0 + static_cast<int32_t>(g.tokens.size()));
        if (m > 0)
            ck(cudaMemcpyAsync(logits, logits_, static_cast<size_t>(m * hp_.n_vocab) * 4, cudaMemcpyDeviceToHost, stream_),
               "logits");
        ck(cudaStreamSynchronize(stream_), "forward");
        if (lanes_) lanes_->end_forward();
    }

    // The forward's launches: a captured graph for a decode step, else enqueued one by one.
    void enqueue_forward(std::span<const batch_segment> batch, const std::vector<float*>& kv_bufs, int64_t n) {
        // A split model's host sits inside every MoE layer: no graphs there.
        if (graphs_ && !lanes_ && batch.size() == 1 && n == 1) {
            // A decode step: one captured graph per (cache, logits wanted), replayed with the
            // position read from device memory.
            *h_pos_ = batch[0].pos0;
            const graph_key key{kv_bufs[0], batch[0].kv->shape().n_ctx, batch[0].n_logits};
            cudaGraphExec_t exec = nullptr;
            for (const auto& [k, e] : graphs_cache_)
                if (k == key) exec = e;
            if (!exec) exec = capture(batch, kv_bufs, n, key);
            ck(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
        } else {
            enqueue(batch, kv_bufs, n, nullptr);
        }
    }

    const cuda_expert_lanes* lanes() const { return lanes_.get(); }
    cuda_expert_lanes* lanes() { return lanes_.get(); }

    void set_graphs(bool on) { graphs_ = on; }
    void set_programmatic(bool on) {
        ck(cudaSetDevice(dev_), "cudaSetDevice");
        ck(cudaStreamSynchronize(stream_), "sync");
        clear_graphs();
        cuda::set_programmatic_launch(on);
    }

private:
    // ---- loading ----------------------------------------------------------------------------
    void* dalloc(size_t bytes) {
        void* p = nullptr;
        ck(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
        allocs_.push_back(p);
        return p;
    }

    float* upload_vec(const std::vector<float>& v) {
        if (v.empty()) return nullptr;
        auto* p = static_cast<float*>(dalloc(v.size() * 4));
        ck(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "upload");
        return p;
    }

    dmat upload_mat(const tensor_view& t) {
        if (!cuda::has_matmul(t.type)) fail("cuda model: tensor '{}': no CUDA matmul for {}", t.name, name(t.type));
        // One upload per tensor: a tied LM head shares token_embd's copy.
        if (auto it = uploaded_.find(&t); it != uploaded_.end()) return it->second;
        dmat m;
        m.type = t.type;
        m.n_in = t.ne[0];
        m.n_out = t.ne[1];
        m.row_bytes = t.row_bytes();
        m.expert_stride = m.row_bytes * static_cast<size_t>(t.ne[1]);
        auto* p = static_cast<std::byte*>(dalloc(t.nbytes));
        ck(cudaMemcpy(p, t.data, t.nbytes, cudaMemcpyHostToDevice), "upload");
        m.data = p;
        uploaded_[&t] = m;
        return m;
    }

    // A bank of cache slots read as an expert tensor: slot s where the file has expert s. data:
    // the slots' device buffer (null when the layer has none).
    static dmat slot_mat(const tensor_view& t, const std::byte* data) {
        if (!cuda::has_matmul(t.type)) fail("cuda model: tensor '{}': no CUDA matmul for {}", t.name, name(t.type));
        dmat m;
        m.type = t.type;
        m.n_in = t.ne[0];
        m.n_out = t.ne[1];
        m.row_bytes = t.row_bytes();
        m.expert_stride = m.row_bytes * static_cast<size_t>(t.ne[1]);
        m.data = data;
        return m;
    }

    // ---- per-forward buffers ----------------------------------------------------------------
    void free_scratch() {
        clear_graphs();
        for (void* p : scratch_) cudaFree(p);
        scratch_.clear();
        if (h_x_) cudaFreeHost(h_x_);
        if (h_pos_) cudaFreeHost(h_pos_);
        h_x_ = nullptr;
        h_pos_ = nullptr;
        max_rows_ = 0;
    }

    template <class T>
    T* salloc(size_t count) {
        void* p = nullptr;
        ck(cudaMalloc(&p, count * sizeof(T) + 16), "cudaMalloc (scratch)");
        scratch_.push_back(p);
        return static_cast<T*>(p);
    }

    void ensure_scratch(int max_rows) {
        if (max_rows <= max_rows_) return;
        ck(cudaStreamSynchronize(stream_), "sync");
        free_scratch();
        const size_t R = static_cast<size_t>(max_rows), E = static_cast<size_t>(hp_.n_embd);
        const size_t nq = static_cast<size_t>(hp_.n_head) * static_cast<size_t>(hp_.head_dim);
        const size_t nkv = static_cast<size_t>(hp_.n_kv_head) * static_cast<size_t>(hp_.head_dim);
        const size_t K = static_cast<size_t>(std::max(hp_.n_expert_used, 1));
        const size_t ff = static_cast<size_t>(std::max({hp_.n_ff, hp_.n_ff_exp, hp_.n_ff_shexp, 1}));
        const size_t RK = R * K;   // (row, expert) pairs
        x_ = salloc<float>(R * E);
        xn_ = salloc<float>(R * E);
        q_ = salloc<float>(R * nq);
        k_ = salloc<float>(R * nkv);
        v_ = salloc<float>(R * nkv);
        attn_ = salloc<float>(R * nq);
        out_buf_ = salloc<float>(R * E);
        gate_ = salloc<float>(RK * ff);
        up_ = salloc<float>(RK * ff);
        ey_ = salloc<float>(RK * E);
        shexp_ = salloc<float>(R * E);
        router_ = salloc<float>(R * static_cast<size_t>(std::max(hp_.n_expert, 1)));
        ids_ = salloc<int32_t>(RK);
        perm_ = salloc<int32_t>(RK);
        // [3, max tiles]: sized for the smallest tile (16 rows), which gives the most tiles.
        tiles_ = salloc<int32_t>(3 * static_cast<size_t>(cuda::group_tiles_max(
                                         static_cast<int64_t>(RK), std::max(hp_.n_expert, 1), cuda::k_tile_rows_window)));
        n_tiles_ = salloc<int32_t>(1);
        ew_ = salloc<float>(RK);
        shgate_ = salloc<float>(R);
        logits_ = salloc<float>(R * static_cast<size_t>(hp_.n_vocab));
        // int8 activation rows: at most 292 bytes per 256 values (act_block256) or 36 per 32.
        const size_t widest = std::max({E, nq, ff});
        act_ = salloc<std::byte>(RK * (widest / 32 + 1) * 37);
        d_pos_ = salloc<int32_t>(1);
        ck(cudaMallocHost(&h_x_, R * E * 4), "cudaMallocHost");
        ck(cudaMallocHost(&h_pos_, 4), "cudaMallocHost");
        max_rows_ = max_rows;
    }

    // cos/sin rows for positions [0, n_pos), made by the CPU's rope_table.
    void ensure_rope(int32_t n_pos) {
        if (n_pos <= rope_pos_) return;
        const int32_t want = std::max<int32_t>(((n_pos + 1023) / 1024) * 1024, rope_pos_ * 2);
        const int n_rot = hp_.rope.n_rot;
        std::vector<float> cs(static_cast<size_t>(want) * n_rot);
        for (int32_t p = 0; p < want; ++p) kernels::rope_table(hp_.rope, p, cs.data() + static_cast<size_t>(p) * n_rot);
        ck(cudaStreamSynchronize(stream_), "sync");
        clear_graphs();
        if (rope_) cudaFree(rope_);
        ck(cudaMalloc(&rope_, cs.size() * 4), "cudaMalloc (rope)");
        ck(cudaMemcpy(rope_, cs.data(), cs.size() * 4, cudaMemcpyHostToDevice), "rope table");
        rope_pos_ = want;
    }

    float* kv_for(const kv_cache& kv) {
        auto it = kvs_.find(&kv);
        if (it != kvs_.end() && it->second.n_ctx == kv.shape().n_ctx) return it->second.buf;
        if (it != kvs_.end()) {
            ck(cudaStreamSynchronize(stream_), "sync");
            clear_graphs();
            cudaFree(it->second.buf);
            kvs_.erase(it);
        }
        dkv d;
        d.n_ctx = kv.shape().n_ctx;
        const size_t floats = static_cast<size_t>(hp_.n_layer) * 2 * static_cast<size_t>(d.n_ctx) * kv.row_floats();
        ck(cudaMalloc(&d.buf, floats * 4), "cudaMalloc (KV cache)");
        kvs_[&kv] = d;
        return d.buf;
    }

    // ---- one forward, enqueued ------------------------------------------------------------
    struct graph_key {
        float* kv;
        int n_ctx;
        int32_t n_logits;
        bool operator==(const graph_key& o) const { return kv == o.kv && n_ctx == o.n_ctx && n_logits == o.n_logits; }
    };

    // Everything from the embedding copy to the LM head's logits (left in logits_). pos_dev:
    // nullptr for host positions (each segment's pos0), or the device copy of segment 0's pos0
    // (graph replay; single segment).
    void enqueue(std::span<const batch_segment> batch, const std::vector<float*>& kv_bufs, int64_t n, const int32_t* pos_dev) {
        const int64_t E = hp_.n_embd;
        ck(cudaMemcpyAsync(x_, h_x_, static_cast<size_t>(n * E) * 4, cudaMemcpyHostToDevice, stream_), "embeddings");
        if (pos_dev) ck(cudaMemcpyAsync(d_pos_, h_pos_, 4, cudaMemcpyHostToDevice, stream_), "position");
        for (int il = 0; il < hp_.n_layer; ++il) {
            const dlayer& l = layers_[static_cast<size_t>(il)];
            attention_block(l, il, batch, kv_bufs, n, pos_dev);
            if (spec_.moe) moe_block(l, il, n);
            else dense_block(l, n);
        }
        // Output: the rows that want logits, packed, then one LM-head matmul.
        const auto fo = fmt(output_);
        const size_t act_row = fo == quant::act_format::f32 ? 0 : quant::act_row_bytes(fo, E);
        int64_t row0 = 0, m = 0;
        bool o_act = false;
        for (const batch_segment& g : batch) {
            const int64_t rows = static_cast<int64_t>(g.tokens.size());
            if (g.n_logits > 0) {
                o_act = norm(x_ + (row0 + rows - g.n_logits) * E, output_norm_, xn_ + m * E, g.n_logits, fo,
                             act_ + static_cast<size_t>(m) * act_row);
                m += g.n_logits;
            }
            row0 += rows;
        }
        if (m > 0) mm(output_, xn_, m, logits_, o_act);
    }

    cudaGraphExec_t capture(std::span<const batch_segment> batch, const std::vector<float*>& kv_bufs, int64_t n,
                            const graph_key& key) {
        if (graphs_cache_.size() >= 16) clear_graphs();
        ck(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
        cudaGraph_t g = nullptr;
        try {
            enqueue(batch, kv_bufs, n, d_pos_);
        } catch (...) {
            cudaStreamEndCapture(stream_, &g);
            if (g) cudaGraphDestroy(g);
            throw;
        }
        ck(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
        cudaGraphExec_t exec = nullptr;
        const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
        cudaGraphDestroy(g);
        ck(e, "cudaGraphInstantiate");
        graphs_cache_.emplace_back(key, exec);
        return exec;
    }

    // Graphs hold buffer addresses: dropped whenever a buffer they use is reallocated.
    void clear_graphs() {
        for (auto& kv : graphs_cache_) cudaGraphExecDestroy(kv.second);
        graphs_cache_.clear();
    }

    // ---- the forward's pieces -------------------------------------------------------------
    static quant::act_format fmt(const dmat& w) { return quant::act_format_for(w.type); }
    // Two matrices one launch can compute from the same activations (gate and up, k and v).
    static bool pairable(const dmat& a, const dmat& b) {
        return a.type == b.type && a.n_in == b.n_in && a.row_bytes == b.row_bytes && a.expert_stride == b.expert_stride;
    }

    // y [n_rows, w.n_out] = w . x; x [n_rows / act_div or n_rows, w.n_in] f32. reuse: the
    // activation rows in act_ are already x's, for w's activation format. accumulate: y += w . x
    // (the residual add in the same launch). w2, y2: a second matrix pairable with w, computed in
    // the same launch into y2 [n_rows, w2->n_out].
    void mm(const dmat& w, const float* x, int64_t n_rows, float* y, bool reuse, const int32_t* ids = nullptr,
            int act_div = 1, bool accumulate = false, const dmat* w2 = nullptr, float* y2 = nullptr) {
        const auto f = fmt(w);
        const int64_t act_rows = ids ? n_rows / act_div : n_rows;
        cuda::mm_args a;
        a.type = w.type;
        a.w = w.data;
        a.row_bytes = w.row_bytes;
        a.n_in = w.n_in;
        a.n_out = w.n_out;
        a.ids = ids;
        a.expert_stride = w.expert_stride;
        a.act_div = act_div;
        a.n_rows = n_rows;
        a.y = y;
        a.y_stride = w.n_out;
        a.accumulate = accumulate;
        if (ids && grouped_ && f != quant::act_format::f32) {
            a.perm = perm_;
            a.tiles = tiles_;
            a.n_tiles = n_tiles_;
            a.max_tiles = cuda::group_tiles_max(n_rows, group_experts_, cuda::k_tile_rows_mma);
            a.tile_rows = cuda::k_tile_rows_mma;
        }
        if (w2) {
            a.w2 = w2->data;
            a.n_out2 = w2->n_out;
            a.y2 = y2;
            a.y2_stride = w2->n_out;
        }
        if (f == quant::act_format::f32) {
            a.act = reinterpret_cast<const std::byte*>(x);
            a.act_stride = static_cast<size_t>(w.n_in) * 4;
        } else {
            if (!reuse) cuda::quantize_act_rows(f, x, act_rows, w.n_in, act_, stream_);
            a.act = act_;
            a.act_stride = quant::act_row_bytes(f, w.n_in);
        }
        cuda::matmul(a, stream_);
    }

    // out = rmsnorm(x) * w for n rows; when f is an int8 format, act_ gets out's activation rows
    // in the same launch (returns true), else act_ is untouched (false).
    bool norm(const float* x, const float* w, float* out, int64_t n, quant::act_format f, std::byte* act) {
        if (f == quant::act_format::f32) {
            cuda::rmsnorm(x, w, out, n, hp_.n_embd, hp_.rms_eps, stream_);
            return false;
        }
        cuda::rmsnorm_quant(x, w, out, n, hp_.n_embd, hp_.rms_eps, f, act, stream_);
        return true;
    }

    void attention_block(const dlayer& l, int il, std::span<const batch_segment> batch, const std::vector<float*>& kv_bufs,
                         int64_t n, const int32_t* pos_dev) {
        const int64_t hd = hp_.head_dim;
        const int64_t nq = hp_.n_head * hd, nkv = hp_.n_kv_head * hd;
        // The norm quantises for wq; k and v reuse those rows when their format takes the same.
        const bool q_act = norm(x_, l.attn_norm, xn_, n, fmt(l.wq), act_);
        mm(l.wq, xn_, n, q_, q_act);
        const bool k_reuse = q_act && fmt(l.wk) == fmt(l.wq);
        if (pairable(l.wk, l.wv)) {
            mm(l.wk, xn_, n, k_, k_reuse, nullptr, 1, false, &l.wv, v_);
        } else {
            mm(l.wk, xn_, n, k_, k_reuse);
            // An int8 wk leaves xn_'s rows for its format in act_ (a float wk leaves act_ alone, and
            // then v quantises again: a rare mix not worth tracking).
            const bool k_act = fmt(l.wk) != quant::act_format::f32;
            mm(l.wv, xn_, n, v_, k_act && fmt(l.wv) == fmt(l.wk));
        }
        if (l.bq) {
            cuda::add_rows(q_, l.bq, n, nq, stream_);
            cuda::add_rows(k_, l.bk, n, nkv, stream_);
            cuda::add_rows(v_, l.bv, n, nkv, stream_);
        }
        kernels::attention_params ap;
        ap.n_head = hp_.n_head;
        ap.n_kv_head = hp_.n_kv_head;
        ap.head_dim = hp_.head_dim;
        ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hp_.head_dim)));
        int64_t row0 = 0;
        for (size_t i = 0; i < batch.size(); ++i) {
            const batch_segment& g = batch[i];
            const int64_t rows = static_cast<int64_t>(g.tokens.size());
            const size_t layer_floats = static_cast<size_t>(g.kv->shape().n_ctx) * static_cast<size_t>(nkv);
            float* kc = kv_bufs[i] + (2 * static_cast<size_t>(il)) * layer_floats;
            float* vc = kc + layer_floats;
            // q/k head norms (qwen3*), RoPE, and k, v into the cache: one launch.
            cuda::qk_norm_rope_store(hp_.rope, rope_, g.pos0, q_ + row0 * nq, k_ + row0 * nkv, v_ + row0 * nkv, l.q_norm,
                                     l.k_norm, hp_.rms_eps, rows, hp_.n_head, hp_.n_kv_head, static_cast<int>(hd), kc, vc,
                                     stream_, pos_dev);
            cuda::attention(ap, q_ + row0 * nq, kc, vc, g.pos0, rows, attn_ + row0 * nq, stream_, pos_dev);
            row0 += rows;
        }
        // x += wo . attn in the matmul's launch.
        mm(l.wo, attn_, n, x_, false, nullptr, 1, true);
    }

    // SwiGLU of gate_ and up_ ([rows, width]) as the down projection's input: quantised straight
    // into act_ when `down` takes int8 rows (returns true: reuse them), else in place in gate_.
    bool swiglu_for(const dmat& down, int64_t rows, int64_t width) {
        if (fmt(down) == quant::act_format::f32) {
            cuda::swiglu(gate_, up_, gate_, rows * width, stream_);
            return false;
        }
        cuda::swiglu_quant(gate_, up_, rows, width, fmt(down), act_, stream_);
        return true;
    }

    void dense_block(const dlayer& l, int64_t n) {
        const bool g_act = norm(x_, l.ffn_norm, xn_, n, fmt(l.gate), act_);
        if (pairable(l.gate, l.up)) {
            mm(l.gate, xn_, n, gate_, g_act, nullptr, 1, false, &l.up, up_);
        } else {
            mm(l.gate, xn_, n, gate_, g_act);
            mm(l.up, xn_, n, up_, fmt(l.gate) != quant::act_format::f32 && fmt(l.up) == fmt(l.gate));
        }
        const bool d_act = swiglu_for(l.down, n, hp_.n_ff);
        mm(l.down, gate_, n, x_, d_act, nullptr, 1, true);   // x += down . swiglu
    }

    // Pair p = (row p / K, rank p % K), each a one-row product with expert ids[p] (read on the
    // device: every routed expert of the layer in one launch, gate and up together) into ey_.
    void routed_experts(const dlayer& l, int64_t n, const int32_t* ids, bool g_act) {
        const int64_t K = hp_.n_expert_used;
        const auto fg = fmt(l.gate_exps);
        if (pairable(l.gate_exps, l.up_exps)) {
            mm(l.gate_exps, xn_, n * K, gate_, g_act, ids, static_cast<int>(K), false, &l.up_exps, up_);
        } else {
            mm(l.gate_exps, xn_, n * K, gate_, g_act, ids, static_cast<int>(K));
            mm(l.up_exps, xn_, n * K, up_, fg != quant::act_format::f32 && fmt(l.up_exps) == fg, ids, static_cast<int>(K));
        }
        const bool d_act = swiglu_for(l.down_exps, n * K, hp_.n_ff_exp);
        mm(l.down_exps, gate_, n * K, ey_, d_act, ids, 1);
    }

    // Every routed expert of the layer in VRAM, expert e at slot e (the all-GPU model, a whole
    // layer of a split one, or a streamed layer's buffer).
    void all_experts(const dlayer& l, int64_t n, bool g_act) {
        const int64_t K = hp_.n_expert_used;
        // Many pairs per expert (a prefill): group them by expert on the device, so each
        // expert's weights are decoded once per tile of 64 pairs (the tensor-core kernel) instead
        // of once per pair. The choice depends on the sizes only; either way every pair's bits
        // are the same (E1).
        group_experts_ = hp_.n_expert;
        grouped_ = n * K >= 2 * hp_.n_expert && hp_.n_expert <= cuda::k_group_max_experts;
        if (grouped_)
            cuda::group_pairs(ids_, n * K, hp_.n_expert, cuda::k_tile_rows_mma, perm_, tiles_, n_tiles_, stream_);
        routed_experts(l, n, ids_, g_act);
    }

    void moe_block(const dlayer& l, int il, int64_t n) {
        const int64_t K = hp_.n_expert_used;
        const auto fg = fmt(l.gate_exps);
        bool g_act = norm(x_, l.ffn_norm, xn_, n, fg, act_);
        // The router (F32 in the files llama.cpp writes: it reads xn_ and leaves act_ alone).
        const auto fr = fmt(l.router);
        mm(l.router, xn_, n, router_, g_act && fr == fg);
        if (fr != quant::act_format::f32 && fr != fg) g_act = false;   // act_ was overwritten
        kernels::router_params rp;
        rp.n_expert = hp_.n_expert;
        rp.n_used = hp_.n_expert_used;
        rp.renormalize = hp_.expert_weights_norm;
        cuda::route_topk(rp, router_, n, ids_, ew_, stream_);
        if (lanes_ && lanes_->streaming() && !lanes_->whole_layer(il)) {
            // A streamed split layer (prefill): its experts copied whole into a layer buffer in
            // expert order, computed as a whole layer once the copies land.
            const cuda_expert_lanes::layer_slots& buf = lanes_->stream_acquire(il);
            dlayer streamed = l;
            streamed.gate_exps.data = buf.gate;
            streamed.up_exps.data = buf.up;
            streamed.down_exps.data = buf.down;
            lanes_->gpu_begin(il);   // after the wait: the GPU lane's time, not the copy's
            all_experts(streamed, n, g_act);
            lanes_->gpu_end(il);
            lanes_->stream_release(il);
        } else if (lanes_ && !lanes_->whole_layer(il)) {
            // A split layer: the ids go to the host, the GPU computes the pairs of resident experts
            // (slot ids; grouped, CPU pairs skipped) while the CPU lane computes the rest, whose
            // rows join ey_ before the combine: every pair's row has the same bits either way (E3).
            const cuda_expert_lanes::routed r = lanes_->route(il, n, ids_, xn_);
            if (r.gpu_pairs + r.pcie_pairs > 0) lanes_->gpu_begin(il);
            if (r.gpu_pairs > 0) {
                group_experts_ = lanes_->slots(il).n_slots;
                grouped_ = r.grouped;
                if (grouped_)
                    cuda::group_pairs(r.mm_ids, n * K, group_experts_, cuda::k_tile_rows_mma, perm_, tiles_, n_tiles_, stream_);
                routed_experts(l, n, r.mm_ids, g_act);
                g_act = false;   // act_ now holds the down projection's input
            }
            if (r.pcie_pairs > 0) {
                // The misses copied over PCIe: the same launches on the staging slots, once the
                // copies have landed (their pairs only: the others are -1, skipped).
                lanes_->staged_begin();
                const cuda_expert_lanes::layer_slots& st = lanes_->staging();
                dlayer staged = l;
                staged.gate_exps.data = st.gate;
                staged.up_exps.data = st.up;
                staged.down_exps.data = st.down;
                group_experts_ = st.n_slots;
                grouped_ = true;
                cuda::group_pairs(r.stage_ids, n * K, group_experts_, cuda::k_tile_rows_mma, perm_, tiles_, n_tiles_, stream_);
                routed_experts(staged, n, r.stage_ids, g_act);
                lanes_->staged_end();
            }
            if (r.gpu_pairs + r.pcie_pairs > 0) lanes_->gpu_end(il);
            lanes_->run_cpu(n, *pool_, il);
            lanes_->join(n, ey_);
        } else {
            all_experts(l, n, g_act);
        }
        grouped_ = false;
        const int64_t E = hp_.n_embd;
        if (!l.sh_inp) {
            cuda::moe_combine(ey_, ew_, static_cast<int>(K), n, E, x_, stream_, true);   // x += the rank-order sum
            return;
        }
        cuda::moe_combine(ey_, ew_, static_cast<int>(K), n, E, out_buf_, stream_);
        const int64_t S = hp_.n_ff_shexp;
        mm(l.sh_gate, xn_, n, gate_, false);
        mm(l.sh_up, xn_, n, up_, l.sh_up.type == l.sh_gate.type);
        cuda::swiglu(gate_, up_, gate_, n * S, stream_);
        mm(l.sh_down, gate_, n, shexp_, false);
        mm(l.sh_inp, xn_, n, shgate_, false);
        cuda::add_gated(out_buf_, shexp_, shgate_, n, E, stream_);
        cuda::add(x_, out_buf_, n * E, stream_);
    }

    int dev_;
    cudaStream_t stream_ = nullptr;
    arch_spec spec_{};
    model_hparams hp_;
    output_weights out_;
    const tensor_view* tok_embd_ = nullptr;   // read on the host for the embedding rows
    float* output_norm_ = nullptr;
    dmat output_;
    std::vector<dlayer> layers_;
    std::vector<void*> allocs_;
    std::unordered_map<const tensor_view*, dmat> uploaded_;
    std::unordered_map<const kv_cache*, dkv> kvs_;
    float* rope_ = nullptr;   // [rope_pos_, n_rot]
    int32_t rope_pos_ = 0;
    // Scratch for max_rows_ rows (see ensure_scratch for shapes).
    int max_rows_ = 0;
    std::vector<void*> scratch_;
    float *x_ = nullptr, *xn_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *attn_ = nullptr;
    float *out_buf_ = nullptr, *gate_ = nullptr, *up_ = nullptr, *ey_ = nullptr, *shexp_ = nullptr;
    float *router_ = nullptr, *ew_ = nullptr, *shgate_ = nullptr, *logits_ = nullptr;
    int32_t* ids_ = nullptr;
    int32_t *perm_ = nullptr, *tiles_ = nullptr, *n_tiles_ = nullptr;   // group_pairs' output: [RK], [max tiles][3], [1]
    bool grouped_ = false;   // the expert matmuls being enqueued use the grouped pairs
    int group_experts_ = 0;  // ... grouped over this many experts (or a split layer's cache slots)
    std::unique_ptr<cuda_expert_lanes> lanes_;   // the split model's lanes (null: every expert in VRAM)
    thread_pool* pool_ = nullptr;                // the CPU lane's threads (the forward's scratch)
    std::byte* act_ = nullptr;
    float* h_x_ = nullptr;        // pinned [max_rows_, n_embd]
    int32_t* h_pos_ = nullptr;    // pinned [1]: a graph step's position
    int32_t* d_pos_ = nullptr;    // device [1]
    bool graphs_ = true;          // decode steps (one segment, one row) as CUDA graphs
    std::vector<std::pair<graph_key, cudaGraphExec_t>> graphs_cache_;
};

}  // namespace

bool cuda_available() {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

std::unique_ptr<model> load_model_cuda(const model_file& f, const load_options& o, int device, bool graphs) {
    auto m = std::make_unique<cuda_model>(f, o, device, nullptr);
    m->set_graphs(graphs);
    return m;
}

std::unique_ptr<model> load_model_cuda(const model_file& f, const load_options& o, int device, const cuda_placement& p,
                                       bool graphs) {
    auto m = std::make_unique<cuda_model>(f, o, device, &p);
    m->set_graphs(graphs);
    return m;
}

namespace {
const cuda_model& as_cuda(const model& m, const char* what) {
    const auto* c = dynamic_cast<const cuda_model*>(&m);
    if (!c) fail("{}: not a model made by load_model_cuda", what);
    return *c;
}
}  // namespace

cuda_placement_info cuda_placement_of(const model& m) {
    const cuda_model& c = as_cuda(m, "cuda_placement_of");
    if (c.lanes()) return c.lanes()->info();
    cuda_placement_info i;   // every routed expert in VRAM
    const model_hparams& hp = c.hparams();
    i.resident = i.total = hp.n_expert > 0 ? hp.n_layer * hp.n_expert : 0;
    i.whole_layers = hp.n_expert > 0 ? hp.n_layer : 0;
    return i;
}

std::optional<placement::placement_metrics> cuda_placement_metrics(const model& m) {
    const cuda_model& c = as_cuda(m, "cuda_placement_metrics");
    if (!c.lanes()) return std::nullopt;
    return c.lanes()->metrics();
}

void reset_cuda_placement_metrics(model& m) {
    auto& c = const_cast<cuda_model&>(as_cuda(m, "reset_cuda_placement_metrics"));
    if (c.lanes()) c.lanes()->reset_metrics();
}

void set_cuda_graphs(model& m, bool on) {
    auto* c = dynamic_cast<cuda_model*>(&m);
    if (!c) fail("set_cuda_graphs: not a model made by load_model_cuda");
    c->set_graphs(on);
}

void set_cuda_programmatic_launch(model& m, bool on) {
    auto* c = dynamic_cast<cuda_model*>(&m);
    if (!c) fail("set_cuda_programmatic_launch: not a model made by load_model_cuda");
    c->set_programmatic(on);
}

}  // namespace sluice

#else  // no CUDA backend in this build

namespace sluice {

bool cuda_available() { return false; }

std::unique_ptr<model> load_model_cuda(const model_file&, const load_options&, int device, bool) {
    fail("cuda model: device {}: sluice was not built with CUDA (configure with -DSLUICE_CUDA=ON and nvcc)", device);
}
std::unique_ptr<model> load_model_cuda(const model_file&, const load_options&, int device, const cuda_placement&, bool) {
    fail("cuda model: device {}: sluice was not built with CUDA (configure with -DSLUICE_CUDA=ON and nvcc)", device);
}
cuda_placement_info cuda_placement_of(const model&) { fail("cuda_placement_of: sluice was not built with CUDA"); }
std::optional<placement::placement_metrics> cuda_placement_metrics(const model&) {
    fail("cuda_placement_metrics: sluice was not built with CUDA");
}
void reset_cuda_placement_metrics(model&) { fail("reset_cuda_placement_metrics: sluice was not built with CUDA"); }

void set_cuda_graphs(model&, bool) { fail("set_cuda_graphs: sluice was not built with CUDA"); }
void set_cuda_programmatic_launch(model&, bool) { fail("set_cuda_programmatic_launch: sluice was not built with CUDA"); }

}  // namespace sluice

#endif
