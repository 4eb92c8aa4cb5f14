// Hyperparameters, weight binding and the DeltaNet / gated-attention blocks of the hybrid Qwen
// MoEs (see hybrid_blocks.h). Tensor names and metadata keys are llama.cpp's.
#include "models/hybrid_blocks.h"

#include "core/error.h"
#include "io/model_file.h"
#include "kernels/math.h"
#include "quant/quant.h"

#include <algorithm>
#include <cmath>

namespace sluice {
namespace {

int checked(std::string_view what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) fail("model: {}: expected {}..{}, got {}", what, lo, hi, v);
    return static_cast<int>(v);
}

// forward_scratch::arch regions, in units of max_rows floats (one row's width each).
struct dn_regions {
    int64_t C, vd, nv;
    int64_t mixed() const { return 0; }                 // [C] q|k|v projection
    int64_t conv() const { return C; }                  // [C] conv output
    int64_t z() const { return 2 * C; }                 // [vd] output gate
    int64_t ba() const { return 2 * C + vd; }           // [2*nv] beta|alpha projection (or beta)
    int64_t alpha() const { return ba() + 2 * nv; }     // [nv] alpha projection (qwen35moe)
    int64_t core() const { return alpha() + nv; }       // [vd] DeltaNet output
    int64_t g() const { return core() + vd; }           // [nv] log-decay
    int64_t beta() const { return g() + nv; }           // [nv] write strength
    int64_t total() const { return beta() + nv; }
};

dn_regions regions_of(const kernels::delta_net_shape& dn) {
    return {dn.conv_channels(), dn.value_dim(), dn.n_v_heads};
}

}  // namespace

hybrid_hparams read_hybrid_hparams(const model_file& f, std::string_view arch_sv, bool v_tiled, model_hparams& hp) {
    const metadata& m = f.meta();
    const std::string a(arch_sv);
    hp = read_transformer_hparams(f, a, kernels::rope_mode::neox);
    read_moe_hparams(f, hp, /*default_norm=*/true);
    hp.n_ff_shexp = checked(a + ".expert_shared_feed_forward_length",
                            m.get_int(a + ".expert_shared_feed_forward_length").value_or(hp.n_ff), 1, 1 << 20);
    hybrid_hparams h;
    h.n_nextn = checked(a + ".nextn_predict_layers", m.get_int(a + ".nextn_predict_layers").value_or(0), 0, 1);
    if (h.n_nextn >= hp.n_layer)
        fail("model: {}.nextn_predict_layers ({}): expected fewer than block_count ({})", a, h.n_nextn, hp.n_layer);
    const int n_all = hp.n_layer;
    hp.n_layer = n_all - h.n_nextn;   // block_count counts the MTP layers too (llama.cpp's converter)

    kernels::delta_net_shape& dn = h.dn;
    dn.d_conv = checked(a + ".ssm.conv_kernel", m.require_int(a + ".ssm.conv_kernel"), 2, 64);
    dn.head_k_dim = checked(a + ".ssm.state_size", m.require_int(a + ".ssm.state_size"), 1, 1024);
    dn.n_k_heads = checked(a + ".ssm.group_count", m.require_int(a + ".ssm.group_count"), 1, 1024);
    dn.n_v_heads = checked(a + ".ssm.time_step_rank", m.require_int(a + ".ssm.time_step_rank"), 1, 1024);
    const int inner = checked(a + ".ssm.inner_size", m.require_int(a + ".ssm.inner_size"), 1, 1 << 20);
    if (dn.n_v_heads % dn.n_k_heads != 0)
        fail("model: {}.ssm.time_step_rank ({}) is not a multiple of ssm.group_count ({})", a, dn.n_v_heads, dn.n_k_heads);
    if (inner % dn.n_v_heads != 0)
        fail("model: {}.ssm.inner_size ({}) is not a multiple of ssm.time_step_rank ({})", a, inner, dn.n_v_heads);
    dn.head_v_dim = inner / dn.n_v_heads;
    if (dn.head_v_dim != dn.head_k_dim)
        fail("model: {}: value head width {} != key head width {} (llama.cpp requires them equal)", a, dn.head_v_dim,
             dn.head_k_dim);
    dn.v_tiled = v_tiled;
    dn.eps = hp.rms_eps;

    // Which layers are recurrent: the per-layer array when present, else every layer but each
    // full_attention_interval-th (llama.cpp's rule).
    h.rec_index.assign(static_cast<size_t>(hp.n_layer), -1);
    std::vector<bool> rec(static_cast<size_t>(hp.n_layer));
    if (const meta_array* arr = m.get_array(a + ".attention.recurrent_layers")) {
        if (arr->ints.size() < static_cast<size_t>(hp.n_layer))
            fail("model: {}.attention.recurrent_layers: expected {} entries, got {}", a, hp.n_layer, arr->ints.size());
        for (int il = 0; il < hp.n_layer; ++il) rec[static_cast<size_t>(il)] = arr->ints[static_cast<size_t>(il)] != 0;
    } else {
        const int every = checked(a + ".full_attention_interval", m.get_int(a + ".full_attention_interval").value_or(4),
                                  1, 1024);
        for (int il = 0; il < hp.n_layer; ++il) rec[static_cast<size_t>(il)] = (il + 1) % every != 0;
    }
    for (int il = 0; il < hp.n_layer; ++il)
        if (rec[static_cast<size_t>(il)]) h.rec_index[static_cast<size_t>(il)] = hp.n_rec_layer++;

    hp.ssm_d_inner = inner;
    hp.rec_conv_floats = dn.conv_state_floats();
    hp.rec_ssm_floats = dn.ssm_state_floats();
    const int64_t nq = int64_t{hp.n_head} * hp.head_dim;
    hp.arch_floats_per_row = std::max(2 * nq, regions_of(dn).total());
    return h;
}

delta_net_weights bind_delta_net(const model_file& f, const weight_binder& b, const model_hparams& hp, const kernels::delta_net_shape& dn,
                                 int il, bool separate_beta_alpha) {
    const int64_t E = hp.n_embd, C = dn.conv_channels(), vd = dn.value_dim(), nv = dn.n_v_heads;
    delta_net_weights w;
    w.norm = b.vec(blk(il, "attn_norm.weight"), E);
    if (b.optional_matrix(blk(il, "ssm_in.weight"), E, C + vd))
        fail("model: tensor '{}': the legacy fused q|k|v|z projection is not supported; reconvert with a current "
             "convert_hf_to_gguf.py (attn_qkv + attn_gate)", blk(il, "ssm_in.weight"));
    w.wqkv = &b.matrix(blk(il, "attn_qkv.weight"), E, C);
    w.wz = &b.matrix(blk(il, "attn_gate.weight"), E, vd);
    if (separate_beta_alpha) {
        w.w_beta = &b.matrix(blk(il, "ssm_beta.weight"), E, nv);
        w.w_alpha = &b.matrix(blk(il, "ssm_alpha.weight"), E, nv);
    } else {
        w.w_ba = &b.matrix(blk(il, "ssm_ba.weight"), E, 2 * nv);
    }
    // The conv kernel as f32 [C, d_conv] (ne {d_conv, C}), row by row.
    const std::string cname = blk(il, "ssm_conv1d.weight");
    const tensor_view& ct = f.require(cname);
    if (ct.ne[0] != dn.d_conv || ct.ne[1] != C || ct.ne[2] != 1 || ct.ne[3] != 1)
        fail("model: tensor '{}': shape: expected [{}, {}], got {}", cname, dn.d_conv, C, ct.shape_string());
    if (!quant::can_dequantize(ct.type)) fail("model: tensor '{}': dtype {} cannot be read as f32", cname, name(ct.type));
    w.conv.resize(static_cast<size_t>(C * dn.d_conv));
    for (int64_t c = 0; c < C; ++c) quant::dequantize_row(ct.type, ct.row(c), w.conv.data() + c * dn.d_conv, dn.d_conv);
    w.dt_bias = b.vec(blk(il, "ssm_dt.bias"), nv);
    w.a = b.vec(blk(il, "ssm_a"), nv);
    w.out_norm = b.vec(blk(il, "ssm_norm.weight"), dn.head_v_dim);
    w.wo = &b.matrix(blk(il, "ssm_out.weight"), vd, E);
    return w;
}

gated_attn_weights bind_gated_attention(const weight_binder& b, const model_hparams& hp, int il) {
    const int64_t E = hp.n_embd, nq = int64_t{hp.n_head} * hp.head_dim, nkv = int64_t{hp.n_kv_head} * hp.head_dim;
    gated_attn_weights w;
    w.norm = b.vec(blk(il, "attn_norm.weight"), E);
    w.wq = &b.matrix(blk(il, "attn_q.weight"), E, 2 * nq);
    w.wk = &b.matrix(blk(il, "attn_k.weight"), E, nkv);
    w.wv = &b.matrix(blk(il, "attn_v.weight"), E, nkv);
    w.wo = &b.matrix(blk(il, "attn_output.weight"), nq, E);
    w.q_norm = b.vec(blk(il, "attn_q_norm.weight"), hp.head_dim);
    w.k_norm = b.vec(blk(il, "attn_k_norm.weight"), hp.head_dim);
    return w;
}

mtp_weights bind_mtp(const weight_binder& b, const model_hparams& hp, int il) {
    const int64_t E = hp.n_embd;
    mtp_weights w;
    w.eh_proj = &b.matrix(blk(il, "nextn.eh_proj.weight"), 2 * E, E);
    w.enorm = b.vec(blk(il, "nextn.enorm.weight"), E);
    w.hnorm = b.vec(blk(il, "nextn.hnorm.weight"), E);
    w.embed = b.optional_matrix(blk(il, "nextn.embed_tokens.weight"), E, hp.n_vocab);
    w.head = b.optional_matrix(blk(il, "nextn.shared_head_head.weight"), E, hp.n_vocab);
    w.head_norm = b.optional_vec(blk(il, "nextn.shared_head_norm.weight"), E);
    w.attn = bind_gated_attention(b, hp, il);
    w.post_norm = b.vec(blk(il, "post_attention_norm.weight"), E);
    w.moe = bind_moe(b, hp, il, /*shared_expert=*/true);
    return w;
}

void check_recurrent(std::span<const batch_segment> batch) {
    for (size_t i = 0; i < batch.size(); ++i) {
        const recurrent_state& r = batch[i].kv->recurrent();
        if (r.empty()) fail("forward: segment {}: the KV cache has no recurrent state (make it with kv_shape_for)", i);
        if (!r.can_rewind(batch[i].pos0))
            fail("forward: segment {}: pos0 {}: the recurrent state holds {} positions and can roll back only "
                 "the last window's rows",
                 i, batch[i].pos0, r.length());
    }
}

void begin_recurrent(std::span<const batch_segment> batch, bool host_slots) {
    for (const batch_segment& g : batch) {
        recurrent_state& r = g.kv->recurrent();
        r.rewind(g.pos0);
        r.begin_window(g.pos0, static_cast<int32_t>(g.tokens.size()), host_slots);
    }
}

void end_recurrent(std::span<const batch_segment> batch) {
    for (const batch_segment& g : batch) g.kv->recurrent().end_window(g.pos0 + static_cast<int32_t>(g.tokens.size()));
}

void delta_net_block(const delta_net_weights& w, const model_hparams& hp, const kernels::delta_net_shape& dn, int ir,
                     std::span<const batch_segment> batch, int64_t n, forward_scratch& s) {
    thread_pool& pool = *s.pool;
    const int64_t E = hp.n_embd, R = s.max_rows;
    const dn_regions rg = regions_of(dn);
    const int64_t C = rg.C, vd = rg.vd, nv = rg.nv;
    float* arch = s.arch.data();
    float* mixed = arch + rg.mixed() * R;   // [n, C]
    float* conv = arch + rg.conv() * R;     // [n, C]
    float* z = arch + rg.z() * R;           // [n, vd]
    float* ba = arch + rg.ba() * R;         // [n, 2*nv] or beta logits [n, nv]
    float* alpha = arch + rg.alpha() * R;   // [n, nv] (separate projections)
    float* core = arch + rg.core() * R;     // [n, vd]
    float* gdec = arch + rg.g() * R;        // [n, nv]
    float* beta = arch + rg.beta() * R;     // [n, nv]

    // Row-wise part: projections of every row at once.
    rmsnorm_rows(pool, s.x.data(), w.norm.data(), s.xn.data(), n, E, hp.rms_eps);
    if (w.w_ba) {
        const kernels::matmul_out in_proj[] = {{w.wqkv, mixed}, {w.wz, z}, {w.w_ba, ba}};
        matmul_shared_input(pool, in_proj, s.xn.data(), n, s.act.data());
    } else {
        const kernels::matmul_out in_proj[] = {{w.wqkv, mixed}, {w.wz, z}, {w.w_beta, ba}, {w.w_alpha, alpha}};
        matmul_shared_input(pool, in_proj, s.xn.data(), n, s.act.data());
    }
    const int64_t rep = dn.n_v_heads / dn.n_k_heads;
    for (int64_t r = 0; r < n; ++r) {
        for (int64_t h = 0; h < nv; ++h) {
            float b_logit, a_logit;
            if (w.w_ba) {
                // Per key head kh: [beta x rep, alpha x rep]; value head h = kh * rep + j.
                const int64_t kh = h / rep, j = h % rep;
                b_logit = ba[r * 2 * nv + kh * 2 * rep + j];
                a_logit = ba[r * 2 * nv + kh * 2 * rep + rep + j];
            } else {
                b_logit = ba[r * nv + h];
                a_logit = alpha[r * nv + h];
            }
            beta[r * nv + h] = kernels::sigmoid_f32(b_logit);
            gdec[r * nv + h] = kernels::softplus_f32(a_logit + w.dt_bias[static_cast<size_t>(h)]) * w.a[static_cast<size_t>(h)];
        }
    }
    // The recurrence: per segment, row after row in position order (the same code for a window
    // of 1 and of 16), the state a row starts from checkpointed first.
    int64_t row0 = 0;
    for (const batch_segment& g : batch) {
        const int64_t rows = static_cast<int64_t>(g.tokens.size());
        recurrent_state& st = g.kv->recurrent();
        for (int64_t i = 0; i < rows; ++i) {
            const int64_t r = row0 + i;
            st.checkpoint(ir, g.pos0 + static_cast<int32_t>(i));
            kernels::delta_net_conv_row(dn, w.conv.data(), st.conv(ir), mixed + r * C, conv + r * C);
            kernels::delta_net_rule_row(pool, dn, conv + r * C, gdec + r * nv, beta + r * nv, st.ssm(ir), core + r * vd);
            kernels::delta_net_gated_norm_row(dn, core + r * vd, z + r * vd, w.out_norm.data(), core + r * vd);
        }
        row0 += rows;
    }
    kernels::matmul(pool, *w.wo, core, n, s.out.data(), s.act.data());
    add_rows(pool, s.x.data(), s.out.data(), n, E);
}

void gated_attention_block(const gated_attn_weights& w, const model_hparams& hp, int il,
                           std::span<const batch_segment> batch, int64_t n, forward_scratch& s) {
    thread_pool& pool = *s.pool;
    const int64_t E = hp.n_embd, hd = hp.head_dim;
    const int64_t nq = hp.n_head * hd, nkv = hp.n_kv_head * hd;
    float* qg = s.arch.data();   // [n, n_head, 2*head_dim]: query then gate per head
    rmsnorm_rows(pool, s.x.data(), w.norm.data(), s.xn.data(), n, E, hp.rms_eps);
    const kernels::matmul_out qkv[] = {{w.wq, qg}, {w.wk, s.k.data()}, {w.wv, s.v.data()}};
    matmul_shared_input(pool, qkv, s.xn.data(), n, s.act.data());
    kernels::attention_params ap;
    ap.n_head = hp.n_head;
    ap.n_kv_head = hp.n_kv_head;
    ap.head_dim = hp.head_dim;
    ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hp.head_dim)));
    int64_t row0 = 0;
    for (const batch_segment& g : batch) {
        const int64_t rows = static_cast<int64_t>(g.tokens.size());
        kv_cache& kv = *g.kv;
        kernels::for_rows(pool, rows, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
                const int64_t r = row0 + i;
                float* q = s.q.data() + r * nq;
                float* k = s.k.data() + r * nkv;
                const float* v = s.v.data() + r * nkv;
                for (int h = 0; h < hp.n_head; ++h) {
                    const float* src = qg + r * 2 * nq + h * 2 * hd;
                    kernels::rmsnorm(src, w.q_norm.data(), q + h * hd, hd, hp.rms_eps);
                }
                for (int h = 0; h < hp.n_kv_head; ++h) kernels::rmsnorm(k + h * hd, w.k_norm.data(), k + h * hd, hd, hp.rms_eps);
                // Partial RoPE: the first n_rot dims of each head (rope.dimension_count), NeoX pairs.
                rope_and_cache_row(hp, g.pos0 + static_cast<int32_t>(i), q, k, v, kv.k(il) + (g.pos0 + i) * nkv,
                                   kv.v(il) + (g.pos0 + i) * nkv);
            }
        });
        kernels::attention(pool, ap, s.q.data() + row0 * nq, kv.k(il), kv.v(il), g.pos0, rows, s.attn.data() + row0 * nq,
                           kernels::attention_scratch{s.attn_split.data(), s.attn_split.size()});
        row0 += rows;
    }
    // Output gate: attn *= sigmoid(gate), per head and dimension.
    kernels::for_rows(pool, n, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int h = 0; h < hp.n_head; ++h) {
                float* o = s.attn.data() + r * nq + h * hd;
                const float* gate = qg + r * 2 * nq + h * 2 * hd + hd;
                for (int64_t d = 0; d < hd; ++d) o[d] = o[d] * kernels::sigmoid_f32(gate[d]);
            }
    });
    kernels::matmul(pool, *w.wo, s.attn.data(), n, s.out.data(), s.act.data());
    add_rows(pool, s.x.data(), s.out.data(), n, E);
}

}  // namespace sluice
