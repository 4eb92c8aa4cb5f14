// The whole model on one CUDA device: llama, qwen3, qwen3moe, qwen2moe and the hybrids
// qwen3next and qwen35moe, with every weight uploaded once, the forward run by the kernels of
// src/kernels/cuda, and each sequence's KV cache (and a hybrid's recurrent state) in VRAM. Where every weight is quantised (or F32 router/norm vectors), the logits are
// the CPU model's bits (E3: the same int8 activation blocks, the same per-block float terms in
// the same order, the same exp/SiLU); F16/BF16 matrices follow the same 16-lane FMA rule.
#pragma once

#include "models/model.h"
#include "placement/metrics.h"
#include "placement/routing_profile.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace sluice {
namespace placement {
class progress;
}

struct mtp_head;         // spec/mtp.h
struct mtp_draft_rows;   // models/hybrid_mtp.h

// True when this build has the CUDA backend and at least one device is visible.
bool cuda_available();
// True when load_model_cuda has a forward for general.architecture `arch` (llama, qwen3,
// qwen3moe, qwen2moe, qwen3next, qwen35moe; in any build).
bool cuda_model_supports(const std::string& arch);

// Loads f onto CUDA device `device`. The returned model's forward_batch keeps, per kv_cache
// object passed in, a device copy of that cache (keyed by its address: a kv_cache must outlive
// its use with this model, and a new cache at a freed one's address inherits nothing valid
// beyond kv.n_pos(), which forward_batch's contract already requires). The host K/V arrays of
// the kv_cache are not written; n_pos is. f must outlive the model (embedding rows are read
// from it on the host). graphs: run each decode step (one sequence, one row) and each verify window
// (2..16 rows, logits for all) as captured CUDA graphs (one per cache and row count; a split
// model's cut where the host works), replayed with the position in device memory: the same
// kernels with the same arguments, so the same bits, with one launch instead of ~20 per layer. Throws "not built
// with CUDA" in a CPU-only build.
std::unique_ptr<model> load_model_cuda(const model_file& f, const load_options& o, int device, bool graphs = true);

// Routed experts split between VRAM and host memory (issue 10, first working path; the lanes are
// src/models/cuda_expert_lanes.h). Dense weights, attention, router, shared experts, norms and
// KV stay on the GPU; vram_budget bytes hold routed experts (each a gate|up|down "blob"), chosen
// by the profile's counts, highest first (placement::expert_cache's initial set), or without a
// profile whole layers in layer order (a layer whose experts are all resident runs as in the
// all-GPU model, with no host round trip). Per MoE layer the GPU routes, a kernel hands the
// window's ids to the host through mapped memory (the doorbell, which the host polls), the GPU
// computes the resident experts' pairs while the CPU pool computes the others from host memory (moe/expert_pool.h: run_expert_pairs), and the GPU
// combines each row in rank order: the logits of the all-GPU model and of the CPU model (E3).
// A budget that holds every routed expert is the all-GPU model (CUDA graphs and all); a split
// model's decode step runs as graph segments cut where the host works in each split layer
// (cuda_model_graphs.cpp). Misses the cost model sends over PCIe are
// copied into staging slots and computed by the GPU after its hits (same kernels, same bits).
// Large prefill chunks stream each split layer's experts (prefill_stream_rows). Not yet: the
// doorbell (the ids through mapped memory, polled by the host), adaptive swaps.
struct cuda_placement {
    uint64_t vram_budget = UINT64_MAX;                   // bytes for routed experts' blobs
    std::optional<placement::routing_profile> profile;   // must match the model's shape when given
    // The PCIe lane: up to staging_slots misses a layer are copied by the copy engine from the
    // model file's mapping (registered with CUDA, so the copies are DMA) into device staging
    // slots and computed by the GPU, while the CPU lane computes the other misses. The slots are
    // VRAM beyond vram_budget (staging_slots x one expert's blob). 0: no PCIe lane.
    int staging_slots = 16;
    // < 0: the cost model (calibrated at load and at the first forward) splits each layer's
    // misses; 0..1: this share goes over PCIe whatever it costs (tests: the bits never depend on it).
    double pcie_share = -1.0;
    // Prefill streaming (issue 10, part 5; models/cuda_expert_stream.cpp): a forward for which
    // copying every missing expert costs less than splitting the misses (the cost model:
    // placement::stream_layer_costs over the split layers) copies each split layer's experts whole
    // into one of two layer buffers on the device, the next layer's copy running while this one
    // computes, and runs the layer as the all-GPU model does: no host round trip, the same bits.
    // < 0: the cost model's cut-over (rows); 0: never; N > 0: every forward of >= N rows (tests).
    // Needs the PCIe lane; the two buffers are VRAM beyond vram_budget (2 x a layer's experts).
    int prefill_stream_rows = -1;
    // The adaptive cache (issue 10, part 4; placement/expert_cache.h): decayed routing counts
    // with this half-life (in forwards), and at each forward's end up to cache_swaps_per_step
    // swaps of a layer's weakest resident for a hotter expert of the same layer (hysteresis:
    // 1.25x + 1 lookup), copied while the next forward runs. Without a profile the initial set is
    // then an even share of each layer (expert 0 of every layer first, ...) for the swaps to
    // improve on. false: the initial set stays, and without a profile it is whole layers in
    // layer order (they skip the host round trip). Needs the copy stream (the expert pages
    // registered); never changes a bit (E3).
    // 8 swaps a forward: on the H200, synthetic Qwen3-30B-A3B shape at 2 GiB, 128 tokens after a
    // 512-token prompt, 122.8 tok/s (hit rate 0.810) against 78.2 with 2 (0.404) and 64.4 with
    // whole layers kept (2026-12-04; bench/gpu/split_decode_bench.cu).
    bool adaptive_cache = true;
    double cache_half_life_steps = 32.0;
    int cache_swaps_per_step = 8;
    // The load's long steps (the weights to the GPU, the resident experts, pinning the expert
    // pages) as progress phases; none when null. Only used during load_model_cuda.
    placement::progress* progress = nullptr;
};
std::unique_ptr<model> load_model_cuda(const model_file& f, const load_options& o, int device, const cuda_placement& p,
                                       bool graphs = true);

// Where a model made by load_model_cuda keeps its routed experts.
struct cuda_placement_info {
    bool split = false;          // some routed experts run on the CPU lane
    int resident = 0, total = 0; // (layer, expert) pairs in VRAM / in the model
    uint64_t resident_bytes = 0, total_bytes = 0;
    int whole_layers = 0;        // layers with every routed expert resident (no host round trip)
    bool pcie_lane = false;      // misses may be copied into staging slots
    int staging_slots = 0;
    uint64_t staging_bytes = 0;  // VRAM of the staging slots
    std::string pcie_note;       // why there is no PCIe lane (empty when there is one)
    double pcie_gb_s = 0;        // the cost model's figures: measured at load (PCIe) ...
    double cpu_gb_s = 0;         // ... and at the first forward (the CPU pool; 0 before it)
    bool prefill_stream = false; // layer buffers for prefill streaming are allocated
    uint64_t stream_bytes = 0;   // their VRAM
    int64_t stream_rows = 0;     // forwards of at least this many rows stream (the cost model's
                                 // cut-over once calibrated at the first forward, or the forced count)
    std::string stream_note;     // why there is no streaming (empty when there is)
    bool adaptive_cache = false; // the cache swaps experts within split layers
    std::string adaptive_note;   // why it does not (empty when it does)
};
cuda_placement_info cuda_placement_of(const model& m);
// What the split model's lanes did since the last reset (hits, CPU misses, per-lane seconds
// measured: the GPU lane by events around its expert launches, the CPU lane by wall time);
// nullopt for a model whose experts are all in VRAM. Fails for a model not made by load_model_cuda.
std::optional<placement::placement_metrics> cuda_placement_metrics(const model& m);
void reset_cuda_placement_metrics(model& m);
// The MTP (nextn) head of a hybrid model made by load_model_cuda whose file carries the block
// (hybrid_mtp.h's contract and bits: the same host steps, then the block on m's device and
// stream; the first head uploads it, every routed expert of it in VRAM whatever the budget, and
// from then on m's forwards leave their residual rows in scratch.x); null for any other
// model. draft_rows as make_mtp_head's. m must outlive the head, and the head runs on the thread
// that runs m's forwards (it uses m's stream and scratch). make_mtp_head (hybrid_mtp.h) calls it.
std::unique_ptr<mtp_head> make_cuda_mtp_head(model& m, int n_ctx, int max_rows,
                                             std::shared_ptr<const mtp_draft_rows> draft_rows = nullptr);
// That head's output matrix (host view: nextn.shared_head_head, or output), null without one.
const tensor_view* cuda_mtp_output(const model& m);
// VRAM of that block's own weights, uploaded by the first head (0 before, or without one):
// outside the routed experts' budget.
uint64_t cuda_mtp_bytes(const model& m);
// Turns the decode-step graphs of a model made by load_model_cuda on or off (benchmarks compare
// both); fails for any other model.
void set_cuda_graphs(model& m, bool on);
// Programmatic dependent launch (sm_90; src/kernels/cuda/launch.cuh) for every CUDA kernel of
// the process, on or off (on by default on sm_90+ devices, unless SLUICE_CUDA_PDL=0): each
// kernel waits for the one before it at its first instruction, so the bits are the same; only
// launch latency overlaps. Drops m's captured graphs
// (they are captured again with or without programmatic edges). Fails for a model not made by
// load_model_cuda.
void set_cuda_programmatic_launch(model& m, bool on);

}  // namespace sluice
