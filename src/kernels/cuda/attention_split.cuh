// The split decode attention: attention_split_kernel and attention_merge_kernel. Included by
// attention.cu only, after attention_rows.cuh (whose chunk buffers and staging it uses) and the
// chunk helpers, into the same anonymous namespace.
#pragma once

namespace sluice::cuda {
namespace {

// A decode step (one row) split over the GPU in two launches; a verify window's rows take the same
// two launches with a grid dimension more (a row each: its position, query, records and output).
// 1. attention_split_kernel: one block per (KV head, chunk lane s), grid (n_kv_head, S, rows); the
// block's G = n_head / n_kv_head warps are the query heads sharing the KV head. Block s takes
// chunks s, s + S, s + 2S, ...: it stages each chunk's K and V rows in shared memory once for its
// G queries (as attention_rows_kernel), and each warp computes its head's chunk (chunk_scores,
// chunk_max, the exponentials, chunk_v_sums: attention_kernel's operations) into a record in
// global memory (the chunk's max, exp sum and V sum). The rows of the block's first chunk before
// the step's position were written by earlier steps: they are staged before the wait for the
// kernel before (launch.cuh), which writes only the row at the position (and q).
// 2. attention_merge_kernel merges every chunk of a head in chunk order with attention_kernel's
// merge (the prefix of maxima, then the serial l / o updates), so the bits are the one-block
// kernel's, which are the CPU's.
// Why: attention_kernel gives a decode step one block per head, 32 blocks on 132 SMs reading
// every K/V row once per query head; at 512 positions that took 16.3 us a layer (kernel_bench,
// session 9); this reads each row once per KV head from all SMs. Until session 32 the last chunk
// block of a KV head to arrive (an atomic counter) merged its G heads: one SM read every record
// of the KV head (540 KB at 4,096 positions), and with 128 chunk lanes the kernel took 31.3 us
// there against 9.1 at 512 (kernel_bench, H100, records in L2). In two launches: 26.9 against
// 7.6 us (kernel_bench, H200), and the 30B shape's whole-GPU decode at 4,096 positions 4.88 ms a
// token against 5.75 before session 32 and 3.67 at 512 (decode_bench, H200, bench/RESULTS.md).
// The rest of the difference from 512 positions points to the chunk kernel's instruction count:
// at 4,096 positions it runs in one wave (5 blocks an SM), 41.7% of warps resident, ~2.5
// instructions issued a cycle an SM, DRAM at 25% of peak (Nsight Compute, H100, session 33): about
// 2,000 instructions a warp per chunk (an estimate from those figures) against ~500 loads and
// operations (the PTX has a bounds check and a branch before each of chunk_v_sums' loads, and
// stage_chunk divides by the run-time width).
//   rec: [rows, n_head, max_chunks, attention_split_record_floats(head_dim)] (max, exp sum, 2 floats of
//   padding, V sum from float 4 = k_split_rec_v: each record's V sums start 16-byte aligned; the
//   accesses are scalar, so the padding only aligns them).
//   The chunk's K and V rows (rows_chunk_buffers<U>) are dynamic shared memory: 66 KB at U = 8.
//   WINDOW: the form for a verify window's rows (blockIdx.z); a decode step's launch keeps the
//   one-row form, whose 43 registers (U = 4) the row's offsets would raise to 54 (sm_90, ptxas),
//   5 blocks an SM to 4 (session 37 measured such a rise as a loss).
template <int U, bool WINDOW>
__global__ void __launch_bounds__(k_rows_warps * 32)
    attention_split_kernel(kernels::attention_params p, const float* q, const float* kc, const float* vc, int32_t pos0,
                           const int32_t* pos_dev, float* rec, int64_t max_chunks, int row0) {
    // The position: copied in before the step's first launch (pos_dev), so settled here.
    if (pos_dev) pos0 = *pos_dev;
    // A window's row (blockIdx.z of this launch's rows, from row0 of the window): its query, its
    // position and its own records. pos0 stays the window's first position: the rows before it
    // are the ones earlier forwards wrote.
    int row = 0;
    if constexpr (WINDOW) {
        row = row0 + static_cast<int>(blockIdx.z);
        q += static_cast<int64_t>(row) * p.n_head * p.head_dim;
        rec += static_cast<int64_t>(blockIdx.z) * p.n_head * max_chunks * attention_split_record_floats(p.head_dim);
    }
    extern __shared__ float4 split_dyn[];
    rows_chunk_buffers<U>& chunk = *reinterpret_cast<rows_chunk_buffers<U>*>(split_dyn);   // this KV head's chunk rows
    __shared__ __align__(16) float sq[k_rows_warps][k_rows_hd<U>];   // [warps, head_dim] each warp's query
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int G = p.n_head / p.n_kv_head, hd = p.head_dim;
    const int kvh = static_cast<int>(blockIdx.x);
    const int h = kvh * G + warp;
    const int64_t kv_stride = static_cast<int64_t>(p.n_kv_head) * hd;
    const int64_t rs = attention_split_record_floats(hd);   // floats per record
    float* hrec = rec + static_cast<int64_t>(h) * max_chunks * rs;
    const int64_t n_kv = static_cast<int64_t>(pos0) + row + 1;
    const int64_t n_chunks = (n_kv + kernels::k_attn_chunk - 1) / kernels::k_attn_chunk;
    if (n_chunks > max_chunks) __trap();   // the caller sizes rec for its cache: never
    if (blockIdx.y >= n_chunks) return;    // a lane with no chunk at this position
    const bool vec16 = hd % 16 == 0;
    auto rows_of = [&](int64_t c) {
        return static_cast<int>(n_kv - c * kernels::k_attn_chunk < kernels::k_attn_chunk ? n_kv - c * kernels::k_attn_chunk
                                                                                          : kernels::k_attn_chunk);
    };
    auto k_rows = [&](int64_t c) { return kc + c * kernels::k_attn_chunk * kv_stride + static_cast<int64_t>(kvh) * hd; };
    auto v_rows = [&](int64_t c) { return vc + c * kernels::k_attn_chunk * kv_stride + static_cast<int64_t>(kvh) * hd; };
    // The first chunk's rows before the position, staged before the wait (above). None where the
    // chunk begins after the window's first position (a window's later row reaching a chunk the
    // cache had not begun): until session 46 the count went negative there and stage_chunk then
    // wrote rows before its buffer, over the warps' queries (the 30B shape's 16-row windows
    // differed from serial decoding, placement_parity at a 12-token prompt).
    const int64_t first_row = static_cast<int64_t>(blockIdx.y) * kernels::k_attn_chunk;
    const int64_t before = pos0 - first_row < 0 ? 0 : pos0 - first_row;
    const int early_rows = static_cast<int>(before < rows_of(blockIdx.y) ? before : rows_of(blockIdx.y));
    if (early_rows > 0) stage_chunk<U>(k_rows(blockIdx.y), v_rows(blockIdx.y), kv_stride, 0, early_rows, hd, chunk);
    wait_prior_grids();   // see launch.cuh
    for (int d = lane; d < hd; d += 32) sq[warp][d] = q[static_cast<int64_t>(h) * hd + d];
    for (int64_t c = blockIdx.y; c < n_chunks; c += gridDim.y) {
        const int n = rows_of(c);
        __syncthreads();   // the previous chunk's reads are done (and sq is written)
        stage_chunk<U>(k_rows(c), v_rows(c), kv_stride, c == blockIdx.y ? early_rows : 0, n, hd, chunk);
        stage_wait();
        __syncthreads();
        float mc[1], lc[1], oc[1][U];
        staged_chunk<U, 1>(chunk, sq[warp], n, hd, vec16, p.scale, lane, mc, lc, oc);
        float* r = hrec + c * rs;
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int d = lane + 32 * u;
            if (d < hd) r[k_split_rec_v + d] = oc[0][u];
        }
        if (lane == 0) {
            r[0] = mc[0];
            r[1] = lc[0];
        }
    }
}

// The merge of attention_split_kernel's records: a block per heads_per_block heads, a warp per 32
// dimensions of a head (the lane: one dimension), so the records of a 4,096-position step are read
// by 16 SMs (32 heads of 128) rather than by one block of each KV head. Each warp walks its head's
// chunks in groups of 32: the group's maxima and exp sums give every chunk's factors at once
// (merge_factors), then its 32 V sums are merged one after the other; the next group's records
// are loaded while this one is merged (64 floats of registers a lane: a block of this kernel
// needs no company on its SM).
// With act (act_width 32 or 256, a whole number of blocks in the block's heads: heads_per_block
// heads of head_dim floats) the block also writes those heads' int8 activation blocks of the
// output row (quantize_block_warp, as quantize_act_rows makes them from the same floats) for the
// output projection, which then skips its quantiser launch (2.2 us, bench/gpu/step_trace, H200,
// session 27). With gate (the hybrids' query|gate row, [n_head, 2 * head_dim]), each output is
// first multiplied by the sigmoid of its gate (output_gate_kernel's expression): the gated
// attention's output gate in this launch too.
constexpr int k_merge_group = 32;
constexpr int k_merge_max_floats = kernels::k_max_head_dim;   // a block's heads' outputs (act)
__global__ void __launch_bounds__(k_merge_max_floats)
    attention_merge_kernel(kernels::attention_params p, const float* rec, int64_t max_chunks, int32_t pos0,
                           const int32_t* pos_dev, int heads_per_block, float* out, std::byte* act, int act_width,
                           const float* gate, int row0) {
    if (pos_dev) pos0 = *pos_dev;   // settled before the step's first launch
    // The window's row blockIdx.y of this launch (see attention_split_kernel): its records, its
    // output row, its gate row and its activation blocks.
    const int row = row0 + static_cast<int>(blockIdx.y);
    rec += static_cast<int64_t>(blockIdx.y) * p.n_head * max_chunks * attention_split_record_floats(p.head_dim);
    out += static_cast<int64_t>(row) * p.n_head * p.head_dim;
    if (gate) gate += static_cast<int64_t>(row) * p.n_head * 2 * p.head_dim;
    __shared__ float heads[k_merge_max_floats];   // [heads_per_block, head_dim] the block's outputs (act)
    wait_prior_grids();   // the records: written by the launch before
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x & 31);
    const int hd = p.head_dim;
    const int warps_per_head = (hd + 31) / 32;
    const int hb = warp / warps_per_head;   // the block's head
    const int h = static_cast<int>(blockIdx.x) * heads_per_block + hb;
    const int d = (warp % warps_per_head) * 32 + lane;
    const int64_t rs = attention_split_record_floats(hd);
    const float* hrec = rec + static_cast<int64_t>(h < p.n_head ? h : 0) * max_chunks * rs;
    const int64_t n_chunks = (static_cast<int64_t>(pos0) + row + kernels::k_attn_chunk) / kernels::k_attn_chunk;
    const bool mine = h < p.n_head && d < hd;
    // Records read from L2 (__ldcg: written by the launch before, on other SMs). The V sums by a
    // pointer stepped a record at a time and a 32-bit bound: the 64-bit index, bound and address
    // of each load were ~14 instructions (sm_90 SASS), 490 a group.
    auto load_group = [&](int64_t cg, float& mc, float& lc, float (&v)[k_merge_group]) {
        const int left = static_cast<int>(n_chunks - cg < k_merge_group ? n_chunks - cg : k_merge_group);
        const float* g = hrec + cg * rs;
        const bool stats = lane < left;
        mc = stats ? __ldcg(g + lane * rs) : 0.0f;
        lc = stats ? __ldcg(g + lane * rs + 1) : 0.0f;
        const float* pv = g + k_split_rec_v + d;
#pragma unroll
        for (int w = 0; w < k_merge_group; ++w) {
            v[w] = mine && w < left ? __ldcg(pv) : 0.0f;
            pv += rs;
        }
    };
    float group_mc, group_lc, group_v[k_merge_group], next_mc = 0.0f, next_lc = 0.0f, next_v[k_merge_group];
    load_group(0, group_mc, group_lc, group_v);
    float o[1] = {0.0f};
    float m = 0.0f, l = 0.0f;
    for (int64_t cg = 0; cg < n_chunks; cg += k_merge_group) {
        if (cg + k_merge_group < n_chunks) load_group(cg + k_merge_group, next_mc, next_lc, next_v);
        const int n_here = static_cast<int>(n_chunks - cg < k_merge_group ? n_chunks - cg : k_merge_group);
        float a_w, bc_w;
        const float m_after = merge_factors(cg, n_here, group_mc, m, lane, a_w, bc_w);
        if (cg != 0 && n_here == k_merge_group) {
            // A whole group after the row's first chunk: merge_chunk's steps with no branch between
            // them (its break and its first-chunk test made each chunk a block of its own, so
            // every chunk's shuffles waited in the chain of adds), the same operations in the same
            // order. The merge took 15.1 us a layer at 4,096 positions and 3.9 at 512 (bench/gpu/
            // step_trace, the 30B shape, H100, session 37); ~35 instructions a chunk a lane. After
            // (with the loads below): kernel_bench's split attention 22.77 -> 20.51 us at 4,096
            // positions, the 30B whole-model decode 227.6 -> 245.6 tok/s there and 309.9 -> 323.6
            // at 512 with q and k paired (decode_bench, H100, tests/gpu/parity.h100.log).
#pragma unroll
            for (int w = 0; w < k_merge_group; ++w) {
                const float a = __shfl_sync(k_full, a_w, w), bc = __shfl_sync(k_full, bc_w, w);
                l = merge_step(l, a, __shfl_sync(k_full, group_lc, w), bc);
                if (d < hd) o[0] = merge_step(o[0], a, group_v[w], bc);
            }
        } else {
#pragma unroll
            for (int w = 0; w < k_merge_group; ++w) {
                if (w >= n_here) break;   // uniform
                merge_chunk<1>(cg, w, __shfl_sync(k_full, group_lc, w), [&](int) { return group_v[w]; }, a_w, bc_w, hd, d,
                               32, l, o);
            }
        }
        m = m_after;
        group_mc = next_mc;
        group_lc = next_lc;
#pragma unroll
        for (int w = 0; w < k_merge_group; ++w) group_v[w] = next_v[w];
    }
    if (mine) {
        float r = __fdiv_rn(o[0], l);
        // The hybrids' output gate (output_gate_kernel's expression), before the activation blocks.
        if (gate) r = __fmul_rn(r, kernels::sigmoid_f32(gate[static_cast<int64_t>(h) * 2 * hd + hd + d]));
        out[static_cast<int64_t>(h) * hd + d] = r;
        if (act) heads[hb * hd + d] = r;
    }
    if (!act) return;
    __syncthreads();
    const int blocks = heads_per_block * hd / act_width;   // activation blocks of the block's heads
    const int n_warps = static_cast<int>(blockDim.x / 32);
    const int64_t row_blocks = static_cast<int64_t>(p.n_head) * hd / act_width;   // the output row's
    for (int b = warp; b < blocks; b += n_warps) {
        const int64_t gb = row * row_blocks + static_cast<int64_t>(blockIdx.x) * blocks + b;
        if (act_width == 256) {
            quant::act_block256* dst = reinterpret_cast<quant::act_block256*>(act) + gb;
            quantize_block_warp<256>(heads + b * 256, &dst->d, dst->q, dst->bsums);
        } else {
            quant::act_block32* dst = reinterpret_cast<quant::act_block32*>(act) + gb;
            quantize_block_warp<32>(heads + b * 32, &dst->d, dst->q, nullptr);
        }
    }
}

}  // namespace
}  // namespace sluice::cuda
