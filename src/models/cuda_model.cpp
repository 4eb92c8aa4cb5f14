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
    return arch == "llama" || arch == "qwen3" || arch == "qwen3moe" || arch == "qwen2moe" || arch == "qwen3next" ||
           arch == "qwen35moe";
}
}  // namespace sluice

#ifdef SLUICE_HAVE_CUDA

#include "models/cuda_model_impl.h"
#include "models/hybrid_model.h"
#include "placement/progress.h"

#include "kernels/cuda/act_quant.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/ops.cuh"

#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>

namespace sluice::cuda_impl {

void ck(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("cuda model: {}: {}", what, cudaGetErrorString(e));
}

arch_spec spec_for(const std::string& arch) {
    if (arch == "llama") return {kernels::rope_mode::normal, false, false, false, false, false};
    if (arch == "qwen3") return {kernels::rope_mode::neox, false, true, false, false, false};
    if (arch == "qwen3moe") return {kernels::rope_mode::neox, false, true, true, false, true};
    if (arch == "qwen2moe") return {kernels::rope_mode::neox, true, false, true, true, false};
    if (arch == "qwen3next" || arch == "qwen35moe") return {kernels::rope_mode::neox, false, true, true, true, true, true};
    fail("cuda model: general.architecture '{}': expected one of llama, qwen3, qwen3moe, qwen2moe, qwen3next, qwen35moe",
         arch);
}

cuda_model::cuda_model(const model_file& f, const load_options&, int device, const cuda_placement* place) : dev_(device) {
    int n_dev = 0;
    ck(cudaGetDeviceCount(&n_dev), "cudaGetDeviceCount");
    if (device < 0 || device >= n_dev) fail("cuda model: device {}: expected 0..{}", device, n_dev - 1);
    ck(cudaSetDevice(dev_), "cudaSetDevice");
    ck(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, dev_), "cudaDeviceGetAttribute");
    ck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda::upload_tables();

    // Hyperparameters, as the CPU architecture files read them.
    const std::string arch = f.architecture();
    spec_ = spec_for(arch);
    std::optional<hybrid_variant> variant;
    if (spec_.hybrid) {
        variant = hybrid_variant_of(f);
        hy_ = read_hybrid_hparams(f, arch, variant->v_tiled, hp_);   // the MoE and shared-expert keys too
    } else {
        hp_ = read_transformer_hparams(f, arch, spec_.rope);
    }
    if (spec_.hybrid) {
        // read_hybrid_hparams read everything.
    } else if (spec_.moe) {
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

    // Weights: bound and checked by the CPU's binder, then uploaded (flush_uploads).
    placement::progress* prog = place ? place->progress : nullptr;
    defer_uploads_ = true;
    weight_binder b(f);
    std::vector<moe::expert_bank> banks;   // [n_layer] the routed experts in host memory (MoE)
    std::vector<ffn_weights> shexps;       // [n_layer] their shared experts (spec_.shexp)
    uint64_t expert_bytes = 0;
    out_ = bind_output(b, hp_);
    tok_embd_ = out_.tok_embd;
    output_norm_ = upload_vec(out_.norm);
    output_ = upload_mat(*out_.output);
    for (int il = 0; il < hp_.n_layer; ++il) {
        dlayer l;
        if (spec_.hybrid) {
            l = load_hybrid_layer(f, b, il, *variant);
        } else {
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
        }
        if (spec_.moe) {
            const moe_weights m = bind_moe(b, hp_, il, spec_.shexp);
            l.router = upload_mat(*m.router);
            banks.push_back({m.gate_exps, m.up_exps, m.down_exps});
            expert_bytes += m.gate_exps->nbytes + m.up_exps->nbytes + m.down_exps->nbytes;
            if (spec_.shexp) {
                shexps.push_back(m.shexp);   // uploaded below, with the routed experts where they fit as one more
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
    const bool split = spec_.moe && place && place->vram_budget < expert_bytes;
    for (size_t il = 0; il < banks.size(); ++il) {
        dlayer& l = layers_[il];
        const moe::expert_bank& k = banks[il];
        // All in VRAM, a shared expert of the routed experts' format and shape goes after them,
        // as expert n_expert of each bank: a decode row then computes it as one more pair of
        // the routed launches (moe_block), not in launches of its own.
        if (!split && !shexps.empty()) {
            const ffn_weights& sh = shexps[il];
            // (The shared expert's id in ids_sh_ is n_expert: the bank must hold exactly that many.)
            l.sh_pair = k.gate->ne[2] == hp_.n_expert && fits_as_expert(*k.gate, *sh.gate) && fits_as_expert(*k.up, *sh.up) && fits_as_expert(*k.down, *sh.down);
            if (l.sh_pair) {
                upload_bank_with(*k.gate, *sh.gate, l.gate_exps, l.sh_gate);
                upload_bank_with(*k.up, *sh.up, l.up_exps, l.sh_up);
                upload_bank_with(*k.down, *sh.down, l.down_exps, l.sh_down);
                continue;
            }
        }
        if (!split) {
            l.gate_exps = upload_mat(*k.gate);
            l.up_exps = upload_mat(*k.up);
            l.down_exps = upload_mat(*k.down);
        }
        if (!shexps.empty()) {
            l.sh_gate = upload_mat(*shexps[il].gate);
            l.sh_up = upload_mat(*shexps[il].up);
            l.sh_down = upload_mat(*shexps[il].down);
        }
    }
    flush_uploads(prog);
    if (split) {
        lanes_ = std::make_unique<cuda_expert_lanes>(hp_, banks, *place, stream_);
        for (int il = 0; il < hp_.n_layer; ++il) {
            const cuda_expert_lanes::layer_slots& sl = lanes_->slots(il);
            const moe::expert_bank& k = banks[static_cast<size_t>(il)];
            dlayer& l = layers_[static_cast<size_t>(il)];
            l.gate_exps = slot_mat(*k.gate, sl.gate);
            l.up_exps = slot_mat(*k.up, sl.up);
            l.down_exps = slot_mat(*k.down, sl.down);
        }
    }
    if (spec_.hybrid && hy_.n_nextn > 0) mtp_host_ = bind_mtp(b, hp_, hp_.n_layer);   // uploaded by a head
    ck(cudaStreamSynchronize(stream_), "weight upload");
}

cuda_model::~cuda_model() {
    cudaSetDevice(dev_);
    cudaStreamSynchronize(stream_);
    lanes_.reset();
    for (void* p : allocs_) cudaFree(p);
    for (auto& kv : kvs_) free_kv(kv.second);
    free_scratch();
    free_attention_split();
    if (rope_) cudaFree(rope_);
    cudaStreamDestroy(stream_);
}

void cuda_model::forward_batch(std::span<const batch_segment> batch, forward_scratch& s, float* logits) {
    const int64_t n = check_batch(hp_, batch, s);
    if (spec_.hybrid) check_recurrent(batch);   // before any change: can each state roll back to pos0?
    ck(cudaSetDevice(dev_), "cudaSetDevice");
    ensure_scratch(s.max_rows);
    if (lanes_) {
        if (lanes_->ensure(s.max_rows)) clear_graphs();   // the split graphs hold its buffers
        lanes_->sync_slot_map();   // after an adapt() that threw part way
        pool_ = s.pool;
        lanes_->calibrate(*pool_);   // once: the CPU lane's figure for the planner
    }
    int32_t max_pos = 0;
    for (const batch_segment& g : batch) max_pos = std::max(max_pos, g.pos0 + static_cast<int32_t>(g.tokens.size()));
    ensure_rope(max_pos);
    std::vector<float*>& kv_bufs = kv_bufs_;
    kv_bufs.clear();
    for (const batch_segment& g : batch) {
        kv_bufs.push_back(kv_for(*g.kv));
        ensure_attention_split(g.kv->shape().n_ctx);
    }

    // Embeddings: dequantised on the host (the CPU's get_row) into pinned memory; the copy
    // up is the step's first operation.
    const int64_t E = hp_.n_embd;
    int64_t r = 0, m = 0;
    for (const batch_segment& g : batch) {
        for (token_id t : g.tokens) kernels::get_row(*tok_embd_, t, h_x_ + (r++) * E);
        m += g.n_logits;
    }
    if (spec_.hybrid) {
        begin_recurrent(batch, /*host_slots=*/false);   // the host's bookkeeping, without its slots
        begin_recurrent_device(batch);   // the device state, rolled back the same way
    }
    try {
        if (lanes_) lanes_->begin_stream(n);   // a prefill chunk may stream its split layers
        enqueue_forward(batch, kv_bufs, n);
    } catch (...) {
        if (lanes_) lanes_->abandon_forward();
        if (spec_.hybrid) end_recurrent_device(batch, false);
        throw;
    }
    if (spec_.hybrid) {
        end_recurrent_device(batch, true);
        end_recurrent(batch);
    }
    for (const batch_segment& g : batch) g.kv->set_n_pos(g.pos0 + static_cast<int32_t>(g.tokens.size()));
    // Once an MTP head exists, every row's last residual goes to s.x, as the CPU model leaves
    // it: the drafter's input (8 KiB a row for n_embd 2,048), through the pinned embedding rows.
    const size_t res_bytes = static_cast<size_t>(n * hp_.n_embd) * 4;
    if (mtp_) ck(cudaMemcpyAsync(h_x_, x_, res_bytes, cudaMemcpyDeviceToHost, stream_), "residual rows");
    copy_logits(logits, m);   // waits for the stream
    if (mtp_) std::memcpy(s.x.data(), h_x_, res_bytes);
    if (lanes_) lanes_->end_forward();
}

// The forward's m logits rows into the caller's memory, through the pinned staging rows: a
// copy into pageable memory costs more than the copy and a memcpy (94 us against 18 + 22 us for
// a 151,936-float row on the H200 machine, bench/gpu/step_overhead.cu), and the caller's first
// read of a row the driver wrote there was slower still (decode_bench's argmax over it: 0.70 ms
// a token, session 10). With m == 0 it only waits for the forward.
void cuda_model::copy_logits(float* dst, int64_t m) {
    const size_t row = static_cast<size_t>(hp_.n_vocab) * 4;
    if (m == 0) ck(cudaStreamSynchronize(stream_), "forward");
    for (int64_t r0 = 0; r0 < m; r0 += logits_stage_rows_) {
        const size_t bytes = static_cast<size_t>(std::min<int64_t>(logits_stage_rows_, m - r0)) * row;
        ck(cudaMemcpyAsync(h_logits_, logits_ + r0 * hp_.n_vocab, bytes, cudaMemcpyDeviceToHost, stream_), "logits");
        ck(cudaStreamSynchronize(stream_), "forward");
        std::memcpy(reinterpret_cast<std::byte*>(dst) + static_cast<size_t>(r0) * row, h_logits_, bytes);
    }
}

void cuda_model::enqueue_forward(std::span<const batch_segment> batch, const std::vector<float*>& kv_bufs, int64_t n) {
    if (split_graphs_apply(batch, n)) {
        *h_pos_ = batch[0].pos0;
        enqueue_split_step(batch, kv_bufs, n);
    } else if (graphs_apply(batch, n)) {
        // A decode step or a verify window: one captured graph per (cache, logits wanted, rows),
        // replayed with the position read from device memory.
        *h_pos_ = batch[0].pos0;
        const graph_key key{kv_bufs[0], batch[0].kv->shape().n_ctx, batch[0].n_logits, n};
        cudaGraphExec_t exec = nullptr;
        for (const auto& [k, e] : graphs_cache_)
            if (k == key) exec = e;
        if (!exec) exec = capture(batch, kv_bufs, n, key);
        ck(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
    } else {
        enqueue(batch, kv_bufs, n, nullptr);
    }
}

void cuda_model::set_programmatic(bool on) {
    ck(cudaSetDevice(dev_), "cudaSetDevice");
    ck(cudaStreamSynchronize(stream_), "sync");
    clear_graphs();
    cuda::set_programmatic_launch(on);
}

void* cuda_model::dalloc(size_t bytes) {
    void* p = nullptr;
    ck(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    allocs_.push_back(p);
    return p;
}

void cuda_model::flush_uploads(placement::progress* prog) {
    defer_uploads_ = false;
    uint64_t total = 0;
    for (const pending_upload& u : pending_uploads_) total += u.bytes;
    if (prog) prog->begin("weights to the GPU", total);
    for (const pending_upload& u : pending_uploads_) {
        ck(cudaMemcpy(u.dst, u.src, u.bytes, cudaMemcpyHostToDevice), "upload");
        if (prog) prog->advance(u.bytes);
    }
    if (prog) prog->finish();
    pending_uploads_ = {};
}

float* cuda_model::upload_vec(const std::vector<float>& v) {
    if (v.empty()) return nullptr;
    auto* p = static_cast<float*>(dalloc(v.size() * 4));
    ck(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "upload");
    return p;
}

dmat cuda_model::upload_mat(const tensor_view& t) {
    // One upload per tensor: a tied LM head shares token_embd's copy.
    if (auto it = uploaded_.find(&t); it != uploaded_.end()) return it->second;
    auto* p = static_cast<std::byte*>(dalloc(t.nbytes));
    copy_up(p, t);
    const dmat m = slot_mat(t, p);
    uploaded_[&t] = m;
    return m;
}

void cuda_model::copy_up(std::byte* dst, const tensor_view& t) {
    if (defer_uploads_) pending_uploads_.push_back({dst, t.data, t.nbytes});
    else ck(cudaMemcpy(dst, t.data, t.nbytes, cudaMemcpyHostToDevice), "upload");
}

bool cuda_model::fits_as_expert(const tensor_view& bank, const tensor_view& extra) {
    return bank.ne[2] >= 1 && extra.type == bank.type && extra.ne[0] == bank.ne[0] && extra.ne[1] == bank.ne[1] &&
           extra.ne[2] == 1 && extra.ne[3] == 1 && extra.nbytes * static_cast<size_t>(bank.ne[2]) == bank.nbytes;
}

void cuda_model::upload_bank_with(const tensor_view& bank, const tensor_view& extra, dmat& bank_out, dmat& extra_out) {
    if (!fits_as_expert(bank, extra)) fail("cuda model: '{}' does not fit as one more expert of '{}'", extra.name, bank.name);
    auto* p = static_cast<std::byte*>(dalloc(bank.nbytes + extra.nbytes));
    copy_up(p, bank);
    copy_up(p + bank.nbytes, extra);
    bank_out = slot_mat(bank, p);
    extra_out = slot_mat(extra, p + bank.nbytes);
    uploaded_[&bank] = bank_out;
    uploaded_[&extra] = extra_out;
}

dmat cuda_model::slot_mat(const tensor_view& t, const std::byte* data) {
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

void cuda_model::free_scratch() {
    clear_graphs();
    for (void* p : scratch_) cudaFree(p);
    scratch_.clear();
    if (h_x_) cudaFreeHost(h_x_);
    if (h_pos_) cudaFreeHost(h_pos_);
    if (h_logits_) cudaFreeHost(h_logits_);
    h_x_ = nullptr;
    h_pos_ = nullptr;
    h_logits_ = nullptr;
    max_rows_ = 0;
}

void cuda_model::ensure_scratch(int max_rows) {
    if (max_rows <= max_rows_) return;
    ck(cudaStreamSynchronize(stream_), "sync");
    free_scratch();
    const size_t R = static_cast<size_t>(max_rows), E = static_cast<size_t>(hp_.n_embd);
    const size_t nq = static_cast<size_t>(hp_.n_head) * static_cast<size_t>(hp_.head_dim);
    const size_t nkv = static_cast<size_t>(hp_.n_kv_head) * static_cast<size_t>(hp_.head_dim);
    const size_t K = static_cast<size_t>(std::max(hp_.n_expert_used, 1));
    const size_t RK = R * K;   // (row, expert) pairs
    // gate_ / up_ hold a dense FFN's rows [R, n_ff], the routed pairs' [RK, n_ff_exp] or the
    // shared expert's [R, n_ff_shexp]: the largest of the three, not RK x the widest (for the 80B
    // hybrid at 2048 rows that was 2 x 0.84 GB against 2 x 0.08).
    const auto width = [](int v) { return static_cast<size_t>(std::max(v, 0)); };
    // (RK + 1: a decode row's pairs with the shared expert as one more, dlayer::sh_pair.)
    const size_t ffn_elems =
        std::max({R * width(hp_.n_ff), (RK + 1) * width(hp_.n_ff_exp), R * width(hp_.n_ff_shexp), size_t{1}});
    const size_t ff = std::max({width(hp_.n_ff), width(hp_.n_ff_exp), width(hp_.n_ff_shexp), size_t{1}});
    x_ = salloc<float>(R * E);
    xn_ = salloc<float>(R * E);
    q_ = salloc<float>(R * nq);
    k_ = salloc<float>(R * nkv);
    v_ = salloc<float>(R * nkv);
    attn_ = salloc<float>(R * nq);
    out_buf_ = salloc<float>(R * E);
    gate_ = salloc<float>(ffn_elems);
    up_ = salloc<float>(ffn_elems);
    ey_ = salloc<float>((RK + 1) * E);
    shexp_ = salloc<float>(R * E);
    router_ = salloc<float>(R * static_cast<size_t>(std::max(hp_.n_expert, 1)));
    ids_ = salloc<int32_t>(RK);
    ids_sh_ = salloc<int32_t>(K + 1);
    const int32_t shared_id = hp_.n_expert;   // the shared expert's place in a sh_pair layer's banks
    ck(cudaMemcpy(ids_sh_ + K, &shared_id, 4, cudaMemcpyHostToDevice), "cudaMemcpy (shared expert id)");
    perm_ = salloc<int32_t>(RK);
    // [3, max tiles]: sized for the smallest tile (16 rows), which gives the most tiles.
    tiles_ = salloc<int32_t>(3 * static_cast<size_t>(cuda::group_tiles_max(
                                     static_cast<int64_t>(RK), std::max(hp_.n_expert, 1), cuda::k_tile_rows_window)));
    n_tiles_ = salloc<int32_t>(1);
    ew_ = salloc<float>(RK);
    shgate_ = salloc<float>(R);
    logits_ = salloc<float>(R * static_cast<size_t>(hp_.n_vocab));
    // int8 activation rows: at most 292 bytes per 256 values (act_block256) or 36 per 32.
    const size_t vd = spec_.hybrid ? static_cast<size_t>(hy_.dn.value_dim()) : 0;
    const size_t widest = std::max({E, nq, ff, vd, mtp_host_ ? 2 * E : 0});   // the MTP's eh_proj reads 2*n_embd
    act_ = salloc<std::byte>((RK + 1) * (widest / 32 + 1) * 37);   // RK + 1: sh_pair's row as one more pair
    if (spec_.hybrid) {
        const size_t C = static_cast<size_t>(hy_.dn.conv_channels()), nv = static_cast<size_t>(hy_.dn.n_v_heads);
        qg_ = salloc<float>(R * 2 * nq);
        dn_mixed_ = salloc<float>(R * C);
        dn_conv_ = salloc<float>(R * C);
        dn_z_ = salloc<float>(R * vd);
        dn_ba_ = salloc<float>(R * 2 * nv);
        dn_alpha_ = salloc<float>(R * nv);
        dn_core_ = salloc<float>(R * vd);
    }
    d_pos_ = salloc<int32_t>(1);
    route_arrivals_ = salloc<unsigned>(2);
    ck(cudaMemset(route_arrivals_, 0, 2 * sizeof(unsigned)), "cudaMemset");
    combine_arrivals_ = route_arrivals_ + 1;
    ck(cudaMallocHost(&h_x_, R * E * 4), "cudaMallocHost");
    ck(cudaMallocHost(&h_pos_, 4), "cudaMallocHost");
    logits_stage_rows_ = std::min(max_rows, k_logits_stage_rows);
    ck(cudaMallocHost(&h_logits_, static_cast<size_t>(logits_stage_rows_) * static_cast<size_t>(hp_.n_vocab) * 4),
       "cudaMallocHost");
    max_rows_ = max_rows;
}

void cuda_model::enqueue(std::span<const batch_segment> batch, const std::vector<float*>& kv_bufs, int64_t n, const int32_t* pos_dev) {
    const int64_t E = hp_.n_embd;
    ck(cudaMemcpyAsync(x_, h_x_, static_cast<size_t>(n * E) * 4, cudaMemcpyHostToDevice, stream_), "embeddings");
    if (pos_dev) ck(cudaMemcpyAsync(d_pos_, h_pos_, 4, cudaMemcpyHostToDevice, stream_), "position");
    attn_rows_.clear();
    // The MoE residual add is deferred only inside this loop: whatever way enqueue leaves (an
    // exception from a launch or a capture included), nothing stays deferred or pending.
    pending_residual_ = {};
    struct residual_scope {
        cuda_model& m;
        ~residual_scope() {
            m.defer_residual_ = false;
            if (std::uncaught_exceptions() > 0) m.pending_residual_ = {};
        }
    } residual_guard{*this};
    for (size_t i = 0; i < batch.size(); ++i)
        attn_rows_.push_back({batch[i].pos0, static_cast<int64_t>(batch[i].tokens.size()), batch[i].kv->shape().n_ctx,
                              kv_bufs[i]});
    for (int il = 0; il < hp_.n_layer; ++il) {
        const dlayer& l = layers_[static_cast<size_t>(il)];
        if (l.recurrent) delta_net_block(l, batch, n);
        else attention_block(l, il, attn_rows_, n, pos_dev);
        defer_residual_ = il + 1 < hp_.n_layer;   // the next layer's first launch is its norm
        if (spec_.moe) moe_block(l, il, n);
        else dense_block(l, n);
    }
    defer_residual_ = false;
    flush_residual();   // never pending here (the last layer's add is not deferred): a guard
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

bool cuda_model::graph_shaped(std::span<const batch_segment> batch, int64_t n) {
    return batch.size() == 1 && (n == 1 || (n <= cuda::k_split_max_rows && batch[0].n_logits == n));
}

bool cuda_model::graphs_apply(std::span<const batch_segment> batch, int64_t n) const {
    // A window's launches read its position from device memory as a step's do (the split
    // attention's lanes come from its records then, not from the position), so one graph per
    // window size serves every position.
    return graphs_ && !lanes_ && graph_shaped(batch, n);
}

cudaGraphExec_t cuda_model::capture(std::span<const batch_segment> batch, const std::vector<float*>& kv_bufs,
                                    int64_t n, const graph_key& key) {
    if (graphs_cache_.size() >= k_graphs_max) clear_graphs();
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

void cuda_model::clear_graphs() {
    for (auto& kv : graphs_cache_) cudaGraphExecDestroy(kv.second);
    graphs_cache_.clear();
    for (split_graph& g : split_graphs_)
        for (cudaGraphExec_t e : g.segments) cudaGraphExecDestroy(e);
    split_graphs_.clear();
}

void cuda_model::mm(const dmat& w, const float* x, int64_t n_rows, float* y, bool reuse, const int32_t* ids, int act_div,
                    bool accumulate, const dmat* w2, float* y2) {
    cuda::matmul(mm_args_for(w, x, n_rows, y, reuse, ids, act_div, accumulate, w2, y2), stream_);
}

cuda::mm_args cuda_model::mm_args_for(const dmat& w, const float* x, int64_t n_rows, float* y, bool reuse,
                                      const int32_t* ids, int act_div, bool accumulate, const dmat* w2, float* y2) {
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
    a.sm_count = sm_count_;
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
    return a;
}

bool cuda_model::norm(const float* x, const float* w, float* out, int64_t n, quant::act_format f, std::byte* act) {
    if (pending_residual_.ey) {
        if (x == x_ && out != x_ && n == pending_rows_ && f != quant::act_format::f32 && hp_.n_embd <= 8192) {
            cuda::moe_residual_rmsnorm_quant(pending_residual_, x_, w, out, n, hp_.n_embd, hp_.rms_eps, f, act, stream_);
            pending_residual_ = {};
            return true;
        }
        flush_residual();
    }
    if (f == quant::act_format::f32) {
        cuda::rmsnorm(x, w, out, n, hp_.n_embd, hp_.rms_eps, stream_);
        return false;
    }
    cuda::rmsnorm_quant(x, w, out, n, hp_.n_embd, hp_.rms_eps, f, act, stream_);
    return true;
}

void cuda_model::swiglu_down(const dmat& down, int64_t rows, float* y, const int32_t* ids, bool accumulate,
                             bool ids_settled) {
    if (fmt(down) == quant::act_format::f32) {
        cuda::swiglu(gate_, up_, gate_, rows * down.n_in, stream_);
        mm(down, gate_, rows, y, false, ids, 1, accumulate);
        return;
    }
    cuda::mm_args a = mm_args_for(down, gate_, rows, y, true, ids, 1, accumulate);   // act_: where the rows go
    a.ids_settled = ids_settled;
    cuda::matmul_swiglu(a, gate_, up_, stream_);
}

void cuda_model::dense_block(const dlayer& l, int64_t n) {
    const bool g_act = norm(x_, l.ffn_norm, xn_, n, fmt(l.gate), act_);
    if (pairable(l.gate, l.up)) {
        mm(l.gate, xn_, n, gate_, g_act, nullptr, 1, false, &l.up, up_);
    } else {
        mm(l.gate, xn_, n, gate_, g_act);
        mm(l.up, xn_, n, up_, fmt(l.gate) != quant::act_format::f32 && fmt(l.up) == fmt(l.gate));
    }
    swiglu_down(l.down, n, x_, nullptr, true);   // x += down . swiglu
}

}  // namespace sluice::cuda_impl

namespace sluice {

using cuda_impl::cuda_model;

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

