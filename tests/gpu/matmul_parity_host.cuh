// Part 1 of matmul_parity.cu (no GPU needed): the CUDA kernels' lane arithmetic emulated on the
// host (quant_decode.cuh's per-lane decoding, the tensor-core window kernel's fragments, shuffles
// and quad sums) against kernels::dot_ref's bits.
#pragma once

#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/quant_decode.cuh"

#include "kernels/cpu/dot_ref.h"
#include "quant/act.h"
#include "quant/iq_tables.h"
#include "quant/quant.h"

#include "matmul_parity_data.cuh"

#include <cstdio>
#include <string>
#include <vector>

namespace sluice::matmul_test {

// ---- part 1: the kernel's lane arithmetic on the host -----------------------------------------
// sc * dot(q, x) into sumi and mn * sum(x) into summ over `len` weights q and the activation
// block ab's int8 values from element k0.
inline void add_products(const int8_t* q, const uint8_t* ab, int k0, int len, int sc, int mn, int32_t& sumi,
                         int32_t& summ) {
    int32_t dot = 0, sx = 0;
    for (int e = 0; e < len; ++e) {
        const int8_t x = static_cast<int8_t>(ab[4 + k0 + e]);
        dot += q[e] * x;
        sx += x;
    }
    sumi += sc * dot;
    summ += mn * sx;
}

// dot_ref's fold of block ib's term (its scale dx at the activation block's start) into y.
template <dtype T>
float fold_block(float y, int64_t ib, float d, float dmin, const uint8_t* ab, int32_t sumi, int32_t summ) {
    float dx;
    std::memcpy(&dx, ab, 4);
    const float t = cuda::block_term<cuda::fmt_traits<T>::kind>(d, dmin, dx, sumi, summ);
    return ib == 0 ? t : y + t;
}

template <dtype T>
float emulate_dot(const uint8_t* w_row, const uint8_t* act_row, int64_t n, const cuda::iq_tables& tb) {
    using tr = cuda::fmt_traits<T>;
    constexpr int L = tr::qk / 8;
    float y = 0.0f;
    for (int64_t ib = 0; ib < n / tr::qk; ++ib) {
        const uint8_t* b = w_row + ib * tr::block_bytes;
        const uint8_t* ab = act_row + ib * tr::act_bytes;
        float d, dmin;
        cuda::decode_scales<T>(b, d, dmin);
        // The tensor-core kernel's whole-word decoders (K-quant mixes' formats): the block's 256
        // weights, checked against decode_piece below.
        uint32_t words[64] = {};
        if constexpr (T == dtype::q4_k || T == dtype::q5_k) {
            for (int w = 0; w < 32; ++w) cuda::decode_word_k4<T>(b, w, words[16 * (w >> 3) + (w & 7)], words[16 * (w >> 3) + 8 + (w & 7)]);
        } else if constexpr (T == dtype::q6_k) {
            for (int h = 0; h < 2; ++h)
                for (int i = 0; i < 8; ++i) {
                    uint32_t q4[4];
                    cuda::decode_words_q6k(b, h, 4 * i, q4);
                    for (int m = 0; m < 4; ++m) words[32 * h + 8 * m + i] = q4[m];
                }
        }
        constexpr bool has_words = T == dtype::q4_k || T == dtype::q5_k || T == dtype::q6_k;
        int32_t sumi = 0, summ = 0;
        for (int p = 0; p < L; ++p) {
            int8_t q[8];
            int sc, mn;
            cuda::decode_piece<T>(b, p, tb, q, sc, mn);
            if (has_words && (static_cast<int32_t>(words[2 * p]) != cuda::pack4(q) || static_cast<int32_t>(words[2 * p + 1]) != cuda::pack4(q + 4)))
                return std::nanf("1");
            // The packed form the kernel uses (word loads for Q4_K/Q5_K/Q6_K) must be these bytes.
            for (bool aligned : {true, false}) {
                int32_t q0, q1;
                int sc2, mn2;
                cuda::decode_piece_packed<T>(b, p, tb, aligned, q0, q1, sc2, mn2);
                if (q0 != cuda::pack4(q) || q1 != cuda::pack4(q + 4) || sc2 != sc || mn2 != mn) return std::nanf("1");
            }
            add_products(q, ab, 8 * p, 8, sc, mn, sumi, summ);
        }
        // The one-row kernels' whole-sub-block path (4 and 8 pieces a lane): the same integers,
        // one sub-block at a time and as even-odd pairs (its activation sums from the bsums).
        if constexpr (T == dtype::q4_k) {
            alignas(16) uint8_t blk[tr::block_bytes];
            std::memcpy(blk, b, sizeof blk);
            int32_t si1 = 0, sm1 = 0, si2 = 0, sm2 = 0;
            for (int j = 0; j < 8; ++j) cuda::q4k_subblock_sums<1>(blk, j, ab, si1, sm1);
            for (int j = 0; j < 8; j += 2) cuda::q4k_subblock_sums<2>(blk, j, ab, si2, sm2);
            if (si1 != sumi || sm1 != summ || si2 != sumi || sm2 != summ) return std::nanf("1");
        }
        // Q6_K's: 32-element segments (4 pieces a lane) and 64-element ones (8).
        if constexpr (T == dtype::q6_k) {
            int32_t si1 = 0, si2 = 0;
            for (int s = 0; s < 8; ++s) cuda::q6k_segment_sums<1>(b, s, ab, si1);
            for (int s = 0; s < 4; ++s) cuda::q6k_segment_sums<2>(b, s, ab, si2);
            if (si1 != sumi || si2 != sumi) return std::nanf("1");
        }
        y = fold_block<T>(y, ib, d, dmin, ab, sumi, summ);
    }
    return y;
}

// The tensor-core kernel's arithmetic (matmul_mma.cuh): the integer dot of each 16-element
// group (what one MMA gives), times the group's sc, summed into sumi; the group's activation sum
// times its mn into summ; the block term and the fold as above. Its premise is that the two
// pieces of a group share sc and mn: checked here for every block of every format.
template <dtype T>
float emulate_mma_dot(const uint8_t* w_row, const uint8_t* act_row, int64_t n, const cuda::iq_tables& tb) {
    using tr = cuda::fmt_traits<T>;
    float y = 0.0f;
    for (int64_t ib = 0; ib < n / tr::qk; ++ib) {
        const uint8_t* b = w_row + ib * tr::block_bytes;
        const uint8_t* ab = act_row + ib * tr::act_bytes;
        float d, dmin;
        cuda::decode_scales<T>(b, d, dmin);
        int32_t sumi = 0, summ = 0;
        for (int g = 0; g < tr::qk / 16; ++g) {
            int8_t q[16];
            int sc, mn, sc2, mn2;
            cuda::decode_piece<T>(b, 2 * g, tb, q, sc, mn);
            cuda::decode_piece<T>(b, 2 * g + 1, tb, q + 8, sc2, mn2);
            if (sc != sc2 || mn != mn2 || sc != static_cast<int8_t>(sc) || mn != static_cast<int8_t>(mn)) return std::nanf("1");
            add_products(q, ab, 16 * g, 16, sc, mn, sumi, summ);
        }
        y = fold_block<T>(y, ib, d, dmin, ab, sumi, summ);
    }
    return y;
}

// The tensor-core window kernel (matmul_window_mma.cuh) lane by lane: one warp's 16 rows x 8
// columns, each lane's registers as the kernel fills them, the MMA as the PTX ISA lays its
// fragments out (the layout mm_mma_kernel already runs on: A rows are activation rows, B columns
// weight rows, lane 4g + t holds D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]), the shuffles
// as reads of the source lane and the quad sums over lanes 4g..4g+3. out: [16][8] row-major.
uint8_t byte_of(uint32_t v, int i) { return static_cast<uint8_t>(v >> (8 * i)); }

template <dtype T>
void emulate_window_warp(const uint8_t* w, size_t wrb, int n_cols, const uint8_t* act, size_t arb, int n_rows,
                         int64_t n_in, const cuda::iq_tables& tb, float* out) {
    using tr = cuda::fmt_traits<T>;
    constexpr int QK = tr::qk, BB = tr::block_bytes, AB = tr::act_bytes;
    constexpr int GS = T == dtype::q4_k || T == dtype::q5_k || T == dtype::iq4_xs || QK == 32 ? 2 : 1;   // mma_group_span
    constexpr int KS = 16 * GS, MPB = QK / KS;
    int32_t si[32][4] = {}, sm[32][4] = {};
    float acc[32][4] = {};
    auto act_word = [&](int row, int64_t kb, int e) -> uint32_t {
        if (row >= n_rows) return 0u;
        uint32_t v;
        std::memcpy(&v, act + static_cast<size_t>(row) * arb + static_cast<size_t>(kb) * AB + 4 + e, 4);
        return v;
    };
    for (int64_t kb = 0; kb < n_in / QK; ++kb) {
        for (int m = 0; m < MPB; ++m) {
            int32_t q0[32] = {}, q1[32] = {}, a0[32][2] = {}, a1[32][2] = {};
            int sc[32] = {}, mn[32] = {};
            int8_t A[16][32] = {}, B[32][8] = {};   // logical k
            for (int L = 0; L < 32; ++L) {
                const int g = L >> 2, t = L & 3;
                const uint8_t* b = w + static_cast<size_t>(g) * wrb + static_cast<size_t>(kb) * BB;
                const int piece = GS == 2 ? 4 * m + t : 2 * m + t / 2;
                if (g < n_cols) cuda::decode_piece_packed<T>(b, piece, tb, cuda::packed_aligned<T>(b), q0[L], q1[L], sc[L], mn[L]);
                if (GS == 2) {
                    a0[L][0] = act_word(g, kb, KS * m + 8 * t);
                    a0[L][1] = act_word(g, kb, KS * m + 8 * t + 4);
                    a1[L][0] = act_word(g + 8, kb, KS * m + 8 * t);
                    a1[L][1] = act_word(g + 8, kb, KS * m + 8 * t + 4);
                    for (int i = 0; i < 4; ++i) {
                        A[g][4 * t + i] = static_cast<int8_t>(byte_of(a0[L][0], i));
                        A[g + 8][4 * t + i] = static_cast<int8_t>(byte_of(a1[L][0], i));
                        A[g][16 + 4 * t + i] = static_cast<int8_t>(byte_of(a0[L][1], i));
                        A[g + 8][16 + 4 * t + i] = static_cast<int8_t>(byte_of(a1[L][1], i));
                        B[4 * t + i][g] = static_cast<int8_t>(byte_of(static_cast<uint32_t>(q0[L]), i));
                        B[16 + 4 * t + i][g] = static_cast<int8_t>(byte_of(static_cast<uint32_t>(q1[L]), i));
                    }
                } else {
                    a0[L][0] = act_word(g, kb, KS * m + 4 * t);
                    a1[L][0] = act_word(g + 8, kb, KS * m + 4 * t);
                    const uint32_t bq = static_cast<uint32_t>((t & 1) ? q1[L] : q0[L]);
                    for (int i = 0; i < 4; ++i) {
                        A[g][4 * t + i] = static_cast<int8_t>(byte_of(a0[L][0], i));
                        A[g + 8][4 * t + i] = static_cast<int8_t>(byte_of(a1[L][0], i));
                        B[4 * t + i][g] = static_cast<int8_t>(byte_of(bq, i));
                    }
                }
            }
            int32_t D[16][8] = {};
            for (int r = 0; r < 16; ++r)
                for (int c = 0; c < 8; ++c)
                    for (int k = 0; k < KS; ++k) D[r][c] += A[r][k] * B[k][c];
            // Each lane's partial activation sum of rows g and g + 8, then the quad sums.
            int32_t part0[32] = {}, part1[32] = {};
            for (int L = 0; L < 32; ++L)
                for (int wd = 0; wd < GS; ++wd)
                    for (int i = 0; i < 4; ++i) {
                        part0[L] += static_cast<int8_t>(byte_of(a0[L][wd], i));
                        part1[L] += static_cast<int8_t>(byte_of(a1[L][wd], i));
                    }
            for (int L = 0; L < 32; ++L) {
                const int g = L >> 2, t = L & 3, q = L & ~3;
                const int32_t xs0 = part0[q] + part0[q + 1] + part0[q + 2] + part0[q + 3];
                const int32_t xs1 = part1[q] + part1[q + 1] + part1[q + 2] + part1[q + 3];
                const int32_t dd[4] = {D[g][2 * t], D[g][2 * t + 1], D[g + 8][2 * t], D[g + 8][2 * t + 1]};
                const int src0 = 8 * t, src1 = 8 * t + 4;
                const int32_t scs[4] = {sc[src0], sc[src1], sc[src0], sc[src1]}, mns[4] = {mn[src0], mn[src1], mn[src0], mn[src1]};
                const int32_t xss[4] = {xs0, xs0, xs1, xs1};
                for (int c = 0; c < 4; ++c) {
                    si[L][c] += scs[c] * dd[c];
                    if (tr::kind != cuda::term_kind::sym) sm[L][c] += mns[c] * xss[c];
                }
            }
        }
        float d[32] = {}, dmin[32] = {};
        for (int L = 0; L < 32; ++L)
            if ((L >> 2) < n_cols) cuda::decode_scales<T>(w + static_cast<size_t>(L >> 2) * wrb + static_cast<size_t>(kb) * BB, d[L], dmin[L]);
        for (int L = 0; L < 32; ++L) {
            const int g = L >> 2, t = L & 3, src0 = 8 * t, src1 = 8 * t + 4;
            float dx[2] = {0.0f, 0.0f};
            for (int h = 0; h < 2; ++h)
                if (g + 8 * h < n_rows) std::memcpy(&dx[h], act + static_cast<size_t>(g + 8 * h) * arb + static_cast<size_t>(kb) * AB, 4);
            const bool has_min = tr::kind != cuda::term_kind::sym;
            for (int c = 0; c < 4; ++c) {
                const int src = (c & 1) ? src1 : src0;
                const float tt = cuda::block_term<tr::kind>(d[src], has_min ? dmin[src] : 0.0f, dx[c >> 1], si[L][c], sm[L][c]);
                acc[L][c] = kb == 0 ? tt : acc[L][c] + tt;
                si[L][c] = 0;
                sm[L][c] = 0;
            }
        }
    }
    for (int L = 0; L < 32; ++L)
        for (int c = 0; c < 4; ++c) out[((L >> 2) + (c < 2 ? 0 : 8)) * 8 + 2 * (L & 3) + (c & 1)] = acc[L][c];
}

void emulate_window(dtype t, const uint8_t* w, size_t wrb, int n_cols, const uint8_t* a, size_t arb, int n_rows,
                    int64_t n, const cuda::iq_tables& tb, float* out) {
    switch (t) {
#define C(T) case dtype::T: emulate_window_warp<dtype::T>(w, wrb, n_cols, a, arb, n_rows, n, tb, out); break;
        C(q8_0) C(q4_0) C(q4_1) C(q5_0) C(q5_1) C(iq4_nl) C(mxfp4) C(q2_k) C(q3_k) C(q4_k) C(q5_k) C(q6_k)
        C(iq4_xs) C(iq2_xxs) C(iq2_xs) C(iq2_s) C(iq3_xxs) C(iq3_s)
#undef C
    default: break;
    }
}

float emulate(dtype t, const uint8_t* w, const uint8_t* a, int64_t n, const cuda::iq_tables& tb, bool mma) {
    switch (t) {
#define C(T) case dtype::T: return mma ? emulate_mma_dot<dtype::T>(w, a, n, tb) : emulate_dot<dtype::T>(w, a, n, tb);
        C(q8_0) C(q4_0) C(q4_1) C(q5_0) C(q5_1) C(iq4_nl) C(mxfp4) C(q2_k) C(q3_k) C(q4_k) C(q5_k) C(q6_k)
        C(iq4_xs) C(iq2_xxs) C(iq2_xs) C(iq2_s) C(iq3_xxs) C(iq3_s)
#undef C
    default: return 0.0f;
    }
}

int host_emulation() {
    using namespace sluice::quant;
    const cuda::iq_tables tb{k_ksigns_iq2xs, &k_iq2xxs_grid[0][0], &k_iq2xs_grid[0][0], &k_iq2s_grid[0][0],
                             &k_iq3xxs_grid[0][0], &k_iq3s_grid[0][0], k_kvalues_iq4nl, k_kvalues_mxfp4};
    int failures = 0;
    const int64_t n_in = 1024, n_out = 24, n_rows = 3;
    for (dtype t : k_formats) {
        if (is_float(t)) continue;
        const auto w = make_weights(t, n_in, n_out, 11);
        const auto a = make_act(t, n_in, n_rows, 12);
        const size_t wrb = *bytes_for(t, n_in), arb = act_row_bytes(act_format_for(t), n_in);
        for (bool mma : {false, true}) {
            int bad = 0;
            for (int64_t j = 0; j < n_out; ++j)
                for (int64_t r = 0; r < n_rows; ++r) {
                    const float ref = kernels::dot_ref(t, w.data() + j * wrb, a.data() + r * arb, n_in);
                    const float got = emulate(t, reinterpret_cast<const uint8_t*>(w.data() + j * wrb),
                                              reinterpret_cast<const uint8_t*>(a.data() + r * arb), n_in, tb, mma);
                    if (f2u(ref) != f2u(got) && bad++ == 0)
                        std::printf("  %s col %lld row %lld: dot_ref %.9g, %s %.9g\n", std::string(name(t)).c_str(),
                                    static_cast<long long>(j), static_cast<long long>(r), ref, mma ? "groups" : "lanes", got);
                }
            std::printf("%s host-%s %-8s: %s\n", bad ? "FAIL" : "PASS", mma ? "groups" : "lanes", std::string(name(t)).c_str(),
                        bad ? "differs from dot_ref" : "bit-identical to dot_ref");
            failures += bad ? 1 : 0;
        }
        // The window kernel's lanes: full and partial warps (rows past the window, columns past
        // the matrix are zeros that must not reach the written outputs).
        const auto aw = make_act(t, n_in, 16, 13);
        int bad = 0;
        for (const auto [rows, cols] : {std::pair{16, 8}, std::pair{3, 8}, std::pair{11, 5}, std::pair{2, 1}}) {
            float out[16 * 8];
            emulate_window(t, reinterpret_cast<const uint8_t*>(w.data()), wrb, cols, reinterpret_cast<const uint8_t*>(aw.data()),
                           arb, rows, n_in, tb, out);
            for (int r = 0; r < rows; ++r)
                for (int c = 0; c < cols; ++c) {
                    const float ref = kernels::dot_ref(t, w.data() + c * wrb, aw.data() + r * arb, n_in);
                    if (f2u(ref) != f2u(out[r * 8 + c]) && bad++ == 0)
                        std::printf("  %s window %dx%d row %d col %d: dot_ref %.9g, window lanes %.9g\n", std::string(name(t)).c_str(),
                                    rows, cols, r, c, ref, out[r * 8 + c]);
                }
        }
        std::printf("%s host-window %-8s: %s\n", bad ? "FAIL" : "PASS", std::string(name(t)).c_str(),
                    bad ? "differs from dot_ref" : "bit-identical to dot_ref");
        failures += bad ? 1 : 0;
    }
    return failures;
}

}  // namespace sluice::matmul_test
