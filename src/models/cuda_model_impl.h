// The CUDA model's class, private to src/models (the interface is models/cuda_model.h), shared
// by its source files: cuda_model.cpp (loading, per-forward buffers, the forward, its dense
// block, graphs), cuda_model_attention.cpp (the attention block, its RoPE table and split
// attention records), cuda_model_moe.cpp (the MoE block: routing, then the routed experts
// all in VRAM, split between the lanes of cuda_expert_lanes.h, or streamed), cuda_model_kv.cpp
// (the device copies of the KV caches), cuda_model_hybrid.cpp (the hybrid Qwen MoEs' DeltaNet
// layers and recurrent state) and cuda_model_mtp.cpp (their MTP head). CUDA builds only.
#pragma once

#ifdef SLUICE_HAVE_CUDA

#include "models/cuda_model.h"

#include "core/error.h"
#include "io/model_file.h"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/ops.cuh"
#include "models/blocks.h"
#include "models/cuda_expert_lanes.h"
#include "models/hybrid_model.h"
#include "quant/act.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::cuda_impl {

void ck(cudaError_t e, const char* what);

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
    // The shared expert's gate, up and down are expert n_expert of the banks above (uploaded one
    // expert longer: upload_bank_with), so a decode row computes it as pair k_used of the routed
    // launches (sh_gate / sh_up / sh_down then point into the banks).
    bool sh_pair = false;
    // Hybrid models (hybrid_blocks.h): a gated attention layer uses attn_norm, wq [n_embd,
    // 2*nq] (query then gate per head), wk, wv, wo, q_norm, k_norm; a Gated DeltaNet layer
    // (recurrent) attn_norm, wo = ssm_out [value_dim, n_embd] and the fields below. Both take
    // ffn_norm = post_attention_norm for the MoE FFN.
    bool recurrent = false;
    int rec = -1;                               // its recurrent-state layer
    dmat wqkv, wz;                              // attn_qkv [n_embd, conv_channels], attn_gate [n_embd, value_dim]
    dmat w_ba;                                  // ssm_ba [n_embd, 2*n_v] (qwen3next)
    dmat w_beta, w_alpha;                       // ssm_beta, ssm_alpha [n_embd, n_v] (qwen35moe)
    float* conv = nullptr;                      // ssm_conv1d [conv_channels, d_conv]
    float *dt_bias = nullptr, *ssm_a = nullptr; // [n_v]
    float* ssm_norm = nullptr;                  // [head_v_dim]
};

// A sequence's KV cache on the device: per layer K then V, each [n_ctx, n_kv_head, head_dim].
// Hybrid models add the recurrent state, laid out as kv/recurrent_state.h's host arrays (so the
// two copy into each other whole), with the same bookkeeping for rollback.
struct dkv {
    float* buf = nullptr;
    int n_ctx = 0;
    float* rec = nullptr;        // [n_rec, conv_floats + ssm_floats] the live state
    float* rec_ckpt = nullptr;   // [rec_slots, n_rec, conv_floats + ssm_floats] a window's checkpoints
    int32_t rec_slots = 0;       // slots allocated: the largest window's checkpointed rows so far (<= n_ckpt)
    int32_t rec_len = 0;         // positions folded into rec (-1: unknown, after a failed forward)
    int32_t rec_lo = 0;          // slot j holds the state of length rec_lo + j ...
    int32_t rec_valid = 0;       // ... for j < rec_valid
    int64_t ck_first = 0;        // the running window's first checkpointed row
};

// One sequence's rows for the attention block: where they start and its K/V in VRAM.
struct attn_rows {
    int32_t pos0 = 0;
    int64_t rows = 0;
    int n_ctx = 0;         // positions the cache holds
    float* kv = nullptr;   // per layer K then V, each [n_ctx, n_kv_head, head_dim]
};

// The MTP (nextn) block of a hybrid file on the device: run by cuda_mtp_head (cuda_model_mtp.cpp),
// never by forward_batch; uploaded when the first head is made (a run without MTP drafting
// spends no VRAM on it). Every routed expert of the block is in VRAM, outside the routed
// experts' budget, so drafting never waits on the CPU lane.
struct dmtp {
    dlayer block;               // gated attention + the MoE FFN with the shared expert, experts in VRAM
    dmat eh_proj;               // [2*n_embd, n_embd]
    float* head_norm = nullptr; // [n_embd] shared_head_norm, or output_norm
    dmat head;                  // [n_embd, n_vocab] shared_head_head, or output
    uint64_t bytes = 0;         // VRAM of the block's own weights
};

// One forward of the MTP head (cuda_model::mtp_forward); the buffers are the head's.
struct mtp_pass {
    const float* h_cat = nullptr;   // pinned [n, 2*n_embd]: enorm(embed(t)) | hnorm(h), made on the host
    float* d_cat = nullptr;         // device [n, 2*n_embd]
    int64_t n = 0;                  // rows
    int32_t pos0 = 0;               // the first row's position
    int n_ctx = 0;                  // positions the head's cache holds
    float* kv = nullptr;            // device: the head's K then V [n_ctx, n_kv_head * head_dim] each
    float* d_hout = nullptr;        // device [n, n_embd] h' = head_norm(x')
    float* h_hout = nullptr;        // pinned [n, n_embd] its copy
    const dmat* logits = nullptr;   // null: no logits; else the output matrix (the head's, or its draft rows) ...
    float* h_logits = nullptr;      // ... whose [logits->n_out] products with the last row's h' land here (pinned)
};

struct arch_spec {
    kernels::rope_mode rope;
    bool bias, qk_norm, moe, shexp, default_norm;
    bool hybrid = false;   // qwen3next / qwen35moe: Gated DeltaNet and gated attention layers
};

arch_spec spec_for(const std::string& arch);

class cuda_model final : public model {
public:
    // place: null, or the VRAM budget for routed experts (a budget below their total splits the
    // experts between the GPU's cache slots and the CPU lane: cuda_expert_lanes).
    cuda_model(const model_file& f, const load_options&, int device, const cuda_placement* place);

    ~cuda_model() override;

    const model_hparams& hparams() const override { return hp_; }

    void forward_batch(std::span<const batch_segment> batch, forward_scratch& s, float* logits) override;
    bool forward_on_host() const override { return false; }   // its scratch: x and the pool only

    // The file's MTP block: its bound host views (null: the file has none); on the device once
    // upload_mtp has run (null before); one forward of it (waits for its copies).
    const mtp_weights* mtp_host() const { return mtp_host_ ? &*mtp_host_ : nullptr; }
    const dmtp* mtp() const { return mtp_ ? &*mtp_ : nullptr; }
    const dmtp& upload_mtp();
    const output_weights& output() const { return out_; }   // host views and the output norm
    void mtp_forward(const mtp_pass& p);
    int device() const { return dev_; }

    // t read from data on the device (its shape; checked for a CUDA matmul), or a bank of cache
    // slots read as an expert tensor: slot s where the file has expert s. data: the device copy,
    // or the slots' buffer (null when the layer has none).
    static dmat slot_mat(const tensor_view& t, const std::byte* data);

    // The device copy of kv to and from its host arrays (model.h).
    void sync_kv_to_host(kv_cache& kv) override;
    void load_kv_from_host(kv_cache& kv) override;

    // The forward's launches: a captured graph for a decode step, else enqueued one by one.
    void enqueue_forward(std::span<const batch_segment> batch, const std::vector<float*>& kv_bufs, int64_t n);

    const cuda_expert_lanes* lanes() const { return lanes_.get(); }
    cuda_expert_lanes* lanes() { return lanes_.get(); }

    void set_graphs(bool on) { graphs_ = on; }
    void set_programmatic(bool on);

private:
    // ---- loading ----------------------------------------------------------------------------
    void* dalloc(size_t bytes);

    float* upload_vec(const std::vector<float>& v);

    // Allocates t's device copy; the bytes are copied at once, or, while the constructor binds
    // the weights (pending_uploads_ open), by flush_uploads.
    dmat upload_mat(const tensor_view& t);
    // t's bytes to dst: now, or at the batched copy when uploads are deferred (defer_uploads_).
    void copy_up(std::byte* dst, const tensor_view& t);
    // Whether `extra` (a shared expert's matrix) has the type and per-expert shape of `bank`'s
    // experts, so that it can follow them as one more.
    static bool fits_as_expert(const tensor_view& bank, const tensor_view& extra);
    // bank uploaded with extra after its last expert, in one allocation (fits_as_expert, else it
    // fails): bank_out views the bank, extra_out the matrix after it.
    void upload_bank_with(const tensor_view& bank, const tensor_view& extra, dmat& bank_out, dmat& extra_out);
    // Copies the pending uploads in binding order, reporting them to the load's progress as one
    // phase of known size (first reads of a mapped file come from the disk: minutes for a large
    // model), and closes the pending list.
    void flush_uploads(placement::progress* prog);

    // ---- per-forward buffers ----------------------------------------------------------------
    void free_scratch();

    template <class T>
    T* salloc(size_t count) {
        void* p = nullptr;
        ck(cudaMalloc(&p, count * sizeof(T) + 16), "cudaMalloc (scratch)");
        scratch_.push_back(p);
        return static_cast<T*>(p);
    }

    void ensure_scratch(int max_rows);

    // cos/sin rows for positions [0, n_pos), made by the CPU's rope_table.
    void ensure_rope(int32_t n_pos);

    // The device copy of kv (made on first use; the cache's release hook queues it for freeing).
    float* kv_for(kv_cache& kv);
    // Frees the device copies of caches released since the last call (released_).
    void drain_released();
    void free_kv(dkv& d);
    void ensure_attention_split(int n_ctx);
    void free_attention_split();

    // Waits for the forward and copies its m logits rows (logits_) to dst.
    void copy_logits(float* dst, int64_t m);

    // ---- one forward, enqueued ------------------------------------------------------------
    struct graph_key {
        float* kv;
        int n_ctx;
        int32_t n_logits;
        int64_t rows = 1;   // a decode step's one row, or a verify window's rows
        bool operator==(const graph_key& o) const {
            return kv == o.kv && n_ctx == o.n_ctx && n_logits == o.n_logits && rows == o.rows;
        }
    };
    // Graphs kept (decode steps and verify windows of 2..16 rows, per cache): past this many the
    // cache is cleared and capture starts again.
    static constexpr size_t k_graphs_max = 64;
    // The forwards a graph can replay at any position, whole or split: one segment of one row (a
    // decode step) or of 2..k_split_max_rows rows that all want logits (a verify window). A
    // prefill chunk (logits for its last row only) stays uncaptured: each size would be captured
    // for one use.
    static bool graph_shaped(std::span<const batch_segment> batch, int64_t n);
    // Whether a forward of the model in VRAM runs as a captured graph (graph_shaped, graphs on).
    bool graphs_apply(std::span<const batch_segment> batch, int64_t n) const;

    // Everything from the embedding copy to the LM head's logits (left in logits_). pos_dev:
    // nullptr for host positions (each segment's pos0), or the device copy of segment 0's pos0
    // (graph replay; single segment).
    void enqueue(std::span<const batch_segment> batch, const std::vector<float*>& kv_bufs, int64_t n, const int32_t* pos_dev);

    cudaGraphExec_t capture(std::span<const batch_segment> batch, const std::vector<float*>& kv_bufs, int64_t n,
                            const graph_key& key);

    // ---- a split model's decode step and verify windows as graphs (cuda_model_graphs.cpp) ---
    // The host sits inside every split layer (the routed ids come to it, it plans, its CPU lane
    // computes), so the step is cut there into segments, each captured once and replayed:
    //   head: the embedding .. the first split layer's router;
    //   per split layer: hits (the doorbell that hands the routing to the host, the resident
    //   experts, the shared expert); [the host polls the doorbell and plans while hits runs]
    //   staged (the slots' upload, the PCIe lane's experts after their copies land; with the
    //   lane only); [the CPU lane] tail (the slots' upload without the PCIe lane, the CPU rows
    //   joined, the combine .. the next split layer's router, or the logits).
    // Replaying saves the host's launches on the step's serial path (~175 us of them per split
    // layer of the 80B shape, session 16's split_decode_bench).
    // Split graphs kept: a decode step and windows of 2..16 rows for two caches (a target and
    // its MTP head's, or two requests') before the cache is cleared and capture starts again.
    static constexpr size_t k_split_graphs_max = 2 * cuda::k_split_max_rows;
    struct split_graph {
        graph_key key;   // key.rows: the rows of the step or window
        std::vector<cudaGraphExec_t> segments;   // in the order above
    };
    bool split_graphs_apply(std::span<const batch_segment> batch, int64_t n) const;
    // Runs the step: replays its graphs, or captures them while running it the first time.
    void enqueue_split_step(std::span<const batch_segment> batch, const std::vector<float*>& kv_bufs, int64_t n);
    void replay_split(const split_graph& g);
    // The capture's cuts (segment_out_ non-null while capturing): segment_begin starts capturing
    // on the stream; segment_cut ends it, keeps the graph and launches it.
    void segment_begin();
    void segment_cut();
    // moe_block's split layer during a capture: the same launches as its uncaptured path, cut into
    // the segments above (every launch made whatever the window routed: each lane's matmuls
    // skip the other lanes' pairs on the device).
    void captured_split_layer(const dlayer& l, int il, int64_t n, bool g_act);

    // Graphs hold buffer addresses: dropped whenever a buffer they use is reallocated.
    void clear_graphs();

    // ---- the forward's pieces -------------------------------------------------------------
    static quant::act_format fmt(const dmat& w) { return quant::act_format_for(w.type); }
    // Two plain matrices one launch can compute from the same activations (q and k: their
    // expert strides, rows x row bytes, differ and no plain launch reads them).
    static bool pairable_plain(const dmat& a, const dmat& b) {
        return a.type == b.type && a.n_in == b.n_in && a.row_bytes == b.row_bytes;
    }
    // ... and two matrices or expert banks (gate and up, k and v).
    static bool pairable(const dmat& a, const dmat& b) {
        return pairable_plain(a, b) && a.expert_stride == b.expert_stride;
    }

    // y [n_rows, w.n_out] = w . x; x [n_rows / act_div or n_rows, w.n_in] f32. reuse: the
    // activation rows in act_ are already x's, for w's activation format. accumulate: y += w . x
    // (the residual add in the same launch). w2, y2: a second matrix pairable with w, computed in
    // the same launch into y2 [n_rows, w2->n_out].
    void mm(const dmat& w, const float* x, int64_t n_rows, float* y, bool reuse, const int32_t* ids = nullptr,
            int act_div = 1, bool accumulate = false, const dmat* w2 = nullptr, float* y2 = nullptr);
    // mm's launch arguments (the activation rows quantised first unless reused), for a caller that
    // launches them itself (the router with its top-k).
    cuda::mm_args mm_args_for(const dmat& w, const float* x, int64_t n_rows, float* y, bool reuse,
                              const int32_t* ids = nullptr, int act_div = 1, bool accumulate = false,
                              const dmat* w2 = nullptr, float* y2 = nullptr);

    // out = rmsnorm(x) * w for n rows; when f is an int8 format, act_ gets out's activation rows
    // in the same launch (returns true), else act_ is untouched (false). A residual add the MoE
    // block left pending (pending_residual_) is made first: in the same launch when x is x_ and
    // the rows are quantised (moe_residual_rmsnorm_quant), else by its own launches.
    bool norm(const float* x, const float* w, float* out, int64_t n, quant::act_format f, std::byte* act);
    // x_ += the MoE block's pending sum (its own launches), if one is pending.
    void flush_residual();

    // x += attention(rmsnorm(x)) against KV layer il of each sequence's cache (segs: the rows in
    // order).
    void attention_block(const dlayer& l, int il, std::span<const attn_rows> segs, int64_t n, const int32_t* pos_dev);

    // y = down . swiglu(gate_, up_) for `rows` rows of down's width (y += with accumulate; ids:
    // expert mode, the pairs' experts): int8 formats through cuda::matmul_swiglu (the SwiGLU
    // quantised by the down launch's own blocks where the one-wave kernel takes it, else into
    // act_ first), float formats by the SwiGLU in place in gate_ and then the product.
    // ids_settled: see cuda::mm_args (the ids' writer ran two launches or more before the SwiGLU).
    void swiglu_down(const dmat& down, int64_t rows, float* y, const int32_t* ids = nullptr, bool accumulate = false,
                     bool ids_settled = false);

    void dense_block(const dlayer& l, int64_t n);

    // Pair p = (row p / K, rank p % K), each a one-row product with expert ids[p] (read on the
    // device: every routed expert of the layer in one launch, gate and up together) into ey_.
    // pairs: the pairs a row (k_used, or k_used + 1 with the shared expert as a pair: sh_pair).
    void routed_experts(const dlayer& l, int64_t n, const int32_t* ids, bool g_act, int pairs);

    // Every routed expert of the layer in VRAM, expert e at slot e (the all-GPU model, a whole
    // layer of a split one, or a streamed layer's buffer). ids: device [n * k_used], the router's
    // (ids_) unless given; -1 skips a pair (a streamed layer's resident pairs).
    void all_experts(const dlayer& l, int64_t n, bool g_act, const int32_t* ids = nullptr, int pairs = 0);

    // A split layer's pairs on n_slots slots (resident, or the staging slots): ids [n * k_used],
    // each pair's slot or -1 for another lane's pair (skipped).
    void slot_experts(const dlayer& l, int n_slots, int64_t n, const int32_t* ids, bool g_act);
    // ... on the PCIe lane's staging slots.
    void staged_experts(const dlayer& l, int64_t n, const int32_t* ids, bool g_act);

    // The gated shared expert's product and gate logit (none without sh_inp) into shexp_
    // [n, n_embd] and shgate_ [n, 1], from xn_; the combine adds them.
    void shared_expert(const dlayer& l, int64_t n);
    // The shared expert's sigmoid gate input [n, 1] into shgate_, unless the router's launch made it.
    void shared_gate_value(const dlayer& l, int64_t n);
    // The shared expert's gate logit is computed by the router's launch (a second matrix of the
    // same float format and width: one more column block) rather than by a launch of its own.
    static bool gate_in_router(const dlayer& l) { return l.sh_inp.data && pairable_plain(l.router, l.sh_inp); }

    // il: the trunk layer (the split model's lanes know it), or -1 for the MTP block (every
    // expert in VRAM).
    void moe_block(const dlayer& l, int il, int64_t n);
    // The MoE block's residual add left to the next norm (defer_residual_: set by enqueue for
    // every trunk layer but the last, whose next launch is that norm): saves up to three launches
    // a layer, the same bits (ops.cuh).
    bool defer_residual_ = false;
    cuda::moe_residual pending_residual_;   // ey set: pending for pending_rows_ rows
    int64_t pending_rows_ = 0;

    // ---- hybrid models (cuda_model_hybrid.cpp) ----------------------------------------------
    // Binds and uploads layer il of a hybrid file (its MoE FFN as the other MoE models do).
    dlayer load_hybrid_layer(const model_file& f, const weight_binder& b, int il, const hybrid_variant& v);
    // A gated attention block's weights into l (a trunk layer's, or the MTP block's).
    void upload_gated_attention(const gated_attn_weights& a, dlayer& l);
    // Device recurrent state for every segment's cache: rolled back to pos0 (from the window
    // checkpoints, or zeroed at 0) and set up for the window's checkpoints, as begin_recurrent
    // does on the host; end_recurrent_device after the forward.
    void begin_recurrent_device(std::span<const batch_segment> batch);
    // d's live state rolled back to length n (zeroed for 0, else from a window checkpoint; throws
    // when it holds neither), enqueued.
    void rewind_recurrent_device(dkv& d, int32_t n, size_t live_floats);
    void end_recurrent_device(std::span<const batch_segment> batch, bool ok);
    // x += DeltaNet(rmsnorm(x)) (hybrid_blocks.cpp's delta_net_block), the recurrence per segment
    // against its cache's device state.
    void delta_net_block(const dlayer& l, std::span<const batch_segment> batch, int64_t n);

    int dev_;
    int sm_count_ = 0;   // dev_'s SMs: the matmuls' one-wave launch shapes (cuda::mm_args::sm_count)
    cudaStream_t stream_ = nullptr;
    arch_spec spec_{};
    model_hparams hp_;
    hybrid_hparams hy_;   // hybrid models: the DeltaNet shape and which layers are recurrent
    output_weights out_;
    const tensor_view* tok_embd_ = nullptr;   // read on the host for the embedding rows
    float* output_norm_ = nullptr;
    dmat output_;
    std::vector<dlayer> layers_;
    std::optional<mtp_weights> mtp_host_;   // hybrid files with a nextn block: bound at load
    std::optional<dmtp> mtp_;               // ... and uploaded by the first MTP head
    std::vector<attn_rows> attn_rows_;   // the forward's sequences for attention_block (capacity kept)
    std::vector<void*> allocs_;
    std::unordered_map<const tensor_view*, dmat> uploaded_;
    struct pending_upload {
        void* dst;
        const void* src;
        size_t bytes;
    };
    std::vector<pending_upload> pending_uploads_;   // the constructor's, until flush_uploads
    bool defer_uploads_ = false;
    std::unordered_map<const kv_cache*, dkv> kvs_;
    // Addresses of caches destroyed (or moved, assigned) since the last drain_released: their
    // hooks may run on any thread and after this model is gone, so they only queue, under the
    // mutex, through a weak pointer.
    struct release_queue {
        std::mutex m;
        std::vector<const kv_cache*> caches;
    };
    std::shared_ptr<release_queue> released_ = std::make_shared<release_queue>();
    float* rope_ = nullptr;   // [rope_pos_, n_rot]
    cuda::attention_split attn_split_;   // decode attention's chunk records for the longest cache
    // Rows of split attention records (ensure_attention_split): a verify window's widest
    // (cuda::k_split_max_rows) within 64 MiB, outside the --vram-budget as the KV cache is (16
    // rows up to 7,936 positions for 32 heads of 128, 34.6 MB at 4,096; 3 at 32,768).
    static constexpr size_t k_split_records_bytes = size_t{64} << 20;
    std::vector<float*> kv_bufs_;        // [segments] each segment's device KV, refilled every forward (no allocation once grown)
    int32_t rope_pos_ = 0;
    // Scratch for max_rows_ rows (see ensure_scratch for shapes).
    int max_rows_ = 0;
    std::vector<void*> scratch_;
    float *x_ = nullptr, *xn_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *attn_ = nullptr;
    float *out_buf_ = nullptr, *gate_ = nullptr, *up_ = nullptr, *ey_ = nullptr, *shexp_ = nullptr;
    float *router_ = nullptr, *ew_ = nullptr, *shgate_ = nullptr, *logits_ = nullptr;
    int32_t* ids_ = nullptr;
    // A decode row's ids with the shared expert as its last pair (sh_pair layers): [k_used + 1],
    // the router writes the first k_used, the last is n_expert (set once).
    int32_t* ids_sh_ = nullptr;
    // Hybrid models' scratch (null otherwise): qg_ [R, 2*nq] the gated query projection; the
    // DeltaNet's dn_mixed_ [R, C] projection, dn_conv_ [R, C] conv output, dn_z_ [R, value_dim]
    // output gate, dn_ba_ [R, 2*n_v] beta|alpha (or beta) logits, dn_alpha_ [R, n_v], dn_core_
    // [R, value_dim] rule output.
    float *qg_ = nullptr, *dn_mixed_ = nullptr, *dn_conv_ = nullptr, *dn_z_ = nullptr, *dn_ba_ = nullptr;
    float *dn_alpha_ = nullptr, *dn_core_ = nullptr;
    int32_t *perm_ = nullptr, *tiles_ = nullptr, *n_tiles_ = nullptr;   // group_pairs' output: [RK], [max tiles][3], [1]
    bool grouped_ = false;   // the expert matmuls being enqueued use the grouped pairs
    int group_experts_ = 0;  // ... grouped over this many experts (or a split layer's cache slots)
    std::unique_ptr<cuda_expert_lanes> lanes_;   // the split model's lanes (null: every expert in VRAM)
    thread_pool* pool_ = nullptr;                // the CPU lane's threads (the forward's scratch)
    std::byte* act_ = nullptr;
    float* h_x_ = nullptr;        // pinned [max_rows_, n_embd]
    int32_t* h_pos_ = nullptr;    // pinned [1]: a graph step's position
    // Rows of logits staged at a time: a verify window's 16 (9.7 MB for a 151,936 vocabulary);
    // a prefill that wants more rows copies them in turns.
    static constexpr int k_logits_stage_rows = 16;
    int logits_stage_rows_ = 0;
    float* h_logits_ = nullptr;   // pinned [logits_stage_rows_, n_vocab]
    int32_t* d_pos_ = nullptr;    // device [1]
    unsigned* route_arrivals_ = nullptr;   // device [2]: [0] the fused router's block counter (zero between launches)
    unsigned* combine_arrivals_ = nullptr; // route_arrivals_ + 1: a one-row combine's block counter (moe_residual::arrivals)
    bool graphs_ = true;          // decode steps (one segment, one row) as CUDA graphs
    std::vector<std::pair<graph_key, cudaGraphExec_t>> graphs_cache_;
    std::vector<split_graph> split_graphs_;                     // a split model's, per key
    std::vector<cudaGraphExec_t>* segment_out_ = nullptr;       // the capture's segments (null: not capturing)
};

}  // namespace sluice::cuda_impl

#endif  // SLUICE_HAVE_CUDA
