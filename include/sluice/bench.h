// `sluice bench`: how fast a model runs here, and how far that is from what the machine allows.
//
// Tests (llama-bench's names where they exist):
//   ppN          prefill of N tokens from an empty cache, in chunks of `chunk` rows;
//   tgN@dD       serial decode of N tokens after a prompt of D tokens (the KV cache is filled
//                once per depth, deepest last, and reused by the repetitions);
//   win T@dD     one forward of a verify window of T rows after D cached positions (the cost
//                curve the draft-depth policy reads), never committed;
//   spec T@dD    decoding with windows of T rows whose drafts come from an oracle tape: the
//                model's own greedy continuation, each draft replaced by a wrong token with
//                probability 1 - accept, so the acceptance is set, not hoped for; its tokens
//                must equal serial decoding's (checked, reported as same_tokens).
//   spec+mtp T@dD  the same windows with a model's MTP head drafting (models that carry one):
//                its proposals are computed and paid for, then replaced by the oracle's, so the
//                time includes drafting at the oracle's acceptance.
// Every result carries the roofline ceiling and its fraction of it: the smaller of the memory
// bound (bandwidth measured at start / bytes per token from `inspect`'s groups) and the compute
// bound (the CPU's measured int8 dot-kernel rate, or the GPU's tensor-core peak, / 2 x multiply-
// adds per token from the tensor shapes), with the one that binds named; runtime/roofline.h has
// both models.
// Expert hit rate and per-lane times: with --gpu and a --vram-budget below the routed experts'
// total (experts split between VRAM and the CPU lane), the report's placement holds them over
// the whole run; otherwise placement is null and placement_note says why.
#pragma once

#include "sluice/engine.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {

struct bench_options {
    std::filesystem::path model_path;   // GGUF file or Hugging Face directory
    int n_threads = 0;                  // 0: every hardware thread
    std::vector<int> n_prompt{512};     // prefill tests (tokens); empty: none
    int n_gen = 64;                     // tokens per decode test; 0: no decode tests
    std::vector<int> depths{512, 4096}; // decode after prompts of these many tokens (0: one token)
    int repetitions = 3;                // each test runs this many times: mean and stddev
    int chunk = 0;                      // rows per prefill forward; 0: the engine's for the model and backend
    std::vector<int> windows{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};  // cost curve; empty: none
    int window_depth = -1;              // depth of the cost curve and spec runs; -1: the first depth
    double accept = 0.7;                // oracle tape: probability a draft is the model's own token
    std::vector<int> spec_windows{1, 2, 4, 8, 16};  // windows of the oracle runs; empty: none
    int spec_n = 0;                     // tokens per oracle run; 0: n_gen
    int spec_reps = 1;                  // repetitions of each oracle run
    // 2..16: one more oracle run (and one with the MTP head) whose windows, up to this many rows,
    // the depth policy sizes as `sluice run --spec` does, calibrated once before it, untimed;
    // 0: none. The MTP head's run keeps the engine's cap of 4 drafts.
    int spec_policy = 0;
    uint64_t seed = 1;                  // prompt tokens and the oracle's coin
    bool probe_bandwidth = true;        // measure RAM (and GPU) bandwidth at start
    bool warmup = true;                 // one untimed decode token before each depth's timed runs
                                        // (llama-bench's warm-up); `--no-warmup` turns it off
    double bandwidth_gb_s = 0.0;        // > 0: use this instead of the RAM probe (tests, what-ifs)
    uint64_t probe_bytes = 0;           // RAM probe buffer; 0: 4x the last-level cache, >= 512 MiB
    int gpu = -1;                       // >= 0: the whole model on this CUDA device (bench_gpu_built() only);
                                        // ceilings then use the GPU's HBM bandwidth
    std::string numa = "auto";          // --numa off|auto|simulate:N (engine_options::numa)
    uint64_t vram_budget = UINT64_MAX;  // with gpu >= 0: VRAM bytes for routed experts (UINT64_MAX: all of them)
    // With a split budget: prefill streaming of the experts to the GPU (< 0: from the cost
    // model's cut-over; 0: off; N: every forward of >= N rows).
    int prefill_stream_rows = -1;
    bool adaptive_cache = true;         // with a split budget: the VRAM cache swaps experts (engine_options)
    bool mmap = true;                   // false (`--no-mmap`): the file read into memory (src/io/mmap.h)
};

struct bench_result {
    std::string test;          // "pp512", "tg64@d4096", "win 4@d512", "spec 4@d512"
    std::string kind;          // "prefill", "decode", "window", "spec"
    int n_prompt = 0;          // prefill tokens
    int n_gen = 0;             // decoded tokens (decode, spec)
    int depth = 0;             // cached positions before the test
    int rows = 0;              // rows per forward: the chunk (prefill), 1 (decode), T (window, spec)
    int reps = 0;
    std::vector<double> seconds;  // one per repetition
    double mean_s = 0.0, stddev_s = 0.0;
    double tok_s = 0.0, stddev_tok_s = 0.0;  // tokens/s (window: rows/s), mean over repetitions
    double bytes_per_token = 0.0;            // roofline traffic (window: per row)
    double ceiling_tok_s = 0.0;              // min(memory, compute) bound, the known ones (0: neither)
    double ceiling_fraction = 0.0;           // tok_s / ceiling_tok_s
    double memory_ceiling_tok_s = 0.0;       // bandwidth / bytes per token (spec: x tokens per window)
    double ops_per_token = 0.0;              // 2 x multiply-adds (window: per row)
    double compute_ceiling_tok_s = 0.0;      // peak ops/s / ops per token (0: no peak measured)
    std::string ceiling_bound = "none";      // which bound is the ceiling: "memory", "compute", "none"
    // Decode and spec tests of a split placement: the VRAM cache's hits over this test's routed
    // expert lookups (all repetitions) and the swaps it made meanwhile; -1: no split, not measured.
    double hit_rate = -1.0;
    int64_t swaps = -1;
    // spec only
    double accept = 0.0;            // the tape's per-draft probability
    double acceptance = 0.0;        // drafts kept / drafts proposed (a rejected draft wastes the rest)
    double tokens_per_step = 0.0;   // measured tokens per window
    double expected_tokens_per_step = 0.0;  // 1 + a + ... + a^(T-1) (0 for a policy's windows)
    double rows_mean = 0.0;         // rows per window over the run (at most T; a policy's: its choices)
    bool same_tokens = true;        // token_sha equal to serial decoding's
    // A policy's windows: the milliseconds it priced windows of 1..T rows at, as calibrated
    // before the run and as the run's own windows left them, and a draft at the run's end (its
    // drafter's measured cost: 0 for the oracle's free drafts); its last repetition. Empty and
    // 0 for fixed windows.
    std::vector<double> policy_costs_calibrated_ms, policy_costs_end_ms;
    double policy_draft_cost_ms = 0.0;
};

struct bench_report {
    std::string model_path;
    std::string model;          // engine-style description: arch, layers, widths, experts
    std::string machine;        // "Intel(R) Xeon(R) Processor, 2 cores"
    std::string backend;        // "cpu" or "cuda:N"
    int threads = 0;
    int chunk = 0;
    bool warmup = true;         // bench_options::warmup
    uint64_t file_bytes = 0;
    // NUMA (runtime/numa_setup.h): the nodes the threads are spread over, the threads of each,
    // whether the nodes are simulated, and the decision in words (with the expert placement).
    int numa_nodes = 1;
    std::vector<int> threads_per_node;
    bool numa_simulated = false;
    std::string numa;
    // Bandwidth measured at start.
    double ram_read_gb_s = 0.0;
    uint64_t ram_probe_bytes = 0;
    bool gpu_present = false;
    std::string gpu_note;       // "no GPU (built without CUDA)", or the device and what was measured
    double pcie_h2d_gb_s = 0.0, hbm_read_gb_s = 0.0;
    // Roofline.
    double bandwidth_gb_s = 0.0;       // what the ceilings use
    std::string bandwidth_source;      // "ram probe", "gpu hbm probe", "given (--bandwidth)"
    struct group {
        std::string name;
        uint64_t bytes = 0;
        uint64_t bytes_per_token = 0;
    };
    std::vector<group> groups;         // inspect's five groups
    uint64_t bytes_per_token = 0;      // one decoded token at depth 0 (inspect's figure)
    uint64_t kv_bytes_per_position = 0;
    // The traffic model (runtime/roofline.h), so that another engine's figures can be held to
    // the ceiling of its own batch size (bench/record.py: llama-bench's n_ubatch).
    uint64_t shared_bytes = 0, embd_row_bytes = 0, routed_bytes_total = 0;
    int64_t n_expert = 0, n_expert_used = 0;
    double ceiling_tok_s = 0.0;        // decode at depth 0, memory bound
    // Compute bound (runtime/roofline.h): multiply-adds from the tensor shapes, and the peak of
    // the device the weights are computed on.
    double weight_macs_per_row = 0.0;      // every matmul of one row (n_expert_used experts)
    double attn_macs_per_position = 0.0;   // attention, per row per attended position
    double routed_macs_per_row = 0.0;      // of weight_macs_per_row, the routed experts' share
    double cpu_peak_ops_s = 0.0;           // measured int8 dot-kernel rate (0: not probed)
    std::string cpu_peak_isa;
    double gpu_peak_ops_s = 0.0;           // int8 tensor cores, from the device (0: none / unknown arch)
    double peak_ops_s = 0.0;               // what the compute bounds use
    std::string peak_source;               // how peak_ops_s was obtained
    double compute_ceiling_tok_s = 0.0;    // decode at depth 0
    std::vector<bench_result> results;
    std::string placement_note;        // where the routed experts ran (and why no hit rate, when none)
    std::string placement_json;        // a split model's placement over the run, a JSON object; empty: none
    std::vector<std::string> notes;
};

// True when this build can run the model on a GPU (CUDA backend compiled in); no device is
// touched.
bool bench_gpu_built();

// Runs the tests; progress receives one line per finished test (for people; may be empty).
// Throws sluice::error on a bad option or a model that does not open.
bench_report run_bench(const bench_options& o, const std::function<void(std::string_view)>& progress = {});

std::string format_bench_text(const bench_report& r);
// The JSON object bench/record.py and the tests read (shape in bench/README.md).
std::string format_bench_json(const bench_report& r);

}  // namespace sluice
