// The SIMD dot-product kernels of dot.h, written once and compiled twice: dot_avx2.cpp includes
// this file under `#pragma GCC target("avx2,fma,f16c")` and dot_avx512.cpp under the AVX-512
// target with SLUICE_DOT_WIDE=1 (VNNI: vpdpwssd for 256-wide blocks, vpdpbusd for 32-wide
// ones; one zmm for float rows). Everything here has internal linkage, so the two copies never
// meet at link time and no baseline caller can pick up a wide instruction.
//
// Included only by those two files, after <immintrin.h>, <cmath>, <cstring>, quant/blocks.h,
// quant/act.h, quant/quant.h, quant/iq_tables.h and kernels/cpu/dot.h.
//
// Shape of every quantised kernel: for each weight block in order, decode it once (weights to
// int8 vectors, sub-block scales to int16 per element pair), then for each activation row
// compute the block's exact integer sums and dot_ref's fp32 term, and fold it into out[r].
// Bounds: |w| <= 128, |x| <= 127 (act.h clamps), so a pmaddubsw pair is <= 32,512 (no int16
// saturation); a pair times its scale (|sc| <= 128) summed over two pairs is <= 8.4e6, and a
// 32-bit lane sums at most 8 of those (67e6 < 2^31); dot_ref bounds the block's sumi by 1.4e8.
#ifndef SLUICE_DOT_WIDE
#error "dot_simd_impl.h: define SLUICE_DOT_WIDE (0 or 1) before including"
#endif

namespace sluice::kernels {
namespace {

using namespace sluice::quant;

// f16 scale widened exactly (vcvtph2ps); inf/NaN go through fp16_to_fp32, which keeps a
// signalling NaN's payload bits where the instruction would set the quiet bit.
float f16_at(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    if ((h & 0x7C00u) == 0x7C00u) return fp16_to_fp32(h);
    return _cvtsh_ss(h);
}

int32_t hsum8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

__m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// 16 packed bytes -> 32 nibbles: low nibbles are elements 0-15, high nibbles 16-31 (GGML order).
// Both 128-bit lanes get the 16 bytes by a broadcast load (no shuffle-port uop, unlike an
// insert: the column tiles decode 8 blocks per step and were bound by that port), the high lane
// is shifted right by 4 bits, and the mask keeps each byte's nibble.
__m256i nibbles32(const std::byte* qs) {
    const __m256i v = _mm256_broadcastsi128_si256(loadu128(qs));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0F));
}

// Byte i = 0xFF where bit i of bits is set.
__m256i bits_to_bytes(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bm = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int32_t>(bits)), shuf);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bm), bm);
}

__m256i table16(const int8_t* t) { return _mm256_broadcastsi128_si256(loadu128(t)); }

// sum over 32 lanes of aw[i] * x[i] (aw unsigned 0..255 with aw * x pairs inside int16; see top).
__m256i dot32_u(__m256i aw, __m256i x) {
#if SLUICE_DOT_WIDE
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), aw, x);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, x), _mm256_set1_epi16(1));
#endif
}

// ---------------------------------------------------------------------------------------------
// 32-wide formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4): one 32-byte vector per block.

constexpr bool is_legacy(dtype t) {
    return t == dtype::q8_0 || t == dtype::q4_0 || t == dtype::q4_1 || t == dtype::q5_0 ||
           t == dtype::q5_1 || t == dtype::iq4_nl || t == dtype::mxfp4;
}
// Formats whose decoded weights are unsigned: multiplied directly, no sign transfer.
constexpr bool unsigned_weights(dtype t) {
    return t == dtype::q4_1 || t == dtype::q5_1 || t == dtype::q4_k || t == dtype::q5_k || t == dtype::q2_k;
}
// Formats whose kblock holds unsigned weights: the unsigned ones, and Q6_K stored biased by 32.
constexpr bool decoded_unsigned(dtype t) { return unsigned_weights(t) || t == dtype::q6_k; }
// Formats whose term has a min: Q4_1/Q5_1 add (m * dx) * summ, K-quants subtract (dmin * dx) * summ.
constexpr bool has_min(dtype t) {
    return t == dtype::q4_1 || t == dtype::q5_1 || t == dtype::q4_k || t == dtype::q5_k || t == dtype::q2_k;
}

template <dtype wt>
constexpr size_t block_bytes() {
    switch (wt) {
    case dtype::q8_0: return sizeof(block_q8_0);
    case dtype::q4_0: return sizeof(block_q4_0);
    case dtype::q4_1: return sizeof(block_q4_1);
    case dtype::q5_0: return sizeof(block_q5_0);
    case dtype::q5_1: return sizeof(block_q5_1);
    case dtype::iq4_nl: return sizeof(block_iq4_nl);
    case dtype::mxfp4: return sizeof(block_mxfp4);
    case dtype::q2_k: return sizeof(block_q2_k);
    case dtype::q3_k: return sizeof(block_q3_k);
    case dtype::q4_k: return sizeof(block_q4_k);
    case dtype::q5_k: return sizeof(block_q5_k);
    case dtype::q6_k: return sizeof(block_q6_k);
    case dtype::iq4_xs: return sizeof(block_iq4_xs);
    case dtype::iq2_xxs: return sizeof(block_iq2_xxs);
    case dtype::iq2_xs: return sizeof(block_iq2_xs);
    case dtype::iq2_s: return sizeof(block_iq2_s);
    case dtype::iq3_xxs: return sizeof(block_iq3_xxs);
    case dtype::iq3_s: return sizeof(block_iq3_s);
    default: return 0;
    }
}

// Software prefetch of the weight bytes k_prefetch_bytes ahead of a block about to be decoded
// (one prefetch per 64-byte line of the block; lines prefetched twice cost a load slot each). A
// decode step streams every weight row once from RAM, and the one-row kernels decode a block in
// fewer cycles than the hardware prefetcher, following the row, brings it in. Measured
// 2026-12-02 on the 2-core AMD EPYC (AVX-512), `sluice bench` tg32 on the 8-layer
// Qwen3-30B-A3B-shaped Q4_K_M file, 2 threads, four rounds interleaved with the binary without
// it: 57.6 / 50.1 / 52.0 / 49.8 tok/s against 32.1 / 40.1 / 37.9 / 37.8 (llama.cpp in the same
// rounds: 52.2 / 34.1 / 52.6 / 53.8); distances of 2-16 KiB were level within the machine's
// noise. Prefetching past a matrix's end is harmless (never faults).
constexpr size_t k_prefetch_bytes = 4096;
template <dtype wt>
[[gnu::always_inline]] inline void prefetch_ahead(const std::byte* block) {
    // The address is formed as an integer: a pointer that far past an allocation would be UB.
    const uintptr_t at = reinterpret_cast<uintptr_t>(block) + k_prefetch_bytes;
    for (size_t l = 0; l < block_bytes<wt>(); l += 64) _mm_prefetch(reinterpret_cast<const char*>(at + l), _MM_HINT_T0);
}

// Decodes one 32-wide block at b: returns its 32 integer weights, sets d (and m for Q4_1/Q5_1).
template <dtype wt>
[[gnu::always_inline]] inline __m256i decode32(const std::byte* b, float& d, float& m) {
    if constexpr (wt == dtype::q8_0) {
        d = f16_at(b);
        return loadu256(b + 2);
    } else if constexpr (wt == dtype::q4_0) {
        d = f16_at(b);
        return _mm256_sub_epi8(nibbles32(b + 2), _mm256_set1_epi8(8));
    } else if constexpr (wt == dtype::q4_1) {
        d = f16_at(b);
        m = f16_at(b + 2);
        return nibbles32(b + 4);
    } else if constexpr (wt == dtype::q5_0 || wt == dtype::q5_1) {
        constexpr int off = wt == dtype::q5_0 ? 2 : 4;   // qh follows d (and m)
        d = f16_at(b);
        if constexpr (wt == dtype::q5_1) m = f16_at(b + 2);
        uint32_t qh;
        std::memcpy(&qh, b + off, 4);
        const __m256i q = _mm256_or_si256(nibbles32(b + off + 4),
                                          _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)));
        return wt == dtype::q5_0 ? _mm256_sub_epi8(q, _mm256_set1_epi8(16)) : q;
    } else if constexpr (wt == dtype::iq4_nl) {
        d = f16_at(b);
        return _mm256_shuffle_epi8(table16(k_kvalues_iq4nl), nibbles32(b + 2));
    } else {
        static_assert(wt == dtype::mxfp4);
        d = e8m0_to_fp32_half(static_cast<uint8_t>(b[0]));
        return _mm256_shuffle_epi8(table16(k_kvalues_mxfp4), nibbles32(b + 1));
    }
}

// One 32-wide block decoded for all rows, and its per-row integer sums as 8 int32 partials.
template <dtype wt>
struct legacy_ops {
    static constexpr bool uns = unsigned_weights(wt);
    static constexpr size_t act_bytes = sizeof(act_block32);
    __m256i q, aw;          // weights, |weights| (32 x int8)
    float d = 0.0f, m = 0.0f;

    [[gnu::always_inline]] void decode(const std::byte* w, int64_t ib) {
        prefetch_ahead<wt>(w + ib * static_cast<int64_t>(block_bytes<wt>()));
        q = decode32<wt>(w + ib * static_cast<int64_t>(block_bytes<wt>()), d, m);
        aw = uns ? q : _mm256_sign_epi8(q, q);   // -128 becomes 128 as unsigned
    }
    [[gnu::always_inline]] __m256i sumi(const std::byte* ab) const {
        const __m256i x = loadu256(ab + 4);
        return uns ? dot32_u(aw, x) : dot32_u(aw, _mm256_sign_epi8(x, q));
    }
    [[gnu::always_inline]] __m256i summ(const std::byte* ab) const { return dot32_u(_mm256_set1_epi8(1), loadu256(ab + 4)); }
    // Rows r < R at ab + r * stride: vi[r] = sumi, vm[r] = summ (zero without a min).
    template <int R>
    [[gnu::always_inline]] void sums(const std::byte* ab, int64_t stride, __m256i* vi, __m256i* vm) const {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            vi[r] = sumi(ab + r * stride);
            vm[r] = has_min(wt) ? summ(ab + r * stride) : _mm256_setzero_si256();
        }
    }
};

// ---------------------------------------------------------------------------------------------
// 256-wide formats (Q2_K..Q6_K, IQ4_XS, and the IQ2/IQ3 grid formats): decoded into a kblock
// (dot_kdecode_impl.h), then one integer pass per row.
#include "kernels/cpu/dot_kdecode_impl.h"

// sumi partials of one row (8 int32 lanes that add up to sum_j sc_j * dot(q_j, x_j)).
// 256-bit loads even with AVX-512: the kblock was just written 32 bytes at a time, and a 64-byte
// load of two 32-byte stores cannot be forwarded from the store buffer (it waits for them to
// reach L1). Measured on this Xeon (bench_dot, one thread): Q4_K one row at a time went from
// 4.0 GB/s with 512-bit loads to 5-7.6 GB/s with these; 4 and 16 rows did not get slower.
// AVX-512 VNNI adds the scaled pairs with vpdpwssd; AVX2 with vpmaddwd + vpaddd.
template <bool uns>
[[gnu::always_inline]] inline __m256i kblock_sumi(const kblock& k, const int8_t* x) {
    // Two accumulators (even and odd chunks; integer sums, exact in any order): with one, the 8
    // vpdpwssd of a block were one dependent chain.
    __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
        const __m256i xv = loadu256(x + 32 * c);
        const __m256i qv = _mm256_load_si256(reinterpret_cast<const __m256i*>(k.q + 32 * c));
        const __m256i p = uns ? _mm256_maddubs_epi16(qv, xv)
                              : _mm256_maddubs_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(k.aw + 32 * c)),
                                                     _mm256_sign_epi8(xv, qv));
        const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(k.scp + 16 * c));
#if SLUICE_DOT_WIDE
        acc[c % 2] = _mm256_dpwssd_epi32(acc[c % 2], p, sc);
#else
        acc[c % 2] = _mm256_add_epi32(acc[c % 2], _mm256_madd_epi16(p, sc));
#endif
    }
    return _mm256_add_epi32(acc[0], acc[1]);
}

// Formats whose one-row dot skips the kblock (fused_row_sums).
template <dtype wt>
constexpr bool k_fused_row = wt == dtype::q4_k || wt == dtype::q6_k;

// acc + the int16 pairs p times the int16 scales sc, pairwise into 8 int32 lanes.
[[gnu::always_inline]] inline __m256i add_scaled(__m256i acc, __m256i p, __m256i sc) {
#if SLUICE_DOT_WIDE
    return _mm256_dpwssd_epi32(acc, p, sc);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, sc));
#endif
}

// One activation row against one Q4_K or Q6_K block without the kblock: the codes are split in
// registers and multiplied at once, where decode256 + kblock_sumi store 256 bytes and the
// expanded scales and load them back. The integer sums are the same (exact in any order), so
// the terms and the fold are dot_ref's. Used for one row (decode). Measured 2026-12-01 on a
// 2-core AMD EPYC with AVX-512: bench_dot one row, one thread, AVX-512, Q4_K 17.1 GB/s (19.0 via
// the kblock: within its noise), Q6_K 26.9 (24.2); `sluice bench` tg128 on the 8-layer
// Qwen3-30B-A3B-shaped Q4_K_M file, 2 threads, five runs each: 41.8 tok/s mean (38.9-46.3) against
// 39.7 (39.1-40.4) via the kblock. Returns the sumi partials in vi, the summ partials in vm
// (zero for Q6_K, whose bias is folded into vi as in k_ops::sumi), d and dmin (Q6_K: 0).
template <dtype wt>
[[gnu::always_inline]] inline void fused_row_sums(const std::byte* b, const std::byte* ab, __m256i& vi, __m256i& vm,
                                                  float& d, float& m) {
    prefetch_ahead<wt>(b);
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const std::byte* x = ab + 4;
    const __m256i bsums = loadu256(ab + offsetof(act_block256, bsums));
    __m256i acc = _mm256_setzero_si256();
    if constexpr (wt == dtype::q4_k) {
        // d, dmin, scales[12], qs[128]; sub-blocks 2h and 2h + 1: the low and high nibbles of qs[32h..].
        d = f16_at(b);
        m = f16_at(b + 2);
        const __m128i sm = k4_scales_mins(b + 4);
        const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));   // int16 scales 0-7, both lanes
#pragma GCC unroll 4
        for (int h = 0; h < 4; ++h) {
            const __m256i v = loadu256(b + 16 + 32 * h);
            const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            const __m256i pl = _mm256_maddubs_epi16(lo, loadu256(x + 64 * h));
            const __m256i ph = _mm256_maddubs_epi16(hi, loadu256(x + 64 * h + 32));
            acc = add_scaled(acc, pl, _mm256_shuffle_epi8(sc, _mm256_set1_epi16(static_cast<int16_t>((4 * h + 1) << 8 | 4 * h))));
            acc = add_scaled(acc, ph, _mm256_shuffle_epi8(sc, _mm256_set1_epi16(static_cast<int16_t>((4 * h + 3) << 8 | (4 * h + 2)))));
        }
        // summ: the mins are per 32 elements, the bsums per 16: each min taken twice.
        const __m128i mn8 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        const __m256i mn = _mm256_set_m128i(_mm_unpackhi_epi16(mn8, mn8), _mm_unpacklo_epi16(mn8, mn8));
        vi = acc;
        vm = _mm256_madd_epi16(bsums, mn);
    } else {
        static_assert(wt == dtype::q6_k);
        // ql[128], qh[64], scales[16] (int8), d; codes biased to q + 32 in [0, 63] as in decode256,
        // the bias taken out as 32 * sum_j sc_j * bsum_j (|.| < 2^25).
        d = f16_at(b + 208);
        m = 0.0f;
        const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(b + 192));
        const __m256i sc_lo = _mm256_permute2x128_si256(sc16, sc16, 0x00), sc_hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
            __m256i q[4];
            q6k_codes(b, h, q);
#pragma GCC unroll 4
            for (int c = 0; c < 4; ++c) {
                const int ch = 4 * h + c;   // chunk: elements 32ch..32ch+31, scales 2ch (low half), 2ch + 1
                const __m256i p = _mm256_maddubs_epi16(q[c], loadu256(x + 32 * ch));
                const int i = 4 * (ch % 4);
                const __m256i ctrl = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>((i + 3) << 8 | (i + 2))),
                                                      _mm_set1_epi16(static_cast<int16_t>((i + 1) << 8 | i)));
                acc = add_scaled(acc, p, _mm256_shuffle_epi8(ch < 4 ? sc_lo : sc_hi, ctrl));
            }
        }
        vi = _mm256_sub_epi32(acc, _mm256_slli_epi32(_mm256_madd_epi16(bsums, sc16), 5));
        vm = _mm256_setzero_si256();
    }
}

template <dtype wt>
struct k_ops {
    static constexpr size_t act_bytes = sizeof(act_block256);
    kblock k;
    float d = 0.0f, m = 0.0f;

    [[gnu::always_inline]] void decode(const std::byte* w, int64_t ib) {
        prefetch_ahead<wt>(w + ib * static_cast<int64_t>(block_bytes<wt>()));
        decode256<wt>(w + ib * static_cast<int64_t>(block_bytes<wt>()), k);
        d = k.d;
        m = k.dmin;
    }
    [[gnu::always_inline]] __m256i sumi(const std::byte* ab) const {
        const __m256i v = kblock_sumi<decoded_unsigned(wt)>(k, reinterpret_cast<const int8_t*>(ab + 4));
        if constexpr (wt != dtype::q6_k) return v;
        // Q6_K's bias: sum_j sc_j * dot(q_j + 32, x_j) - 32 * sum_j sc_j * bsum_j (|.| < 2^25).
        const __m256i bs = loadu256(ab + offsetof(act_block256, bsums));
        const __m256i sb = _mm256_madd_epi16(bs, _mm256_load_si256(reinterpret_cast<const __m256i*>(k.mn)));
        return _mm256_sub_epi32(v, _mm256_slli_epi32(sb, 5));
    }
    // summ partials: sum over 16-groups of min * bsum (K-quant mins are per 32: stored twice).
    [[gnu::always_inline]] __m256i summ(const std::byte* ab) const {
        const __m256i bs = loadu256(ab + offsetof(act_block256, bsums));
        return _mm256_madd_epi16(bs, _mm256_load_si256(reinterpret_cast<const __m256i*>(k.mn)));
    }
    // sumi and summ of rows r < R at ab + r * stride, chunk by chunk: each chunk's weights and
    // scales are loaded once for the R rows (one activation load per row and chunk instead of
    // three loads), the register blocking that makes a window's extra rows cheap.
    template <int R>
    [[gnu::always_inline]] void sums(const std::byte* ab, int64_t stride, __m256i* vi, __m256i* vm) const {
        constexpr bool uns = decoded_unsigned(wt);
        // Two chains per row (even and odd chunks): integer sums, exact in any order.
        __m256i acc[R], acc2[R];
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) acc[r] = acc2[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
            const __m256i qv = _mm256_load_si256(reinterpret_cast<const __m256i*>(k.q + 32 * c));
            const __m256i av = uns ? qv : _mm256_load_si256(reinterpret_cast<const __m256i*>(k.aw + 32 * c));
            const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(k.scp + 16 * c));
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const __m256i xv = loadu256(ab + r * stride + 4 + 32 * c);
                const __m256i p = _mm256_maddubs_epi16(av, uns ? xv : _mm256_sign_epi8(xv, qv));
#if SLUICE_DOT_WIDE
                if (c % 2) acc2[r] = _mm256_dpwssd_epi32(acc2[r], p, sc);
                else acc[r] = _mm256_dpwssd_epi32(acc[r], p, sc);
#else
                if (c % 2) acc2[r] = _mm256_add_epi32(acc2[r], _mm256_madd_epi16(p, sc));
                else acc[r] = _mm256_add_epi32(acc[r], _mm256_madd_epi16(p, sc));
#endif
            }
        }
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) acc[r] = _mm256_add_epi32(acc[r], acc2[r]);
        const __m256i mn = _mm256_load_si256(reinterpret_cast<const __m256i*>(k.mn));
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            vi[r] = acc[r];
            vm[r] = _mm256_setzero_si256();
            if constexpr (has_min(wt) || wt == dtype::q6_k) {
                const __m256i sb = _mm256_madd_epi16(loadu256(ab + r * stride + offsetof(act_block256, bsums)), mn);
                // Q6_K's bias: sum_j sc_j * dot(q_j + 32, x_j) - 32 * sum_j sc_j * bsum_j (|.| < 2^25).
                if constexpr (wt == dtype::q6_k) vi[r] = _mm256_sub_epi32(acc[r], _mm256_slli_epi32(sb, 5));
                else vm[r] = sb;
            }
        }
    }
};

// sums of m rows (m >= 1) at ab + r * stride into vi[r], vm[r]: batches of 4, then the rest.
template <class ops>
[[gnu::always_inline]] inline void sums_n(const ops& o, const std::byte* ab, int64_t stride, int m, __m256i* vi, __m256i* vm) {
    int r = 0;
    for (; r + 4 <= m; r += 4) o.template sums<4>(ab + r * stride, stride, vi + r, vm + r);
    switch (m - r) {
    case 3: o.template sums<3>(ab + r * stride, stride, vi + r, vm + r); break;
    case 2: o.template sums<2>(ab + r * stride, stride, vi + r, vm + r); break;
    case 1: o.template sums<1>(ab + r * stride, stride, vi + r, vm + r); break;
    default: break;
    }
}

// Eight 8-lane partial vectors -> one vector whose lane r is the total of v[r].
__m256i reduce8(const __m256i* v) {
    const __m256i s01 = _mm256_hadd_epi32(v[0], v[1]), s23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i s45 = _mm256_hadd_epi32(v[4], v[5]), s67 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i a = _mm256_hadd_epi32(s01, s23), b = _mm256_hadd_epi32(s45, s67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

// dot_ref's term for one block: A = (d * dx) * float(sumi), then + or - (m * dx) * float(summ).
template <dtype wt>
float term1(float d, float m, float dx, int32_t sumi, int32_t summ) {
    const float a = (d * dx) * static_cast<float>(sumi);
    if constexpr (!has_min(wt)) return a;
    else if constexpr (is_legacy(wt)) return a + (m * dx) * static_cast<float>(summ);
    else return a - (m * dx) * static_cast<float>(summ);
}
// The same term for 8 blocks (or 8 rows), one per lane: A = (d * dx) * float(sumi), then + or -
// (m * dx) * float(summ), each operation rounded on its own.
template <dtype wt>
__m256 term8(__m256 d, __m256 m, __m256 dx, __m256i sumi, __m256i summ) {
    const __m256 a = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sumi));
    if constexpr (!has_min(wt)) return a;
    const __m256 b = _mm256_mul_ps(_mm256_mul_ps(m, dx), _mm256_cvtepi32_ps(summ));
    if constexpr (is_legacy(wt)) return _mm256_add_ps(a, b);
    else return _mm256_sub_ps(a, b);
}

// The dx of the activation blocks at b, b + st, ..., b + 7 st. Plain loads, not vgatherdps: on
// AMD Zen it is microcoded.
[[gnu::always_inline]] inline __m256 rows_dx(const std::byte* b, int64_t st) {
    auto at = [&](int r) {
        float v;
        std::memcpy(&v, b + r * st, 4);
        return v;
    };
    return _mm256_setr_ps(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7));
}

// Blocks go 8 at a time (a group), each decoded once into o[0..7] for every row; a row's y folds
// dot_ref's terms in block order, one fp32 lane per term, whichever of two layouts computes it:
//   - rows in whole groups of 8 (windows of 8..16): one lane per row. For each block, the 8
//     rows' integer partials reduce together (reduce8), the 8 terms come out of one term8, and
//     lane r folds y_r = y_r + t_r;
//   - the other rows (0..7 of them; all of a 1..7-row window): one lane per block. For each row,
//     the 8 blocks' partials reduce together, term8 gives the row's 8 terms, folded in order in
//     scalar code.
// Either way a row costs its integer sums and 1/8 of a reduce8 and a term8 per block: a window
// of T rows costs one decode plus T of these, with no lanes spent on rows that are not there.
// act_stride < 2^27 (dot_dispatch.cpp checks) so the rows' dx gather with int32 offsets.
template <dtype wt, class ops, bool full>
[[gnu::always_inline]] inline void block_group(ops& o, const std::byte* w, const std::byte* a, size_t stride, int nr,
                                               int64_t ib, int kb_rt, __m256i blk_ix, __m256* yv,
                                               float* ys) {
    constexpr int64_t ab_bytes = static_cast<int64_t>(ops::act_bytes);
    const int64_t st = static_cast<int64_t>(stride);
    const int kb = full ? 8 : kb_rt;   // blocks in this group
    const int nv = nr / 8;              // row groups of 8 (lane = row)
    const int m = nr - 8 * nv;          // the other rows (lane = block)
    const std::byte* rows0 = a + 8 * nv * st + ib * ab_bytes;
    // The other rows' integer sums, [block][row], for the per-row reductions after the loop.
    // One decoded block (o) is reused: measured on this Xeon, decoding 8 K-quant blocks into 8
    // kblocks first made one row 40% slower than decoding each into the same (hot) kblock.
    __m256i sb_i[8][7], sb_m[8][7];
    alignas(32) float ds[8] = {}, ms[8] = {};
    // Not unrolled: unrolled 8 times (each block's decode and sums for every row group
    // inlined) the function outgrew the CPU's decoded-instruction cache, and windows of 8-16
    // rows ran at half the 4-row rate per row. bench_dot (one thread, 1 MiB, n = 4096, the 2-core
    // AMD EPYC) at 16 rows, GB/s: IQ4_XS 1.26 -> 2.05, Q4_K 2.03 -> 2.6; the sluice binary lost
    // 2.5 MB of code.
#pragma GCC unroll 1
    for (int k = 0; k < kb; ++k) {
        o.decode(w, ib + k);
        ds[k] = o.d;
        ms[k] = o.m;
        for (int g = 0; g < nv; ++g) {
            const std::byte* bk = a + 8 * g * st + (ib + k) * ab_bytes;
            __m256i vi[8], vm[8];
            o.template sums<4>(bk, st, vi, vm);
            o.template sums<4>(bk + 4 * st, st, vi + 4, vm + 4);
            const __m256 dx = rows_dx(bk, st);
            const __m256i summ = has_min(wt) ? reduce8(vm) : _mm256_setzero_si256();
            const __m256 t = term8<wt>(_mm256_set1_ps(o.d), _mm256_set1_ps(o.m), dx, reduce8(vi), summ);
            yv[g] = ib + k == 0 ? t : _mm256_add_ps(yv[g], t);
        }
        if (m > 0) sums_n(o, rows0 + k * ab_bytes, st, m, sb_i[k], sb_m[k]);
    }
    if (m == 0) return;
    if (!full)
        for (int k = kb; k < 8; ++k)
            for (int r = 0; r < m; ++r) sb_i[k][r] = sb_m[k][r] = _mm256_setzero_si256();
    // Lanes past kb (a row's last, partial group) hold zero terms: never folded.
    const __m256 dv = _mm256_load_ps(ds), mv = _mm256_load_ps(ms);
    const __m256 live = full ? _mm256_castsi256_ps(_mm256_set1_epi32(-1))
                             : _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(kb), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
    for (int i = 0; i < m; ++i) {
        const std::byte* base = rows0 + i * st;
        __m256i vi[8], vm[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) {
            vi[k] = sb_i[k][i];
            vm[k] = sb_m[k][i];
        }
        const __m256 dx = full ? _mm256_i32gather_ps(reinterpret_cast<const float*>(base), blk_ix, 1)
                               : _mm256_mask_i32gather_ps(_mm256_setzero_ps(), reinterpret_cast<const float*>(base), blk_ix, live, 1);
        const __m256i summ = has_min(wt) ? reduce8(vm) : _mm256_setzero_si256();
        alignas(32) float ts[8];
        _mm256_store_ps(ts, term8<wt>(dv, mv, dx, reduce8(vi), summ));
        float y = ys[i];
        for (int k = 0; k < kb; ++k) y = ib + k == 0 ? ts[k] : y + ts[k];   // y = t0, then y + t in block order
        ys[i] = y;
    }
}

template <dtype wt, class ops>
void quant_rows_with(const std::byte* w, const std::byte* a, size_t stride, int nr, int64_t n, float* out) {
    constexpr int64_t qk = is_legacy(wt) ? 32 : 256;
    constexpr int32_t ab_bytes = static_cast<int32_t>(ops::act_bytes);
    const int64_t nb = n / qk;
    if (nb == 0) {
        for (int r = 0; r < nr; ++r) out[r] = 0.0f;   // dot_ref's empty row
        return;
    }
    ops o;
    if (nr == 1) {   // one row: blocks decoded in place, 8 terms per term8 (measured fastest for decode)
        float y = 0.0f;
        int64_t ib = 0;
        for (; ib + 8 <= nb; ib += 8) {
            __m256i vi[8], vm[8];
            alignas(32) float ds[8], ms[8], dxs[8], ts[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; ++k) {
                const std::byte* ab = a + (ib + k) * ab_bytes;
                std::memcpy(&dxs[k], ab, 4);
                if constexpr (k_fused_row<wt>) {
                    fused_row_sums<wt>(w + (ib + k) * static_cast<int64_t>(block_bytes<wt>()), ab, vi[k], vm[k], ds[k], ms[k]);
                } else {
                    o.decode(w, ib + k);
                    ds[k] = o.d;
                    ms[k] = o.m;
                    vi[k] = o.sumi(ab);
                    vm[k] = has_min(wt) ? o.summ(ab) : _mm256_setzero_si256();
                }
            }
            const __m256i summ = has_min(wt) ? reduce8(vm) : _mm256_setzero_si256();
            _mm256_store_ps(ts, term8<wt>(_mm256_load_ps(ds), _mm256_load_ps(ms), _mm256_load_ps(dxs), reduce8(vi), summ));
            for (int k = 0; k < 8; ++k) y = ib + k == 0 ? ts[k] : y + ts[k];   // y = t0, then y + t in block order
        }
        for (; ib < nb; ++ib) {
            const std::byte* ab = a + ib * ab_bytes;
            float dx, d, m;
            std::memcpy(&dx, ab, 4);
            __m256i vi, vm;
            if constexpr (k_fused_row<wt>) {
                fused_row_sums<wt>(w + ib * static_cast<int64_t>(block_bytes<wt>()), ab, vi, vm, d, m);
            } else {
                o.decode(w, ib);
                d = o.d;
                m = o.m;
                vi = o.sumi(ab);
                vm = has_min(wt) ? o.summ(ab) : _mm256_setzero_si256();
            }
            const int32_t sumi = hsum8(vi);
            const int32_t summ = has_min(wt) ? hsum8(vm) : 0;
            const float t = term1<wt>(d, m, dx, sumi, summ);
            y = ib == 0 ? t : y + t;
        }
        out[0] = y;
        return;
    }
    const __m256i blk_ix = _mm256_setr_epi32(0, ab_bytes, 2 * ab_bytes, 3 * ab_bytes, 4 * ab_bytes, 5 * ab_bytes,
                                             6 * ab_bytes, 7 * ab_bytes);
    __m256 yv[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    float ys[8] = {};
    int64_t ib = 0;
    for (; ib + 8 <= nb; ib += 8) block_group<wt, ops, true>(o, w, a, stride, nr, ib, 8, blk_ix, yv, ys);
    if (ib < nb) block_group<wt, ops, false>(o, w, a, stride, nr, ib, static_cast<int>(nb - ib), blk_ix, yv, ys);
    const int nv = nr / 8;
    for (int g = 0; g < nv; ++g) _mm256_storeu_ps(out + 8 * g, yv[g]);
    for (int r = 8 * nv; r < nr; ++r) out[r] = ys[r - 8 * nv];
}

// ---------------------------------------------------------------------------------------------
// Float weights: dot_f32_ref's 16 lanes, lane l taking elements i % 16 == l by fmaf in index
// order, then the pairwise fold. Rows go in groups of up to 4 so each weight vector is widened
// once per group; the tail (n % 16) runs the scalar rule on the spilled lanes.

template <dtype wt>
float widen1(const std::byte* w, int64_t i) {
    if constexpr (wt == dtype::f32) {
        float f;
        std::memcpy(&f, w + 4 * i, 4);
        return f;
    } else {
        uint16_t h;
        std::memcpy(&h, w + 2 * i, 2);
        return wt == dtype::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
    }
}

float fold16(float* acc, const std::byte* w_tail, const float* x_tail, int rem, float (*widen)(const std::byte*, int64_t)) {
    for (int l = 0; l < rem; ++l) acc[l] = std::fmaf(widen(w_tail, l), x_tail[l], acc[l]);
    for (int s = 8; s >= 1; s /= 2)
        for (int l = 0; l < s; ++l) acc[l] += acc[l + s];
    return acc[0];
}

#if SLUICE_DOT_WIDE
template <dtype wt>
__m512 widen16(const std::byte* w, int64_t i) {
    if constexpr (wt == dtype::f32) return _mm512_loadu_ps(w + 4 * i);
    else if constexpr (wt == dtype::f16) return _mm512_cvtph_ps(loadu256(w + 2 * i));
    else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(loadu256(w + 2 * i)), 16));
}

template <dtype wt, int R>
void float_group(const std::byte* w, const std::byte* a, size_t stride, int64_t n, float* out) {
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 wv = widen16<wt>(w, i);
        for (int r = 0; r < R; ++r)
            acc[r] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(reinterpret_cast<const float*>(a + r * stride) + i), acc[r]);
    }
    const std::byte* wt_tail = w + (wt == dtype::f32 ? 4 : 2) * i;
    for (int r = 0; r < R; ++r) {
        alignas(64) float l[16];
        _mm512_store_ps(l, acc[r]);
        out[r] = fold16(l, wt_tail, reinterpret_cast<const float*>(a + r * stride) + i, static_cast<int>(n - i), widen1<wt>);
    }
}
#else
template <dtype wt>
void widen16(const std::byte* w, int64_t i, __m256& lo, __m256& hi) {
    if constexpr (wt == dtype::f32) {
        lo = _mm256_loadu_ps(reinterpret_cast<const float*>(w + 4 * i));
        hi = _mm256_loadu_ps(reinterpret_cast<const float*>(w + 4 * i + 32));
    } else if constexpr (wt == dtype::f16) {
        lo = _mm256_cvtph_ps(loadu128(w + 2 * i));
        hi = _mm256_cvtph_ps(loadu128(w + 2 * i + 16));
    } else {
        lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(w + 2 * i)), 16));
        hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(w + 2 * i + 16)), 16));
    }
}

template <dtype wt, int R>
void float_group(const std::byte* w, const std::byte* a, size_t stride, int64_t n, float* out) {
    __m256 lo[R], hi[R];   // lanes 0-7 and 8-15 of each row
    for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 wl, wh;
        widen16<wt>(w, i, wl, wh);
        for (int r = 0; r < R; ++r) {
            const float* x = reinterpret_cast<const float*>(a + r * stride) + i;
            lo[r] = _mm256_fmadd_ps(wl, _mm256_loadu_ps(x), lo[r]);
            hi[r] = _mm256_fmadd_ps(wh, _mm256_loadu_ps(x + 8), hi[r]);
        }
    }
    const std::byte* wt_tail = w + (wt == dtype::f32 ? 4 : 2) * i;
    for (int r = 0; r < R; ++r) {
        alignas(32) float l[16];
        _mm256_store_ps(l, lo[r]);
        _mm256_store_ps(l + 8, hi[r]);
        out[r] = fold16(l, wt_tail, reinterpret_cast<const float*>(a + r * stride) + i, static_cast<int>(n - i), widen1<wt>);
    }
}
#endif

template <dtype wt>
void float_rows(const std::byte* w, const std::byte* a, size_t stride, int nr, int64_t n, float* out) {
    int r = 0;
    for (; r + 4 <= nr; r += 4) float_group<wt, 4>(w, a + r * stride, stride, n, out + r);
    switch (nr - r) {
    case 3: float_group<wt, 3>(w, a + r * stride, stride, n, out + r); break;
    case 2: float_group<wt, 2>(w, a + r * stride, stride, n, out + r); break;
    case 1: float_group<wt, 1>(w, a + r * stride, stride, n, out + r); break;
    default: break;
    }
}

template <dtype wt>
void quant_rows(const std::byte* w, const std::byte* a, size_t stride, int nr, int64_t n, float* out) {
    if constexpr (is_legacy(wt)) quant_rows_with<wt, legacy_ops<wt>>(w, a, stride, nr, n, out);
    else quant_rows_with<wt, k_ops<wt>>(w, a, stride, nr, n, out);
}

// This ISA's kernel table.
dot_rows_fn kernel_for(dtype wt) {
    switch (wt) {
    case dtype::f32: return float_rows<dtype::f32>;
    case dtype::f16: return float_rows<dtype::f16>;
    case dtype::bf16: return float_rows<dtype::bf16>;
    case dtype::q8_0: return quant_rows<dtype::q8_0>;
    case dtype::q4_0: return quant_rows<dtype::q4_0>;
    case dtype::q4_1: return quant_rows<dtype::q4_1>;
    case dtype::q5_0: return quant_rows<dtype::q5_0>;
    case dtype::q5_1: return quant_rows<dtype::q5_1>;
    case dtype::iq4_nl: return quant_rows<dtype::iq4_nl>;
    case dtype::mxfp4: return quant_rows<dtype::mxfp4>;
    case dtype::q2_k: return quant_rows<dtype::q2_k>;
    case dtype::q3_k: return quant_rows<dtype::q3_k>;
    case dtype::q4_k: return quant_rows<dtype::q4_k>;
    case dtype::q5_k: return quant_rows<dtype::q5_k>;
    case dtype::q6_k: return quant_rows<dtype::q6_k>;
    case dtype::iq4_xs: return quant_rows<dtype::iq4_xs>;
    case dtype::iq2_xxs: return quant_rows<dtype::iq2_xxs>;
    case dtype::iq2_xs: return quant_rows<dtype::iq2_xs>;
    case dtype::iq2_s: return quant_rows<dtype::iq2_s>;
    case dtype::iq3_xxs: return quant_rows<dtype::iq3_xxs>;
    case dtype::iq3_s: return quant_rows<dtype::iq3_s>;
    default: return nullptr;   // dot_ref row by row (dot.h: has_simd is false)
    }
}

}  // namespace
}  // namespace sluice::kernels
