// The roofline behind `sluice bench`: what one forward must read from memory, the bandwidth
// measured at start, and the speed that bandwidth allows (the ceiling). Every bench result
// shows measured / ceiling, so a figure says how far it is from the machine, not only from a
// peer.
//
// The traffic model is the ideal one: each byte a forward needs is read once per forward (a
// window of rows shares one read of the dense weights and of each expert it touches), caches
// hold nothing across forwards, and the K/V of every cached position is read once per forward.
// Routed experts: a row reads n_expert_used of n_expert experts per layer; a window of R rows
// touches the expected number of distinct experts under uniform routing,
// n_expert * (1 - (1 - n_expert_used / n_expert)^R). Skewed routing touches fewer, so for
// windows and prefill the ceiling is a lower bound of the true one when routing is skewed.
//
// The compute bound: the same forward also costs arithmetic, 2 operations per multiply-add
// (the usual "2 x active weights" per row, plus attention: a row at position p does QK^T and PV
// over p + 1 positions in every layer). A row-heavy forward (prefill, on a GPU above all) can
// run out of multiply-adds before it runs out of bandwidth, so the ceiling of a result is
// min(bandwidth bound, compute bound), and the report names the bound that binds. Peaks: the
// CPU's int8 dot-product rate measured with the engine's own dot kernel (measure_cpu_int8_peak),
// the GPU's from its SM count and clock times a small per-architecture table of tensor-core rates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sluice {

class thread_pool;

// Bytes by kind, from `inspect`'s groups (include/sluice/inspect.h).
struct traffic_model {
    uint64_t shared_bytes = 0;        // read once per forward whatever its rows: attention/dense, shared
                                      // experts, output (inspect's bytes_per_token of those groups)
    uint64_t embd_row_bytes = 0;      // read per row: one token's embedding row
    uint64_t routed_bytes_total = 0;  // every routed expert of every layer (the *_exps tensors)
    int64_t n_expert = 0;             // 0: dense model
    int64_t n_expert_used = 0;
    uint64_t kv_bytes_per_position = 0;  // K and V of one position over all layers (f32 cache)
};

// Expected distinct experts one layer reads for `rows` rows under uniform routing; n_used for
// one row, n_expert at most. 0 for a dense model.
double expected_distinct_experts(int64_t n_expert, int64_t n_used, int rows);

// Bytes one forward of `rows` rows reads when `depth` positions are already cached: the shared
// weights once, an embedding row per row, the expected distinct experts, and the K/V of
// depth + rows positions (the window's own rows are written, then read back by attention).
double forward_bytes(const traffic_model& m, int rows, int64_t depth);

// Bytes per token of a prefill of n_prompt tokens from an empty cache in chunks of `chunk`
// rows: the sum of its forwards' bytes over n_prompt.
double prefill_bytes_per_token(const traffic_model& m, int n_prompt, int chunk);

// Bytes per token of serial decoding of n_gen tokens after `depth` cached positions: the mean
// of forward_bytes(1, depth + i), i = 0..n_gen-1.
double decode_bytes_per_token(const traffic_model& m, int64_t depth, int n_gen);

// The speed the bandwidth allows: tokens/s = bandwidth / bytes per token. 0 when either is 0.
double ceiling_tok_s(double bandwidth_gb_s, double bytes_per_token);

// Tokens a window of `rows` rows (1 pending + rows-1 drafts) yields on average when each draft
// is kept with probability `accept` given the ones before it were: 1 + a + ... + a^(rows-1).
double expected_window_tokens(double accept, int rows);

// ---- compute bound ----

// Multiply-adds per row, from the tensor shapes (bench.cpp fills it from inspect's tensors).
struct compute_model {
    double weight_macs_per_row = 0.0;     // every matmul one row goes through: attention/dense and
                                          // shared-expert projections, n_expert_used routed experts
                                          // per MoE layer, the output projection (the embedding
                                          // lookup is no matmul)
    double attn_macs_per_position = 0.0;  // per row per attended position, all layers:
                                          // n_layer * 2 * n_head * head_dim (QK^T and PV)
};

// Operations (2 per multiply-add) of one forward of `rows` rows after `depth` cached positions:
// row i attends depth + i + 1 positions (causal).
double forward_ops(const compute_model& m, int rows, int64_t depth);
// Per token of a prefill of n_prompt tokens from an empty cache (the chunking changes no
// arithmetic: the sum over rows is the same for any chunk).
double prefill_ops_per_token(const compute_model& m, int n_prompt);
// Per token of serial decoding of n_gen tokens after `depth` cached positions.
double decode_ops_per_token(const compute_model& m, int64_t depth, int n_gen);
// tokens/s = peak / ops per token; 0 when either is 0.
double compute_ceiling_tok_s(double peak_ops_s, double ops_per_token);

// Both bounds of one result and the one that binds: the smaller of those known (0 = unknown).
struct roofline_bound {
    double memory_tok_s = 0.0;
    double compute_tok_s = 0.0;
    double ceiling_tok_s = 0.0;   // min of the known bounds, 0 when neither is known
    const char* binds = "none";   // "memory", "compute" or "none"
};
roofline_bound bind_ceiling(double memory_tok_s, double compute_tok_s);

// The CPU's peak int8 rate: every pool thread runs the engine's dot kernel (kernels::dot_rows
// at the best ISA) on a Q8_0 weight row against 16 activation rows, all in L1/L2, for about
// `seconds`; ops = 2 per multiply-add. Measured, not assumed (cores x GHz x ops per cycle would
// need the turbo clock under AVX-512 load, which no file states); it is the rate this kernel can
// reach on this machine with nothing to wait for, so a real forward stays below it.
struct cpu_peak_probe {
    double int8_ops_s = 0.0;
    int threads = 0;
    std::string isa;           // "avx512", "avx2", "scalar"
    double seconds = 0.0;      // measured
};
cpu_peak_probe measure_cpu_int8_peak(thread_pool& pool, double seconds = 0.2);

// Tensor-core rates per SM per clock, dense (no sparsity), by compute capability; nullptr for an
// architecture the table does not hold (then no GPU compute bound is reported).
struct gpu_tensor_rate {
    int cc_major = 0, cc_minor = 0;
    double int8_ops_per_clk_sm = 0.0;   // 2 per int8 multiply-add
    double fp16_flops_per_clk_sm = 0.0; // 2 per fp16 multiply-add, fp32 accumulate
    const char* source = "";            // where the figure comes from
};
const gpu_tensor_rate* gpu_tensor_rate_for(int cc_major, int cc_minor);
// SM count x clock (GHz) x rate per SM per clock, in operations per second.
double gpu_peak_ops_s(int sm_count, double clock_ghz, double ops_per_clk_sm);

// Memory read bandwidth with the pool's threads: each thread reads its own slice of a buffer
// far larger than the last-level cache (first touched by the same thread), `reps` times; the
// best pass is kept (the others saw interference). GB/s = 1e9 bytes/s.
struct ram_probe {
    double read_gb_s = 0.0;
    uint64_t buffer_bytes = 0;
    int threads = 0;
    int reps = 0;
};
ram_probe measure_ram_read(thread_pool& pool, uint64_t buffer_bytes = 0, int reps = 5);

// The buffer measure_ram_read uses by default: 4x the last-level cache, at least 512 MiB, at
// most an eighth of physical memory.
uint64_t default_ram_probe_bytes();

// GPU probes (SLUICE_HAVE_CUDA builds with a device): host-to-device copies from pinned memory
// and device-to-device copies (read + write counted, as GPU-MACHINE.md reports them).
struct gpu_probe {
    bool present = false;
    std::string note;          // "no GPU (built without CUDA)", "no GPU (no CUDA device)", ...
    std::string name;          // device name
    double pcie_h2d_gb_s = 0.0;
    double hbm_copy_gb_s = 0.0;  // device-to-device, bytes read + bytes written
    double hbm_read_gb_s = 0.0;  // the bandwidth a weight-reading kernel can approach (= the copy figure)
    // The compute peak (device attributes x gpu_tensor_rate_for; 0 when the arch is not in the table).
    int sm_count = 0, cc_major = 0, cc_minor = 0;
    double clock_ghz = 0.0;          // the SM clock the device reports (its boost clock)
    double peak_int8_ops_s = 0.0;    // int8 tensor-core operations per second, dense
    double peak_fp16_flops_s = 0.0;  // fp16 tensor-core flops per second, dense
    std::string peak_source;         // the table row's source, or why there is no peak
};
gpu_probe measure_gpu();

// "Intel(R) Xeon(R) Processor, 2 cores" (the machine field of bench/results.jsonl).
std::string machine_description();

}  // namespace sluice
