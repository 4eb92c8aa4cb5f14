// The 256-wide block decoders of dot_simd_impl.h: K-quants (Q2_K..Q6_K), IQ4_XS and the IQ2/IQ3
// grid formats into a kblock (int8 weights, |w|, int16 scales per element pair, mins). A
// fragment: included by dot_simd_impl.h inside its anonymous namespace and target, after the
// shared helpers (f16_at, loadu256, nibbles32, bits_to_bytes, table16) it uses.
struct kblock {
    alignas(64) int8_t q[256];     // integer weights, element order
    alignas(64) uint8_t aw[256];   // |q| (signed formats only)
    alignas(64) int16_t scp[128];  // scale of the sub-block holding element pair p (2p, 2p+1)
    alignas(32) int16_t mn[16];    // min of each 16-element group (formats with a min; Q6_K: its scales)
    alignas(32) int16_t sc16[16];  // scale of each 16-element group (the column tiles' table)
    float d = 0.0f, dmin = 0.0f;
};

// The scale setters fill kblock::sc16 and, with `pairs`, kblock::scp (which only dot_rows
// reads: the column tiles of dot_ktile_impl.h decode without it).
template <bool pairs>
void set_scale(kblock& k, int j, int sub_w, int sc) {
    const auto s = static_cast<int16_t>(sc);
    if (sub_w == 32) {
        if constexpr (pairs) _mm256_store_si256(reinterpret_cast<__m256i*>(k.scp + 16 * j), _mm256_set1_epi16(s));
        k.sc16[2 * j] = k.sc16[2 * j + 1] = s;
    } else {
        if constexpr (pairs) _mm_store_si128(reinterpret_cast<__m128i*>(k.scp + 8 * j), _mm_set1_epi16(s));
        k.sc16[j] = s;
    }
}
void store_q(kblock& k, int chunk, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(k.q + 32 * chunk), v); }

// The K-quant sub-block scales, decoded in registers (no per-scale scalar code): the SIMD form
// of get_scale_min_k4 and of the 16-scale formats, then kblock::scp filled with vpshufb.

// Q4_K/Q5_K: the 12 packed scale bytes at s (16 bytes are read; the block's quants follow) ->
// bytes 0-7 the 6-bit scales of sub-blocks 0-7, bytes 8-15 their 6-bit mins, as
// get_scale_min_k4 gives them: j < 4: sc = s[j] & 63, m = s[j+4] & 63; j >= 4:
// sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4, m = (s[j+4] >> 4) | (s[j] >> 6) << 4.
[[gnu::always_inline]] inline __m128i k4_scales_mins(const std::byte* s) {
    const __m128i v = loadu128(s);
    const __m128i lo = _mm_shuffle_epi8(v, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
    const __m128i hi = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 0, 1, 2, 3, -1, -1, -1, -1, 4, 5, 6, 7));
    const __m128i a = _mm_and_si128(lo, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
    const __m128i b = _mm_and_si128(_mm_srli_epi16(lo, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
    // (x >> 6) << 4 == (x & 0xC0) >> 2; the 16-bit shift moves no bit across bytes after the mask.
    const __m128i c = _mm_srli_epi16(_mm_and_si128(hi, _mm_set1_epi8(static_cast<char>(0xC0))), 2);
    return _mm_or_si128(_mm_or_si128(a, b), c);
}

// 32-wide sub-blocks: sc8 holds 8 int16 scales; chunk j (32 elements, 16 pairs) gets scale j.
template <bool pairs>
[[gnu::always_inline]] inline void set_scales32(kblock& k, __m128i sc8) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(k.sc16), _mm256_set_m128i(_mm_unpackhi_epi16(sc8, sc8), _mm_unpacklo_epi16(sc8, sc8)));
    if constexpr (!pairs) return;
    const __m256i s = _mm256_broadcastsi128_si256(sc8);
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j)
        _mm256_store_si256(reinterpret_cast<__m256i*>(k.scp + 16 * j),
                           _mm256_shuffle_epi8(s, _mm256_set1_epi16(static_cast<int16_t>((2 * j + 1) << 8 | 2 * j))));
}

// 16-wide sub-blocks: sc16 holds 16 int16 scales; chunk c's low 128 bits (elements 32c..32c+15)
// get scale 2c, its high 128 bits scale 2c + 1. vpshufb stays inside 128-bit lanes, so chunks
// 0-3 shuffle a copy of scales 0-7 in both lanes and chunks 4-7 one of scales 8-15.
template <bool pairs>
[[gnu::always_inline]] inline void set_scales16(kblock& k, __m256i sc16) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(k.sc16), sc16);
    if constexpr (!pairs) return;
    const __m256i lo = _mm256_permute2x128_si256(sc16, sc16, 0x00), hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
        const int i = 4 * (c % 4);   // byte of scale 2c within its copy
        const __m256i ctrl = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>((i + 3) << 8 | (i + 2))),
                                              _mm_set1_epi16(static_cast<int16_t>((i + 1) << 8 | i)));
        _mm256_store_si256(reinterpret_cast<__m256i*>(k.scp + 16 * c), _mm256_shuffle_epi8(c < 4 ? lo : hi, ctrl));
    }
}

// I-quant grid formats (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): the grid lookups in scalar code,
// the layouts and constant factors of dot_ref.cpp. The magnitudes go to k.aw and each 8-element
// group's sign byte to sg; the signs are then applied 32 elements at a time with vector ops (a
// per-element branch in scalar code made IQ3_S decode 0.18x llama.cpp's on the 2-core EPYC).
// The 4-byte grid entries at the 8 indices of idx (32 magnitudes), from a table of uint8_t[4].
[[gnu::always_inline]] inline __m256i grid4_gather(const uint8_t* table, __m256i idx) {
    return _mm256_i32gather_epi32(reinterpret_cast<const int*>(table), idx, 4);
}

// Bytes 2i and 2i + 1 = the low and the high nibble of byte i of s (i < 8).
[[gnu::always_inline]] inline __m128i nibbles16(uint64_t s) {
    const __m128i v = _mm_cvtsi64_si128(static_cast<long long>(s)), m = _mm_set1_epi8(0x0F);
    return _mm_unpacklo_epi8(_mm_and_si128(v, m), _mm_and_si128(_mm_srli_epi16(v, 4), m));
}
// The grid formats' sub-block scales 2n + 1 of the nibbles n of their scale bytes, in order (a
// scalar extraction and broadcast store per sub-block cost more than the grid lookups' setup).
template <int bytes>
[[gnu::always_inline]] inline __m128i odd_scales(const uint8_t* scales) {
    uint64_t s = 0;
    std::memcpy(&s, scales, bytes);
    const __m128i n = nibbles16(s);
    return _mm_or_si128(_mm_add_epi8(n, n), _mm_set1_epi8(1));
}

// IQ4_XS's 8 sub-block scales at block b as int16: sub-block j's is (lo_j | hi_j << 4) - 32, lo_j
// nibble j of scales_l and hi_j bits 2j..2j+1 of scales_h; the 8 at once in int32 lanes by
// variable shifts (8 scalar extractions and broadcast stores were ~40% of the decode, bench_dot).
[[gnu::always_inline]] inline __m128i iq4xs_scales(const std::byte* b) {
    uint16_t sh;
    uint32_t sl;
    std::memcpy(&sh, b + 2, 2);
    std::memcpy(&sl, b + 4, 4);
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(sl)),
                                                          _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                        _mm256_set1_epi32(0x0F));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(sh), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                        _mm256_set1_epi32(3));
    const __m256i sc = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
    // int32 lanes -> 8 int16 (values in [-32, 31]: no saturation), in order.
    const __m256i p16 = _mm256_packs_epi32(sc, sc);   // per 128-bit lane: s0..s3 s0..s3 | s4..s7 s4..s7
    return _mm_unpacklo_epi64(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1));
}

template <dtype wt, bool pairs>
void decode_grid(const std::byte* b, kblock& k) {
    alignas(32) uint8_t sg[32];   // sign byte of group g (elements 8g..8g+7): bit e set, element 8g+e negative
    uint8_t* mag = k.aw;
    if constexpr (wt == dtype::iq2_xxs) {
        block_iq2_xxs x;
        std::memcpy(&x, b, sizeof x);
        k.d = fp16_to_fp32(x.d) * 0.125f;
        for (int j = 0; j < 8; ++j) {
            uint32_t aux[2];
            std::memcpy(aux, x.qs + 4 * j, 8);
            set_scale<pairs>(k, j, 32, 2 * static_cast<int>(aux[1] >> 28) + 1);
            for (int g = 0; g < 4; ++g) {
                std::memcpy(mag + 32 * j + 8 * g, k_iq2xxs_grid[(aux[0] >> (8 * g)) & 0xFF], 8);
                sg[4 * j + g] = k_ksigns_iq2xs[(aux[1] >> (7 * g)) & 0x7F];
            }
        }
    } else if constexpr (wt == dtype::iq2_xs) {
        block_iq2_xs x;
        std::memcpy(&x, b, sizeof x);
        k.d = fp16_to_fp32(x.d) * 0.125f;
        set_scales16<pairs>(k, _mm256_cvtepu8_epi16(odd_scales<8>(x.scales)));
        for (int g = 0; g < 32; ++g) {
            std::memcpy(mag + 8 * g, k_iq2xs_grid[x.qs[g] & 511], 8);
            sg[g] = k_ksigns_iq2xs[x.qs[g] >> 9];
        }
    } else if constexpr (wt == dtype::iq2_s) {
        block_iq2_s x;
        std::memcpy(&x, b, sizeof x);
        k.d = fp16_to_fp32(x.d) * 0.125f;
        set_scales16<pairs>(k, _mm256_cvtepu8_epi16(odd_scales<8>(x.scales)));
        for (int g = 0; g < 32; ++g) {
            std::memcpy(mag + 8 * g, k_iq2s_grid[x.qs[g] | (((x.qh[g / 4] >> (2 * (g % 4))) & 3) << 8)], 8);
            sg[g] = x.signs[g];
        }
    } else if constexpr (wt == dtype::iq3_xxs) {
        block_iq3_xxs x;
        std::memcpy(&x, b, sizeof x);
        k.d = fp16_to_fp32(x.d) * 0.25f;
        for (int j = 0; j < 8; ++j) {
            uint32_t aux;
            std::memcpy(&aux, x.sas + 4 * j, 4);
            set_scale<pairs>(k, j, 32, 2 * static_cast<int>(aux >> 28) + 1);
            for (int g = 0; g < 4; ++g) {
                std::memcpy(mag + 32 * j + 8 * g, k_iq3xxs_grid[x.qs[8 * j + 2 * g]], 4);
                std::memcpy(mag + 32 * j + 8 * g + 4, k_iq3xxs_grid[x.qs[8 * j + 2 * g + 1]], 4);
                sg[4 * j + g] = k_ksigns_iq2xs[(aux >> (7 * g)) & 0x7F];
            }
        }
    } else {
        static_assert(wt == dtype::iq3_s);
        block_iq3_s x;
        std::memcpy(&x, b, sizeof x);
        k.d = fp16_to_fp32(x.d);
        set_scales32<pairs>(k, _mm_cvtepu8_epi16(odd_scales<4>(x.scales)));
        std::memcpy(sg, x.signs, 32);   // one sign byte per 8 elements
        // Grid entry i (elements 4i..4i+3) is k_iq3s_grid[qs[i] | (bit i of the qh bytes) << 8]:
        // 8 a gather, the ninth index bits of entries 8c..8c+7 from qh[c]. Measured 2026-12-02 on
        // the 2-core EPYC (bench_dot, AVX-512, one thread, weights from RAM): 1 / 4 / 16 rows
        // 1.7 / 1.3 / 0.48 -> 2.0 / 1.8 / 0.81 GB/s against the scalar index and lookup per entry.
        // IQ3_XXS, whose index is a plain byte, stays scalar: its gather measured slower.
        const __m256i bit = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), one = _mm256_set1_epi32(1);
        for (int c = 0; c < 8; ++c) {
            const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x.qs + 8 * c)));
            const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(x.qh[c]), bit), one);
            _mm256_store_si256(reinterpret_cast<__m256i*>(mag + 32 * c),
                               grid4_gather(k_iq3s_grid[0], _mm256_or_si256(lo, _mm256_slli_epi32(hi, 8))));
        }
    }
    // q = sign ? -mag : mag, 32 elements a step: bit i of the chunk's 4 sign bytes is element i
    // (magnitudes <= 62, so the negation fits int8).
    for (int c = 0; c < 8; ++c) {
        uint32_t bits;
        std::memcpy(&bits, sg + 4 * c, 4);
        const __m256i neg = bits_to_bytes(bits);
        const __m256i m = _mm256_load_si256(reinterpret_cast<const __m256i*>(mag + 32 * c));
        store_q(k, c, _mm256_sub_epi8(_mm256_xor_si256(m, neg), neg));
    }
}

// Q6_K's codes of half h (elements 128h..128h+127) as 4 chunks of 32, biased to q + 32 in
// [0, 63]: the ql nibble, and 2 bits of qh above it.
[[gnu::always_inline]] inline void q6k_codes(const std::byte* b, int h, __m256i* q) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    const __m256i qh = loadu256(b + 128 + 32 * h);
    const __m256i ql0 = loadu256(b + 64 * h), ql1 = loadu256(b + 64 * h + 32);
    const __m256i l[4] = {_mm256_and_si256(ql0, m4), _mm256_and_si256(ql1, m4),
                          _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4)};
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c)
        q[c] = _mm256_or_si256(l[c], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), m2), 4));
}

// for_rows: also fill what only dot_rows reads, k.aw (signed formats) and k.scp (the column
// tiles of dot_ktile_impl.h read neither).
template <dtype wt, bool for_rows = true>
[[gnu::always_inline]] inline void decode256(const std::byte* b, kblock& k) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    if constexpr (wt == dtype::q4_k || wt == dtype::q5_k) {
        // d, dmin, scales[12], [qh[32]], qs[128]; sub-blocks of 32: pair h of them shares 32 qs bytes.
        constexpr int qs_off = wt == dtype::q4_k ? 16 : 48;
        k.d = f16_at(b);
        k.dmin = f16_at(b + 2);
        const __m128i sm = k4_scales_mins(b + 4);
        const __m128i mn8 = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));   // mins of sub-blocks 0-7
        _mm256_store_si256(reinterpret_cast<__m256i*>(k.mn), _mm256_set_m128i(_mm_unpackhi_epi16(mn8, mn8), _mm_unpacklo_epi16(mn8, mn8)));
        set_scales32<for_rows>(k, _mm_cvtepu8_epi16(sm));
        const __m256i hb = wt == dtype::q5_k ? loadu256(b + 16) : _mm256_setzero_si256();
        for (int h = 0; h < 4; ++h) {
            const __m256i v = loadu256(b + qs_off + 32 * h);
            __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if constexpr (wt == dtype::q5_k) {
                const __m256i b0 = _mm256_set1_epi8(static_cast<char>(1 << (2 * h)));
                const __m256i b1 = _mm256_set1_epi8(static_cast<char>(1 << (2 * h + 1)));
                const __m256i x10 = _mm256_set1_epi8(0x10);
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, b0), b0), x10));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hb, b1), b1), x10));
            }
            store_q(k, 2 * h, lo);
            store_q(k, 2 * h + 1, hi);
        }
    } else if constexpr (wt == dtype::q6_k) {
        // ql[128], qh[64], scales[16] (int8), d. Element 128h + 32c: ql nibble, qh 2 bits, - 32.
        // Stored biased: q + 32 in [0, 63] (unsigned, no sign transfer); k_ops::sumi subtracts
        // 32 * sum_j sc_j * bsum_j, so the block's integer sum is unchanged (exact).
        k.d = f16_at(b + 208);
        const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(b + 192));   // 16 int8 scales, sign-extended
        _mm256_store_si256(reinterpret_cast<__m256i*>(k.mn), sc16);
        set_scales16<for_rows>(k, sc16);
        for (int h = 0; h < 2; ++h) {
            __m256i q[4];
            q6k_codes(b, h, q);
            for (int c = 0; c < 4; ++c) store_q(k, 4 * h + c, q[c]);
        }
    } else if constexpr (wt == dtype::q2_k || wt == dtype::q3_k) {
        // Q2_K: scales[16], qs[64], d, dmin. Q3_K: hmask[32], qs[64], scales[12], d.
        // Element 32c + l (c = 4h + s): (qs[32h + l] >> 2s) & 3.
        constexpr int qs_off = wt == dtype::q2_k ? 16 : 32;
        if constexpr (wt == dtype::q2_k) {
            k.d = f16_at(b + 80);
            k.dmin = f16_at(b + 82);
            // scales[16]: low nibble the scale, high nibble the min of each 16-element sub-block.
            const __m128i s = loadu128(b);
            const __m128i lo = _mm_and_si128(s, _mm_set1_epi8(0x0F)), hi = _mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0F));
            _mm256_store_si256(reinterpret_cast<__m256i*>(k.mn), _mm256_cvtepu8_epi16(hi));
            set_scales16<for_rows>(k, _mm256_cvtepu8_epi16(lo));
        } else {
            k.d = f16_at(b + 108);
            // q3_k_scale for the 16 sub-blocks at once: lo_j the low nibble of scales[j] (j < 8)
            // or the high one of scales[j - 8]; hi_j bits 2(j/4)..+1 of scales[8 + j % 4]; the
            // scale (lo | hi << 4) - 32. (16 scalar extractions and stores made the one-row Q3_K
            // dot 4.4 GB/s in bench_dot.) The 12 scale bytes are read as 8 + 4: a 16-byte load
            // would run past the block.
            const __m128i s8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 96));
            uint32_t s4;
            std::memcpy(&s4, b + 104, 4);
            const __m128i n4 = _mm_set1_epi8(0x0F);
            const __m128i lo = _mm_unpacklo_epi64(_mm_and_si128(s8, n4), _mm_and_si128(_mm_srli_epi16(s8, 4), n4));
            const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(static_cast<int>(s4)), _mm_setr_epi32(0, 2, 4, 6)),
                                             _mm_set1_epi8(3));
            const __m128i sc = _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
            set_scales16<for_rows>(k, _mm256_cvtepi8_epi16(sc));
        }
        const __m256i hm = wt == dtype::q3_k ? loadu256(b) : _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i v = loadu256(b + qs_off + 32 * h);
            const __m256i lo[4] = {_mm256_and_si256(v, m2), _mm256_and_si256(_mm256_srli_epi16(v, 2), m2),
                                   _mm256_and_si256(_mm256_srli_epi16(v, 4), m2),
                                   _mm256_and_si256(_mm256_srli_epi16(v, 6), m2)};
            for (int s = 0; s < 4; ++s) {
                __m256i q = lo[s];
                if constexpr (wt == dtype::q3_k) {
                    // hmask bit c clear: subtract 4.
                    const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * h + s)));
                    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                    q = _mm256_sub_epi8(q, _mm256_andnot_si256(set, _mm256_set1_epi8(4)));
                }
                store_q(k, 4 * h + s, q);
            }
        }
    } else if constexpr (wt == dtype::iq2_xxs || wt == dtype::iq2_xs || wt == dtype::iq2_s ||
                         wt == dtype::iq3_xxs || wt == dtype::iq3_s) {
        decode_grid<wt, for_rows>(b, k);
    } else {
        static_assert(wt == dtype::iq4_xs);
        // d, scales_h (u16), scales_l[4], qs[128]; sub-block j: qs[16j..16j+16) nibbles.
        k.d = f16_at(b);
        set_scales32<for_rows>(k, iq4xs_scales(b));
        const __m256i tab = table16(k_kvalues_iq4nl);
        for (int j = 0; j < 8; ++j) store_q(k, j, _mm256_shuffle_epi8(tab, nibbles32(b + 8 + 16 * j)));
    }
    if constexpr (!decoded_unsigned(wt) && for_rows) {
        for (int c = 0; c < 8; ++c) {
            const __m256i q = _mm256_load_si256(reinterpret_cast<const __m256i*>(k.q + 32 * c));
            _mm256_store_si256(reinterpret_cast<__m256i*>(k.aw + 32 * c), _mm256_sign_epi8(q, q));
        }
    }
}
