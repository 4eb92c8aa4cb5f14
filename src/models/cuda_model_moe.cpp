// The CUDA model's MoE block (the class is models/cuda_model_impl.h): the norm, the router and
// its top-k, then the routed experts of the layer computed one of three ways with the same bits:
// all in VRAM (one launch for every pair, grouped by expert for a prefill), split between the
// GPU's cache slots, the PCIe staging slots and the CPU lane (cuda_expert_lanes.h), or streamed
// whole into a layer buffer (a prefill chunk, cuda_expert_stream.cpp); then the combine in rank
// order and, for qwen2moe, the gated shared expert.
#ifdef SLUICE_HAVE_CUDA

#include "models/cuda_model_impl.h"

#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/ops.cuh"

namespace sluice::cuda_impl {

void cuda_model::routed_experts(const dlayer& l, int64_t n, const int32_t* ids, bool g_act, int pairs) {
    const int64_t K = pairs;
    const auto fg = fmt(l.gate_exps);
    if (pairable(l.gate_exps, l.up_exps)) {
        mm(l.gate_exps, xn_, n * K, gate_, g_act, ids, static_cast<int>(K), false, &l.up_exps, up_);
    } else {
        mm(l.gate_exps, xn_, n * K, gate_, g_act, ids, static_cast<int>(K));
        mm(l.up_exps, xn_, n * K, up_, fg != quant::act_format::f32 && fmt(l.up_exps) == fg, ids, static_cast<int>(K));
    }
    // Whoever wrote the ids (the router, the split's kernels, an upload) ran before the gate and up
    // launch, and that one before the down projection's launches: their blocks may read the ids
    // before they wait (cuda::mm_args::ids_settled).
    swiglu_down(l.down_exps, n * K, ey_, ids, false, true);
}

void cuda_model::all_experts(const dlayer& l, int64_t n, bool g_act, const int32_t* ids, int pairs) {
    const int64_t K = pairs > 0 ? pairs : hp_.n_expert_used;
    if (!ids) ids = ids_;
    // Many pairs per expert (a prefill): group them by expert on the device, so each
    // expert's weights are decoded once per tile of 64 pairs (the tensor-core kernel) instead
    // of once per pair. The choice depends on the sizes only; either way every pair's bits
    // are the same (E1).
    group_experts_ = hp_.n_expert;
    grouped_ = n * K >= 2 * hp_.n_expert && hp_.n_expert <= cuda::k_group_max_experts;
    if (grouped_)
        cuda::group_pairs(ids, n * K, hp_.n_expert, cuda::k_tile_rows_mma, perm_, tiles_, n_tiles_, stream_);
    routed_experts(l, n, ids, g_act, static_cast<int>(K));
}

void cuda_model::moe_block(const dlayer& l, int il, int64_t n) {
    const int64_t K = hp_.n_expert_used;
    const auto fg = fmt(l.gate_exps);
    // The norm, the router (F32 in the files llama.cpp writes: it reads xn_ and leaves act_ alone)
    // and its top-k: for a decode step's row one launch (the router's blocks each normalise the
    // row, its first block writes xn_ and act_, its last block routes), else the norm's launch
    // and then the router's.
    const auto fr = fmt(l.router);
    kernels::router_params rp;
    rp.n_expert = hp_.n_expert;
    rp.n_used = hp_.n_expert_used;
    rp.renormalize = hp_.expert_weights_norm;
    const bool split = lanes_ && il >= 0 && !lanes_->whole_layer(il);   // il -1: the MTP block, all in VRAM
    // A decode row of a layer whose shared expert follows its routed experts (sh_pair): the router
    // writes ids_sh_, whose last entry is the shared expert, and the routed launches take it as
    // pair K (the same bits as its own launches: E3).
    const bool sh_as_pair = l.sh_pair && n == 1 && !split;
    int32_t* const route_ids = sh_as_pair ? ids_sh_ : ids_;
    bool g_act = false;
    // The shared expert's gate row rides in the router's launch (its own block or columns).
    const dmat* sh_gate_row = gate_in_router(l) ? &l.sh_inp : nullptr;
    if (n == 1 && fr == quant::act_format::f32 && !pending_residual_.ey) {
        cuda::router_norm rn;
        rn.x = x_;
        rn.w = l.ffn_norm;
        rn.eps = hp_.rms_eps;
        rn.f = fg;
        rn.act = act_;
        cuda::norm_router_topk(mm_args_for(l.router, xn_, n, router_, false, nullptr, 1, false, sh_gate_row, shgate_), rn, rp,
                               route_ids, ew_, route_arrivals_, stream_);
        g_act = fg != quant::act_format::f32;
    } else {
        g_act = norm(x_, l.ffn_norm, xn_, n, fg, act_);
        cuda::router_topk(mm_args_for(l.router, xn_, n, router_, g_act && fr == fg, nullptr, 1, false, sh_gate_row, shgate_),
                          rp, route_ids, ew_, route_arrivals_, stream_);
        if (fr != quant::act_format::f32 && fr != fg) g_act = false;   // act_ was overwritten
    }
    bool shared_done = false;   // the split path enqueues the shared expert before its CPU lane
    if (split && lanes_->streaming()) {
        // A streamed split layer (prefill): its experts not resident copied into a layer buffer
        // in expert order, computed once the copies land; the resident ones from their slots,
        // enqueued first so that they run while the copy finishes. A pair's row has the same
        // bits from either (E3). The GPU lane's time includes what the buffer's launch waits.
        lanes_->gpu_begin(il);
        const int n_resident = lanes_->slots(il).n_slots;
        const int32_t* rest = nullptr;
        if (n_resident > 0) {
            rest = lanes_->split_streamed(il, n, ids_);
            slot_experts(l, n_resident, n, lanes_->slot_ids(), g_act);
            g_act = false;   // act_ holds the down projection's input now
        }
        const cuda_expert_lanes::layer_slots& buf = lanes_->stream_acquire(il);
        dlayer streamed = l;
        streamed.gate_exps.data = buf.gate;
        streamed.up_exps.data = buf.up;
        streamed.down_exps.data = buf.down;
        all_experts(streamed, n, g_act, rest);
        lanes_->gpu_end(il);
        lanes_->stream_release(il);
    } else if (split && segment_out_) {
        captured_split_layer(l, il, n, g_act);   // a split decode step's graphs being captured
        shared_done = true;
    } else if (split) {
        // A split layer: the doorbell hands the ids to the host; the GPU computes the pairs of
        // resident experts (the doorbell's slot ids; the other lanes' pairs skipped) and the
        // shared expert (it reads xn_ only) while the host plans and the CPU lane computes the
        // rest, whose rows join ey_ before the combine: every pair's row has the same bits
        // either way (E3).
        lanes_->ring(il, n, ids_, xn_);
        const int n_resident = lanes_->slots(il).n_slots;
        lanes_->gpu_begin(il);
        if (n_resident > 0) {
            slot_experts(l, n_resident, n, lanes_->slot_ids(), g_act);
            g_act = false;   // act_ now holds the down projection's input
        }
        shared_expert(l, n);
        shared_done = true;
        if (l.sh_inp) g_act = false;   // its launches quantised their own rows into act_
        const cuda_expert_lanes::routed r = lanes_->plan_window(il, n);
        lanes_->upload_slots(n);
        if (r.pcie_pairs > 0) {
            // The misses copied over PCIe: the same launches on the staging slots, once the
            // copies have landed (their pairs only: the others are -1, skipped).
            lanes_->staged_begin();
            staged_experts(l, n, lanes_->stage_ids(n), g_act);
            lanes_->staged_end();
        }
        lanes_->gpu_end(il);
        lanes_->run_cpu(n, *pool_, il);
        lanes_->join(n, ey_);
    } else if (sh_as_pair) {
        all_experts(l, n, g_act, ids_sh_, static_cast<int>(K) + 1);   // the shared expert's row: ey_ row K
        shared_done = true;
        shared_gate_value(l, n);
    } else {
        all_experts(l, n, g_act);
    }
    if (!shared_done) shared_expert(l, n);
    grouped_ = false;
    float* const sh_rows = sh_as_pair ? ey_ + K * hp_.n_embd : shexp_;
    pending_residual_ = cuda::moe_residual{ey_, ew_, static_cast<int>(K), l.sh_inp ? sh_rows : nullptr,
                                           l.sh_inp ? shgate_ : nullptr};
    if (n == 1) pending_residual_.arrivals = combine_arrivals_;   // the combine over blocks (ops.cuh)
    pending_rows_ = n;
    if (!defer_residual_) flush_residual();
}

void cuda_model::flush_residual() {
    if (!pending_residual_.ey) return;
    const cuda::moe_residual r = pending_residual_;
    const int64_t n = pending_rows_, E = hp_.n_embd;
    pending_residual_ = {};
    if (!r.sh) {
        cuda::moe_combine(r.ey, r.weights, r.K, n, E, x_, stream_, true);   // x += the rank-order sum
        return;
    }
    cuda::moe_combine(r.ey, r.weights, r.K, n, E, out_buf_, stream_);
    cuda::add_gated(out_buf_, r.sh, r.sh_gate, n, E, stream_);
    cuda::add(x_, out_buf_, n * E, stream_);
}

void cuda_model::slot_experts(const dlayer& l, int n_slots, int64_t n, const int32_t* ids, bool g_act) {
    const int64_t K = hp_.n_expert_used;
    group_experts_ = n_slots;
    // Grouped by slot when the window has many pairs a slot (a prefill chunk: the all-GPU
    // model's rule); else a block a pair, another lane's pairs skipped by their -1 (a decode step
    // or a verify window, where grouping costs more than it saves: 8 rows over 8 experts took
    // 75.7 us grouped against 30.7, bench/gpu/window_bench.cu).
    grouped_ = lanes_->groupable() && n * K >= 2 * static_cast<int64_t>(n_slots);
    if (grouped_) cuda::group_pairs(ids, n * K, n_slots, cuda::k_tile_rows_mma, perm_, tiles_, n_tiles_, stream_);
    routed_experts(l, n, ids, g_act, static_cast<int>(K));
}

void cuda_model::staged_experts(const dlayer& l, int64_t n, const int32_t* ids, bool g_act) {
    const cuda_expert_lanes::layer_slots& st = lanes_->staging();
    dlayer staged = l;
    staged.gate_exps.data = st.gate;
    staged.up_exps.data = st.up;
    staged.down_exps.data = st.down;
    slot_experts(staged, st.n_slots, n, ids, g_act);
}

void cuda_model::shared_expert(const dlayer& l, int64_t n) {
    if (!l.sh_inp) return;
    // After the routed experts' launches: gate_ and up_ are theirs until the down projection
    // has read them (the stream orders it). The bits do not depend on where it is enqueued.
    mm(l.sh_gate, xn_, n, gate_, false);
    mm(l.sh_up, xn_, n, up_, l.sh_up.type == l.sh_gate.type);
    swiglu_down(l.sh_down, n, shexp_);   // [n, E]
    shared_gate_value(l, n);
}

void cuda_model::shared_gate_value(const dlayer& l, int64_t n) {
    // Where the router's launch could not take the gate row (formats differ): its own matmul.
    if (l.sh_inp && !gate_in_router(l)) mm(l.sh_inp, xn_, n, shgate_, false);   // [n, 1]
}

}  // namespace sluice::cuda_impl

#endif  // SLUICE_HAVE_CUDA
