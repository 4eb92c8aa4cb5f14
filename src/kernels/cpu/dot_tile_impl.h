// The column-tile kernels of dot.h (dot_tile_fn) for the 32-wide formats (Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1, IQ4_NL, MXFP4): 8 weight rows (8 output columns of a matmul) against 1..64
// activation rows, one fp32 lane per column; in the AVX2 build, windows of 2+ rows of the
// unsigned-code formats take tile_block_quads; in the AVX-512 VNNI build, windows of 2+ rows take
// tile_block_vnni (transposed codes, vpdpbusd: bench_dot, one thread, EPYC, GB/s of weights at
// 4 / 16 / 64 rows: Q8_0 4.7 -> 5.9, 1.5 -> 1.8, 0.40 -> 0.52; Q4_1 2.4 -> 2.9, 0.9 -> 1.1,
// 0.22 -> 0.30). Included by dot_avx2.cpp and dot_avx512.cpp right
// after dot_simd_impl.h, whose helpers (nibbles32, bits_to_bytes, dot32_u, reduce8, hsum8,
// f16_at, block_bytes) it uses, inside the same anonymous namespace and target.
//
// The 256-wide formats' tiles are dot_ktile_impl.h's (AVX-512 VNNI only, for windows of
// several rows). A one-row K-quant tile that decoded each block in registers ran at 2.5-4.6 GB/s
// against dot_rows' 8.1-8.6 GB/s (one thread, AMD EPYC, AVX2): their fold is one add per 256
// weights, not the bottleneck it is for 32-wide blocks.
//
// Why columns in lanes: dot_ref folds one term per 32-element block, y = ((t0 + t1) + t2) + ...,
// a chain of dependent scalar adds in the one-column kernel (one add per 32 weights, ~20% of a
// decode step's instructions with the hadds that feed it). With 8 columns in 8 lanes the same
// per-column fold is one vector add per block for 8 columns, the term's multiplies are one
// vector op for 8 columns, and what depends on the activation block alone (its dx, its sum)
// is loaded or computed once for the 8 columns instead of once per column.
//
// Exactness (E3): lane c computes, for every block in order, dot_ref's integer sums and its
// term A = (d_c * dx) * float(sumi_c), then + (m_c * dx) * float(summ) for Q4_1/Q5_1, each
// operation rounded on its own, and folds y_c = t0, then y_c + t in block order: dot_ref's bits.
// Integer sums are exact in any order. Q4_0 and Q5_0 are multiplied as their unsigned codes
// (nibble, 5 bits) and the offset taken out as an integer: sum((u - 8) x) = sum(u x) - 8 sum(x),
// both sides exact int32 (|.| <= 32 * 31 * 127), so sumi is dot_ref's.
//
// Bounds: unsigned codes <= 31; signed weights are multiplied as |w| (<= 128) by sign(w) * x
// (|x| <= 127, act.h), so a pmaddubsw pair is <= 32,512 (no int16 saturation).

namespace sluice::kernels {
namespace {   // the same (translation-unit-local) namespace as dot_simd_impl.h's

using namespace sluice::quant;

// Codes kept unsigned (multiplied directly) and the integer offset dot_ref subtracts from them.
constexpr bool tile_unsigned(dtype t) {
    return t == dtype::q4_0 || t == dtype::q4_1 || t == dtype::q5_0 || t == dtype::q5_1;
}
constexpr int tile_offset(dtype t) { return t == dtype::q4_0 ? 8 : t == dtype::q5_0 ? 16 : 0; }
// Formats whose term needs sum(x) of the activation block: an offset or a min.
constexpr bool tile_needs_sumx(dtype t) { return tile_offset(t) != 0 || has_min(t); }

// The 32 codes of one block at b: unsigned codes for tile_unsigned formats, else signed weights.
template <dtype wt>
[[gnu::always_inline]] inline __m256i tile_codes(const std::byte* b) {
    if constexpr (wt == dtype::q8_0) {
        return loadu256(b + 2);
    } else if constexpr (wt == dtype::q4_0) {
        return nibbles32(b + 2);
    } else if constexpr (wt == dtype::q4_1) {
        return nibbles32(b + 4);
    } else if constexpr (wt == dtype::q5_0 || wt == dtype::q5_1) {
        constexpr int off = wt == dtype::q5_0 ? 2 : 4;   // qh follows d (and m)
        uint32_t qh;
        std::memcpy(&qh, b + off, 4);
        return _mm256_or_si256(nibbles32(b + off + 4), _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)));
    } else if constexpr (wt == dtype::iq4_nl) {
        return _mm256_shuffle_epi8(table16(k_kvalues_iq4nl), nibbles32(b + 2));
    } else {
        static_assert(wt == dtype::mxfp4);
        return _mm256_shuffle_epi8(table16(k_kvalues_mxfp4), nibbles32(b + 1));
    }
}

// d (and m) of the 8 blocks at b0 + c * ws: each block's first 4 bytes (d, then m for
// Q4_1/Q5_1) by a plain 32-bit load, interleaved into one vector, widened with vcvtph2ps.
// Not vpgatherdd: on AMD Zen it is microcoded, and with it this kernel ran at 7 GB/s for Q8_0
// where dot_rows ran at 9. f16_at's rule for inf/NaN (fp16_to_fp32 keeps a signalling NaN's
// payload, the instruction would quiet it) is kept by redoing a group that holds one in
// scalar code.
[[gnu::always_inline]] inline __m128i load4x32(const std::byte* p, size_t ws) {
    auto at = [&](int c) {
        int32_t v;
        std::memcpy(&v, p + c * ws, 4);
        return _mm_cvtsi32_si128(v);
    };
    return _mm_unpacklo_epi64(_mm_unpacklo_epi32(at(0), at(1)), _mm_unpacklo_epi32(at(2), at(3)));
}

template <dtype wt>
[[gnu::always_inline]] inline void tile_scales(const std::byte* b0, size_t ws, __m256& d, __m256& m) {
    if constexpr (wt == dtype::mxfp4) {
        // e8m0_half_bits for 8 exponents at once: (e - 1) << 23, or 0x00200000 << e for e < 2.
        auto e = [&](int c) { return static_cast<int>(static_cast<uint8_t>(b0[c * ws])); };
        const __m256i ev = _mm256_setr_epi32(e(0), e(1), e(2), e(3), e(4), e(5), e(6), e(7));
        const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(ev, _mm256_set1_epi32(1)), 23);
        const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), ev);
        const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), ev);
        d = _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, small));
        m = _mm256_setzero_ps();
    } else {
        const __m256i g = _mm256_set_m128i(load4x32(b0 + 4 * ws, ws), load4x32(b0, ws));
        const __m256i special = _mm256_set1_epi32(has_min(wt) ? 0x7C007C00 : 0x00007C00);
        const __m256i hit = _mm256_cmpeq_epi16(_mm256_and_si256(g, special), _mm256_set1_epi16(0x7C00));
        if (__builtin_expect(!_mm256_testz_si256(hit, hit), 0)) {
            alignas(32) float ds[8], ms[8] = {};
            for (int c = 0; c < 8; ++c) {
                ds[c] = f16_at(b0 + c * ws);
                if constexpr (has_min(wt)) ms[c] = f16_at(b0 + c * ws + 2);
            }
            d = _mm256_load_ps(ds);
            m = _mm256_load_ps(ms);
            return;
        }
        // Per 128-bit lane: [d0..d3 | m0..m3] as u16, then qwords reordered to [d0..d7 | m0..m7].
        const __m256i p = _mm256_packus_epi32(_mm256_and_si256(g, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(g, 16));
        const __m256i dm = _mm256_permute4x64_epi64(p, 0xD8);
        d = _mm256_cvtph_ps(_mm256_castsi256_si128(dm));
        m = has_min(wt) ? _mm256_cvtph_ps(_mm256_extracti128_si256(dm, 1)) : _mm256_setzero_ps();
    }
}

// The 8x8 transpose of int32 lanes: row r of the result holds lane r of each input row.
[[gnu::always_inline]] inline void transpose8x32(__m256i* v) {
    const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    const __m256i t4 = _mm256_unpacklo_epi32(v[4], v[5]), t5 = _mm256_unpackhi_epi32(v[4], v[5]);
    const __m256i t6 = _mm256_unpacklo_epi32(v[6], v[7]), t7 = _mm256_unpackhi_epi32(v[6], v[7]);
    const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
    const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
    const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
    const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
    v[0] = _mm256_permute2x128_si256(u0, u4, 0x20);
    v[1] = _mm256_permute2x128_si256(u1, u5, 0x20);
    v[2] = _mm256_permute2x128_si256(u2, u6, 0x20);
    v[3] = _mm256_permute2x128_si256(u3, u7, 0x20);
    v[4] = _mm256_permute2x128_si256(u0, u4, 0x31);
    v[5] = _mm256_permute2x128_si256(u1, u5, 0x31);
    v[6] = _mm256_permute2x128_si256(u2, u6, 0x31);
    v[7] = _mm256_permute2x128_si256(u3, u7, 0x31);
}

// One block of 8 columns, decoded once for every activation row of the tile.
template <dtype wt>
struct tile_block {
    static constexpr bool uns = tile_unsigned(wt);
    __m256i q[8];    // codes of column c
    __m256 d, m;     // per column

    // Also prefetches the same block of the next tile's 8 rows (the matrix's next 8 weight
    // rows). A tile reads 8 short rows side by side (a 576-wide Q4_1 row is 6 cache lines), which
    // the hardware prefetcher does not follow as it follows one row after another: without this
    // the one-row tile ran twice dot_rows' speed on cached weights and no faster on a decode step
    // streaming them from RAM. Prefetching past the matrix's end is harmless (never faults).
    [[gnu::always_inline]] void load(const std::byte* b0, size_t ws) {
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
            _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(b0) + (8 + c) * ws), _MM_HINT_T0);
            q[c] = tile_codes<wt>(b0 + c * ws);
        }
        tile_scales<wt>(b0, ws, d, m);
    }
    // Lane c: dot_ref's term of this block of column c against the activation block at xb.
    [[gnu::always_inline]] __m256 term(const std::byte* xb) const {
        const __m256i x = loadu256(xb + 4);
        __m256i s[8];
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c)   // signed: |q| (-128 becomes 128 as unsigned) times sign(q) * x
            s[c] = uns ? dot32_u(q[c], x) : dot32_u(_mm256_sign_epi8(q[c], q[c]), _mm256_sign_epi8(x, q[c]));
        __m256i sumi = reduce8(s);
        float dxf;
        std::memcpy(&dxf, xb, 4);
        const __m256 dx = _mm256_set1_ps(dxf);
        int32_t sx = 0;
        if constexpr (tile_needs_sumx(wt)) sx = hsum8(dot32_u(_mm256_set1_epi8(1), x));
        if constexpr (tile_offset(wt) != 0) sumi = _mm256_sub_epi32(sumi, _mm256_set1_epi32(tile_offset(wt) * sx));
        const __m256 a = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sumi));
        if constexpr (!has_min(wt)) return a;
        return _mm256_add_ps(a, _mm256_mul_ps(_mm256_mul_ps(m, dx), _mm256_set1_ps(static_cast<float>(sx))));
    }
};

// sum(x) of an activation block (its 32 int8 values at xb + 4) in every lane: exact int32 adds
// in any order, reduced in registers (a scalar reduction's extract, moves and conversion were the
// longest chain of a row's term in the VNNI form).
[[gnu::always_inline]] inline __m256i block_sum_all_lanes(const std::byte* xb) {
    __m256i sx = dot32_u(_mm256_set1_epi8(1), loadu256(xb + 4));
    sx = _mm256_add_epi32(sx, _mm256_permute2x128_si256(sx, sx, 1));
    sx = _mm256_add_epi32(sx, _mm256_shuffle_epi32(sx, 0x4E));
    return _mm256_add_epi32(sx, _mm256_shuffle_epi32(sx, 0xB1));
}

#if !SLUICE_DOT_WIDE
// The AVX2 form for windows of several rows of the formats with unsigned 4- and 5-bit codes
// (Q4_0, Q4_1, Q5_0, Q5_1). As in tile_block_vnni, the block's 8 columns are transposed once to
// [quad][column]; a row's integer sums are then one pmaddubsw per quad (the row's 4 values
// broadcast) against the 8 columns' codes at once, added as int16 and widened by one pmaddwd:
// no per-column pmaddwd and no horizontal reduction (tile_block's reduce8), and sum(x) stays in
// registers. Exact: a pmaddubsw lane is at most 2 * 31 * 127 = 7,874 in magnitude, so a chain of
// 4 quads stays within int16 (31,496), and for 4-bit codes (2 * 15 * 127 = 3,810 a quad) the two
// chains' sum does too (30,480). The term and the fold are tile_block's, so the bits are
// dot_ref's. Measured (session 46, the 2-core AMD EPYC VM, AVX2 only): bench_dot, one thread,
// GB/s of Q4_1 weights at 2 / 4 / 8 / 16 / 64 rows, 6.77 / 4.19 / 2.40 / 1.33 / 0.32 with
// tile_block, 7.87 / 5.22 / 3.29 / 1.92 / 0.52 with this (Q4_0, Q5_0, Q5_1 alike); SmolLM2-135M
// Q4_1's verify windows after 256 positions (`sluice bench -d 256 --windows`, two runs each, the
// old and new builds interleaved) 2 rows 9.45 -> 8.15 ms, 8 rows 24.1 -> 19.9, 16 rows 44.4 -> 34.1.
template <dtype wt>
struct tile_block_quads : tile_block<wt> {
    static_assert(tile_unsigned(wt), "unsigned codes (pmaddubsw's unsigned operand)");
    static constexpr int code_max = (wt == dtype::q4_0 || wt == dtype::q4_1) ? 15 : 31;
    static_assert(4 * 2 * code_max * 127 <= 32767, "4 quads of int16 partial sums without overflow");
    static constexpr bool one_widen = 8 * 2 * code_max * 127 <= 32767;   // 4-bit codes: both chains in int16
    static_assert(tile_offset(wt) == 0 || tile_offset(wt) == 8 || tile_offset(wt) == 16, "a power-of-two offset");
    using tile_block<wt>::q;   // after load: [quad k] lane c holds codes 4k..4k+3 of column c
    using tile_block<wt>::d;
    using tile_block<wt>::m;

    [[gnu::always_inline]] void load(const std::byte* b0, size_t ws) {
        tile_block<wt>::load(b0, ws);
        transpose8x32(q);
    }
    [[gnu::always_inline]] __m256 term(const std::byte* xb) const {
        auto quad = [&](int k) {
            int32_t v;
            std::memcpy(&v, xb + 4 + 4 * k, 4);
            return _mm256_maddubs_epi16(q[k], _mm256_set1_epi32(v));
        };
        // Two chains (even and odd quads), so a row's block does not wait on one chain of 8 adds.
        const __m256i even = _mm256_add_epi16(_mm256_add_epi16(quad(0), quad(2)), _mm256_add_epi16(quad(4), quad(6)));
        const __m256i odd = _mm256_add_epi16(_mm256_add_epi16(quad(1), quad(3)), _mm256_add_epi16(quad(5), quad(7)));
        const __m256i ones = _mm256_set1_epi16(1);
        __m256i sumi = one_widen ? _mm256_madd_epi16(_mm256_add_epi16(even, odd), ones)
                                 : _mm256_add_epi32(_mm256_madd_epi16(even, ones), _mm256_madd_epi16(odd, ones));
        float dxf;
        std::memcpy(&dxf, xb, 4);
        const __m256 dx = _mm256_set1_ps(dxf);
        const __m256i sx = block_sum_all_lanes(xb);
        // The offset (8 or 16) times sum(x), as a shift: the same exact int32 as tile_block's.
        if constexpr (tile_offset(wt) != 0)
            sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(sx, tile_offset(wt) == 8 ? 3 : 4));
        const __m256 a = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sumi));
        if constexpr (!has_min(wt)) return a;
        return _mm256_add_ps(a, _mm256_mul_ps(_mm256_mul_ps(m, dx), _mm256_cvtepi32_ps(sx)));
    }
};
// Rows from which the quad form is used: its transpose (~24 shuffles a block) already pays at 2
// rows (bench_dot above).
constexpr int k_tile_quads_min_rows = 2;
#endif

#if SLUICE_DOT_WIDE
// The VNNI form for windows of several rows (AVX-512 VNNI build only). The block's 8 columns are
// transposed once to [quad][column]; then a row's integer sums are 8 vpdpbusd, each with one of
// the row's 4-element quads broadcast, and land in the 8 lanes with no horizontal reduction (the
// form above spends a maddubs, a madd and a share of reduce8's adds per column). vpdpbusd takes
// unsigned weights: signed codes are biased by 128 and the bias taken out exactly with the row's
// sum, sum((q + 128) x) - 128 sum(x), int32 (|.| <= 32 * 255 * 127). The term and the fold are
// tile_block's, so the bits are dot_ref's.
template <dtype wt>
struct tile_block_vnni {
    static constexpr bool uns = tile_unsigned(wt);
    static constexpr int offset = uns ? tile_offset(wt) : 128;   // taken out of the sums times sum(x)
    __m256i t[8];    // [quad k] lane c: codes 4k..4k+3 of column c, unsigned (biased if signed)
    __m256 d, m;     // per column

    [[gnu::always_inline]] void load(const std::byte* b0, size_t ws) {
        const __m256i flip = _mm256_set1_epi8(static_cast<char>(uns ? 0 : 0x80));
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
            // The same block of the next tile's 8 rows (tile_block::load says why).
            _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(b0) + (8 + c) * ws), _MM_HINT_T0);
            t[c] = _mm256_xor_si256(tile_codes<wt>(b0 + c * ws), flip);
        }
        transpose8x32(t);
        tile_scales<wt>(b0, ws, d, m);
    }
    [[gnu::always_inline]] __m256 term(const std::byte* xb) const {
        // Two chains of 4 vpdpbusd, added at the end (integer sums: exact in any order): one
        // chain of 8 made a row's block wait ~8 vpdpbusd latencies, which rows in flight hid
        // only in part (perf on the 2-core VM, windows of 8 rows: most of the kernel's samples
        // sat on the float term that waits for the chain).
        __m256i sum_even = _mm256_setzero_si256(), sum_odd = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int k = 0; k < 8; k += 2) {
            int32_t quad_even, quad_odd;
            std::memcpy(&quad_even, xb + 4 + 4 * k, 4);
            std::memcpy(&quad_odd, xb + 8 + 4 * k, 4);
            sum_even = _mm256_dpbusd_epi32(sum_even, t[k], _mm256_set1_epi32(quad_even));
            sum_odd = _mm256_dpbusd_epi32(sum_odd, t[k + 1], _mm256_set1_epi32(quad_odd));
        }
        __m256i sumi = _mm256_add_epi32(sum_even, sum_odd);
        float dxf;
        std::memcpy(&dxf, xb, 4);
        const __m256 dx = _mm256_set1_ps(dxf);
        // sum(x) of the block in every lane, reduced in registers (exact int32 adds in any order;
        // float(sx) is the scalar conversion's value): the scalar reduction's extract, moves and
        // conversion were the longest chain of a row's term once the products ran in two chains.
        __m256i sx = _mm256_setzero_si256();
        if constexpr (offset != 0 || has_min(wt)) sx = block_sum_all_lanes(xb);
        if constexpr (offset != 0) sumi = _mm256_sub_epi32(sumi, _mm256_mullo_epi32(sx, _mm256_set1_epi32(offset)));
        const __m256 a = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sumi));
        if constexpr (!has_min(wt)) return a;
        return _mm256_add_ps(a, _mm256_mul_ps(_mm256_mul_ps(m, dx), _mm256_cvtepi32_ps(sx)));
    }
};
// Rows from which the VNNI form is used: its transpose costs ~24 shuffles a block, what it saves
// on ~2 rows.
constexpr int k_tile_vnni_min_rows = 2;
#endif

// A window: each block of the 8 columns decoded once (by Block) for all nr rows; row r folds
// into y[r] in block order.
template <class Block>
[[gnu::always_inline]] inline void tile_window(const std::byte* w, size_t ws, int64_t bb, const std::byte* a, size_t as,
                                               int64_t ab, int nr, int64_t nb, float* out, size_t os) {
    __m256 y[k_tile_max_rows];
    Block blk;
    blk.load(w, ws);
    for (int r = 0; r < nr; ++r) y[r] = blk.term(a + r * as);
    for (int64_t ib = 1; ib < nb; ++ib) {
        blk.load(w + ib * bb, ws);
        for (int r = 0; r < nr; ++r) y[r] = _mm256_add_ps(y[r], blk.term(a + r * as + ib * ab));
    }
    for (int r = 0; r < nr; ++r) _mm256_storeu_ps(out + r * os, y[r]);
}

// dot_tile_fn: out[r * os + c] = dot_ref(wt, w + c * ws, a + r * as, n), c < 8, r < nr
// (1..k_tile_max_rows).
template <dtype wt>
void tile_rows(const std::byte* w, size_t ws, const std::byte* a, size_t as, int nr, int64_t n, float* out, size_t os) {
    constexpr int64_t bb = static_cast<int64_t>(block_bytes<wt>());
    constexpr int64_t ab = static_cast<int64_t>(sizeof(act_block32));
    const int64_t nb = n / 32;
    if (nb == 0) {   // dot_ref's empty row
        for (int r = 0; r < nr; ++r) _mm256_storeu_ps(out + r * os, _mm256_setzero_ps());
        return;
    }
    if (nr == 1) {   // the decode step: the fold stays in a register
        tile_block<wt> blk;
        blk.load(w, ws);
        __m256 y = blk.term(a);   // y = t0
        for (int64_t ib = 1; ib < nb; ++ib) {
            blk.load(w + ib * bb, ws);
            y = _mm256_add_ps(y, blk.term(a + ib * ab));
        }
        _mm256_storeu_ps(out, y);
        return;
    }
#if SLUICE_DOT_WIDE
    if (nr >= k_tile_vnni_min_rows) {
        tile_window<tile_block_vnni<wt>>(w, ws, bb, a, as, ab, nr, nb, out, os);
        return;
    }
#else
    if constexpr (tile_unsigned(wt))
        if (nr >= k_tile_quads_min_rows) {
            tile_window<tile_block_quads<wt>>(w, ws, bb, a, as, ab, nr, nb, out, os);
            return;
        }
#endif
    tile_window<tile_block<wt>>(w, ws, bb, a, as, ab, nr, nb, out, os);
}

// This ISA's tile table: nullptr for formats without a tile kernel (matmul then runs dot_rows
// column by column).
dot_tile_fn tile_for(dtype wt) {
    switch (wt) {
    case dtype::q8_0: return tile_rows<dtype::q8_0>;
    case dtype::q4_0: return tile_rows<dtype::q4_0>;
    case dtype::q4_1: return tile_rows<dtype::q4_1>;
    case dtype::q5_0: return tile_rows<dtype::q5_0>;
    case dtype::q5_1: return tile_rows<dtype::q5_1>;
    case dtype::iq4_nl: return tile_rows<dtype::iq4_nl>;
    case dtype::mxfp4: return tile_rows<dtype::mxfp4>;
    default: return nullptr;
    }
}

}  // namespace
}  // namespace sluice::kernels
