// The hybrid Qwen MoEs (qwen3next, qwen35moe) on the device: loading their Gated DeltaNet
// layers, the DeltaNet block (hybrid_blocks.cpp's delta_net_block, op for op: the same
// projections, then conv, rule and gated norm by kernels/cuda/delta_net.cuh, each the CPU
// reference's bits) and the device copy of each sequence's recurrent state. That copy keeps the
// host recurrent_state's layout and bookkeeping: a window's rows checkpoint the state they start
// from, and a later forward at an earlier position (a verify window rolled back by
// kv_cache::truncate) restores the checkpoint first. The gated attention layers run the common
// attention block (cuda_model.cpp) with the query/gate split and the output gate.
#include "models/cuda_model.h"

#ifdef SLUICE_HAVE_CUDA

#include "models/cuda_model_impl.h"
#include "models/hybrid_model.h"

#include "kernels/cuda/delta_net.cuh"
#include "kernels/cuda/ops.cuh"

#include <algorithm>
#include <optional>

namespace sluice::cuda_impl {

dlayer cuda_model::load_hybrid_layer(const model_file& f, const weight_binder& b, int il, const hybrid_variant& v) {
    dlayer l;
    l.rec = hy_.rec_index[static_cast<size_t>(il)];
    l.recurrent = l.rec >= 0;
    if (l.recurrent) {
        const delta_net_weights w = bind_delta_net(f, b, hp_, hy_.dn, il, v.separate_beta_alpha);
        l.attn_norm = upload_vec(w.norm);
        l.wqkv = upload_mat(*w.wqkv);
        l.wz = upload_mat(*w.wz);
        if (w.w_ba) {
            l.w_ba = upload_mat(*w.w_ba);
        } else {
            l.w_beta = upload_mat(*w.w_beta);
            l.w_alpha = upload_mat(*w.w_alpha);
        }
        l.conv = upload_vec(w.conv);
        l.dt_bias = upload_vec(w.dt_bias);
        l.ssm_a = upload_vec(w.a);
        l.ssm_norm = upload_vec(w.out_norm);
        l.wo = upload_mat(*w.wo);
    } else {
        upload_gated_attention(bind_gated_attention(b, hp_, il), l);
    }
    l.ffn_norm = upload_vec(b.vec(blk(il, "post_attention_norm.weight"), hp_.n_embd));
    return l;
}

void cuda_model::upload_gated_attention(const gated_attn_weights& a, dlayer& l) {
    l.attn_norm = upload_vec(a.norm);
    l.wq = upload_mat(*a.wq);
    l.wk = upload_mat(*a.wk);
    l.wv = upload_mat(*a.wv);
    l.wo = upload_mat(*a.wo);
    l.q_norm = upload_vec(a.q_norm);
    l.k_norm = upload_vec(a.k_norm);
}

void cuda_model::rewind_recurrent_device(dkv& d, int32_t n, size_t live_floats) {
    if (n == d.rec_len) return;
    if (n == 0) {
        ck(cudaMemsetAsync(d.rec, 0, live_floats * 4, stream_), "recurrent state reset");
        d.rec_lo = d.rec_valid = 0;
    } else if (d.rec_len > 0 && n >= d.rec_lo && n < d.rec_len && n - d.rec_lo < d.rec_valid) {
        const float* slot = d.rec_ckpt + static_cast<size_t>(n - d.rec_lo) * live_floats;
        ck(cudaMemcpyAsync(d.rec, slot, live_floats * 4, cudaMemcpyDeviceToDevice, stream_), "recurrent rollback");
        d.rec_valid = n - d.rec_lo;   // slots past n describe a future that no longer exists
    } else {
        // The host state says n is fine but the device never held it: the host's was set another
        // way (recurrent_state::assign without load_kv_from_host).
        fail("cuda model: the device's recurrent state holds {} positions and can roll back to {}..{} only, not {}",
             d.rec_len, d.rec_lo, d.rec_lo + d.rec_valid - 1, n);
    }
    d.rec_len = n;
}

void cuda_model::begin_recurrent_device(std::span<const batch_segment> batch) {
    const recurrent_shape& rs = batch[0].kv->shape().rec;
    const size_t live = static_cast<size_t>(rs.n_layer) * static_cast<size_t>(rs.conv_floats + rs.ssm_floats);
    for (const batch_segment& g : batch) {
        dkv& d = kvs_.at(g.kv);
        const int32_t rows = static_cast<int32_t>(g.tokens.size());
        rewind_recurrent_device(d, g.pos0, live);
        // The window's last min(rows, n_ckpt) rows are checkpointed (recurrent_state::begin_window),
        // into slots allocated as windows need them: plain decoding holds one (75 MiB for the
        // Qwen3-Next-80B shape, against 1.2 GiB for all 16).
        const int32_t kept = std::min(rows, rs.n_ckpt);
        if (kept > d.rec_slots) {
            ck(cudaStreamSynchronize(stream_), "sync");   // the rollback above may read the old slots
            clear_graphs();                                // they hold the old slots' address
            if (d.rec_ckpt) cudaFree(d.rec_ckpt);
            d.rec_ckpt = nullptr;
            d.rec_slots = 0;
            ck(cudaMalloc(&d.rec_ckpt, live * static_cast<size_t>(kept) * 4), "cudaMalloc (recurrent checkpoints)");
            d.rec_slots = kept;
        }
        d.rec_lo = g.pos0 + rows - kept;
        d.rec_valid = kept;
        d.ck_first = rows - kept;
    }
}

void cuda_model::end_recurrent_device(std::span<const batch_segment> batch, bool ok) {
    for (const batch_segment& g : batch) {
        dkv& d = kvs_.at(g.kv);
        d.rec_len = ok ? g.pos0 + static_cast<int32_t>(g.tokens.size()) : -1;
        if (!ok) d.rec_lo = d.rec_valid = 0;
    }
}

void cuda_model::delta_net_block(const dlayer& l, std::span<const batch_segment> batch, int64_t n) {
    const kernels::delta_net_shape& dn = hy_.dn;
    const int64_t C = dn.conv_channels(), vd = dn.value_dim(), nv = dn.n_v_heads;
    // Projections of every row at once. act_ holds xn_'s int8 rows in format `held` (after the
    // norm, or after a projection quantised them): a projection of that format reuses them.
    std::optional<quant::act_format> held;
    if (norm(x_, l.attn_norm, xn_, n, fmt(l.wqkv), act_)) held = fmt(l.wqkv);
    // Two projections of one format, input width and row size go in one launch (mm_args::w2):
    // qwen35moe's beta and alpha rows always, q|k|v and z where the file quantised them alike.
    const auto project = [&](const dmat& w, float* y, const dmat* w2 = nullptr, float* y2 = nullptr) {
        const quant::act_format f = fmt(w);
        mm(w, xn_, n, y, held == f, nullptr, 1, false, w2, y2);
        if (f != quant::act_format::f32) held = f;
    };
    if (pairable_plain(l.wqkv, l.wz)) {
        project(l.wqkv, dn_mixed_, &l.wz, dn_z_);
    } else {
        project(l.wqkv, dn_mixed_);
        project(l.wz, dn_z_);
    }
    if (l.w_ba) project(l.w_ba, dn_ba_);
    else if (pairable_plain(l.w_beta, l.w_alpha)) project(l.w_beta, dn_ba_, &l.w_alpha, dn_alpha_);
    else {
        project(l.w_beta, dn_ba_);
        project(l.w_alpha, dn_alpha_);
    }
    cuda::dn_gates gates;
    gates.ba = dn_ba_;
    gates.alpha = l.w_ba ? nullptr : dn_alpha_;
    gates.dt_bias = l.dt_bias;
    gates.a_coef = l.ssm_a;
    // The recurrence per segment, rows in order, against its cache's state and checkpoints.
    const int64_t layer_floats = hp_.rec_conv_floats + hp_.rec_ssm_floats;
    const int64_t slot_floats = static_cast<int64_t>(hp_.n_rec_layer) * layer_floats;
    // One segment of a few rows (a decode step, a verify window): the rule, its gated norm and
    // the output projection's activation blocks in one launch (delta_net_rule_norm). Not for a
    // prefill chunk: the fused form runs n_v / heads-a-block blocks (16 on the 35B and 80B
    // shapes) against the rule's n_v one-warp blocks, and adds the norm's barriers to each row
    // of the serial loop. 16 covers every verify window (at most 5 rows); a prefill chunk keeps
    // the two launches (the fused form's cost there was not timed).
    constexpr int64_t k_fused_rows_max = 16;
    const quant::act_format fo = fmt(l.wo);
    bool core_quantised = false;
    const bool fused = batch.size() == 1 && n <= k_fused_rows_max;
    int64_t row0 = 0;
    for (const batch_segment& g : batch) {
        const int64_t rows = static_cast<int64_t>(g.tokens.size());
        const dkv& d = kvs_.at(g.kv);
        float* conv_state = d.rec + l.rec * layer_floats;
        float* ssm_state = conv_state + hp_.rec_conv_floats;
        cuda::dn_checkpoints cc{d.rec_ckpt + l.rec * layer_floats, slot_floats, d.ck_first};
        cuda::dn_checkpoints cs{cc.slot0 + hp_.rec_conv_floats, slot_floats, d.ck_first};
        cuda::dn_gates gs = gates;
        gs.ba += row0 * (gs.alpha ? nv : 2 * nv);
        if (gs.alpha) gs.alpha += row0 * nv;
        cuda::delta_net_conv(dn, l.conv, conv_state, dn_mixed_ + row0 * C, dn_conv_ + row0 * C, rows, cc, stream_);
        if (fused) {
            core_quantised = cuda::delta_net_rule_norm(dn, dn_conv_, gs, ssm_state, dn_z_, l.ssm_norm, dn_core_, rows, cs, fo,
                                                       fo == quant::act_format::f32 ? nullptr : act_, stream_);
        } else {
            cuda::delta_net_rule(dn, dn_conv_ + row0 * C, gs, ssm_state, dn_core_ + row0 * vd, rows, cs, stream_);
        }
        row0 += rows;
    }
    if (!fused) cuda::delta_net_gated_norm(dn, dn_core_, dn_z_, l.ssm_norm, dn_core_, n, stream_);
    mm(l.wo, dn_core_, n, x_, core_quantised, nullptr, 1, true);   // x += ssm_out . core
}

}  // namespace sluice::cuda_impl

#endif  // SLUICE_HAVE_CUDA
