// Hyperparameters, weight binding and the shared transformer blocks (attention, dense FFN,
// output). The MoE FFN block is in moe_ffn.cpp.
#include "models/blocks.h"

#include "core/error.h"
#include "io/model_file.h"
#include "kernels/cpu/dot_ref.h"
#include "quant/act.h"
#include "quant/quant.h"

#include <cmath>
#include <fmt/format.h>

namespace sluice {
namespace {

// An integer key that llama.cpp also allows as a per-layer array (one entry a layer, as llama.cpp
// requires): every entry must agree here.
std::optional<int64_t> int_or_uniform_array(const metadata& m, const std::string& key, int64_t n_layer) {
    const meta_value* v = m.find(key);
    if (!v) return std::nullopt;
    if (const meta_array* a = v->as_array()) {
        if (a->ints.empty()) fail("model: key '{}': expected an integer or a non-empty integer array", key);
        if (static_cast<int64_t>(a->ints.size()) != n_layer)
            fail("model: key '{}': a per-layer array of {} entries, expected one a layer ({})", key, a->ints.size(), n_layer);
        for (int64_t x : a->ints)
            if (x != a->ints[0]) fail("model: key '{}': per-layer values differ ({} and {}); not supported", key, a->ints[0], x);
        return a->ints[0];
    }
    return m.get_int(key);
}

int checked_dim(std::string_view what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) fail("model: {}: expected {}..{}, got {}", what, lo, hi, v);
    return static_cast<int>(v);
}

}  // namespace

// y_i = w_i x for matrices that read the same input x [n, n_in]: when they take the same
// activation rows (same format family), x is prepared once and all of them run in one
// parallel_for (one barrier: a decode step has ~8 per layer, each a few microseconds at 2
// threads); otherwise one matmul each. The same bits either way (each output is dot_ref's).
void matmul_shared_input(thread_pool& pool, std::span<const kernels::matmul_out> outs, const float* x, int64_t n,
                         std::byte* act) {
    bool shared = true;
    for (const kernels::matmul_out& o : outs)
        shared = shared && quant::act_format_for(o.w->type) == quant::act_format_for(outs[0].w->type);
    if (!shared) {
        for (const kernels::matmul_out& o : outs) kernels::matmul(pool, *o.w, x, n, o.y, act);
        return;
    }
    kernels::prepare_act(pool, *outs[0].w, x, n, act);
    kernels::matmul_prepared_many(pool, outs, act, n);
}

model_hparams read_transformer_hparams(const model_file& f, std::string_view arch_sv, kernels::rope_mode mode) {
    const metadata& m = f.meta();
    const std::string a(arch_sv);
    model_hparams hp;
    hp.arch = a;
    hp.n_embd = checked_dim(a + ".embedding_length", m.require_int(a + ".embedding_length"), 1, 1 << 16);
    hp.n_layer = checked_dim(a + ".block_count", m.require_int(a + ".block_count"), 1, 1024);
    // A tensor of a layer past block_count would be left unbound and the model run with fewer
    // layers than the file holds (llama.cpp refuses such a file too): block_count counts every
    // layer, the hybrids' MTP layers included.
    for (const tensor_view& t : f.tensors()) {
        const std::string_view name = t.name;
        if (name.substr(0, 4) != "blk.") continue;
        int64_t il = 0;
        size_t i = 4;
        for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && il <= 1 << 20; ++i) il = il * 10 + (name[i] - '0');
        if (i > 4 && il >= hp.n_layer)
            fail("model: tensor '{}' is of layer {}, but {}.block_count is {}", name, il, a, hp.n_layer);
    }
    hp.n_ctx_train = checked_dim(a + ".context_length", m.get_int(a + ".context_length").value_or(4096), 1, 1 << 24);
    hp.n_head = checked_dim(a + ".attention.head_count",
                            int_or_uniform_array(m, a + ".attention.head_count", hp.n_layer).value_or(0), 1, 4096);
    hp.n_kv_head = checked_dim(a + ".attention.head_count_kv",
                               int_or_uniform_array(m, a + ".attention.head_count_kv", hp.n_layer).value_or(hp.n_head), 1, hp.n_head);
    if (hp.n_head % hp.n_kv_head != 0)
        fail("model: {}.attention.head_count ({}) is not a multiple of head_count_kv ({})", a, hp.n_head, hp.n_kv_head);
    const int64_t head_dim = m.get_int(a + ".attention.key_length").value_or(hp.n_embd / hp.n_head);
    hp.head_dim = checked_dim(a + ".attention.key_length", head_dim, 2, kernels::k_max_head_dim);
    if (auto vl = m.get_int(a + ".attention.value_length"); vl && *vl != hp.head_dim)
        fail("model: {}.attention.value_length: expected {} (= key_length), got {}", a, hp.head_dim, *vl);
    hp.n_ff = checked_dim(a + ".feed_forward_length", int_or_uniform_array(m, a + ".feed_forward_length", hp.n_layer).value_or(0), 0, 1 << 20);
    const double eps = m.get_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-6);
    if (!(eps > 0.0 && eps < 1.0)) fail("model: {}.attention.layer_norm_rms_epsilon: expected (0, 1), got {}", a, eps);
    hp.rms_eps = static_cast<float>(eps);

    const tensor_view& emb = f.require("token_embd.weight");
    hp.n_vocab = checked_dim(a + ".vocab_size", m.get_int(a + ".vocab_size").value_or(emb.ne[1]), 1, 1 << 22);

    kernels::rope_params& r = hp.rope;
    r.mode = mode;
    r.n_rot = checked_dim(a + ".rope.dimension_count", m.get_int(a + ".rope.dimension_count").value_or(hp.head_dim), 2, hp.head_dim);
    if (r.n_rot % 2 != 0) fail("model: {}.rope.dimension_count: expected an even number, got {}", a, r.n_rot);
    const double base = m.get_float(a + ".rope.freq_base").value_or(10000.0);
    if (!(base > 1.0 && base < 1e12)) fail("model: {}.rope.freq_base: expected > 1, got {}", a, base);
    r.freq_base = static_cast<float>(base);
    const std::string scaling = m.get_string(a + ".rope.scaling.type").value_or("none");
    double factor = m.get_float(a + ".rope.scaling.factor").value_or(0.0);
    if (factor == 0.0) factor = m.get_float(a + ".rope.scale_linear").value_or(1.0);
    if (!(factor >= 1.0 && factor <= 1024.0) && scaling != "none")
        fail("model: {}.rope.scaling.factor: expected 1..1024, got {}", a, factor);
    r.n_ctx_orig = checked_dim(a + ".rope.scaling.original_context_length",
                               m.get_int(a + ".rope.scaling.original_context_length").value_or(hp.n_ctx_train), 1, 1 << 24);
    // YaRN's floats: finite and within what any model writes (a NaN here generates garbage).
    auto rope_float = [&](const std::string& key, double fallback, double lo, double hi) {
        const double v = m.get_float(key).value_or(fallback);
        if (!(v >= lo && v <= hi)) fail("model: {}: expected {}..{}, got {}", key, lo, hi, v);
        return static_cast<float>(v);
    };
    r.attn_factor = rope_float(a + ".rope.scaling.attn_factor", 1.0, 1e-3, 1e3);
    r.beta_fast = rope_float(a + ".rope.scaling.yarn_beta_fast", 32.0, 0.0, 1e4);
    r.beta_slow = rope_float(a + ".rope.scaling.yarn_beta_slow", 1.0, 0.0, 1e4);
    if (scaling == "none") {
        r.freq_scale = 1.0f;
    } else if (scaling == "linear") {
        r.freq_scale = static_cast<float>(1.0 / factor);
    } else if (scaling == "yarn") {
        r.freq_scale = static_cast<float>(1.0 / factor);
        r.ext_factor = rope_float(a + ".rope.scaling.yarn_ext_factor", 1.0, 0.0, 1e3);
    } else {
        fail("model: {}.rope.scaling.type: expected none, linear or yarn, got '{}'", a, scaling);
    }
    return hp;
}

void read_moe_hparams(const model_file& f, model_hparams& hp, bool default_norm) {
    const metadata& m = f.meta();
    const std::string& a = hp.arch;
    hp.n_expert = checked_dim(a + ".expert_count", m.require_int(a + ".expert_count"), 1, 1 << 16);
    hp.n_expert_used = checked_dim(a + ".expert_used_count", m.require_int(a + ".expert_used_count"), 1, hp.n_expert);
    hp.n_ff_exp = checked_dim(a + ".expert_feed_forward_length",
                              m.get_int(a + ".expert_feed_forward_length").value_or(hp.n_ff), 1, 1 << 20);
    hp.expert_weights_norm = m.get_bool(a + ".expert_weights_norm").value_or(default_norm);
}

std::string blk(int il, std::string_view what) { return fmt::format("blk.{}.{}", il, what); }

void rmsnorm_rows(thread_pool& pool, const float* x, const float* w, float* out, int64_t n, int64_t width, float eps) {
    kernels::for_rows(pool, n, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) kernels::rmsnorm(x + r * width, w, out + r * width, width, eps);
    });
}

void rope_and_cache_row(const model_hparams& hp, int32_t pos, float* q, float* k, const float* v, float* k_cache_row,
                        float* v_cache_row) {
    float cs[kernels::k_max_head_dim];   // [n_rot] this position's cos/sin table
    kernels::rope_table(hp.rope, pos, cs);
    kernels::rope_apply(hp.rope, cs, q, hp.n_head, hp.head_dim);
    kernels::rope_apply(hp.rope, cs, k, hp.n_kv_head, hp.head_dim);
    const int64_t nkv = static_cast<int64_t>(hp.n_kv_head) * hp.head_dim;
    for (int64_t j = 0; j < nkv; ++j) k_cache_row[j] = k[j], v_cache_row[j] = v[j];
}

void add_rows(thread_pool& pool, float* y, const float* b, int64_t n, int64_t width) {
    kernels::for_rows(pool, n, [&](int64_t r0, int64_t r1) { kernels::add(y + r0 * width, b + r0 * width, (r1 - r0) * width); });
}

void weight_binder::check_shape(const tensor_view& t, std::initializer_list<int64_t> ne) const {
    bool ok = true;
    int i = 0;
    for (int64_t e : ne) ok = ok && t.ne[static_cast<size_t>(i++)] == e;
    for (; i < k_max_dims; ++i) ok = ok && t.ne[static_cast<size_t>(i)] == 1;
    if (!ok) {
        std::string want = "[";
        i = 0;
        for (int64_t e : ne) want += fmt::format("{}{}", i++ ? ", " : "", e);
        fail("model: tensor '{}': shape: expected {}], got {}", t.name, want, t.shape_string());
    }
}

const tensor_view* weight_binder::optional_matrix(const std::string& name, int64_t n_in, int64_t n_out) const {
    const tensor_view* t = f_.find(name);
    if (!t) return nullptr;
    if (!kernels::has_dot(t->type))
        fail("model: tensor '{}': dtype: expected one with a dot product (F32, F16, BF16, Q4_0..Q8_0, K-quants, ...), got {}",
             name, sluice::name(t->type));
    check_shape(*t, {n_in, n_out});
    return t;
}

const tensor_view& weight_binder::matrix(const std::string& name, int64_t n_in, int64_t n_out) const {
    const tensor_view* t = optional_matrix(name, n_in, n_out);
    if (!t) fail("model: missing tensor '{}' (expected shape [{}, {}])", name, n_in, n_out);
    return *t;
}

const tensor_view& weight_binder::experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) const {
    const tensor_view& t = f_.require(name);
    if (!kernels::has_dot(t.type)) fail("model: tensor '{}': dtype {} has no dot product", name, sluice::name(t.type));
    check_shape(t, {n_in, n_out, n_expert});
    return t;
}

std::vector<float> weight_binder::optional_vec(const std::string& name, int64_t n) const {
    const tensor_view* t = f_.find(name);
    if (!t) return {};
    if (!quant::can_dequantize(t->type)) fail("model: tensor '{}': dtype {} cannot be read as f32", name, sluice::name(t->type));
    check_shape(*t, {n});
    std::vector<float> v(static_cast<size_t>(n));
    quant::dequantize_row(t->type, t->data, v.data(), n);
    return v;
}

std::vector<float> weight_binder::vec(const std::string& name, int64_t n) const {
    std::vector<float> v = optional_vec(name, n);
    if (v.empty()) fail("model: missing tensor '{}' (expected shape [{}])", name, n);
    return v;
}

attn_weights bind_attention(const weight_binder& b, const model_hparams& hp, int il, bool bias, bool qk_norm) {
    const int64_t nq = static_cast<int64_t>(hp.n_head) * hp.head_dim, nkv = static_cast<int64_t>(hp.n_kv_head) * hp.head_dim;
    attn_weights w;
    w.norm = b.vec(blk(il, "attn_norm.weight"), hp.n_embd);
    w.wq = &b.matrix(blk(il, "attn_q.weight"), hp.n_embd, nq);
    w.wk = &b.matrix(blk(il, "attn_k.weight"), hp.n_embd, nkv);
    w.wv = &b.matrix(blk(il, "attn_v.weight"), hp.n_embd, nkv);
    w.wo = &b.matrix(blk(il, "attn_output.weight"), nq, hp.n_embd);
    if (bias) {
        w.bq = b.vec(blk(il, "attn_q.bias"), nq);
        w.bk = b.vec(blk(il, "attn_k.bias"), nkv);
        w.bv = b.vec(blk(il, "attn_v.bias"), nkv);
    }
    if (qk_norm) {
        w.q_norm = b.vec(blk(il, "attn_q_norm.weight"), hp.head_dim);
        w.k_norm = b.vec(blk(il, "attn_k_norm.weight"), hp.head_dim);
    }
    return w;
}

ffn_weights bind_ffn(const weight_binder& b, int il, std::string_view suffix, int64_t n_embd, int64_t n_ff) {
    ffn_weights w;
    w.gate = &b.matrix(blk(il, fmt::format("ffn_gate{}.weight", suffix)), n_embd, n_ff);
    w.up = &b.matrix(blk(il, fmt::format("ffn_up{}.weight", suffix)), n_embd, n_ff);
    w.down = &b.matrix(blk(il, fmt::format("ffn_down{}.weight", suffix)), n_ff, n_embd);
    return w;
}

output_weights bind_output(const weight_binder& b, const model_hparams& hp) {
    output_weights w;
    w.tok_embd = &b.matrix("token_embd.weight", hp.n_embd, hp.n_vocab);
    w.norm = b.vec("output_norm.weight", hp.n_embd);
    // Tied embeddings: no output.weight means the embedding matrix doubles as the LM head.
    w.output = b.optional_matrix("output.weight", hp.n_embd, hp.n_vocab);
    if (!w.output) w.output = w.tok_embd;
    return w;
}

int64_t check_batch(const model_hparams& hp, std::span<const batch_segment> batch, const forward_scratch& s) {
    if (batch.empty()) fail("forward: a batch of no segments");
    if (!s.pool) fail("forward: scratch has no thread pool");
    int64_t n = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
        const batch_segment& g = batch[i];
        const int64_t rows = static_cast<int64_t>(g.tokens.size());
        if (!g.kv) fail("forward: segment {}: no KV cache", i);
        const kv_cache& kv = *g.kv;
        if (rows < 1) fail("forward: segment {}: expected at least one row, got none", i);
        if (g.n_logits < 0 || g.n_logits > rows) fail("forward: segment {}: n_logits {}: expected 0..{}", i, g.n_logits, rows);
        if (g.pos0 < 0 || g.pos0 > kv.n_pos()) fail("forward: segment {}: pos0 {}: expected 0..{} (the cache's length)", i, g.pos0, kv.n_pos());
        if (g.pos0 + rows > kv.shape().n_ctx)
            fail("forward: segment {}: positions {}..{} do not fit the context ({})", i, g.pos0, g.pos0 + rows - 1, kv.shape().n_ctx);
        if (kv.shape().n_layer != hp.n_layer || kv.shape().n_kv_head != hp.n_kv_head || kv.shape().head_dim != hp.head_dim)
            fail("forward: segment {}: the KV cache's shape does not match the model", i);
        for (size_t j = 0; j < i; ++j)
            if (batch[j].kv == g.kv) fail("forward: segments {} and {} share one KV cache", j, i);
        for (token_id t : g.tokens)
            if (t < 0 || t >= hp.n_vocab) fail("forward: segment {}: token id {}: expected 0..{}", i, t, hp.n_vocab - 1);
        n += rows;
    }
    if (n > s.max_rows) fail("forward: batch of {} rows: expected 1..{}", n, s.max_rows);
    return n;
}

void embed_batch(const output_weights& w, const model_hparams& hp, std::span<const batch_segment> batch,
                 forward_scratch& s) {
    int64_t r = 0;
    for (const batch_segment& g : batch)
        for (token_id t : g.tokens) kernels::get_row(*w.tok_embd, t, s.x.data() + (r++) * hp.n_embd);
}

void attention_block(const attn_weights& w, const model_hparams& hp, int il, std::span<const batch_segment> batch,
                     int64_t n, forward_scratch& s) {
    thread_pool& pool = *s.pool;
    const int64_t E = hp.n_embd, hd = hp.head_dim;
    const int64_t nq = hp.n_head * hd, nkv = hp.n_kv_head * hd;
    // Row-wise part: every row of every segment at once.
    rmsnorm_rows(pool, s.x.data(), w.norm.data(), s.xn.data(), n, E, hp.rms_eps);
    const kernels::matmul_out qkv[] = {{w.wq, s.q.data()}, {w.wk, s.k.data()}, {w.wv, s.v.data()}};
    matmul_shared_input(pool, qkv, s.xn.data(), n, s.act.data());
    kernels::attention_params ap;
    ap.n_head = hp.n_head;
    ap.n_kv_head = hp.n_kv_head;
    ap.head_dim = hp.head_dim;
    ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hp.head_dim)));
    // Per segment: biases, q/k norms and RoPE at the row's own position, the K/V writes into
    // the segment's cache, then attention over that cache only.
    int64_t row0 = 0;
    for (const batch_segment& g : batch) {
        const int64_t rows = static_cast<int64_t>(g.tokens.size());
        kv_cache& kv = *g.kv;
        kernels::for_rows(pool, rows, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
                const int64_t r = row0 + i;
                float* q = s.q.data() + r * nq;
                float* k = s.k.data() + r * nkv;
                float* v = s.v.data() + r * nkv;
                if (!w.bq.empty()) {
                    kernels::add(q, w.bq.data(), nq);
                    kernels::add(k, w.bk.data(), nkv);
                    kernels::add(v, w.bv.data(), nkv);
                }
                if (!w.q_norm.empty()) {
                    for (int h = 0; h < hp.n_head; ++h) kernels::rmsnorm(q + h * hd, w.q_norm.data(), q + h * hd, hd, hp.rms_eps);
                    for (int h = 0; h < hp.n_kv_head; ++h) kernels::rmsnorm(k + h * hd, w.k_norm.data(), k + h * hd, hd, hp.rms_eps);
                }
                rope_and_cache_row(hp, g.pos0 + static_cast<int32_t>(i), q, k, v, kv.k(il) + (g.pos0 + i) * nkv,
                                   kv.v(il) + (g.pos0 + i) * nkv);
            }
        });
        kernels::attention(pool, ap, s.q.data() + row0 * nq, kv.k(il), kv.v(il), g.pos0, rows, s.attn.data() + row0 * nq,
                           kernels::attention_scratch{s.attn_split.data(), s.attn_split.size()});
        row0 += rows;
    }
    kernels::matmul(pool, *w.wo, s.attn.data(), n, s.out.data(), s.act.data());
    add_rows(pool, s.x.data(), s.out.data(), n, E);
}

void commit_batch(std::span<const batch_segment> batch) {
    for (const batch_segment& g : batch) g.kv->set_n_pos(g.pos0 + static_cast<int32_t>(g.tokens.size()));
}

void ffn_rows(const ffn_weights& w, int64_t n_ff, int64_t n_embd, int64_t n, forward_scratch& s, float* out) {
    (void)n_embd;
    const kernels::matmul_out gate_up[] = {{w.gate, s.gate.data()}, {w.up, s.up.data()}};
    matmul_shared_input(*s.pool, gate_up, s.xn.data(), n, s.act.data());
    kernels::for_rows(*s.pool, n, [&](int64_t r0, int64_t r1) {
        kernels::swiglu(s.gate.data() + r0 * n_ff, s.up.data() + r0 * n_ff, s.gate.data() + r0 * n_ff, (r1 - r0) * n_ff);
    });
    kernels::matmul(*s.pool, *w.down, s.gate.data(), n, out, s.act.data());
}

void dense_ffn_block(const std::vector<float>& norm, const ffn_weights& w, const model_hparams& hp,
                     int64_t n, forward_scratch& s) {
    const int64_t E = hp.n_embd;
    rmsnorm_rows(*s.pool, s.x.data(), norm.data(), s.xn.data(), n, E, hp.rms_eps);
    ffn_rows(w, hp.n_ff, E, n, s, s.out.data());
    add_rows(*s.pool, s.x.data(), s.out.data(), n, E);
}

void output_block(const output_weights& w, const model_hparams& hp, std::span<const batch_segment> batch,
                  forward_scratch& s, float* logits) {
    const int64_t E = hp.n_embd;
    // Gather the rows that want logits into xn, packed (rmsnorm is row-wise: the same bits
    // wherever the row lands), then one LM-head matmul over them.
    int64_t row0 = 0, m = 0;
    for (const batch_segment& g : batch) {
        const int64_t rows = static_cast<int64_t>(g.tokens.size());
        for (int64_t r = rows - g.n_logits; r < rows; ++r, ++m)
            kernels::rmsnorm(s.x.data() + (row0 + r) * E, w.norm.data(), s.xn.data() + m * E, E, hp.rms_eps);
        row0 += rows;
    }
    if (m > 0) kernels::matmul(*s.pool, *w.output, s.xn.data(), m, logits, s.act.data());
}

}  // namespace sluice
