// The column tiles of dot.h (dot_tile_fn) for the 256-wide formats (K-quants, IQ4_XS and the
// IQ2/IQ3 grid formats), AVX-512 VNNI only: 8 weight rows (8 output columns) against 1..16
// activation rows, one int32/fp32 lane per column. Included by dot_avx512.cpp after
// dot_simd_impl.h and dot_tile_impl.h, whose helpers (kblock, decode256, term8, quant_rows) it
// uses, inside the same anonymous namespace and target.
//
// Why: dot_rows' window path multiplies each activation row by each decoded block with
// vpmaddubsw + vpdpwssd, plus a sign transfer per row for signed formats: four operations per
// 32 products and row. Here the 8 columns' codes of 4 consecutive elements sit in one vector
// (the block transposed once per tile), the row's 4 activations are broadcast, and one vpdpbusd
// makes 32 products (8 columns x 4) with no per-row work on the weights: about two operations
// per 32 products and row (the broadcast is a load). Codes go in unsigned (vpdpbusd takes u8 x
// s8): signed formats biased by 128, and the bias taken out as an integer, 128 * the scaled sum
// of the activations, from the per-16 sums the activation rows carry (Q6_K's kblock is biased
// by 32 already, the same way).
//
// Exactness (E3): lane c computes, per block, dot_ref's integer sums
//   sumi = sum_g sc_g * sum_{e in g} q_e x_e  = sum_g sc_g * (raw_g - B * bsum_g)
// (raw_g: the biased codes' products with the group's 16 or 32 activations; B the bias), exact
// in int32 (wrapping arithmetic: only the final sum must fit, and dot_ref's does), and summ =
// sum_g min_g * bsum_g for formats with mins; then term8's dot_ref term (each fp32 operation
// rounded on its own) and the fold y = t0, then y + t in block order: dot_ref's bits.
//
// One-row calls (a decode step) run dot_rows column by column (quant_rows): its one-row kernels
// decode each block in registers, and a tile's transposition costs more than it saves on one row.

namespace sluice::kernels {
namespace {   // the same (translation-unit-local) namespace as dot_simd_impl.h's

// Scales per 32 elements (else per 16) in the format's sub-blocks.
constexpr bool ktile_sub32(dtype t) {
    return t == dtype::q4_k || t == dtype::q5_k || t == dtype::iq4_xs || t == dtype::iq2_xxs ||
           t == dtype::iq3_xxs || t == dtype::iq3_s;
}
// Rows from which the tile beats dot_rows column by column: 2. Measured 2026-12-02 with
// bench_dot (one thread, 1 MiB of weights, n = 4096, the 2-core AMD EPYC), GB/s tile vs
// dot_rows: 1 row Q4_K 13.8 vs 18.7-19.4, Q6_K 20.1 vs 30.3, IQ4_XS 12.6 vs 16.3-17.0 (the
// one-row kernels decode in registers); 2 rows Q4_K 12.1-12.3 vs 11.9-12.2, Q6_K 17.0-17.7 vs
// 16.8-17.8, IQ4_XS 11.2 vs 10.0-10.1, Q3_K 6.3-8.6 vs 4.5-6.3, IQ3_S 2.8-2.9 vs 2.1-2.2; 16 rows
// Q4_K 4.2 vs 2.7, Q6_K 5.9 vs 3.9, IQ4_XS 4.0 vs 2.0, Q3_K 3.2 vs 1.6.
constexpr int k_ktile_min_rows = 2;
// The bias B of the unsigned codes vpdpbusd multiplies: 128 for signed codes (q ^ 0x80 as a
// byte is q + 128), 32 for Q6_K's kblock, 0 for unsigned codes.
constexpr int ktile_bias(dtype t) { return t == dtype::q6_k ? 32 : decoded_unsigned(t) ? 0 : 128; }

// transpose8x32 (the 8x8 transpose of int32 lanes) is dot_tile_impl.h's, included before this.

// One block of the tile's 8 columns, decoded and transposed once for every activation row.
template <dtype wt>
struct ktile_block {
    static constexpr int n_groups = ktile_sub32(wt) ? 8 : 16;   // scale groups per block
    static constexpr int group_quads = 64 / n_groups;            // 4-element quads per group
    alignas(32) uint8_t u[64][32];       // [quad][column: 4 codes] unsigned (biased) codes
    alignas(32) int32_t sc[16][8];       // [group][column] the group's scale
    alignas(32) int32_t sc_pair[8][8];   // [16-group pair j][column] int16 scales of 16-groups 2j, 2j+1
    alignas(32) int32_t mn_pair[8][8];   // [pair j][column] int16 mins of 16-groups 2j, 2j+1 (formats with mins)
    __m256 d, m;                          // per column
    kblock k[8];                          // the columns' decoded blocks

    [[gnu::always_inline]] void load(const std::byte* b0, size_t ws) {
        if constexpr (wt == dtype::iq4_xs) load_iq4_xs(b0, ws);
        else load_decoded(b0, ws);
        scale_tables();
    }

    // IQ4_XS straight into the tile: each chunk's codes of the 8 columns from the nibbles and
    // the table (its entries biased by 128 once), transposed; no kblock round trip for the codes.
    [[gnu::always_inline]] void load_iq4_xs(const std::byte* b0, size_t ws) {
        alignas(32) float ds[8];
        for (int c = 0; c < 8; ++c) {
            const std::byte* b = b0 + c * ws;
            _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(b0) + (8 + c) * ws), _MM_HINT_T0);
            ds[c] = f16_at(b);
            const __m128i s8 = iq4xs_scales(b);
            _mm256_store_si256(reinterpret_cast<__m256i*>(k[c].sc16),
                               _mm256_set_m128i(_mm_unpackhi_epi16(s8, s8), _mm_unpacklo_epi16(s8, s8)));
        }
        d = _mm256_load_ps(ds);
        m = _mm256_setzero_ps();
        const __m256i tab = _mm256_xor_si256(table16(k_kvalues_iq4nl), _mm256_set1_epi8(static_cast<char>(0x80)));
        for (int i = 0; i < 8; ++i) {   // chunk i: quads 8i..8i+7
            __m256i v[8];
            for (int c = 0; c < 8; ++c) v[c] = _mm256_shuffle_epi8(tab, nibbles32(b0 + c * ws + 8 + 16 * i));
            transpose8x32(v);
            for (int j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(u[8 * i + j]), v[j]);
        }
    }

    [[gnu::always_inline]] void load_decoded(const std::byte* b0, size_t ws) {
        alignas(32) float ds[8], ms[8];
        for (int c = 0; c < 8; ++c) {
            // The same block of the next tile's 8 rows (dot_tile_impl.h's tile_block says why).
            _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(b0) + (8 + c) * ws), _MM_HINT_T0);
            decode256<wt, false>(b0 + c * ws, k[c]);
            ds[c] = k[c].d;
            ms[c] = k[c].dmin;
        }
        d = _mm256_load_ps(ds);
        m = _mm256_load_ps(ms);
        const __m256i flip = _mm256_set1_epi8(static_cast<char>(ktile_bias(wt) == 128 ? 0x80 : 0));
        for (int i = 0; i < 8; ++i) {   // quads 8i..8i+7
            __m256i v[8];
            for (int c = 0; c < 8; ++c)
                v[c] = _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(k[c].q + 32 * i)), flip);
            transpose8x32(v);
            for (int j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(u[8 * i + j]), v[j]);
        }
    }

    [[gnu::always_inline]] void scale_tables() {
        // The scale tables from the columns' sc16 (int16 per 16-group): dword j of it is the
        // pair of 16-groups 2j, 2j + 1, so one transpose gives sc_pair, and its halves,
        // sign-extended, the per-group scales (32-wide sub-blocks: both halves are the same).
        __m256i v[8];
        for (int c = 0; c < 8; ++c) v[c] = _mm256_load_si256(reinterpret_cast<const __m256i*>(k[c].sc16));
        transpose8x32(v);
        for (int j = 0; j < 8; ++j) {
            if constexpr (ktile_bias(wt) != 0) _mm256_store_si256(reinterpret_cast<__m256i*>(sc_pair[j]), v[j]);
            const __m256i lo = _mm256_srai_epi32(_mm256_slli_epi32(v[j], 16), 16);
            if constexpr (n_groups == 8) {
                _mm256_store_si256(reinterpret_cast<__m256i*>(sc[j]), lo);
            } else {
                _mm256_store_si256(reinterpret_cast<__m256i*>(sc[2 * j]), lo);
                _mm256_store_si256(reinterpret_cast<__m256i*>(sc[2 * j + 1]), _mm256_srai_epi32(v[j], 16));
            }
        }
        if constexpr (has_min(wt)) {
            for (int c = 0; c < 8; ++c) v[c] = _mm256_load_si256(reinterpret_cast<const __m256i*>(k[c].mn));
            transpose8x32(v);
            for (int j = 0; j < 8; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(mn_pair[j]), v[j]);
        }
    }

    // sumi (and summ) of rows r < R at xb + r * xs (activation blocks), lane = column.
    template <int R>
    [[gnu::always_inline]] void sums(const std::byte* xb, int64_t xs, __m256i* vi, __m256i* vm) const {
        __m256i s1[R];
        for (int r = 0; r < R; ++r) s1[r] = _mm256_setzero_si256();
        for (int g = 0; g < n_groups; ++g) {
            __m256i acc[R];
            for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int q = 0; q < group_quads; ++q) {
                const int quad = g * group_quads + q;
                const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(u[quad]));
#pragma GCC unroll 4
                for (int r = 0; r < R; ++r) {
                    int32_t x4;
                    std::memcpy(&x4, xb + r * xs + 4 + 4 * quad, 4);
                    acc[r] = _mm256_dpbusd_epi32(acc[r], wv, _mm256_set1_epi32(x4));
                }
            }
            const __m256i scv = _mm256_load_si256(reinterpret_cast<const __m256i*>(sc[g]));
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) s1[r] = _mm256_add_epi32(s1[r], _mm256_mullo_epi32(acc[r], scv));
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const std::byte* bs = xb + r * xs + offsetof(act_block256, bsums);
            __m256i bias = _mm256_setzero_si256(), mins = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int j = 0; j < 8; ++j) {
                int32_t pair;
                std::memcpy(&pair, bs + 4 * j, 4);
                const __m256i p = _mm256_set1_epi32(pair);
                if constexpr (ktile_bias(wt) != 0)
                    bias = _mm256_dpwssd_epi32(bias, _mm256_load_si256(reinterpret_cast<const __m256i*>(sc_pair[j])), p);
                if constexpr (has_min(wt))
                    mins = _mm256_dpwssd_epi32(mins, _mm256_load_si256(reinterpret_cast<const __m256i*>(mn_pair[j])), p);
            }
            constexpr int shift = ktile_bias(wt) == 128 ? 7 : 5;
            vi[r] = ktile_bias(wt) != 0 ? _mm256_sub_epi32(s1[r], _mm256_slli_epi32(bias, shift)) : s1[r];
            vm[r] = mins;
        }
    }
};

// dot_tile_fn: out[r * os + c] = dot_ref(wt, w + c * ws, a + r * as, n), c < 8, r < nr
// (1..k_tile_max_rows).
template <dtype wt>
void quant_ktile(const std::byte* w, size_t ws, const std::byte* a, size_t as, int nr, int64_t n, float* out,
                 size_t os) {
    constexpr int64_t bb = static_cast<int64_t>(block_bytes<wt>());
    constexpr int64_t ab = static_cast<int64_t>(sizeof(act_block256));
    const int64_t nb = n / 256;
    if (nb == 0) {   // dot_ref's empty row
        for (int r = 0; r < nr; ++r) _mm256_storeu_ps(out + r * os, _mm256_setzero_ps());
        return;
    }
    if (nr < k_ktile_min_rows) {   // one row: nr <= 16, what quant_rows takes
        float t[k_ktile_min_rows];
        for (int c = 0; c < 8; ++c) {
            quant_rows<wt>(w + c * ws, a, as, nr, n, t);
            for (int r = 0; r < nr; ++r) out[r * os + c] = t[r];
        }
        return;
    }
    const int64_t xs = static_cast<int64_t>(as);
    ktile_block<wt> blk;
    __m256 y[k_tile_max_rows];
    for (int64_t ib = 0; ib < nb; ++ib) {
        blk.load(w + ib * bb, ws);
        const std::byte* xb = a + ib * ab;
        int r = 0;
        auto fold = [&](int r0, int cnt, const __m256i* vi, const __m256i* vm) {
            for (int i = 0; i < cnt; ++i) {
                float dx;
                std::memcpy(&dx, xb + (r0 + i) * xs, 4);
                const __m256 t = term8<wt>(blk.d, blk.m, _mm256_set1_ps(dx), vi[i], vm[i]);
                y[r0 + i] = ib == 0 ? t : _mm256_add_ps(y[r0 + i], t);
            }
        };
        __m256i vi[4], vm[4];
        for (; r + 4 <= nr; r += 4) {
            blk.template sums<4>(xb + r * xs, xs, vi, vm);
            fold(r, 4, vi, vm);
        }
        switch (nr - r) {
        case 3: blk.template sums<3>(xb + r * xs, xs, vi, vm); fold(r, 3, vi, vm); break;
        case 2: blk.template sums<2>(xb + r * xs, xs, vi, vm); fold(r, 2, vi, vm); break;
        case 1: blk.template sums<1>(xb + r * xs, xs, vi, vm); fold(r, 1, vi, vm); break;
        default: break;
        }
    }
    for (int r = 0; r < nr; ++r) _mm256_storeu_ps(out + r * os, y[r]);
}

// This ISA's tiles for the 256-wide formats; nullptr for the others.
dot_tile_fn ktile_for(dtype wt) {
    switch (wt) {
    case dtype::q2_k: return quant_ktile<dtype::q2_k>;
    case dtype::q3_k: return quant_ktile<dtype::q3_k>;
    case dtype::q4_k: return quant_ktile<dtype::q4_k>;
    case dtype::q5_k: return quant_ktile<dtype::q5_k>;
    case dtype::q6_k: return quant_ktile<dtype::q6_k>;
    case dtype::iq4_xs: return quant_ktile<dtype::iq4_xs>;
    case dtype::iq2_xxs: return quant_ktile<dtype::iq2_xxs>;
    case dtype::iq2_xs: return quant_ktile<dtype::iq2_xs>;
    case dtype::iq2_s: return quant_ktile<dtype::iq2_s>;
    case dtype::iq3_xxs: return quant_ktile<dtype::iq3_xxs>;
    case dtype::iq3_s: return quant_ktile<dtype::iq3_s>;
    default: return nullptr;
    }
}

}  // namespace
}  // namespace sluice::kernels
