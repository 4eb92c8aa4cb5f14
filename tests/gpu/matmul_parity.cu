// cpu_dot_bits_equal_gpu_matmul_bits and window_rows_match_single_row, for every weight format
// with a dot product:
//   1. (host, no GPU needed) the per-lane decoding the CUDA kernel uses
//      (src/kernels/cuda/quant_decode.cuh), emulated lane by lane on the host, gives
//      kernels::dot_ref's bits on random rows; so do the tensor-core window kernel's lanes
//      (matmul_window_mma.cuh: fragments, shuffles and quad sums emulated, 1..16 rows);
//   2. (GPU) cuda::matmul gives dot_ref's bits for every output element, for windows of 1..16
//      rows (2..16 through the tensor-core window kernel, its split form and the dp4a kernel), a prefill
//      of 100 rows and expert mode (ids, act_div), and each row of a window
//      equals the same row computed alone (E1); and one-row launches of more than a wave (the
//      one-wave kernel, matmul_row_stream.cuh): plain, paired with accumulate, expert mode (with
//      the ids read before the wait, ids_settled), and matmul_swiglu (the SwiGLU rows made in
//      the launch) against swiglu_quant then matmul;
//   3. (GPU) matmul_mixed (a Q4_K pair and a Q6_K or Q4_K matrix in one launch) gives dot_ref's
//      bits; router_topk's one launch (the router's last block routes the row) equals matmul
//      then route_topk, bit for bit;
//   4. (GPU, timing) one-row matmul GB/s on an expert-sized matrix (2048 x 768) and a large
//      dense one, for a few formats.
// Exit 0 when everything matches, 1 on a difference, 77 (skipped) without a GPU after part 1.
// Part 1 is matmul_parity_host.cuh, part 4 matmul_parity_bench.cuh, their shared test data
// matmul_parity_data.cuh; parts 2 and 3 are here.
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/ops.cuh"
#include "kernels/cuda/quant_decode.cuh"

#include "kernels/cpu/dot_ref.h"
#include "kernels/cpu/ops.h"
#include "quant/act.h"
#include "quant/iq_tables.h"
#include "quant/quant.h"

#include "parity_util.cuh"
#include "matmul_parity_bench.cuh"
#include "matmul_parity_data.cuh"
#include "matmul_parity_host.cuh"

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace sluice;
using namespace sluice::matmul_test;

namespace {

// ---- part 2: the device ------------------------------------------------------------------------
// n_in 2048 is one chunk of the kernel's shared-memory staging; 2816 is two for windows, the
// second partial (one of 4,096 for one row: quant_stage); 4608 is two for one row.
int gpu_parity(dtype t, int64_t n_in) {
    const int64_t n_out = 99, n_pre = 100;
    const auto w = make_weights(t, n_in, n_out, 21);
    const auto a = make_act(t, n_in, n_pre, 22);
    const size_t wrb = *bytes_for(t, n_in), arb = quant::act_row_bytes(quant::act_format_for(t), n_in);
    std::vector<float> ref(static_cast<size_t>(n_pre * n_out));
    for (int64_t r = 0; r < n_pre; ++r)
        for (int64_t j = 0; j < n_out; ++j) ref[r * n_out + j] = kernels::dot_ref(t, w.data() + j * wrb, a.data() + r * arb, n_in);
    dev_buf dw(w.size()), da(a.size()), dy(ref.size() * 4);
    CK(cudaMemcpy(dw.p, w.data(), w.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(da.p, a.data(), a.size(), cudaMemcpyHostToDevice));
    cuda::mm_args m = plain_args(t, dw.as<std::byte>(), wrb, n_in, n_out, nullptr, arb, 0, nullptr);
    std::vector<float> got(ref.size());
    int bad_windows = 0;
    auto compare = [&](int64_t r_first, int64_t nr, const char* what) {
        int bad = 0;
        for (int64_t r = 0; r < nr; ++r)
            for (int64_t j = 0; j < n_out; ++j) {
                const float g = got[r * n_out + j], e = ref[(r_first + r) * n_out + j];
                if (f2u(g) != f2u(e) && bad++ == 0)
                    std::printf("  %s %s row %lld col %lld: gpu %.9g, dot_ref %.9g\n", std::string(name(t)).c_str(), what,
                                static_cast<long long>(r_first + r), static_cast<long long>(j), g, e);
            }
        return bad;
    };
    // Windows of 1..16 rows starting at row 3 (the same rows each time: E1 by comparison with
    // the one-row result and with dot_ref), through the tensor-core window kernel (2..16 rows),
    // again through the dp4a kernel and through the window kernel's split form (mm_args::window).
    std::vector<float> single(static_cast<size_t>(16 * n_out));
    using wk = cuda::mm_args::window_kernel;
    const wk pass_kernel[3] = {wk::tensor_cores, wk::dp4a, wk::tensor_cores_split};
    const char* pass_name[3] = {"window", "dp4a window", "split window"};
    for (int pass = 0; pass < 3; ++pass)
    for (int nr = pass == 0 ? 1 : 2; nr <= 16; ++nr) {
        m.window = pass_kernel[pass];
        m.act = da.as<std::byte>() + 3 * arb;
        m.n_rows = nr;
        m.y = dy.as<float>();
        cuda::matmul(m, nullptr);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got.data(), dy.p, static_cast<size_t>(nr * n_out) * 4, cudaMemcpyDeviceToHost));
        int bad = compare(3, nr, pass_name[pass]);
        if (nr == 1) std::memcpy(single.data(), got.data(), static_cast<size_t>(n_out) * 4);
        // E1: row 0 of every window equals the one-row result.
        if (std::memcmp(single.data(), got.data(), static_cast<size_t>(n_out) * 4) != 0) {
            if (!bad) std::printf("  %s window %d: row 0 differs from the one-row result\n", std::string(name(t)).c_str(), nr);
            ++bad;
        }
        bad_windows += bad ? 1 : 0;
    }
    m.window = cuda::mm_args{}.window;   // the library's default for the launches below
    // Two matrices in one launch, both accumulating (y += w . x): w itself and its first
    // n_out - 2 rows as the second matrix, 7 rows (the window kernel, the dp4a kernel, the window
    // kernel's split form) and 40 (the tensor-core kernel); each output must be init + dot_ref,
    // the sum a separate add would make.
    int bad_pair = 0;
    struct paired_case {
        int rows;
        wk kernel;
    };
    for (const paired_case pc : {paired_case{7, wk::tensor_cores}, paired_case{7, wk::dp4a}, paired_case{7, wk::tensor_cores_split},
                                 paired_case{40, wk::by_shape}}) {
        const int nr = pc.rows;
        const int64_t n_out2 = n_out - 2;
        std::vector<float> init(static_cast<size_t>(nr * n_out)), init2(static_cast<size_t>(nr * n_out2));
        for (size_t i = 0; i < init.size(); ++i) init[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.37f;
        for (size_t i = 0; i < init2.size(); ++i) init2[i] = static_cast<float>(static_cast<int>(i % 11) - 5) * 0.53f;
        dev_buf dy1(init.size() * 4), dy2(init2.size() * 4);
        CK(cudaMemcpy(dy1.p, init.data(), init.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dy2.p, init2.data(), init2.size() * 4, cudaMemcpyHostToDevice));
        cuda::mm_args m2 = m;
        m2.window = pc.kernel;
        m2.act = da.as<std::byte>() + 3 * arb;
        m2.n_rows = nr;
        m2.y = dy1.as<float>();
        m2.accumulate = true;
        m2.w2 = dw.as<std::byte>();
        m2.n_out2 = n_out2;
        m2.y2 = dy2.as<float>();
        m2.y2_stride = n_out2;
        cuda::matmul(m2, nullptr);
        CK(cudaDeviceSynchronize());
        std::vector<float> g1(init.size()), g2(init2.size());
        CK(cudaMemcpy(g1.data(), dy1.p, g1.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(g2.data(), dy2.p, g2.size() * 4, cudaMemcpyDeviceToHost));
        for (int r = 0; r < nr; ++r) {
            for (int64_t j = 0; j < n_out; ++j)
                bad_pair += f2u(g1[r * n_out + j]) != f2u(init[r * n_out + j] + ref[(3 + r) * n_out + j]);
            for (int64_t j = 0; j < n_out2; ++j)
                bad_pair += f2u(g2[r * n_out2 + j]) != f2u(init2[r * n_out2 + j] + ref[(3 + r) * n_out + j]);
        }
        if (bad_pair) std::printf("  %s paired + accumulate: %d values differ\n", std::string(name(t)).c_str(), bad_pair);
    }
    // Prefill: all rows at once.
    m.act = da.as<std::byte>();
    m.n_rows = n_pre;
    cuda::matmul(m, nullptr);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got.data(), dy.p, ref.size() * 4, cudaMemcpyDeviceToHost));
    int bad_pre = compare(0, n_pre, "prefill");
    // Again with the weights one byte off their allocation's alignment (a quantised tensor at any
    // offset of a mapped file): the tensor-core kernel's per-piece decode instead of its word
    // decoders (int8 formats; float weights keep their element alignment).
    const bool is_float = t == dtype::f32 || t == dtype::f16 || t == dtype::bf16;
    if (!is_float) {
        dev_buf dw1(w.size() + 1);
        CK(cudaMemcpy(dw1.as<std::byte>() + 1, w.data(), w.size(), cudaMemcpyHostToDevice));
        cuda::mm_args m1 = m;
        m1.w = dw1.as<std::byte>() + 1;
        CK(cudaMemset(dy.p, 0xff, ref.size() * 4));   // NaNs: an output the kernel skipped differs
        cuda::matmul(m1, nullptr);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got.data(), dy.p, ref.size() * 4, cudaMemcpyDeviceToHost));
        bad_pre += compare(0, n_pre, "prefill, weights at an odd address");
    }
    // Expert mode: 3 copies of the matrix as 3 experts, with the copies' ids per pair, 2 pairs per
    // token (act_div 2): pair p reads token p / 2.
    const int n_exp = 3, n_pairs = 20;
    dev_buf dwe(w.size() * n_exp), dids(n_pairs * 4);
    for (int e = 0; e < n_exp; ++e) CK(cudaMemcpy(dwe.as<std::byte>() + e * w.size(), w.data(), w.size(), cudaMemcpyHostToDevice));
    std::vector<int32_t> ids(n_pairs);
    for (int p = 0; p < n_pairs; ++p) ids[static_cast<size_t>(p)] = (p * 7) % n_exp;
    CK(cudaMemcpy(dids.p, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    m.w = dwe.as<std::byte>();
    m.ids = dids.as<int32_t>();
    m.expert_stride = w.size();
    m.act_div = 2;
    m.act = da.as<std::byte>();
    m.n_rows = n_pairs;
    cuda::matmul(m, nullptr);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got.data(), dy.p, static_cast<size_t>(n_pairs * n_out) * 4, cudaMemcpyDeviceToHost));
    int bad_exp = 0;
    for (int p = 0; p < n_pairs; ++p)
        for (int64_t j = 0; j < n_out; ++j)
            if (f2u(got[p * n_out + j]) != f2u(ref[(p / 2) * n_out + j]) && bad_exp++ == 0)
                std::printf("  %s expert pair %d col %lld differs\n", std::string(name(t)).c_str(), p, static_cast<long long>(j));
    // Again with every third pair's id -1 (another lane's pair in a split layer): those rows keep
    // what the output held (0xff bytes), the others are computed as before; then the same with
    // ids_settled (the blocks read their ids and stage their weights before the wait).
    for (int p = 0; p < n_pairs; p += 3) ids[static_cast<size_t>(p)] = -1;
    CK(cudaMemcpy(dids.p, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    for (int settled = 0; settled < 2; ++settled) {
        m.ids_settled = settled == 1;
        CK(cudaMemset(dy.p, 0xff, static_cast<size_t>(n_pairs * n_out) * 4));
        cuda::matmul(m, nullptr);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got.data(), dy.p, static_cast<size_t>(n_pairs * n_out) * 4, cudaMemcpyDeviceToHost));
        for (int p = 0; p < n_pairs; ++p)
            for (int64_t j = 0; j < n_out; ++j) {
                const uint32_t want = p % 3 == 0 ? 0xffffffffu : f2u(ref[(p / 2) * n_out + j]);
                if (f2u(got[p * n_out + j]) != want && bad_exp++ == 0)
                    std::printf("  %s expert pair %d (id %d, ids_settled %d) col %lld differs\n", std::string(name(t)).c_str(),
                                p, ids[static_cast<size_t>(p)], settled, static_cast<long long>(j));
            }
    }
    m.ids_settled = false;
    // Grouped expert mode (int8 formats), for both tile sizes: 60 pairs over the 3 experts (20
    // each: tiles of 16 and 4 for the dp4a kernel, one of 20 for the tensor-core kernel: its
    // layout of 2 row groups), 24 over 3 (tiles of 8: 1 row group), then 200 pairs over 2
    // experts (100 each: tiles of 64 and 36, 4 row groups); grouped on the device by
    // group_pairs; every pair must equal dot_ref of its token.
    int bad_grp = 0;
    const int grouped_cases[4][3] = {{60, 3, cuda::k_tile_rows_window},
                                     {60, 3, cuda::k_tile_rows_mma},
                                     {24, 3, cuda::k_tile_rows_mma},
                                     {200, 2, cuda::k_tile_rows_mma}};
    for (const auto& gc : grouped_cases) {
        if (is_float) break;
        const int g_pairs = gc[0], g_exp = gc[1], tile_rows = gc[2];
        std::vector<int32_t> gids(g_pairs);
        for (int p = 0; p < g_pairs; ++p) gids[static_cast<size_t>(p)] = (p * 7) % g_exp;
        // Pair p reads token p / 2; tokens beyond the activation rows wrap (act_div 2 and the
        // n_pre rows bound the tokens a case may use).
        const int64_t max_tiles = cuda::group_tiles_max(g_pairs, g_exp, tile_rows);
        dev_buf dgids(g_pairs * 4), dperm(g_pairs * 4), dtiles(static_cast<size_t>(max_tiles) * 12), dnt(4),
            dyg(static_cast<size_t>(g_pairs * n_out) * 4);
        CK(cudaMemcpy(dgids.p, gids.data(), gids.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(dyg.p, 0xff, static_cast<size_t>(g_pairs * n_out) * 4));   // NaNs: an unwritten output fails
        cuda::group_pairs(dgids.as<int32_t>(), g_pairs, g_exp, tile_rows, dperm.as<int32_t>(), dtiles.as<int32_t>(),
                          dnt.as<int32_t>(), nullptr);
        cuda::mm_args mg = m;
        mg.ids = dgids.as<int32_t>();
        mg.n_rows = g_pairs;
        mg.y = dyg.as<float>();
        mg.perm = dperm.as<int32_t>();
        mg.tiles = dtiles.as<int32_t>();
        mg.n_tiles = dnt.as<int32_t>();
        mg.max_tiles = max_tiles;
        mg.tile_rows = tile_rows;
        cuda::matmul(mg, nullptr);
        CK(cudaDeviceSynchronize());
        std::vector<float> gg(static_cast<size_t>(g_pairs * n_out));
        CK(cudaMemcpy(gg.data(), dyg.p, gg.size() * 4, cudaMemcpyDeviceToHost));
        for (int p = 0; p < g_pairs; ++p)
            for (int64_t j = 0; j < n_out; ++j)
                if (f2u(gg[p * n_out + j]) != f2u(ref[(p / 2) * n_out + j]) && bad_grp++ == 0)
                    std::printf("  %s grouped (tiles of %d) pair %d col %lld differs\n", std::string(name(t)).c_str(),
                                tile_rows, p, static_cast<long long>(j));
    }
    const bool ok = bad_windows == 0 && bad_pre == 0 && bad_exp == 0 && bad_pair == 0 && bad_grp == 0;
    std::printf("%s gpu %-8s n_in %5lld: windows 1..16 %s, prefill %lld rows %s, expert mode %s, grouped %s, paired + "
                "accumulate %s\n",
                ok ? "PASS" : "FAIL", std::string(name(t)).c_str(), static_cast<long long>(n_in),
                bad_windows ? "DIFFER" : "bit-identical", static_cast<long long>(n_pre), bad_pre ? "DIFFER" : "bit-identical",
                bad_exp ? "DIFFER" : "bit-identical", is_float ? "n/a" : (bad_grp ? "DIFFER" : "bit-identical"),
                bad_pair ? "DIFFER" : "bit-identical");
    return ok ? 0 : 1;
}

// One-row launches of more than one wave (the one-wave kernel, matmul_row_stream.cuh, which
// walks column blocks with the next one's weights in flight): every output equals dot_ref's
// bits. A plain row over 4,500 columns (563 column blocks of 8, the last partial), the same with
// a second matrix (its first 4,497 rows) and both accumulating, and expert mode: 40 pairs over 3
// distinct experts of 1,499 columns (odd: where a warp takes two columns, the last one has one)
// with act_div 2 and some ids -1 (their rows must keep the output's 0xff bytes), alone and paired
// (gate and up). The matrices repeat 61 distinct quantised
// rows (quantising thousands of IQ2/IQ3 rows took most of a 121 s cap): column j of the plain
// matrix is row j % 61, column j of expert e row (5 j + 17 e) % 61, so a column, matrix or
// expert read from the wrong place gives another row's bits (61 is prime to the 8 columns of a
// block and to the launches' strides). sm_count: mm_args::sm_count, the card the launch shapes
// are sized for; 28 (a small gaming card) gives the one-wave kernel 112 blocks, each walking
// ~5 of the plain row's column blocks, and sends the 40 expert pairs to the many-wave kernel.
// n_pairs: the expert launches' pairs; 96 and 128 are a 12- and a 16-row verify window's of the
// 30B shape (8 experts a row), whose one-wave grids give each pair 5 and 4 blocks, each walking
// ~38 and ~47 of the pair's 188 column blocks (a decode step's 8 pairs: 66 blocks a pair).
int row_stream_parity(dtype t, int64_t n_in, int sm_count = 132, int n_pairs = 40) {
    const int64_t n_plain = 4500, n_exp_out = 1499, n_distinct = 61;
    const int n_exp = 3, n_act = n_pairs / 2;
    const size_t wrb = *bytes_for(t, n_in), arb = quant::act_row_bytes(quant::act_format_for(t), n_in);
    const auto base = make_weights(t, n_in, n_distinct, 31);
    const auto a = make_act(t, n_in, n_act, 32);
    auto tiled = [&](int64_t n_out, auto row_of) {
        std::vector<std::byte> m(static_cast<size_t>(n_out) * wrb);
        for (int64_t j = 0; j < n_out; ++j) std::memcpy(m.data() + j * wrb, base.data() + row_of(j) * wrb, wrb);
        return m;
    };
    const auto w = tiled(n_plain, [&](int64_t j) { return j % n_distinct; });
    std::vector<std::vector<std::byte>> we;
    for (int e = 0; e < n_exp; ++e) we.push_back(tiled(n_exp_out, [&](int64_t j) { return (5 * j + 17 * e) % n_distinct; }));
    // dot_ref of every distinct row with every activation row: [act row][distinct row].
    std::vector<float> dots(static_cast<size_t>(n_act * n_distinct));
    for (int r = 0; r < n_act; ++r)
        for (int64_t k = 0; k < n_distinct; ++k)
            dots[r * n_distinct + k] = kernels::dot_ref(t, base.data() + k * wrb, a.data() + r * arb, n_in);
    const std::string fmt_name(name(t));
    int bad = 0;
    auto expect = [&](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
        for (size_t i = 0; i < got.size(); ++i)
            if (f2u(got[i]) != f2u(want[i]) && bad++ == 0)
                std::printf("  %s n_in %lld %s: element %zu gpu %.9g, want %.9g\n", fmt_name.c_str(),
                            static_cast<long long>(n_in), what, i, got[i], want[i]);
    };
    dev_buf dw(w.size()), da(a.size()), dy(n_plain * 4), dy2(n_plain * 4);
    CK(cudaMemcpy(dw.p, w.data(), w.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(da.p, a.data(), a.size(), cudaMemcpyHostToDevice));
    // Plain: activation row 1.
    std::vector<float> ref(n_plain), got(n_plain), got2(n_plain - 3);
    for (int64_t j = 0; j < n_plain; ++j) ref[j] = dots[1 * n_distinct + j % n_distinct];
    cuda::mm_args m = plain_args(t, dw.as<std::byte>(), wrb, n_in, n_plain, da.as<std::byte>() + arb, arb, 1, dy.as<float>());
    m.sm_count = sm_count;
    cuda::matmul(m, nullptr);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got.data(), dy.p, n_plain * 4, cudaMemcpyDeviceToHost));
    expect(got, ref, "one row");
    // Paired and accumulating: y = init + dot, y2 = init2 + dot.
    const auto init = random_floats(n_plain, 33, 1.0f), init2 = random_floats(n_plain - 3, 34, 1.0f);
    CK(cudaMemcpy(dy.p, init.data(), n_plain * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dy2.p, init2.data(), (n_plain - 3) * 4, cudaMemcpyHostToDevice));
    m.accumulate = true;
    m.w2 = dw.as<std::byte>();
    m.n_out2 = n_plain - 3;
    m.y2 = dy2.as<float>();
    m.y2_stride = n_plain - 3;
    cuda::matmul(m, nullptr);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got.data(), dy.p, n_plain * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got2.data(), dy2.p, (n_plain - 3) * 4, cudaMemcpyDeviceToHost));
    std::vector<float> want(n_plain), want2(n_plain - 3);
    for (int64_t j = 0; j < n_plain; ++j) want[j] = init[j] + ref[j];
    for (int64_t j = 0; j < n_plain - 3; ++j) want2[j] = init2[j] + ref[j];
    expect(got, want, "paired, accumulate (first)");
    expect(got2, want2, "paired, accumulate (second)");
    // Expert mode: pair p is expert (p * 7) % 4 - 1 (every fourth pair -1), activation row p / 2.
    const size_t es = we[0].size();
    dev_buf dwe(es * n_exp), dids(n_pairs * 4), dye(n_pairs * n_exp_out * 4), dye2(n_pairs * n_exp_out * 4);
    for (int e = 0; e < n_exp; ++e) CK(cudaMemcpy(dwe.as<std::byte>() + e * es, we[e].data(), es, cudaMemcpyHostToDevice));
    std::vector<int32_t> ids(n_pairs);
    for (int p = 0; p < n_pairs; ++p) ids[p] = (p * 7) % 4 - 1;
    CK(cudaMemcpy(dids.p, ids.data(), n_pairs * 4, cudaMemcpyHostToDevice));
    std::vector<float> ref_e(n_pairs * n_exp_out), got_e(ref_e.size()), got_e2(ref_e.size());
    for (int p = 0; p < n_pairs; ++p)
        for (int64_t j = 0; j < n_exp_out; ++j) {
            float v;
            const uint32_t nan_bits = 0xffffffffu;
            if (ids[p] < 0) std::memcpy(&v, &nan_bits, 4);
            else v = dots[(p / 2) * n_distinct + (5 * j + 17 * ids[p]) % n_distinct];
            ref_e[p * n_exp_out + j] = v;
        }
    cuda::mm_args me = plain_args(t, dwe.as<std::byte>(), wrb, n_in, n_exp_out, da.as<std::byte>(), arb, n_pairs, dye.as<float>());
    me.ids = dids.as<int32_t>();
    me.expert_stride = es;
    me.act_div = 2;
    me.sm_count = sm_count;
    for (int run = 0; run < 4; ++run) {   // unpaired, paired; then both again with ids_settled
        const int paired = run % 2;
        me.ids_settled = run >= 2;
        CK(cudaMemset(dye.p, 0xff, ref_e.size() * 4));
        CK(cudaMemset(dye2.p, 0xff, ref_e.size() * 4));
        if (paired) {
            me.w2 = dwe.as<std::byte>();
            me.n_out2 = n_exp_out;
            me.y2 = dye2.as<float>();
            me.y2_stride = n_exp_out;
        }
        cuda::matmul(me, nullptr);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got_e.data(), dye.p, ref_e.size() * 4, cudaMemcpyDeviceToHost));
        expect(got_e, ref_e, paired ? (run >= 2 ? "expert mode, paired, ids settled (first)" : "expert mode, paired (first)")
                                    : (run >= 2 ? "expert mode, ids settled" : "expert mode"));
        if (paired) {
            CK(cudaMemcpy(got_e2.data(), dye2.p, ref_e.size() * 4, cudaMemcpyDeviceToHost));
            expect(got_e2, ref_e, run >= 2 ? "expert mode, paired, ids settled (second)" : "expert mode, paired (second)");
        }
    }
    // matmul_swiglu: the activation rows swiglu(gate, up) made in the launch's blocks, against
    // swiglu_quant then matmul (both checked against the CPU elsewhere: ops_parity, above), for
    // the expert launch (one wave: its act buffer must stay untouched) and a 3-row plain launch
    // (no one-wave kernel: swiglu_quant fills the buffer first).
    {
        me.w2 = nullptr;
        me.y2 = nullptr;
        me.n_out2 = 0;
        me.ids_settled = true;
        const auto gate = random_floats(static_cast<size_t>(n_act * n_in), 35, 3.0f);
        const auto up = random_floats(static_cast<size_t>(n_act * n_in), 36, 1.0f);
        dev_buf dg(gate.size() * 4), du(up.size() * 4), dsw(a.size()), dsw2(a.size());
        CK(cudaMemcpy(dg.p, gate.data(), gate.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(du.p, up.data(), up.size() * 4, cudaMemcpyHostToDevice));
        const auto f = quant::act_format_for(t);
        std::vector<std::byte> untouched(a.size()), after(a.size());
        std::memset(untouched.data(), 0x5a, untouched.size());
        for (int plain = 0; plain < 2; ++plain) {
            cuda::mm_args& s = plain ? m : me;
            s.accumulate = false;
            s.w2 = nullptr;
            s.y2 = nullptr;
            s.n_out2 = 0;
            if (plain) s.n_rows = 3;
            const size_t ys = static_cast<size_t>(plain ? 3 * n_plain : n_pairs * n_exp_out) * 4;
            dev_buf dyw(ys), dyf(ys);
            CK(cudaMemset(dyw.p, 0xff, ys));
            CK(cudaMemset(dyf.p, 0xff, ys));
            cuda::swiglu_quant(dg.as<float>(), du.as<float>(), n_act, n_in, f, dsw.as<std::byte>(), nullptr);
            s.act = dsw.as<std::byte>();
            s.y = dyw.as<float>();
            cuda::matmul(s, nullptr);
            CK(cudaMemcpy(dsw2.p, untouched.data(), untouched.size(), cudaMemcpyHostToDevice));
            s.act = dsw2.as<std::byte>();
            s.y = dyf.as<float>();
            cuda::matmul_swiglu(s, dg.as<float>(), du.as<float>(), nullptr);
            CK(cudaDeviceSynchronize());
            std::vector<float> want(ys / 4), got_f(ys / 4);
            CK(cudaMemcpy(want.data(), dyw.p, ys, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(got_f.data(), dyf.p, ys, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(after.data(), dsw2.p, after.size(), cudaMemcpyDeviceToHost));
            expect(got_f, want, plain ? "matmul_swiglu, 3 plain rows" : "matmul_swiglu, expert mode");
            // Which launches make their own SwiGLU rows follows the grid. On the H200 (132 SMs) the
            // expert launch is one-wave (the buffer untouched) and the 3-row one is not; with
            // shapes for 28 SMs the 40 pairs get 2 blocks a row, under the one-wave kernel's 4,
            // so both fill the buffer first.
            const bool written = after != untouched;
            const bool expect_written = plain == 1 || sm_count == 28;
            if (written != expect_written && bad++ == 0)
                std::printf("  %s n_in %lld matmul_swiglu %s: the act buffer was %s\n", fmt_name.c_str(),
                            static_cast<long long>(n_in), plain ? "plain" : "experts", written ? "written" : "not written");
        }
    }
    std::printf("%s gpu %-8s n_in %5lld: one-wave one-row kernel (%lld columns, %d pairs of %lld; SwiGLU rows made in the launch; shapes for %d SMs) %s\n",
                bad ? "FAIL" : "PASS", fmt_name.c_str(), static_cast<long long>(n_in), static_cast<long long>(n_plain),
                n_pairs, static_cast<long long>(n_exp_out), sm_count, bad ? "DIFFER" : "bit-identical");
    return bad ? 1 : 0;
}

// ---- part 3: one-row bandwidth -------------------------------------------------------------
// n_copies distinct matrices cycled so that most reads come from HBM, not the 60 MB L2.
// router_topk: the router's product and its top-k in one launch (a decode step's row of an F32 /
// F16 / BF16 router: the column kernel's last block routes it) against the two launches it
// replaces (matmul, then route_topk; each checked against the CPU elsewhere): the probabilities,
// ids and weights bit for bit, over several launches on one arrival counter (which must be
// left at zero), for Qwen3-30B-A3B's 128 experts top-8 (renormalised), qwen2moe's 60 top-4 and
// a row of ties (every column the same weights).
// norm_router_topk: the residual row's RMSNorm made in the router's launch (its first block
// writing the normalised row, the blocks sharing its int8 rows) against rmsnorm_quant (or rmsnorm) then
// router_topk's two launches: the normalised row, the activation bytes, the probabilities, ids
// and weights bit for bit, for F32 and BF16 routers and each activation format, checking that
// the one-launch form is the one compared (router_one_launch).
int norm_router_parity() {
    int f = 0;
    const int n_expert = 128;
    kernels::router_params p;
    p.n_expert = n_expert;
    p.n_used = 8;
    p.renormalize = true;
    // 2048 inputs: each thread's norm weights all loaded before the wait; 4096: half of them after.
    for (const int64_t n_in : {int64_t{2048}, int64_t{4096}})
    for (dtype t : {dtype::f32, dtype::bf16})
        for (auto af : {quant::act_format::q8_256, quant::act_format::q8_32, quant::act_format::f32}) {
            const auto x = random_floats(static_cast<size_t>(n_in), 90, 3.0f), nw = random_floats(static_cast<size_t>(n_in), 91, 1.0f);
            const size_t row_bytes = static_cast<size_t>(n_in) * (t == dtype::f32 ? 4 : 2);
            std::vector<uint8_t> w(row_bytes * n_expert);
            const auto v = random_floats(static_cast<size_t>(n_in) * n_expert, 92, 0.05f);
            for (size_t i = 0; i < v.size(); ++i) {
                const uint32_t u = f2u(v[i]);
                if (t == dtype::f32) std::memcpy(w.data() + 4 * i, &u, 4);
                else {
                    w[2 * i] = static_cast<uint8_t>(u >> 16);
                    w[2 * i + 1] = static_cast<uint8_t>(u >> 24);
                }
            }
            const size_t ab = af == quant::act_format::f32 ? 16 : quant::act_row_bytes(af, n_in);
            dev_buf dw(w.size()), dx(n_in * 4), dnw(n_in * 4), arrivals(4);
            dev_buf dxn[2] = {dev_buf(n_in * 4), dev_buf(n_in * 4)}, dact[2] = {dev_buf(ab), dev_buf(ab)};
            dev_buf dy[2] = {dev_buf(n_expert * 4), dev_buf(n_expert * 4)}, dids[2] = {dev_buf(32), dev_buf(32)},
                    dwt[2] = {dev_buf(32), dev_buf(32)};
            CK(cudaMemcpy(dw.p, w.data(), w.size(), cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dx.p, x.data(), n_in * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dnw.p, nw.data(), n_in * 4, cudaMemcpyHostToDevice));
            CK(cudaMemset(arrivals.p, 0, 4));
            bool one_launch = false;
            for (int k = 0; k < 2; ++k) {   // 0: one launch, 1: the norm's launch, then the router's two
                CK(cudaMemset(dact[k].p, 0, ab));
                cuda::mm_args a;
                a.type = t;
                a.w = dw.as<std::byte>();
                a.row_bytes = row_bytes;
                a.n_in = n_in;
                a.n_out = n_expert;
                a.act = dxn[k].as<std::byte>();
                a.act_stride = static_cast<size_t>(n_in) * 4;
                a.n_rows = 1;
                a.y = dy[k].as<float>();
                a.y_stride = n_expert;
                cuda::router_norm rn;
                rn.x = dx.as<float>();
                rn.w = dnw.as<float>();
                rn.eps = 1e-6f;
                rn.f = af;
                rn.act = dact[k].as<std::byte>();
                if (k == 0) {
                    one_launch = cuda::router_one_launch(a, p, &rn);
                    cuda::norm_router_topk(a, rn, p, dids[k].as<int32_t>(), dwt[k].as<float>(), arrivals.as<unsigned>(), nullptr);
                } else {
                    if (af == quant::act_format::f32) cuda::rmsnorm(rn.x, rn.w, dxn[k].as<float>(), 1, n_in, rn.eps, nullptr);
                    else cuda::rmsnorm_quant(rn.x, rn.w, dxn[k].as<float>(), 1, n_in, rn.eps, af, rn.act, nullptr);
                    cuda::router_topk(a, p, dids[k].as<int32_t>(), dwt[k].as<float>(), nullptr, nullptr);
                }
            }
            CK(cudaDeviceSynchronize());
            auto same_bytes = [&](dev_buf* b, size_t n) {
                std::vector<uint8_t> h0(n), h1(n);
                CK(cudaMemcpy(h0.data(), b[0].p, n, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(h1.data(), b[1].p, n, cudaMemcpyDeviceToHost));
                return h0 == h1;
            };
            const bool same = same_bytes(dxn, n_in * 4) && same_bytes(dact, ab) && same_bytes(dy, n_expert * 4) &&
                              same_bytes(dids, 32) && same_bytes(dwt, 32);
            const char* fname = af == quant::act_format::q8_256 ? "q8_256" : af == quant::act_format::q8_32 ? "q8_32" : "f32";
            std::printf("%s norm_router_topk %s router of %lld inputs, %s activations: %s%s\n", same && one_launch ? "PASS" : "FAIL",
                        std::string(name(t)).c_str(), static_cast<long long>(n_in), fname, same ? "bit-identical to the norm's launch + router_topk" : "DIFFER",
                        one_launch ? "" : " (not one launch)");
            f += same && one_launch ? 0 : 1;
        }
    return f;
}

// matmul_mixed: a Q4_K pair (q and k: 4,100 and 510 columns) and a tb matrix (v: 515 columns;
// Q6_K or Q4_K) from one activation row in one launch, shapes for 132 SMs (the proportional split of a wave:
// some blocks walk two column blocks) and for 28; then 60 + 20 and 30 columns, fewer column
// blocks than a wave. Every output must be dot_ref's; the launch must have taken the shapes
// (matmul_mixed returned true) and left the outputs' 0xff bytes nowhere. Columns repeat 61
// distinct rows as in row_stream_parity, each matrix at its own offset.
int mixed_parity(dtype tb) {
    const int64_t n_in = 2048, n_distinct = 61;
    const dtype ta = dtype::q4_k;
    const size_t wra = *bytes_for(ta, n_in), wrb = *bytes_for(tb, n_in);
    const size_t arb = quant::act_row_bytes(quant::act_format_for(ta), n_in);
    if (quant::act_format_for(tb) != quant::act_format_for(ta)) return 1;
    const auto base_a = make_weights(ta, n_in, n_distinct, 41), base_b = make_weights(tb, n_in, n_distinct, 42);
    const auto act = make_act(ta, n_in, 1, 43);
    std::vector<float> dots_a(n_distinct), dots_b(n_distinct);
    for (int64_t k = 0; k < n_distinct; ++k) {
        dots_a[k] = kernels::dot_ref(ta, base_a.data() + k * wra, act.data(), n_in);
        dots_b[k] = kernels::dot_ref(tb, base_b.data() + k * wrb, act.data(), n_in);
    }
    int bad = 0;
    struct shape {
        int64_t q, k, v;
        int sm_count;
    };
    for (const shape sh : {shape{4100, 510, 515, 132}, shape{4100, 510, 515, 28}, shape{60, 20, 30, 132}}) {
        auto tiled = [&](const std::vector<std::byte>& base, size_t rb, int64_t n_out, int64_t offset) {
            std::vector<std::byte> m(static_cast<size_t>(n_out) * rb);
            for (int64_t j = 0; j < n_out; ++j)
                std::memcpy(m.data() + j * rb, base.data() + ((j + offset) % n_distinct) * rb, rb);
            return m;
        };
        const auto wq = tiled(base_a, wra, sh.q, 0), wk = tiled(base_a, wra, sh.k, 7), wv = tiled(base_b, wrb, sh.v, 13);
        dev_buf dq(wq.size()), dk(wk.size()), dv(wv.size()), da(act.size()), yq(sh.q * 4), yk(sh.k * 4), yv(sh.v * 4);
        CK(cudaMemcpy(dq.p, wq.data(), wq.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dk.p, wk.data(), wk.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dv.p, wv.data(), wv.size(), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(da.p, act.data(), act.size(), cudaMemcpyHostToDevice));
        CK(cudaMemset(yq.p, 0xff, sh.q * 4));   // NaNs: an output the launch skipped differs
        CK(cudaMemset(yk.p, 0xff, sh.k * 4));
        CK(cudaMemset(yv.p, 0xff, sh.v * 4));
        cuda::mm_args a = plain_args(ta, dq.as<std::byte>(), wra, n_in, sh.q, da.as<std::byte>(), arb, 1, yq.as<float>());
        a.w2 = dk.as<std::byte>();
        a.n_out2 = sh.k;
        a.y2 = yk.as<float>();
        a.y2_stride = sh.k;
        a.sm_count = sh.sm_count;
        cuda::mm_args b = plain_args(tb, dv.as<std::byte>(), wrb, n_in, sh.v, da.as<std::byte>(), arb, 1, yv.as<float>());
        b.sm_count = sh.sm_count;
        const bool launched = cuda::matmul_mixed(a, b, nullptr);
        CK(cudaDeviceSynchronize());
        if (!launched) {
            std::printf("  mixed q %lld k %lld v %lld (%d SMs): matmul_mixed did not take the shapes\n",
                        static_cast<long long>(sh.q), static_cast<long long>(sh.k), static_cast<long long>(sh.v), sh.sm_count);
            ++bad;
            continue;
        }
        auto check = [&](dev_buf& y, int64_t n_out, const std::vector<float>& dots, int64_t offset, const char* what) {
            std::vector<float> got(static_cast<size_t>(n_out));
            CK(cudaMemcpy(got.data(), y.p, got.size() * 4, cudaMemcpyDeviceToHost));
            for (int64_t j = 0; j < n_out; ++j)
                if (f2u(got[j]) != f2u(dots[(j + offset) % n_distinct]) && bad++ == 0)
                    std::printf("  mixed %s (%s v, %d SMs) col %lld: gpu %.9g, dot_ref %.9g\n", what,
                                std::string(name(tb)).c_str(), sh.sm_count,
                                static_cast<long long>(j), got[j], dots[(j + offset) % n_distinct]);
        };
        check(yq, sh.q, dots_a, 0, "q");
        check(yk, sh.k, dots_a, 7, "k");
        check(yv, sh.v, dots_b, 13, "v");
    }
    std::printf("gpu mixed Q4_K pair + %s launch (matmul_mixed): %s\n", std::string(name(tb)).c_str(),
                bad ? "DIFFER" : "bit-identical");
    return bad ? 1 : 0;
}

int router_topk_parity() {
    int f = 0;
    // ties: 1 every expert's row the same (every probability equal), 2 experts 2e and 2e + 1 the
    // same (pairs of equal probabilities among the picks). The last block routes in the block
    // form (route_topk_block) up to 256 experts and 31 picks, with its fallback on ties; 32 picks
    // and 512 experts take the warp form. shared_gate: a second matrix of one row in the launch
    // (a shared expert's gate, mm_args::w2), whose block must not disturb the routing and whose
    // output must be the plain matmul's.
    struct cfg { dtype t; int n_expert, n_used; bool renorm; int ties; bool shared_gate = false; };
    const cfg cases[] = {{dtype::f32, 128, 8, true, 0},   {dtype::f32, 60, 4, false, 0},  {dtype::bf16, 128, 8, true, 0},
                         {dtype::f32, 128, 8, true, 1},   {dtype::f32, 128, 8, true, 2},  {dtype::f32, 256, 8, true, 0},
                         {dtype::f32, 256, 10, false, 2}, {dtype::f32, 128, 31, true, 0}, {dtype::f32, 40, 32, true, 0},
                         {dtype::f32, 512, 10, true, 0}, {dtype::f32, 256, 8, true, 0, true},
                         {dtype::f32, 512, 10, true, 0, true}, {dtype::bf16, 128, 8, true, 2, true}};
    for (const cfg& c : cases) {
        const int64_t n_in = 2048;
        const size_t row_bytes = static_cast<size_t>(n_in) * (c.t == dtype::f32 ? 4 : 2);
        std::vector<uint8_t> w(row_bytes * static_cast<size_t>(c.n_expert));
        std::mt19937 rng(77);
        if (c.t == dtype::f32) {
            const auto v = random_floats(static_cast<size_t>(n_in) * c.n_expert, 78, 0.05f);
            std::memcpy(w.data(), v.data(), w.size());
        } else {
            for (size_t i = 0; i < w.size(); i += 2) {   // bf16 of small normals: the top byte pair of a float
                const float x = std::normal_distribution<float>(0.0f, 0.05f)(rng);
                const uint32_t u = f2u(x);
                w[i] = static_cast<uint8_t>(u >> 16);
                w[i + 1] = static_cast<uint8_t>(u >> 24);
            }
        }
        if (c.ties == 1)
            for (int e = 1; e < c.n_expert; ++e) std::memcpy(w.data() + e * row_bytes, w.data(), row_bytes);
        if (c.ties == 2)
            for (int e = 1; e < c.n_expert; e += 2)
                std::memcpy(w.data() + e * row_bytes, w.data() + (e - 1) * row_bytes, row_bytes);
        kernels::router_params p;
        p.n_expert = c.n_expert;
        p.n_used = c.n_used;
        p.renormalize = c.renorm;
        uint8_t* dw = nullptr;
        float *dx = nullptr, *dy[2] = {nullptr, nullptr}, *dwt[2] = {nullptr, nullptr}, *dy2[2] = {nullptr, nullptr};
        uint8_t* dw2 = nullptr;   // shared_gate: its row, a copy of expert 3's with the bytes of one word changed
        if (c.shared_gate) {
            std::vector<uint8_t> row(w.begin() + 3 * row_bytes, w.begin() + 4 * row_bytes);
            row[5] ^= 0x11;
            CK(cudaMalloc(&dw2, row_bytes));
            CK(cudaMemcpy(dw2, row.data(), row_bytes, cudaMemcpyHostToDevice));
        }
        int32_t* dids[2] = {nullptr, nullptr};
        unsigned* arrivals = nullptr;
        CK(cudaMalloc(&dw, w.size()));
        CK(cudaMemcpy(dw, w.data(), w.size(), cudaMemcpyHostToDevice));
        CK(cudaMalloc(&dx, n_in * 4));
        CK(cudaMalloc(&arrivals, 4));
        CK(cudaMemset(arrivals, 0, 4));
        for (int k = 0; k < 2; ++k) {
            CK(cudaMalloc(&dy[k], c.n_expert * 4));
            CK(cudaMalloc(&dwt[k], c.n_used * 4));
            CK(cudaMalloc(&dids[k], c.n_used * 4));
            CK(cudaMalloc(&dy2[k], 4));
        }
        const std::string what = std::string("router_topk ") + std::string(name(c.t)) + " " + std::to_string(c.n_expert) +
                                 " top-" + std::to_string(c.n_used) +
                                 (c.ties == 1 ? " ties" : c.ties == 2 ? " paired ties" : "") +
                                 (c.shared_gate ? " + a shared expert's gate row" : "");
        bool same = true;
        for (int round = 0; round < 3; ++round) {
            const auto x = random_floats(static_cast<size_t>(n_in), 80 + round, 1.0f);
            CK(cudaMemcpy(dx, x.data(), n_in * 4, cudaMemcpyHostToDevice));
            for (int k = 0; k < 2; ++k) {   // k 0: fused (with the counter), 1: the two launches
                cuda::mm_args a;
                a.type = c.t;
                a.w = reinterpret_cast<const std::byte*>(dw);
                a.row_bytes = row_bytes;
                a.n_in = n_in;
                a.n_out = c.n_expert;
                a.act = reinterpret_cast<const std::byte*>(dx);
                a.act_stride = static_cast<size_t>(n_in) * 4;
                a.n_rows = 1;
                a.y = dy[k];
                a.y_stride = c.n_expert;
                if (c.shared_gate) {
                    a.w2 = reinterpret_cast<const std::byte*>(dw2);
                    a.n_out2 = 1;
                    a.y2 = dy2[k];
                    a.y2_stride = 1;
                }
                if (k == 0 && c.shared_gate && !cuda::router_one_launch(a, p, nullptr)) {
                    std::printf("FAIL %s: the one-launch router did not take it\n", what.c_str());
                    same = false;
                }
                cuda::router_topk(a, p, dids[k], dwt[k], k == 0 ? arrivals : nullptr, nullptr);
            }
            CK(cudaDeviceSynchronize());
            std::vector<float> y[2], wt[2];
            std::vector<int32_t> ids[2];
            for (int k = 0; k < 2; ++k) {
                y[k].resize(c.n_expert);
                wt[k].resize(c.n_used);
                ids[k].resize(c.n_used);
                CK(cudaMemcpy(y[k].data(), dy[k], c.n_expert * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(wt[k].data(), dwt[k], c.n_used * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(ids[k].data(), dids[k], c.n_used * 4, cudaMemcpyDeviceToHost));
            }
            same = same && std::memcmp(y[0].data(), y[1].data(), y[0].size() * 4) == 0 && ids[0] == ids[1] &&
                   std::memcmp(wt[0].data(), wt[1].data(), wt[0].size() * 4) == 0;
            if (c.shared_gate) {
                float g[2];
                for (int k = 0; k < 2; ++k) CK(cudaMemcpy(&g[k], dy2[k], 4, cudaMemcpyDeviceToHost));
                same = same && f2u(g[0]) == f2u(g[1]) && g[0] == g[0];
            }
        }
        unsigned left = 1;
        CK(cudaMemcpy(&left, arrivals, 4, cudaMemcpyDeviceToHost));
        std::printf("%s %s: probabilities, ids and weights of 3 rows %s; arrival counter %u after\n",
                    same && left == 0 ? "PASS" : "FAIL", what.c_str(), same ? "bit-identical to matmul + route_topk" : "DIFFER",
                    left);
        f += same && left == 0 ? 0 : 1;
        cudaFree(dw);
        cudaFree(dw2);
        cudaFree(dx);
        cudaFree(arrivals);
        for (int k = 0; k < 2; ++k) {
            cudaFree(dy2[k]);
            cudaFree(dy[k]);
            cudaFree(dwt[k]);
            cudaFree(dids[k]);
        }
    }
    return f;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);   // lines reach the log even if a deadline kills us
    const bool do_bench = !(argc > 1 && std::strcmp(argv[1], "--no-bench") == 0);
    int failures = host_emulation();
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("%s: host part done (%d failures); SKIP: no CUDA device\n", failures ? "FAIL" : "PASS", failures);
        return failures ? 1 : 77;
    }
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    cuda::upload_tables();
    for (dtype t : k_formats) {
        // 256-wide formats: 2048 and 2816 (8 and 11 blocks: one-row launches at 8 pieces a
        // lane, the second with a partial warp step), 768 (3 blocks: 4 pieces a lane, one group
        // of lanes idle), 512 (2 blocks: a piece a lane). 32-wide formats: 4 pieces a lane
        // from 16 blocks (all of these widths).
        failures += gpu_parity(t, 2048) + gpu_parity(t, 2816) + gpu_parity(t, 768) + gpu_parity(t, 512);
        // 4608: two of a one-row launch's chunks (4,096 elements: quant_stage), the second
        // partial, and three of a window's (2,048), for a format of each block width.
        if (t == dtype::q4_k || t == dtype::q6_k || t == dtype::q8_0) failures += gpu_parity(t, 4608);
        // 576 (SmolLM2's width): 18 blocks of 32, so the tensor-core kernel's last step of 256
        // elements is partial (2 blocks); 256: 8 blocks of 32, the one-row kernel at a piece a lane.
        if (info(t).block_elems == 32) failures += gpu_parity(t, 576) + gpu_parity(t, 256);
        // Float weights: 2072 = 32 x 64 + 24, so the tile kernel's last chunk is partial and ends
        // inside a 16-element group.
        if (info(t).block_elems == 1) failures += gpu_parity(t, 2072);
        // 6144 floats: an F32 row and its input no longer fit the router kernel's shared memory
        // beside its own static 2 KB (its input row is then read from global memory).
        if (t == dtype::f32) failures += gpu_parity(t, 6144);
        // The one-wave one-row kernel at each pieces-a-lane choice it makes (int8 formats).
        if (!is_float(t)) {
            failures += row_stream_parity(t, 2048) + row_stream_parity(t, 768);
            failures += row_stream_parity(t, info(t).block_elems == 32 ? 256 : 512);
            // Launch shapes sized for a 28-SM card (mm_args::sm_count): other grids, the same bits.
            failures += row_stream_parity(t, 2048, 28);
            // A wide verify window's ungrouped experts (96 and 128 pairs: one-wave grids of 5 and 4
            // blocks a pair).
            if (t == dtype::q4_k || t == dtype::q6_k || t == dtype::q8_0)
                failures += row_stream_parity(t, 2048, 132, 96) + row_stream_parity(t, 768, 132, 128);
        }
    }
    failures += mixed_parity(dtype::q6_k) + mixed_parity(dtype::q4_k) + router_topk_parity() + norm_router_parity();
    if (do_bench && failures == 0) {
        for (dtype t : {dtype::q4_k, dtype::q8_0, dtype::q4_0, dtype::q6_k, dtype::iq4_xs, dtype::mxfp4}) {
            bench(t, 2048, 768, 128, 1, "expert");
            bench(t, 768, 2048, 128, 1, "expert-down");
            bench(t, 8192, 8192, 4, 1, "dense");
        }
        bench(dtype::q4_k, 8192, 8192, 4, 8, "dense");
        bench(dtype::q4_k, 8192, 8192, 4, 16, "dense");
        // Prefill chunks (the tensor-core kernel): a 512-row chunk through a Qwen3-30B-A3B q
        // projection and a 4096 x 4096 matrix.
        for (dtype t : {dtype::q4_k, dtype::q6_k, dtype::q8_0, dtype::q4_0})
            for (int rows : {64, 512}) bench(t, 2048, 4096, 4, rows, "prefill");
        bench(dtype::f32, 2048, 128, 64, 1, "router");
        // A Qwen3-30B-A3B layer's routed experts for one token: gate + up (one launch), down.
        bench_experts(dtype::q4_k, 2048, 768, 128, 8, true, "gate+up");
        bench_experts(dtype::q4_k, 768, 2048, 128, 8, false, "down");
        bench_experts(dtype::q6_k, 768, 2048, 128, 8, false, "down");
    }
    std::printf("%s: %d failures\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
