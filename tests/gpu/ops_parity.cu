// cpu_op_bits_equal_gpu_op_bits: every device op of src/kernels/cuda/ops.cu and attention.cu
// against its CPU op (src/kernels/cpu), bit for bit, on random inputs: RMSNorm (model rows and
// per-head rows), RoPE (normal, NeoX, YaRN) from the host's rope_table, attention (decode, a
// verify window, prefills with both kernels; GQA; head_dim 128, 80, 72 and 64), the router's softmax + top-k (with ties),
// SwiGLU, the MoE rank-order combine and the shared-expert gate; the fused forms the CUDA
// model runs (rmsnorm + int8 activation rows, SwiGLU + int8 activation rows, combine + residual,
// the MoE residual add with or without the shared expert folded into the next norm) against the CPU's two steps (kernels::rmsnorm / swiglu, then quant::quantize_act_row). Also E1 for attention on the
// GPU: a window's rows equal the same rows computed one at a time (by the one-row kernel).
// Before the GPU: (host) the router's one-row function that the device runs
// (src/kernels/cuda/router.cuh) equals kernels::route_topk on the host.
// Exit 0 when everything matches, 1 on a difference, 77 (skipped) without a GPU.
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/router.cuh"

#include "core/thread_pool.h"
#include "kernels/cpu/ops.h"
#include "kernels/math.h"
#include "parity_util.cuh"
#include "quant/act.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace sluice;

namespace {

using gpu_test::dvec;
using gpu_test::report;
using gpu_test::rnd;

int test_rmsnorm() {
    int f = 0;
    for (auto [rows, n] : {std::pair<int64_t, int64_t>{7, 2048}, {40, 128}, {3, 1000}}) {
        auto x = rnd(static_cast<size_t>(rows * n), 1, 3.0f), w = rnd(static_cast<size_t>(n), 2);
        std::vector<float> cpu(x.size());
        for (int64_t r = 0; r < rows; ++r) kernels::rmsnorm(x.data() + r * n, w.data(), cpu.data() + r * n, n, 1e-6f);
        dvec dx(x), dw(w), dout(x.size());
        cuda::rmsnorm(dx.p, dw.p, dout.p, rows, n, 1e-6f, nullptr);
        f += report("rmsnorm " + std::to_string(rows) + "x" + std::to_string(n), cpu, dout.get());
        cuda::rmsnorm(dx.p, dw.p, dx.p, rows, n, 1e-6f, nullptr);   // in place
        f += report("rmsnorm in place " + std::to_string(rows) + "x" + std::to_string(n), cpu, dx.get());
    }
    return f;
}

int test_rope() {
    int f = 0;
    struct cfg { const char* name; kernels::rope_params p; int head_dim; };
    std::vector<cfg> cfgs(3);
    cfgs[0] = {"rope normal", {}, 64};
    cfgs[0].p.mode = kernels::rope_mode::normal;
    cfgs[0].p.n_rot = 64;
    cfgs[1] = {"rope neox partial", {}, 128};
    cfgs[1].p.mode = kernels::rope_mode::neox;
    cfgs[1].p.n_rot = 96;
    cfgs[1].p.freq_base = 1e6f;
    cfgs[2] = {"rope neox yarn", {}, 128};
    cfgs[2].p.mode = kernels::rope_mode::neox;
    cfgs[2].p.n_rot = 128;
    cfgs[2].p.freq_scale = 0.25f;
    cfgs[2].p.ext_factor = 1.0f;
    cfgs[2].p.n_ctx_orig = 4096;
    for (const cfg& c : cfgs) {
        const int n_head = 6, rows = 9;
        const int32_t pos0 = 1000;
        const int n_pos = pos0 + rows;
        std::vector<float> table(static_cast<size_t>(n_pos) * c.p.n_rot);
        for (int p = 0; p < n_pos; ++p) kernels::rope_table(c.p, p, table.data() + static_cast<size_t>(p) * c.p.n_rot);
        auto x = rnd(static_cast<size_t>(rows * n_head * c.head_dim), 3);
        std::vector<float> cpu = x;
        for (int r = 0; r < rows; ++r)
            kernels::rope_apply(c.p, table.data() + static_cast<size_t>(pos0 + r) * c.p.n_rot,
                                cpu.data() + static_cast<size_t>(r) * n_head * c.head_dim, n_head, c.head_dim);
        dvec dt(table), dx(x);
        cuda::rope(c.p, dt.p, pos0, dx.p, rows, n_head, c.head_dim, nullptr);
        f += report(c.name, cpu, dx.get());
    }
    return f;
}

int report_bytes(const std::string& what, const std::vector<std::byte>& cpu, const std::byte* dev);

int test_attention(thread_pool& pool) {
    int f = 0;
    // ties: the KV rows repeat every 5 positions, so every chunk holds equal maximal scores
    // (equal bits, so any of them gives the same output: this checks that the tree's tie rule
    // still finds a maximum and that the merge is unchanged, not which element it picks; the
    // serial fallback for NaN scores is not covered here, as NaN payloads differ between the
    // CPU and the GPU).
    struct cfg { int n_head, n_kv, hd; int32_t pos0; int rows; bool ties = false; };
    // Windows of more than 16 rows run attention_rows_kernel (a block per KV head and tile of
    // rows, two queries a warp where the query heads a KV head are even, else one); "rows alone"
    // then compares it with the one-row kernel: 300 rows of 4 query heads a KV head, 100 of 8
    // (Qwen3-30B-A3B's 32/4), SmolLM2's 9/3 at head_dim 64 (one query a warp), head_dim 72 (not a
    // multiple of 16: scalar K reads), 16 heads on one KV head (two rows a block), 20 query heads
    // a KV head (one row a block), 17 (odd and more than a block's warps: the one-row kernel), and
    // ties. Heads of 256 (the Qwen hybrids' 16/2 gated attention: 8 dimensions a lane in every
    // kernel) in a prefill window, with ties, 12/4 (one query a warp), and one row at 3000
    // positions (the split kernel); head_dim 200 (8 a lane, part used, scalar K reads); 68/2
    // (G 34, even and past 32: the one-row kernel), 32/1 (G 32: every query slot of the block),
    // 9/3 at head_dim 72 (one query a warp, scalar K reads), 6/2 at head_dim 130 (one query a
    // warp at 8 a lane, K and V staged float by float), and 37 rows of 16/2 heads of 256 (the
    // last tile of 4 rows partial). Verify windows through the split pair at depth: 4 rows of the
    // 30B shape's 32/4 at 4,090 positions, 8 of the hybrids' 16/2 heads of 256 at 3,000, 9 rows
    // of 32/4 across a chunk boundary at 31, and 16 rows whose last ones reach a chunk that begins
    // 13 and 14 positions after the window's first (32/4 at 51, 16/2 of 256 at 1,010): that
    // chunk's lane has no rows to stage before the wait (a count that went negative until
    // session 46 and overwrote the warps' queries).
    const cfg cfgs[] = {{8, 2, 128, 299, 1},   {8, 2, 128, 250, 16},  {8, 2, 128, 0, 300},   {4, 4, 64, 77, 5},
                        {6, 3, 80, 40, 3},     {32, 4, 128, 1000, 1}, {8, 2, 128, 600, 4, true},
                        {32, 4, 128, 37, 100}, {9, 3, 64, 5, 70},     {4, 2, 72, 3, 50},     {16, 1, 128, 20, 33},
                        {40, 2, 128, 0, 20},   {8, 2, 128, 600, 40, true}, {32, 4, 128, 5000, 1}, {9, 3, 64, 2100, 2},
                        {16, 2, 256, 0, 100},  {16, 2, 256, 700, 40, true}, {16, 2, 256, 3000, 1}, {4, 2, 200, 50, 30},
                        {12, 4, 256, 10, 40},  {34, 2, 64, 0, 20},   {68, 2, 64, 0, 20},     {32, 1, 64, 3, 20},
                        {9, 3, 72, 5, 30},     {6, 2, 130, 4, 25},   {16, 2, 256, 500, 37},
                        {32, 4, 128, 4090, 4}, {16, 2, 256, 3000, 8}, {32, 4, 128, 31, 9},   {32, 4, 128, 51, 16},
                        {16, 2, 256, 1010, 16}};
    for (const cfg& c : cfgs) {
        kernels::attention_params p;
        p.n_head = c.n_head;
        p.n_kv_head = c.n_kv;
        p.head_dim = c.hd;
        p.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
        const int64_t n_ctx = c.pos0 + c.rows;
        const size_t kvf = static_cast<size_t>(n_ctx) * c.n_kv * c.hd;
        auto k = rnd(kvf, 4, 2.0f), v = rnd(kvf, 5), q = rnd(static_cast<size_t>(c.rows) * c.n_head * c.hd, 6, 2.0f);
        const size_t kv_row = static_cast<size_t>(c.n_kv) * c.hd;
        if (c.ties)
            for (size_t j = 5; j < static_cast<size_t>(n_ctx); ++j) std::copy_n(k.begin() + (j % 5) * kv_row, kv_row, k.begin() + j * kv_row);
        std::vector<float> cpu(q.size());
        kernels::attention(pool, p, q.data(), k.data(), v.data(), c.pos0, c.rows, cpu.data());
        dvec dk(k), dv(v), dq(q), dout(q.size());
        cuda::attention(p, dq.p, dk.p, dv.p, c.pos0, c.rows, dout.p, nullptr);
        const std::string name = "attention h" + std::to_string(c.n_head) + "/" + std::to_string(c.n_kv) + " hd" +
                                 std::to_string(c.hd) + " pos0 " + std::to_string(c.pos0) + " rows " + std::to_string(c.rows) +
                                 (c.ties ? " ties" : "");
        const auto win = dout.get();
        f += report(name, cpu, win);
        if (c.rows > 1) {
            // E1: each row alone (pos0 + r, one row) gives the window's bits.
            std::vector<float> single(q.size());
            const size_t rf = static_cast<size_t>(c.n_head) * c.hd;
            for (int r = 0; r < c.rows; ++r)
                cuda::attention(p, dq.p + r * rf, dk.p, dv.p, c.pos0 + r, 1, dout.p + r * rf, nullptr);
            f += report(name + " rows alone", win, dout.get());
        }
        // The split decode kernel (one row, chunk records merged by the last block of a KV head):
        // each row alone against the CPU's rows, with records for exactly the chunks the last row
        // needs and for 100 more (idle chunk lanes), the position from the host and from device
        // memory (a graph's form).
        const size_t rf = static_cast<size_t>(c.n_head) * c.hd;
        const int64_t need = (n_ctx + kernels::k_attn_chunk - 1) / kernels::k_attn_chunk;
        for (const int64_t max_chunks : {need, need + 100}) {
            if (cuda::attention_split_blocks(p, max_chunks) == 0) break;
            cuda::attention_split sp;
            sp.max_chunks = max_chunks;
            CK(cudaMalloc(&sp.records, static_cast<size_t>(c.n_head * max_chunks * cuda::attention_split_record_floats(c.hd)) * 4));
            int32_t* dpos = nullptr;
            CK(cudaMalloc(&dpos, 4));
            // A verify window through the split pair at once, in records of exactly rows_held rows
            // filled with NaN first (a row that read another's records, or a group that read past
            // its own, would show), the position from the host or from device memory: groups of
            // rows_held rows, the last partial. True when the activation blocks were made.
            const bool window = c.rows > 1 && c.rows <= cuda::k_split_max_rows;
            auto split_window = [&](int64_t rows_held, bool from_device, const cuda::attention_act* aq) {
                cuda::attention_split ws;
                ws.max_chunks = max_chunks;
                ws.max_rows = rows_held;
                const size_t bytes = static_cast<size_t>(rows_held * c.n_head * max_chunks * cuda::attention_split_record_floats(c.hd)) * 4;
                CK(cudaMalloc(&ws.records, bytes));
                CK(cudaMemset(ws.records, 0xff, bytes));
                CK(cudaMemcpy(dpos, &c.pos0, 4, cudaMemcpyHostToDevice));
                const bool made = cuda::attention(p, dq.p, dk.p, dv.p, from_device ? 0 : c.pos0, c.rows, dout.p, nullptr,
                                                  from_device ? dpos : nullptr, &ws, aq);
                CK(cudaDeviceSynchronize());
                cudaFree(ws.records);
                return made;
            };
            const std::vector<int64_t> rows_held_cases = window ? std::vector<int64_t>{c.rows, 3, 1} : std::vector<int64_t>{};
            for (const int64_t rows_held : rows_held_cases) {
                if (rows_held == 3 && c.rows <= 3) continue;
                for (const bool from_device : {false, true}) {
                    CK(cudaMemset(dout.p, 0, q.size() * 4));
                    split_window(rows_held, from_device, nullptr);
                    f += report(name + " split window, records of " + std::to_string(rows_held) + " rows" +
                                    (from_device ? ", position on the device" : ""),
                                cpu, dout.get());
                }
            }
            if (window && max_chunks == need && (c.pos0 + kernels::k_attn_chunk) / kernels::k_attn_chunk < need) {
                // Records one chunk short of the window's last row (its first row fits): refused on
                // the host with the position named, nothing launched.
                cuda::attention_split shortfall = sp;
                shortfall.max_chunks = need - 1;
                bool refused = false;
                try {
                    cuda::attention(p, dq.p, dk.p, dv.p, c.pos0, c.rows, dout.p, nullptr, nullptr, &shortfall);
                } catch (const std::exception& e) {
                    refused = std::string(e.what()).find("needs more than the split records") != std::string::npos;
                }
                if (!refused) {
                    std::printf("FAIL: %s: a window past its records' chunks was not refused\n", name.c_str());
                    ++f;
                }
            }
            for (int from_device = 0; from_device < 2; ++from_device) {
                CK(cudaMemset(dout.p, 0, q.size() * 4));
                for (int r = 0; r < c.rows; ++r) {
                    const int32_t pos = c.pos0 + r;
                    CK(cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice));
                    cuda::attention(p, dq.p + r * rf, dk.p, dv.p, from_device ? 0 : pos, 1, dout.p + r * rf, nullptr,
                                    from_device ? dpos : nullptr, &sp);
                }
                f += report(name + " split (" + std::to_string(cuda::attention_split_blocks(p, max_chunks)) +
                                " lanes, records of " + std::to_string(max_chunks) + " chunks" +
                                (from_device ? ", position on the device)" : ")"),
                            cpu, dout.get());
            }
            // The output rows' int8 activation blocks made by the merging blocks (cuda::attention_act),
            // where a merge block's heads hold whole blocks (attention_split_act_heads: head_dim
            // divides the width or the width divides head_dim): quantize_act_row's bytes of the
            // CPU's rows, and the floats unchanged.
            for (const quant::act_format af : {quant::act_format::q8_32, quant::act_format::q8_256}) {
                const int width = af == quant::act_format::q8_32 ? 32 : 256;
                const int64_t rf_i = static_cast<int64_t>(rf);
                const std::string what = name + " split, activation blocks of " + std::to_string(width);
                if (cuda::attention_split_act_heads(p, width) == 0) {
                    // Blocks would straddle two merge blocks: declined, nothing written.
                    const std::vector<std::byte> untouched(4096, std::byte{0xee});
                    std::byte* dact = nullptr;
                    CK(cudaMalloc(&dact, untouched.size()));
                    CK(cudaMemset(dact, 0xee, untouched.size()));
                    cuda::attention_act aq;
                    aq.act = dact;
                    aq.width = width;
                    const int32_t pos = c.pos0;
                    CK(cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice));
                    if (cuda::attention(p, dq.p, dk.p, dv.p, 0, 1, dout.p, nullptr, dpos, &sp, &aq)) {
                        std::printf("FAIL: %s: made although its blocks would straddle merge blocks\n", what.c_str());
                        ++f;
                    }
                    f += report_bytes(what + " declined", untouched, dact);
                    cudaFree(dact);
                    continue;
                }
                const size_t rb = quant::act_row_bytes(af, rf_i);
                std::vector<std::byte> want(rb * static_cast<size_t>(c.rows));
                for (int r = 0; r < c.rows; ++r) quant::quantize_act_row_ref(af, cpu.data() + r * rf, rf_i, want.data() + r * rb);
                std::byte* dact = nullptr;
                CK(cudaMalloc(&dact, want.size()));
                CK(cudaMemset(dact, 0xee, want.size()));
                CK(cudaMemset(dout.p, 0, q.size() * 4));
                // Each row alone in the split kernel with its blocks (and gate: [rows, n_head, 2 hd]);
                // the launches that made them.
                auto split_rows = [&](const float* gate) {
                    int made = 0;
                    for (int r = 0; r < c.rows; ++r) {
                        const int32_t pos = c.pos0 + r;
                        CK(cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice));
                        cuda::attention_act aq;
                        aq.act = dact + r * rb;
                        aq.width = width;
                        aq.gate = gate ? gate + r * rf * 2 : nullptr;
                        made += cuda::attention(p, dq.p + r * rf, dk.p, dv.p, 0, 1, dout.p + r * rf, nullptr, dpos, &sp, &aq);
                    }
                    return made;
                };
                const int folded = split_rows(nullptr);
                if (folded != c.rows) {
                    std::printf("FAIL: %s: made in %d of %d launches\n", what.c_str(), folded, c.rows);
                    ++f;
                }
                f += report(what + " (floats)", cpu, dout.get());
                f += report_bytes(what, want, dact);
                // With the hybrids' output gate in the same launch (attention_act::gate): each output
                // times the sigmoid of its gate half (output_gate's expression), then its blocks.
                {
                    const auto qg = rnd(static_cast<size_t>(c.rows) * rf * 2, 9, 3.0f);
                    std::vector<float> gated(cpu.size());
                    for (int r = 0; r < c.rows; ++r)
                        for (int h = 0; h < c.n_head; ++h)
                            for (int d = 0; d < c.hd; ++d) {
                                const size_t i = r * rf + static_cast<size_t>(h) * c.hd + d;
                                gated[i] = cpu[i] * kernels::sigmoid_f32(qg[r * rf * 2 + static_cast<size_t>(h) * 2 * c.hd + c.hd + d]);
                            }
                    std::vector<std::byte> want_g(want.size());
                    for (int r = 0; r < c.rows; ++r)
                        quant::quantize_act_row_ref(af, gated.data() + r * rf, rf_i, want_g.data() + r * rb);
                    dvec dqg(qg);
                    CK(cudaMemset(dact, 0xee, want.size()));
                    const int gfolded = split_rows(dqg.p);
                    if (gfolded != c.rows) {
                        std::printf("FAIL: %s gated: made in %d of %d launches\n", what.c_str(), gfolded, c.rows);
                        ++f;
                    }
                    f += report(what + " gated (floats)", gated, dout.get());
                    f += report_bytes(what + " gated", want_g, dact);
                    // A verify window at once (records of all its rows, of 3: groups, and of 1), with
                    // and without the gate, the position from the host and from the device: every
                    // row's blocks and floats as each row alone made.
                    for (const int64_t rows_held : rows_held_cases) {
                        if (rows_held == 3 && c.rows <= 3) continue;
                        for (const bool with_gate : {false, true})
                            for (const bool from_device : {false, true}) {
                                const std::string wn = what + " window, records of " + std::to_string(rows_held) +
                                                       " rows" + (with_gate ? " gated" : "") +
                                                       (from_device ? ", position on the device" : "");
                                CK(cudaMemset(dact, 0xee, want.size()));
                                CK(cudaMemset(dout.p, 0, q.size() * 4));
                                cuda::attention_act aq;
                                aq.act = dact;
                                aq.width = width;
                                aq.gate = with_gate ? dqg.p : nullptr;
                                if (!split_window(rows_held, from_device, &aq)) {
                                    std::printf("FAIL: %s: not made\n", wn.c_str());
                                    ++f;
                                }
                                f += report(wn + " (floats)", with_gate ? gated : cpu, dout.get());
                                f += report_bytes(wn, with_gate ? want_g : want, dact);
                            }
                    }
                }
                // Without split records (the one-block kernel) and for a prefill chunk (more than 16
                // rows: the rows kernel) nothing is made: false, and the blocks left as they were.
                CK(cudaMemset(dact, 0xee, want.size()));
                cuda::attention_act aq;
                aq.act = dact;
                aq.width = width;
                const bool alone = cuda::attention(p, dq.p, dk.p, dv.p, c.pos0, 1, dout.p, nullptr, nullptr, nullptr, &aq);
                const bool chunk = c.rows > 16 && cuda::attention(p, dq.p, dk.p, dv.p, c.pos0, c.rows, dout.p, nullptr,
                                                                  nullptr, &sp, &aq);
                if (alone || chunk) {
                    std::printf("FAIL: %s: made outside the split kernel (%s)\n", what.c_str(), alone ? "no records" : "a prefill chunk");
                    ++f;
                }
                f += report_bytes(what + ", none outside the split kernel",
                                  std::vector<std::byte>(want.size(), std::byte{0xee}), dact);
                cudaFree(dact);
            }
            cudaFree(sp.records);
            cudaFree(dpos);
        }
    }
    return f;
}

int test_router() {
    int f = 0;
    // 128 top-8 (shared-memory kernel, 20 rows), 16384 top-4 (too wide: the global-memory kernel).
    for (auto [ne, nu, renorm] : {std::tuple<int, int, bool>{128, 8, false}, {128, 8, true}, {16384, 4, true}}) {
        kernels::router_params p;
        p.n_expert = ne;
        p.n_used = nu;
        p.renormalize = renorm;
        const int rows = ne > 1000 ? 3 : 20;
        auto x = rnd(static_cast<size_t>(rows * p.n_expert), 7, 2.0f);
        for (int e = 0; e < p.n_expert; ++e) x[static_cast<size_t>(e)] = static_cast<float>(e % 5);   // row 0: ties
        std::vector<float> cpu = x;
        std::vector<int32_t> ids(static_cast<size_t>(rows * p.n_used)), gids(ids.size());
        std::vector<float> w(ids.size());
        for (int r = 0; r < rows; ++r)
            kernels::route_topk(p, cpu.data() + r * p.n_expert, ids.data() + r * p.n_used, w.data() + r * p.n_used);
        dvec dx(x), dw(w.size());
        int32_t* dids = nullptr;
        CK(cudaMalloc(&dids, ids.size() * 4));
        cuda::route_topk(p, dx.p, rows, dids, dw.p, nullptr);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(gids.data(), dids, ids.size() * 4, cudaMemcpyDeviceToHost));
        cudaFree(dids);
        const bool ids_ok = ids == gids;
        std::printf("%s router top-%d of %d (renorm %d): ids %s\n", ids_ok ? "PASS" : "FAIL", nu, ne, renorm ? 1 : 0,
                    ids_ok ? "identical (ties to the lower id)" : "DIFFER");
        f += ids_ok ? 0 : 1;
        const std::string tag = std::to_string(ne) + "/" + std::to_string(nu) + " renorm " + (renorm ? "1" : "0");
        f += report("router weights " + tag, w, dw.get());
        f += report("router probabilities " + tag, cpu, dx.get());
    }
    return f;
}

// Host: route_topk_row (what the device kernels run) against the CPU op.
int host_router() {
    int f = 0;
    for (auto [ne, nu] : {std::pair<int, int>{128, 8}, {64, 8}, {8, 2}, {8, 1}, {512, 10}})
        for (bool renorm : {false, true}) {
            kernels::router_params p;
            p.n_expert = ne;
            p.n_used = nu;
            p.renormalize = renorm;
            const int rows = 16;
            auto x = rnd(static_cast<size_t>(rows * ne), 20 + static_cast<uint32_t>(ne), 2.0f);
            for (int e = 0; e < ne; ++e) x[static_cast<size_t>(e)] = static_cast<float>(e % 3);   // row 0: ties
            std::vector<float> a = x, b = x, wa(static_cast<size_t>(rows * nu)), wb(wa.size());
            std::vector<int32_t> ia(wa.size()), ib(wa.size());
            for (int r = 0; r < rows; ++r) {
                kernels::route_topk(p, a.data() + r * ne, ia.data() + r * nu, wa.data() + r * nu);
                cuda::route_topk_row(ne, nu, renorm, b.data() + r * ne, ib.data() + r * nu, wb.data() + r * nu);
            }
            const bool ok = ia == ib && std::memcmp(a.data(), b.data(), a.size() * 4) == 0 &&
                            std::memcmp(wa.data(), wb.data(), wa.size() * 4) == 0;
            std::printf("%s host router row %d top-%d renorm %d: %s\n", ok ? "PASS" : "FAIL", ne, nu, renorm ? 1 : 0,
                        ok ? "ids, weights, probabilities bit-identical" : "DIFFER");
            f += ok ? 0 : 1;
        }
    return f;
}

int test_elementwise() {
    int f = 0;
    const int64_t n = 5000;
    auto g = rnd(static_cast<size_t>(n), 8, 4.0f), u = rnd(static_cast<size_t>(n), 9);
    std::vector<float> cpu(static_cast<size_t>(n));
    kernels::swiglu(g.data(), u.data(), cpu.data(), n);
    dvec dg(g), du(u), dout(static_cast<size_t>(n));
    cuda::swiglu(dg.p, du.p, dout.p, n, nullptr);
    f += report("swiglu", cpu, dout.get());
    // MoE combine: rows 3, K 8, width 300, in rank order from 0.
    const int rows = 3, K = 8, E = 300;
    auto ey = rnd(static_cast<size_t>(rows * K * E), 10), w = rnd(static_cast<size_t>(rows * K), 11, 0.3f);
    std::vector<float> out(static_cast<size_t>(rows * E));
    for (int r = 0; r < rows; ++r)
        for (int i = 0; i < E; ++i) {
            float o = 0.0f;
            for (int k = 0; k < K; ++k) o = o + w[static_cast<size_t>(r * K + k)] * ey[static_cast<size_t>((r * K + k) * E + i)];
            out[static_cast<size_t>(r * E + i)] = o;
        }
    dvec dey(ey), dw(w), dcomb(out.size());
    cuda::moe_combine(dey.p, dw.p, K, rows, E, dcomb.p, nullptr);
    auto comb = dcomb.get();
    f += report("moe combine (rank order)", out, comb);
    // Shared expert gate: out += sigmoid(g_r) * sh.
    auto sh = rnd(out.size(), 12), gl = rnd(static_cast<size_t>(rows), 13, 3.0f);
    std::vector<float> ref = comb;
    for (int r = 0; r < rows; ++r) {
        const float s = kernels::sigmoid_f32(gl[static_cast<size_t>(r)]);
        for (int i = 0; i < E; ++i) ref[static_cast<size_t>(r * E + i)] = ref[static_cast<size_t>(r * E + i)] + s * sh[static_cast<size_t>(r * E + i)];
    }
    dvec dsh(sh), dgl(gl);
    cuda::add_gated(dcomb.p, dsh.p, dgl.p, rows, E, nullptr);
    f += report("shared expert sigmoid gate", ref, dcomb.get());
    return f;
}

// The activation rows the CPU makes from float rows x [rows, n].
std::vector<std::byte> cpu_act(quant::act_format f, const std::vector<float>& x, int64_t rows, int64_t n) {
    const size_t rb = quant::act_row_bytes(f, n);
    std::vector<std::byte> a(rb * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) quant::quantize_act_row(f, x.data() + r * n, n, a.data() + r * rb);
    return a;
}

int report_bytes(const std::string& what, const std::vector<std::byte>& cpu, const std::byte* dev) {
    std::vector<std::byte> got(cpu.size());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got.data(), dev, got.size(), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < cpu.size(); ++i) bad += cpu[i] != got[i];
    std::printf("%s %-40s %zu of %zu bytes differ\n", bad ? "FAIL" : "PASS", what.c_str(), bad, cpu.size());
    return bad ? 1 : 0;
}

// The MoE block's residual add folded into the next norm (moe_residual_rmsnorm_quant) against the
// CPU's steps: x + (rank-order sum) or x + (sum + sigmoid(g) * shared), then rmsnorm and the
// activation rows; the new x, the normed rows and the activation bytes, for both formats, with
// 8 experts a token (Qwen3), 4 (Qwen2-MoE's, with its shared expert) and 10 (Qwen3-Next's: the
// kernel's 8-at-a-time loop then has a partial second round).
int test_residual_norm() {
    int f = 0;
    const int rows = 3;
    const int64_t E = 2048;
    auto x = rnd(static_cast<size_t>(rows * E), 42, 2.0f), nw = rnd(static_cast<size_t>(E), 43);
    auto sh = rnd(static_cast<size_t>(rows * E), 44), gl = rnd(static_cast<size_t>(rows), 45, 3.0f);
    for (const int K : {8, 4, 10})
    for (auto fmt : {quant::act_format::q8_32, quant::act_format::q8_256})
        for (int shared = 0; shared < 2; ++shared) {
            auto ey = rnd(static_cast<size_t>(rows * K * E), 40), wk = rnd(static_cast<size_t>(rows * K), 41, 0.3f);
            const std::string tag = std::string(fmt == quant::act_format::q8_32 ? "q8_32" : "q8_256") + " K " +
                                    std::to_string(K) + (shared ? " + shared expert" : "");
            std::vector<float> nx(x.size()), cpu(x.size());
            for (int r = 0; r < rows; ++r) {
                const float s = kernels::sigmoid_f32(gl[static_cast<size_t>(r)]);
                for (int64_t i = 0; i < E; ++i) {
                    float o = 0.0f;
                    for (int k = 0; k < K; ++k) o = o + wk[static_cast<size_t>(r * K + k)] * ey[static_cast<size_t>((r * K + k) * E + i)];
                    if (shared) o = o + s * sh[static_cast<size_t>(r * E + i)];
                    nx[static_cast<size_t>(r * E + i)] = x[static_cast<size_t>(r * E + i)] + o;
                }
                kernels::rmsnorm(nx.data() + r * E, nw.data(), cpu.data() + r * E, E, 1e-6f);
            }
            const auto act = cpu_act(fmt, cpu, rows, E);
            dvec dey(ey), dwk(wk), dx(x), dnw(nw), dsh(sh), dgl(gl), dout(x.size());
            std::byte* da = nullptr;
            CK(cudaMalloc(&da, act.size()));
            cuda::moe_residual m;
            m.ey = dey.p;
            m.weights = dwk.p;
            m.K = K;
            if (shared) {
                m.sh = dsh.p;
                m.sh_gate = dgl.p;
            }
            cuda::moe_residual_rmsnorm_quant(m, dx.p, dnw.p, dout.p, rows, E, 1e-6f, fmt, da, nullptr);
            f += report("moe residual + rmsnorm_quant: x " + tag, nx, dx.get());
            f += report("moe residual + rmsnorm_quant: out " + tag, cpu, dout.get());
            f += report_bytes("moe residual + rmsnorm_quant: act " + tag, act, da);
            // Row 0 alone with a block counter (moe_residual::arrivals): the combine spread over
            // blocks, the last one's norm; twice, the second launch finding the counter reset.
            unsigned* cnt = nullptr;
            CK(cudaMalloc(&cnt, sizeof(unsigned)));
            CK(cudaMemset(cnt, 0, sizeof(unsigned)));
            m.arrivals = cnt;
            const std::vector<float> nx0(nx.begin(), nx.begin() + E), cpu0(cpu.begin(), cpu.begin() + E);
            const std::vector<std::byte> act0(act.begin(), act.begin() + static_cast<std::ptrdiff_t>(act.size() / rows));
            for (int rep = 0; rep < 2; ++rep) {
                dvec dx0(std::vector<float>(x.begin(), x.begin() + E)), dout0(static_cast<size_t>(E));
                CK(cudaMemset(da, 0, act0.size()));
                cuda::moe_residual_rmsnorm_quant(m, dx0.p, dnw.p, dout0.p, 1, E, 1e-6f, fmt, da, nullptr);
                const std::string t1 = tag + " (one row over blocks, launch " + std::to_string(rep + 1) + ")";
                f += report("moe residual + rmsnorm_quant: x " + t1, nx0, dx0.get());
                f += report("moe residual + rmsnorm_quant: out " + t1, cpu0, dout0.get());
                f += report_bytes("moe residual + rmsnorm_quant: act " + t1, act0, da);
            }
            unsigned left = 1;
            CK(cudaMemcpy(&left, cnt, sizeof left, cudaMemcpyDeviceToHost));
            if (left != 0) {
                std::printf("FAIL moe residual + rmsnorm_quant %s: the block counter left at %u\n", tag.c_str(), left);
                ++f;
            }
            cudaFree(cnt);
            cudaFree(da);
        }
    return f;
}

int test_fused() {
    int f = 0;
    for (auto fmt : {quant::act_format::q8_32, quant::act_format::q8_256})
        for (auto [rows, n] : {std::pair<int64_t, int64_t>{5, 2048}, {3, 768}}) {
            const std::string tag = std::string(fmt == quant::act_format::q8_32 ? "q8_32 " : "q8_256 ") + std::to_string(rows) +
                                    "x" + std::to_string(n);
            auto x = rnd(static_cast<size_t>(rows * n), 21, 3.0f), w = rnd(static_cast<size_t>(n), 22);
            x[5] = 0.0f;   // a zero, and a block of zeros (dx = 0)
            for (int i = 0; i < 32; ++i) x[static_cast<size_t>(n + 64 + i)] = 0.0f;
            std::vector<float> cpu(x.size());
            for (int64_t r = 0; r < rows; ++r) kernels::rmsnorm(x.data() + r * n, w.data(), cpu.data() + r * n, n, 1e-6f);
            const auto act = cpu_act(fmt, cpu, rows, n);
            dvec dx(x), dw(w), dout(x.size());
            std::byte* da = nullptr;
            CK(cudaMalloc(&da, act.size()));
            cuda::rmsnorm_quant(dx.p, dw.p, dout.p, rows, n, 1e-6f, fmt, da, nullptr);
            f += report("rmsnorm_quant out " + tag, cpu, dout.get());
            f += report_bytes("rmsnorm_quant act " + tag, act, da);
            // SwiGLU + quantise: the same rows as gate, x as up.
            std::vector<float> sw(x.size());
            kernels::swiglu(cpu.data(), x.data(), sw.data(), rows * n);
            const auto act2 = cpu_act(fmt, sw, rows, n);
            CK(cudaMemset(da, 0, act2.size()));
            cuda::swiglu_quant(dout.p, dx.p, rows, n, fmt, da, nullptr);
            f += report_bytes("swiglu_quant act " + tag, act2, da);
            cudaFree(da);
        }
    // q/k head norms + RoPE + cache store in one launch against the CPU's rmsnorm per head,
    // rope_apply and copies: through memory (normal RoPE without norms; NeoX over 96 of 128 with
    // them) and in registers (NeoX over whole heads of 64, 128 and 256, with norms and without).
    struct qk_case {
        kernels::rope_mode mode;
        int n_rot, hd;
        bool with_norm;
    };
    const qk_case qk_cases[] = {{kernels::rope_mode::normal, 128, 128, false}, {kernels::rope_mode::neox, 96, 128, true},
                                {kernels::rope_mode::neox, 128, 128, true},    {kernels::rope_mode::neox, 128, 128, false},
                                {kernels::rope_mode::neox, 64, 64, true},      {kernels::rope_mode::neox, 256, 256, true}};
    for (const qk_case& qc : qk_cases) {
        const bool with_norm = qc.with_norm;
        kernels::rope_params rp;
        rp.mode = qc.mode;
        rp.n_rot = qc.n_rot;
        rp.freq_base = 1e6f;
        const int n_head = 6, n_kv = 2, hd = qc.hd, rows = 5;
        const int32_t pos0 = 300, n_ctx = pos0 + rows + 3;
        std::vector<float> table(static_cast<size_t>(n_ctx) * rp.n_rot);
        for (int p = 0; p < n_ctx; ++p) kernels::rope_table(rp, p, table.data() + static_cast<size_t>(p) * rp.n_rot);
        auto q = rnd(static_cast<size_t>(rows * n_head * hd), 40, 2.0f), k = rnd(static_cast<size_t>(rows * n_kv * hd), 41, 2.0f);
        auto v = rnd(static_cast<size_t>(rows * n_kv * hd), 42);
        auto qn = rnd(static_cast<size_t>(hd), 43), kn = rnd(static_cast<size_t>(hd), 44);
        std::vector<float> cq = q, ck = k, kcache(static_cast<size_t>(n_ctx * n_kv * hd), 0.0f), vcache = kcache;
        for (int r = 0; r < rows; ++r) {
            float* qr = cq.data() + static_cast<size_t>(r) * n_head * hd;
            float* kr = ck.data() + static_cast<size_t>(r) * n_kv * hd;
            if (with_norm) {
                std::vector<float> tmp(static_cast<size_t>(hd));
                for (int h = 0; h < n_head; ++h) {
                    kernels::rmsnorm(qr + h * hd, qn.data(), tmp.data(), hd, 1e-6f);
                    std::memcpy(qr + h * hd, tmp.data(), static_cast<size_t>(hd) * 4);
                }
                for (int h = 0; h < n_kv; ++h) {
                    kernels::rmsnorm(kr + h * hd, kn.data(), tmp.data(), hd, 1e-6f);
                    std::memcpy(kr + h * hd, tmp.data(), static_cast<size_t>(hd) * 4);
                }
            }
            const float* cs = table.data() + static_cast<size_t>(pos0 + r) * rp.n_rot;
            kernels::rope_apply(rp, cs, qr, n_head, hd);
            kernels::rope_apply(rp, cs, kr, n_kv, hd);
            std::memcpy(kcache.data() + static_cast<size_t>(pos0 + r) * n_kv * hd, kr, static_cast<size_t>(n_kv * hd) * 4);
            std::memcpy(vcache.data() + static_cast<size_t>(pos0 + r) * n_kv * hd, v.data() + static_cast<size_t>(r) * n_kv * hd,
                        static_cast<size_t>(n_kv * hd) * 4);
        }
        dvec dt(table), dq(q), dk(k), dv(v), dqn(qn), dkn(kn), dkc(kcache.size()), dvc(vcache.size());
        CK(cudaMemset(dkc.p, 0, kcache.size() * 4));
        CK(cudaMemset(dvc.p, 0, vcache.size() * 4));
        int32_t* dpos = nullptr;   // the position from device memory, as in a graph replay
        CK(cudaMalloc(&dpos, 4));
        CK(cudaMemcpy(dpos, &pos0, 4, cudaMemcpyHostToDevice));
        cuda::qk_norm_rope_store(rp, dt.p, 0, dq.p, dk.p, dv.p, with_norm ? dqn.p : nullptr, with_norm ? dkn.p : nullptr, 1e-6f,
                                 rows, n_head, n_kv, hd, dkc.p, dvc.p, nullptr, dpos);
        const std::string tag = std::string(" (") + (with_norm ? "head norms, " : "") +
                                (qc.mode == kernels::rope_mode::neox ? "neox " : "normal ") + std::to_string(qc.n_rot) +
                                " of " + std::to_string(hd) + ")";
        f += report("qk_norm_rope_store q" + tag, cq, dq.get());
        f += report("qk_norm_rope_store k" + tag, ck, dk.get());
        f += report("qk_norm_rope_store k cache" + tag, kcache, dkc.get());
        f += report("qk_norm_rope_store v cache" + tag, vcache, dvc.get());
        cudaFree(dpos);
    }
    // Combine with the residual add: x + (rank-order sum).
    const int rows = 3, K = 8, E = 300;
    auto ey = rnd(static_cast<size_t>(rows * K * E), 30), w = rnd(static_cast<size_t>(rows * K), 31, 0.3f);
    auto x = rnd(static_cast<size_t>(rows * E), 32);
    std::vector<float> ref(x.size());
    for (int r = 0; r < rows; ++r)
        for (int i = 0; i < E; ++i) {
            float o = 0.0f;
            for (int k = 0; k < K; ++k) o = o + w[static_cast<size_t>(r * K + k)] * ey[static_cast<size_t>((r * K + k) * E + i)];
            ref[static_cast<size_t>(r * E + i)] = x[static_cast<size_t>(r * E + i)] + o;
        }
    dvec dey(ey), dw(w), dx(x);
    cuda::moe_combine(dey.p, dw.p, K, rows, E, dx.p, nullptr, true);
    f += report("moe combine + residual", ref, dx.get());
    f += test_residual_norm();
    return f;
}

}  // namespace

int main() {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);   // lines reach the log even if a deadline kills us
    const int host_failures = host_router();
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("%s: host part done (%d failures); SKIP: no CUDA device\n", host_failures ? "FAIL" : "PASS", host_failures);
        return host_failures ? 1 : 77;
    }
    thread_pool pool(4);
    int failures = host_failures + test_rmsnorm() + test_rope() + test_attention(pool) + test_router() + test_elementwise() + test_fused();
    std::printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
