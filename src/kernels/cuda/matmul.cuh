// Quantised and float matrix products on the device, returning kernels::dot_ref's bits for
// every output element (DESIGN.md E3) and row-exact (E1): a row's result never depends on the
// window it came in. Host-only declarations: included by C++ code compiled without nvcc.
#pragma once

#include "core/dtype.h"
#include "quant/act.h"

#include <cstddef>
#include <cstdint>

namespace sluice::kernels {
struct router_params;
}

namespace sluice::cuda {

// True when matmul supports weight format t (every format kernels::dot_ref has).
bool has_matmul(dtype t);

// Programmatic dependent launch for every kernel of src/kernels/cuda (launch.cuh), on by
// default on sm_90+; graphs captured while it is on keep it.
bool programmatic_launch();
void set_programmatic_launch(bool on);

// Copies the I-quant grids and 4-bit level tables to the current device (once per device;
// later calls return at once). Call before the first matmul on a device, outside any stream
// capture (load_model_cuda does).
void upload_tables();

// y[r, j] = dot(weight row j, activation row r) for r < n_rows, j < n_out.
struct mm_args {
    dtype type = dtype::f32;
    const std::byte* w = nullptr;     // device: n_out rows of row_bytes (one matrix, or one per expert)
    size_t row_bytes = 0;             // bytes per weight row (n_in elements of `type`)
    int64_t n_in = 0;                 // multiple of the format's block width
    int64_t n_out = 0;
    // Expert mode (ids != nullptr): row r uses the matrix at w + ids[r] * expert_stride. A
    // negative id skips the row (its y row is left as it was): a split layer's pairs that another
    // lane computes.
    const int32_t* ids = nullptr;     // device [n_rows], or nullptr for one plain matrix
    size_t expert_stride = 0;         // bytes between experts' matrices
    // The ids were written two launches or more before this one (a decode step's down projection:
    // the router, then gate and up): this launch's blocks start only once every block of the
    // launch before has passed its wait, so that writer is complete, and they may read the ids
    // before their own wait to stage their experts' weights early (launch.cuh). False: they
    // wait first.
    bool ids_settled = false;
    // Activations: row r reads activation row r / act_div (an expert pair (row, k) reads its
    // token's row with act_div = n_expert_used). Rows as quant::quantize_act_row lays them out
    // for act_format_for(type): int8 blocks, or fp32 rows for F32/F16/BF16 weights.
    const std::byte* act = nullptr;   // device
    size_t act_stride = 0;            // bytes between activation rows
    int act_div = 1;
    int64_t n_rows = 0;
    float* y = nullptr;               // device [n_rows, y_stride]
    int64_t y_stride = 0;             // floats between output rows (>= n_out)
    // y[r, j] = y[r, j] + dot instead of y[r, j] = dot (a residual add in the same launch; the
    // sum is the one a separate add would make).
    bool accumulate = false;
    // A second matrix computed in the same launch from the same activation rows (gate and up,
    // k and v): same type, n_in, row_bytes, ids and expert_stride; its own n_out and output.
    const std::byte* w2 = nullptr;    // device, or nullptr for none
    int64_t n_out2 = 0;
    float* y2 = nullptr;              // device [n_rows, y2_stride]
    int64_t y2_stride = 0;
    // Grouped expert mode (int8 formats, with ids): the pairs as group_pairs tiled them, so a
    // block takes up to tile_rows pairs of one expert and decodes each weight block once for all
    // of them (prefill): 16 (the dp4a kernel) or 64 (the tensor-core kernel). Pair p still reads
    // activation row p / act_div and writes y row p: the same bits as one pair at a time (E1).
    const int32_t* perm = nullptr;    // device [n_rows]: pairs in expert order
    const int32_t* tiles = nullptr;   // device [max_tiles][3]: (first index into perm, count, expert)
    const int32_t* n_tiles = nullptr; // device [1]
    int64_t max_tiles = 0;            // group_tiles_max(n_rows, n_expert, tile_rows): the launch's grid rows
    int tile_rows = 16;               // k_tile_rows_window or k_tile_rows_mma, as group_pairs made them
    // Plain int8 matrices: the tensor-core kernel from this many rows (0: more than
    // k_tile_rows_window, the default), the dp4a kernel below; the same bits either way
    // (bench/gpu/window_bench.cu times both).
    int mma_from_rows = 0;
    // Plain int8 windows of 2..16 rows below mma_from_rows: the tensor-core window kernel
    // (matmul_window_mma.cuh) in its split form where its measured shapes say it is the faster
    // (by_shape: see window_mma_pays), or always one kernel (the tests and window_bench):
    // dp4a, the window kernel's staged form (each warp walks all of K) or its split form (a
    // block's warps share K). The same bits every way: matmul_parity checks all three on a GPU
    // (passed on the H100, sessions 30 and 31) and the window kernel's lanes on the host.
    enum class window_kernel { by_shape, dp4a, tensor_cores, tensor_cores_split };
    window_kernel window = window_kernel::by_shape;
    // The device's SMs (cudaDevAttrMultiProcessorCount). The launch shapes that aim at one wave
    // of resident blocks (4 blocks of 8 warps an SM: the kernels' launch bounds) size it from
    // this; it changes which exact kernel runs, never a bit. 132: the H200 the shapes were timed
    // on (the tests' and benchmarks' default); cuda_model sets its device's count.
    int sm_count = 132;
};

// Rows a block of the dp4a kernel takes (a verify window; grouped tiles for it), and rows a block
// of the tensor-core kernel takes (prefill chunks of more than 16 rows; grouped tiles for it).
inline constexpr int k_tile_rows_window = 16;
inline constexpr int k_tile_rows_mma = 64;

// Experts that group_pairs handles (its shared memory: 12 bytes per expert).
inline constexpr int k_group_max_experts = 4096;
// Tiles group_pairs can make for n_pairs pairs over n_expert experts (the grid's upper bound).
int64_t group_tiles_max(int64_t n_pairs, int n_expert, int tile_rows);
// Groups the pairs of ids [n_pairs] by expert in tiles of up to tile_rows pairs (one of the two
// k_tile_rows_*): perm [n_pairs], tiles [group_tiles_max][3], *n_tiles, all device memory,
// enqueued on `stream` (no host round trip).
void group_pairs(const int32_t* ids, int64_t n_pairs, int n_expert, int tile_rows, int32_t* perm, int32_t* tiles,
                 int32_t* n_tiles, void* stream);
// Enqueues the product on `stream` (a cudaStream_t). Fails on an unsupported format or bad
// sizes (a caller bug, checked before the launch).
void matmul(const mm_args& a, void* stream);
// a's and b's products in one launch where the two are one plain row each (no ids, tiles or
// accumulation) from the same activation row (a.act == b.act) and their formats are a pair this
// launch is built for: Q4_K with Q6_K or Q4_K (a Q4_K_M file's q and k, paired in a, with its wv
// in b, which is Q6_K in some layers and Q4_K in the others), rows of 6 to 8 blocks. True when
// it launched; false (nothing enqueued) otherwise, and the caller runs matmul(a) and matmul(b).
// Each output's bits are matmul's.
bool matmul_mixed(const mm_args& a, const mm_args& b, void* stream);
// The product of a's matrix (an int8 format: a down projection) with the activation rows
// swiglu(gate, up) ([n_rows / act_div, n_in] floats each) quantised as swiglu_quant makes them
// (ops.cuh), a.act = act_buf being where they go: where the one-wave kernel takes the launch, each
// block makes its own row from gate and up (one launch instead of two; act_buf is not written),
// else (windows, grouped prefill tiles) swiglu_quant into act_buf and then matmul. The same bits
// either way.
void matmul_swiglu(const mm_args& a, const float* gate, const float* up, void* stream);

// The router and its top-k (route_topk in ops.cuh) of y = a's product: for one row of a float
// router (F32/F16/BF16) small enough for the column kernel, one launch, whose last block to
// finish routes the row (arrivals: a device counter, zero before, left zero); otherwise, or
// with arrivals null, matmul then route_topk. The same bits either way (tests/gpu/matmul_parity).
// ids, weights: [n_rows, p.n_used]; y is left holding the probabilities.
void router_topk(const mm_args& a, const kernels::router_params& p, int32_t* ids, float* weights, unsigned* arrivals,
                 void* stream);

// router_topk of the RMSNorm of one residual row, the norm made in the same launch where the fused
// router applies (one row of an F32/F16/BF16 router that fits its column kernel, with the row
// staged): every block normalises the row for its own column, and its first block writes the
// normalised row to a.act (f32 rows: the router's input buffer, [1, n_in]) and, for f != f32,
// its int8 activation rows to act (the expert launches' input). Otherwise rmsnorm_quant (or
// rmsnorm) and then router_topk. The same bits either way (cuda::rmsnorm_quant's).
struct router_norm {
    const float* x = nullptr;                       // device [n_in]: the residual row
    const float* w = nullptr;                       // device [n_in]: the norm's weights
    float eps = 0.0f;
    quant::act_format f = quant::act_format::f32;   // the experts' activation format
    std::byte* act = nullptr;                       // device [act_row_bytes(f, n_in)]
};
void norm_router_topk(const mm_args& a, const router_norm& norm, const kernels::router_params& p, int32_t* ids,
                      float* weights, unsigned* arrivals, void* stream);
// Whether norm_router_topk (norm set) or router_topk (null) takes a in one launch (given a
// counter): for the tests, which check that the one-launch form was the one they compared.
bool router_one_launch(const mm_args& a, const kernels::router_params& p, const router_norm* norm);

}  // namespace sluice::cuda
