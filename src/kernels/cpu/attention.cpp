// Causal GQA attention over the KV cache, reduced in fixed chunks of KV positions (E1).
//
// attention_ref is the definition: plain scalar code. attention runs the same arithmetic with
// AVX2+FMA (on AVX-512 machines too: 16-lane reductions map onto two ymm halves, and the V
// accumulation is element-wise, so a wider vector would not change the order of anything) and
// gives attention_ref's bits: every operation below is the same IEEE operation on the same
// operands in the same order, only several independent ones at a time:
//  - a score is dot_f32_lanes: lane l (i % 16 == l) by fmaf in index order, two ymm accumulators
//    holding lanes 0-7 and 8-15, then the pairwise fold (8, 4, 2, 1) with the same pairs;
//  - the chunk max and the running sum of exponentials stay scalar, in order (32 values a
//    chunk); exp_f32 of the scores runs 8 at a time (exp8_avx2: the same operations per lane);
//  - oc[d] += p_j * v_j[d] (a multiply, then an add: no FMA contraction) element-wise in j order,
//    64 or 32 dimensions as eight or four independent chains; the merge o = o * a + oc * bc and the final o / l
//    likewise.
// A task walks the query heads that share a KV head chunk by chunk (run below: each chunk's K and
// V rows stay in cache for all of them); each head's operations are the same in any grouping.
#include "kernels/cpu/ops.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/exp_avx2.h"
#include "kernels/math.h"

#include <immintrin.h>

namespace sluice::kernels {

namespace {

// One chunk of one (row, head): query qh [hd]; kc, vc: the chunk's first K/V row of the head's
// KV head (rows kv_stride floats apart), n <= k_attn_chunk positions. Merges the chunk into the
// running max m, exp sum l and output o [hd] (first: the row's first chunk sets them). The scalar
// definition; run() divides o by l after the row's last chunk.
void chunk_ref(const float* qh, const float* kc, const float* vc, int64_t kv_stride, int hd, int n, bool first,
               float scale, float& m, float& l, float* o) {
    float score[k_attn_chunk];   // this chunk's scores, then their exponentials
    float oc[k_max_head_dim];    // this chunk's weighted sum of V
    float mc = 0.0f;
    for (int j = 0; j < n; ++j) {
        score[j] = dot_f32_lanes_ref(qh, kc + j * kv_stride, hd) * scale;
        mc = (j == 0 || score[j] > mc) ? score[j] : mc;
    }
    float lc = 0.0f;
    for (int d = 0; d < hd; ++d) oc[d] = 0.0f;
    for (int j = 0; j < n; ++j) {
        score[j] = exp_f32(score[j] - mc);
        lc += score[j];
        const float* vj = vc + j * kv_stride;
        for (int d = 0; d < hd; ++d) oc[d] += score[j] * vj[d];
    }
    if (first) {
        m = mc;
        l = lc;
        for (int d = 0; d < hd; ++d) o[d] = oc[d];
    } else {
        // Merge: rescale both partial results to the larger max.
        const float mn = mc > m ? mc : m;
        const float a = exp_f32(m - mn), bc = exp_f32(mc - mn);
        l = l * a + lc * bc;
        for (int d = 0; d < hd; ++d) o[d] = o[d] * a + oc[d] * bc;
        m = mn;
    }
}

#define SLUICE_AVX2 __attribute__((target("avx2,fma")))

// dot_f32_lanes' pairwise fold of its 16 lanes, held as lanes 0-7 (lo) and 8-15 (hi).
SLUICE_AVX2 inline float fold16(__m256 lo, __m256 hi) {
    const __m256 s8 = _mm256_add_ps(lo, hi);                                              // l < 8: l + (l + 8)
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));  // l < 4
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));                               // l < 2
    const __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));                           // l = 0
    return _mm_cvtss_f32(s1);
}

// dot_f32_lanes(a, b, hd) for hd % 16 == 0.
SLUICE_AVX2 inline float dot16_avx2(const float* a, const float* b, int hd) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), hi);
    }
    return fold16(lo, hi);
}

// dot16_avx2(a, b + r * stride, hd) into out[r] for r < 4: four dot products side by side, each
// with its own two accumulators (the same operations), so the FMAs' latency overlaps (one score
// at a time, a 128-wide dot product is two chains of 8 dependent FMAs). bench_attention, one
// thread of the 2-core EPYC, 32/4 heads of 128, us a row: one row at 2,048 positions 1195 ->
// 1061-1082, at 8,192 6066 -> 4721-4850; 64 rows ending at 2,048 1050 -> 934-937.
SLUICE_AVX2 inline void dot16x4_avx2(const float* a, const float* b, int64_t stride, int hd, float* out) {
    __m256 lo[4], hi[4];
    for (int r = 0; r < 4; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += 16) {
        const __m256 a0 = _mm256_loadu_ps(a + i), a1 = _mm256_loadu_ps(a + i + 8);
        for (int r = 0; r < 4; ++r) {
            lo[r] = _mm256_fmadd_ps(a0, _mm256_loadu_ps(b + r * stride + i), lo[r]);
            hi[r] = _mm256_fmadd_ps(a1, _mm256_loadu_ps(b + r * stride + i + 8), hi[r]);
        }
    }
    for (int r = 0; r < 4; ++r) out[r] = fold16(lo[r], hi[r]);
}

// A chunk's V sum of 8 dimensions into the running output: o = oc for the row's first chunk, else
// o = o * a + oc * bc (chunk_ref's merge).
SLUICE_AVX2 inline void merge_v8(float* o, __m256 oc, bool first, float a, float bc) {
    if (first) {
        _mm256_storeu_ps(o, oc);
        return;
    }
    const __m256 prev = _mm256_mul_ps(_mm256_loadu_ps(o), _mm256_set1_ps(a));
    _mm256_storeu_ps(o, _mm256_add_ps(prev, _mm256_mul_ps(oc, _mm256_set1_ps(bc))));
}

// The V sums of dims [d, d + 8C) for positions 0..n-1: oc = ((0 + p0 v0) + p1 v1) + ... in j order
// per dimension, C independent add chains side by side, merged into o.
template <int C>
SLUICE_AVX2 inline void v_sum(const float* score, const float* vc, int64_t kv_stride, int n, int d, bool first, float a,
                              float bc, float* o) {
    __m256 acc[C];
    for (int u = 0; u < C; ++u) acc[u] = _mm256_setzero_ps();
    for (int j = 0; j < n; ++j) {
        const __m256 pj = _mm256_set1_ps(score[j]);
        const float* vj = vc + j * kv_stride + d;
        for (int u = 0; u < C; ++u) acc[u] = _mm256_add_ps(acc[u], _mm256_mul_ps(pj, _mm256_loadu_ps(vj + 8 * u)));
    }
    for (int u = 0; u < C; ++u) merge_v8(o + d + 8 * u, acc[u], first, a, bc);
}

// chunk_ref for hd % 8 == 0 and hd % 16 == 0 (the score needs whole 16-lane groups).
SLUICE_AVX2 void chunk_avx2(const float* qh, const float* kc, const float* vc, int64_t kv_stride, int hd, int n,
                            bool first, float scale, float& m, float& l, float* o) {
    float score[k_attn_chunk];
    int j4 = 0;
    for (; j4 + 4 <= n; j4 += 4) dot16x4_avx2(qh, kc + j4 * kv_stride, kv_stride, hd, score + j4);
    for (int j = j4; j < n; ++j) score[j] = dot16_avx2(qh, kc + j * kv_stride, hd);
    float mc = 0.0f;
    for (int j = 0; j < n; ++j) {
        score[j] = score[j] * scale;
        mc = (j == 0 || score[j] > mc) ? score[j] : mc;
    }
    // The exponentials 8 at a time (exp8_avx2 gives exp_f32's bits), the sum in j order.
    int j8 = 0;
    for (; j8 + 8 <= n; j8 += 8)
        _mm256_storeu_ps(score + j8, exp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(score + j8), _mm256_set1_ps(mc))));
    for (int j = j8; j < n; ++j) score[j] = exp_f32(score[j] - mc);
    float lc = 0.0f;
    for (int j = 0; j < n; ++j) lc += score[j];
    float a = 0.0f, bc = 0.0f;
    if (!first) {
        const float mn = mc > m ? mc : m;
        a = exp_f32(m - mn);
        bc = exp_f32(mc - mn);
        l = l * a + lc * bc;
        m = mn;
    } else {
        m = mc;
        l = lc;
    }
    // V, 64 dimensions (eight add chains) at a time, then 32 (four), then the 16 left when
    // hd % 32 == 16: the adds' latency per position was the kernel's bound with one chain, and
    // still showed with four (bench_attention, one thread of the 2-core EPYC, 32/4 heads of 128,
    // us a row, three runs each: 285 -> 248-250 at 512 positions, 1160-1170 -> 1013-1053 at
    // 2,048, 6525-6606 -> 5870-6046 at 8,192; 64 rows to 2,048 1182-1202 -> 1027-1039). A whole
    // SmolLM2 decode at 2,048 / 4,096 positions on that VM's 2 threads moved within its noise
    // (old 59.5-62.9 / 36.6-37.5 tok/s, new 59.9-74.0 / 36.6-45.8).
    int d = 0;
    for (; d + 64 <= hd; d += 64) v_sum<8>(score, vc, kv_stride, n, d, first, a, bc, o);
    for (; d + 32 <= hd; d += 32) v_sum<4>(score, vc, kv_stride, n, d, first, a, bc, o);
    if (d < hd) v_sum<2>(score, vc, kv_stride, n, d, first, a, bc, o);
}

#undef SLUICE_AVX2

using chunk_fn = void (*)(const float*, const float*, const float*, int64_t, int, int, bool, float, float&, float&, float*);

// Query heads of one KV head that a task walks together (at most this many): each chunk's K and
// V rows are read once for all of them, from cache, instead of once per head. With the V sum's
// four add chains: Qwen3-30B-A3B's 32/4 heads of 128 at 2,048 positions, one thread of the
// 2-core EPYC, 1.48 -> 1.02 ms a row (the heads together alone: 1.25; the chains alone: 1.30);
// the shipped MoE's 6/2 heads of 64: 140 -> 92 us (best of 8 runs each, session 10).
constexpr int k_max_heads_together = 16;

// Heads a task takes together: the largest divisor of the group (query heads per KV head, <=
// k_max_heads_together) that still leaves min_tasks tasks, else 1. The unsplit loop asks for a
// task per thread; the split one for the whole group (min_tasks 0). Each head's operations are the
// same whatever the grouping, so the bits never depend on it (or on the thread count).
int heads_together(const attention_params& p, int64_t n_rows, int min_tasks) {
    const int group = p.n_head / p.n_kv_head;
    for (int d = group < k_max_heads_together ? group : k_max_heads_together; d > 1; --d)
        if (group % d == 0 && n_rows * p.n_kv_head * (group / d) >= min_tasks) return d;
    return 1;
}

void run(thread_pool& pool, chunk_fn f, const attention_params& p, const float* q, const float* k, const float* v,
         int32_t pos0, int64_t n_rows, float* out) {
    const int hd = p.head_dim;
    const int group = p.n_head / p.n_kv_head;                           // query heads per KV head
    const int64_t kv_stride = static_cast<int64_t>(p.n_kv_head) * hd;  // floats per position
    const int together = heads_together(p, n_rows, pool.n_threads());
    const int64_t tasks_per_row = static_cast<int64_t>(p.n_head) / together;
    // One task per (row, KV head, heads together); a chunk of 1 keeps the tail short.
    pool.parallel_for(n_rows * tasks_per_row, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
            const int64_t r = t / tasks_per_row;
            const int h0 = static_cast<int>(t % tasks_per_row) * together;
            const int kvh = h0 / group;
            // causal: row r at position pos0 + r sees positions 0..pos0+r
            const int64_t n_kv = pos0 + r + 1;
            float m[k_max_heads_together], l[k_max_heads_together];
            for (int64_t c0 = 0; c0 < n_kv; c0 += k_attn_chunk) {
                const int n = static_cast<int>(n_kv - c0 < k_attn_chunk ? n_kv - c0 : k_attn_chunk);
                const float* kc = k + c0 * kv_stride + kvh * hd;
                const float* vc = v + c0 * kv_stride + kvh * hd;
                for (int i = 0; i < together; ++i) {
                    const int64_t row_head = r * p.n_head + h0 + i;
                    f(q + row_head * hd, kc, vc, kv_stride, hd, n, c0 == 0, p.scale, m[i], l[i], out + row_head * hd);
                }
            }
            for (int i = 0; i < together; ++i) {
                float* o = out + (r * p.n_head + h0 + i) * hd;
                for (int d = 0; d < hd; ++d) o[d] = o[d] / l[i];
            }
        }
    });
}

// The calls the split can take at all: 1..k_attn_split_rows rows, two chunks or more, two threads.
bool split_allowed(int64_t n_rows, int n_threads, int32_t pos0) {
    return n_threads >= 2 && n_rows <= k_attn_split_rows && pos0 + n_rows > k_attn_chunk;
}

// Whether splitting the positions pays: the slowest thread's (head, chunk) units of the unsplit
// loop against the split's (its items, then the merge: per chunk and head 2 exponentials and 3
// head_dim-wide operations against a chunk's ~3 x 32 x head_dim, about a 25th, plus the second
// barrier). Approximate: the rows' lengths differ by at most n_rows - 1 positions, counted as the
// last row's.
bool split_pays(const attention_params& p, int32_t pos0, int64_t n_rows, int n_threads) {
    if (!split_allowed(n_rows, n_threads, pos0)) return false;
    const int64_t chunks = (pos0 + n_rows + k_attn_chunk - 1) / k_attn_chunk;
    auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
    const int t_unsplit = heads_together(p, n_rows, n_threads);
    const int64_t unsplit = ceil_div(n_rows * p.n_head / t_unsplit, n_threads) * t_unsplit * chunks;
    const int t_split = heads_together(p, n_rows, 0);
    const int64_t items = n_rows * (p.n_head / t_split) * chunks;
    const int64_t merge = ceil_div(n_rows * p.n_head, n_threads) * chunks / 25 + 1;
    const int64_t split = ceil_div(items, n_threads) * t_split + merge;
    return 10 * split < 9 * unsplit;   // a tenth better at least: the model is rough
}

// The loop of run() with the positions cut as well (see ops.h): work items (row, heads together,
// chunk), each chunk's result computed as the row's first chunk would be (f with first = true:
// m, l and o are the chunk's own max, sum and output), then per (row, head) the chunks merged in
// order by chunk_ref's merge, round by round.
void run_split(thread_pool& pool, chunk_fn f, const attention_params& p, const float* q, const float* k, const float* v,
               int32_t pos0, int64_t n_rows, float* out, attention_scratch sc) {
    const int hd = p.head_dim;
    const int group = p.n_head / p.n_kv_head;
    const int together = heads_together(p, n_rows, 0);
    const int64_t kv_stride = static_cast<int64_t>(p.n_kv_head) * hd;
    const int64_t sets = p.n_head / together;   // head sets a row's work items walk
    const int64_t slot = hd + 2;                 // a chunk's output [hd], then its max and sum
    float* state = sc.parts;                     // [n_rows, n_head] running (max, sum)
    float* parts = sc.parts + static_cast<int64_t>(k_attn_split_rows) * p.n_head * 2;
    auto chunks_of = [&](int64_t r) { return (pos0 + r + 1 + k_attn_chunk - 1) / k_attn_chunk; };
    const int64_t all_chunks = chunks_of(n_rows - 1);
    for (int64_t c0 = 0; c0 < all_chunks; c0 += k_attn_split_chunks) {
        const int64_t nc = all_chunks - c0 < k_attn_split_chunks ? all_chunks - c0 : k_attn_split_chunks;
        // Each chunk of the round for every (row, head set): independent of the others.
        pool.parallel_for(n_rows * sets * nc, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t) {
                const int64_t c = c0 + t % nc, r = t / nc / sets;
                const int h0 = static_cast<int>(t / nc % sets) * together;
                const int64_t n_kv = pos0 + r + 1;
                const int64_t first_pos = c * k_attn_chunk;
                if (first_pos >= n_kv) continue;   // past this row's last position
                const int n = static_cast<int>(n_kv - first_pos < k_attn_chunk ? n_kv - first_pos : k_attn_chunk);
                const float* kc = k + first_pos * kv_stride + (h0 / group) * hd;
                const float* vc = v + first_pos * kv_stride + (h0 / group) * hd;
                for (int i = 0; i < together; ++i) {
                    const int64_t row_head = r * p.n_head + h0 + i;
                    float* s = parts + (row_head * k_attn_split_chunks + (c - c0)) * slot;
                    f(q + row_head * hd, kc, vc, kv_stride, hd, n, true, p.scale, s[hd], s[hd + 1], s);
                }
            }
        });
        // The round's chunks merged in order into each (row, head)'s running state and output.
        pool.parallel_for(n_rows * p.n_head, 1, [&](int64_t b, int64_t e) {
            for (int64_t row_head = b; row_head < e; ++row_head) {
                const int64_t r = row_head / p.n_head, row_chunks = chunks_of(r);
                float* o = out + row_head * hd;
                float& m = state[2 * row_head];
                float& l = state[2 * row_head + 1];
                const int64_t c_end = c0 + nc < row_chunks ? c0 + nc : row_chunks;
                for (int64_t c = c0; c < c_end; ++c) {
                    const float* s = parts + (row_head * k_attn_split_chunks + (c - c0)) * slot;
                    const float mc = s[hd], lc = s[hd + 1];
                    if (c == 0) {
                        m = mc;
                        l = lc;
                        for (int d = 0; d < hd; ++d) o[d] = s[d];
                        continue;
                    }
                    const float mn = mc > m ? mc : m;
                    const float a = exp_f32(m - mn), bc = exp_f32(mc - mn);
                    l = l * a + lc * bc;
                    for (int d = 0; d < hd; ++d) o[d] = o[d] * a + s[d] * bc;
                    m = mn;
                }
                if (c_end == row_chunks && c0 < row_chunks)
                    for (int d = 0; d < hd; ++d) o[d] = o[d] / l;
            }
        });
    }
}

}  // namespace

size_t attention_split_floats(const attention_params& p) {
    const size_t rh = static_cast<size_t>(k_attn_split_rows) * static_cast<size_t>(p.n_head);
    return rh * 2 + rh * k_attn_split_chunks * static_cast<size_t>(p.head_dim + 2);
}

void attention_ref(thread_pool& pool, const attention_params& p, const float* q, const float* k,
                   const float* v, int32_t pos0, int64_t n_rows, float* out) {
    run(pool, chunk_ref, p, q, k, v, pos0, n_rows, out);
}

void attention(thread_pool& pool, const attention_params& p, const float* q, const float* k,
               const float* v, int32_t pos0, int64_t n_rows, float* out, attention_scratch split) {
    static const bool avx2 = cpu_supports(isa::avx2);
    const chunk_fn f = avx2 && p.head_dim % 16 == 0 ? chunk_avx2 : chunk_ref;
    const bool split_ok = split.parts && split.floats >= attention_split_floats(p);
    if (split_ok && (split.always ? split_allowed(n_rows, pool.n_threads(), pos0) : split_pays(p, pos0, n_rows, pool.n_threads())))
        run_split(pool, f, p, q, k, v, pos0, n_rows, out, split);
    else
        run(pool, f, p, q, k, v, pos0, n_rows, out);
}

}  // namespace sluice::kernels
