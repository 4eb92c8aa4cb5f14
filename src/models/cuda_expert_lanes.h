// The three expert lanes of a split MoE model on one CUDA device (issue 10; load_model_cuda with
// a cuda_placement, models/cuda_model.h): the VRAM cache lane, whose resident experts the GPU
// computes; the PCIe lane, misses the copy engine moves from host memory into staging slots for
// the GPU to compute; and the CPU lane, which computes the other misses from host memory
// (moe/expert_pool.h: run_expert_pairs). The planner (placement/plan.h) splits each layer's
// misses between PCIe and the CPU by the cost model. cuda_model_moe.cpp runs a layer as
//   ring (a kernel writes the ids and normalised input to mapped host memory, maps each pair to
//   its resident slot on the device, then rings the doorbell) -> GPU hits and the shared expert
//   enqueued -> plan_window (the host polls the doorbell while the GPU computes them; plans;
//   the PCIe copies enqueued on the copy stream) -> staged experts enqueued (waiting on the
//   copies' event) -> run_cpu (the CPU lane, while the GPU and the copy engine work) -> join
//   (the CPU's rows copied into the layer's per-pair buffer) -> the all-GPU model's rank-order
//   combine.
// Every pair's row has the same bits on any lane (E3): the staged and resident experts are the
// file's bytes read by the same kernels.
// The adaptive cache (part 4; cuda_expert_adapt.cpp): each planned window's routed ids are
// counted, and at each forward's end the cache swaps up to 8 experts within their layers; an
// evicted expert leaves both slot maps before the next forward, a loaded one joins them at the
// forward's end after its copy has landed.
// Host-side C++ (cuda_runtime.h only); included by the CUDA model's files alone.
#pragma once

#include "core/thread_pool.h"
#include "models/cuda_model.h"
#include "moe/expert_pool.h"
#include "placement/cost_model.h"
#include "placement/expert_cache.h"
#include "placement/metrics.h"
#include "placement/plan.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

class cuda_expert_lanes {
public:
    // One layer's resident experts on the device: local slot s holds its expert's gate, up and
    // down matrices at gate + s * gate_stride (and so on), each laid out as the expert's slice of
    // the file's tensor, so the expert-mode matmuls read a slot as they read an expert.
    struct layer_slots {
        std::byte* gate = nullptr;   // device [n_slots, n_ff_exp rows of gate's row bytes]
        std::byte* up = nullptr;     // device [n_slots, n_ff_exp rows of up's row bytes]
        std::byte* down = nullptr;   // device [n_slots, n_embd rows of down's row bytes]
        int n_slots = 0;
    };
    // Where one layer's window went.
    struct routed {
        int gpu_pairs = 0, pcie_pairs = 0, cpu_pairs = 0;
    };

    // banks: [n_layer] the file's expert tensors of every layer (host memory: the CPU lane reads
    // them and the resident slots are copied from them). Uploads the resident experts.
    cuda_expert_lanes(const model_hparams& hp, std::vector<moe::expert_bank> banks, const cuda_placement& p,
                      void* stream);
    ~cuda_expert_lanes();
    cuda_expert_lanes(const cuda_expert_lanes&) = delete;
    cuda_expert_lanes& operator=(const cuda_expert_lanes&) = delete;

    const layer_slots& slots(int il) const { return slots_[static_cast<size_t>(il)]; }
    // Every routed expert of layer il is resident, slot e holding expert e: the layer runs as
    // in the all-GPU model, without ring() (no host round trip, nothing for the other lanes).
    bool whole_layer(int il) const { return slots_[static_cast<size_t>(il)].n_slots == hp_.n_expert; }
    // The PCIe lane's staging slots (n_slots 0: no PCIe lane), read as a layer's slots are.
    const layer_slots& staging() const { return staging_; }
    cuda_placement_info info() const { return info_; }

    // Uploads the host's slot map to the device when they differ: adapt() changed it and its
    // upload did not happen (a CUDA call in adapt threw). Called before each forward, so the
    // doorbell's resident slots and the plan's always agree. A flag test when they agree.
    void sync_slot_map();
    // Pinned and host buffers for windows of up to max_rows rows (the stream must be idle).
    // True when it (re)allocated them: graphs holding the old addresses must go.
    bool ensure(int max_rows);
    // A split layer's steps, in this order: ring, the resident lane's launches (slot_ids), then
    // plan_window, upload_slots, the staged launches (stage_ids), run_cpu, join. A split decode
    // step's graphs (cuda_model_graphs.cpp) capture the launches and call the host steps between.
    //
    // Enqueues the doorbell of layer il: its routed ids [n * k_used] and normalised input
    // [n, n_embd] (device) to mapped host memory, and the pairs' resident slots (slot_ids).
    // captured: into a graph (no timing event then).
    void ring(int il, int64_t n, const int32_t* d_ids, const float* d_xn, bool captured = false);
    // Polls the doorbell (no blocking sync: the stream goes on with the resident experts), plans
    // the window, enqueues the PCIe copies and fills each pair's join and staging slots on the host.
    routed plan_window(int il, int64_t n);
    // Enqueues the join and staging slots' upload (the current window's n * k_used pairs).
    void upload_slots(int64_t n);
    // Every expert format takes the grouped matmul (int8 formats).
    bool groupable() const { return grouped_ok_; }
    // Device [n * k_used] each: the slot of a pair on the resident lane (as ring left it), and on
    // the PCIe lane (as upload_slots left it); -1: another lane's pair.
    const int32_t* slot_ids() const { return d_mm_; }
    const int32_t* stage_ids(int64_t n) const { return d_slot_ + n * hp_.n_expert_used; }
    const std::vector<int>& split_layers() const { return split_layers_; }
    // The CPU figure of the cost model, measured on the forward's pool (once; plan_window's
    // plans use it from then on).
    void calibrate(thread_pool& pool);
    // Events around the GPU lane's launches (measured time, read by end_forward): from the
    // doorbell through the resident experts, the shared expert and the staged experts (which
    // wait for their copies).
    void gpu_begin(int il);
    void gpu_end(int il);
    // Around the launches that read the staging slots: the stream waits for this layer's
    // copies; the next layer's copies wait for these launches.
    void staged_begin();
    void staged_end();
    // The CPU lane: every pair whose expert is not resident, into pinned host rows.
    void run_cpu(int64_t n, thread_pool& pool, int il);
    // Enqueues the copy of the CPU lane's rows into d_ey [n * k_used, n_embd] (device). captured:
    // into a graph, which serves every window, so the copy is made even when this one has no CPU
    // rows (and no timing event is recorded).
    void join(int64_t n, float* d_ey, bool captured = false);
    // Events around the GPU's work from a split layer's join to the next one's routing
    // (placement_metrics::gpu_between): join and ring record them, or the replay of a
    // split decode step's graphs around each tail segment. An end without a begin is ignored.
    void between_begin();
    void between_end();
    // After the forward's last sync: adds the GPU lane's measured time to the metrics, then lets
    // the adaptive cache swap (adapt).
    void end_forward();
    // A forward that threw part way: waits for what it enqueued on both streams (so that no
    // copy of the next forward lands in a layer buffer an abandoned launch still reads) and
    // forgets its timings. Never throws.
    void abandon_forward() noexcept;

    // Prefill streaming (cuda_expert_stream.cpp; cuda_placement::prefill_stream_rows). Decides
    // whether this forward of n rows streams; when it does, enqueues the copies of the first two
    // split layers. Call after calibrate.
    bool begin_stream(int64_t n);
    bool streaming() const { return streaming_; }
    // Layer il's non-resident experts in expert order (slot e holds expert e, as a whole layer's
    // slots; a resident expert's slot is not filled): the stream waits for their copies. il must
    // be a split layer of a streaming forward.
    const layer_slots& stream_acquire(int il);
    // Enqueues the split of a streamed layer's pairs (ids: device [n * k_used]): afterwards
    // slot_ids() holds each pair's resident slot (or -1) and the returned device array [n * k_used]
    // its expert where not resident (or -1), the ids to read stream_acquire's buffer by.
    const int32_t* split_streamed(int il, int64_t n, const int32_t* d_ids);
    // After the launches that read layer il's buffer: the buffer is free for the split layer two
    // on, whose copies are enqueued now.
    void stream_release(int il);

    const placement::placement_metrics& metrics() const { return metrics_; }
    void reset_metrics() { metrics_ = {}; }

private:
    void free_host();
    // Waits until the doorbell has rung once more than the last wait saw.
    void wait_for_bell();
    // Allocates the staging slots and calibrates the PCIe figure (after open_copies).
    void open_pcie_lane(int staging_slots);
    // Times copies of a few experts into the staging slots: the cost model's PCIe figure.
    void calibrate_pcie();
    // Enqueues the copies of this layer's PCIe experts (plan_) on the copy stream.
    void copy_staged(int il);
    // Allocates the two layer buffers of prefill streaming (after the PCIe lane opened); on
    // failure streaming stays off and info_.stream_note says why.
    void open_stream(int prefill_stream_rows);
    // The smallest window the cost model streams (stream_layer_costs summed over split layers).
    int64_t stream_cutover() const;
    // Enqueues on the copy stream every non-resident expert of split layer split_layers_[k] into
    // buffer k % 2, from host memory (the resident ones are read from their slots).
    void copy_layer(size_t k);
    // Registers the expert tensors' host pages with CUDA and makes the copy and swap streams (the
    // PCIe lane, prefill streaming and the cache's swaps copy from them); the reason when
    // registering fails (then none is there), else empty.
    std::string open_copies(placement::progress* prog);
    // At a forward's end, the stream idle (cuda_expert_adapt.cpp): when the last swaps' copies
    // have landed their slots join both maps and the cache makes this step's swaps (else it only
    // counts); each evicted expert leaves both maps, and the loaded experts' copies are enqueued
    // on the swap stream, to land while the next forward runs.
    void adapt();

    model_hparams hp_;
    std::vector<moe::expert_bank> banks_;     // [n_layer] host tensors
    void* stream_;
    placement::expert_cache cache_;           // the resident set; swaps within layers (adapt)
    placement::planner planner_;              // dedup and lane split, for the metrics
    placement::layer_plan plan_;
    placement::placement_metrics metrics_;
    cuda_placement_info info_;
    std::vector<layer_slots> slots_;          // [n_layer]
    std::vector<int32_t> local_slot_;         // [n_layer * n_expert] local slot of a landed expert, or -1
    // The adaptive cache (adaptive_: asked for, some layer split, the copy stream open).
    bool adaptive_ = false;
    std::vector<int32_t> local_of_slot_;      // [cache_.n_slots()] a cache slot's local slot in its layer
    std::vector<placement::cache_swap> in_flight_;   // swaps whose copies are enqueued on swap_stream_
    // The swaps' copies have a stream of their own: behind the next forward's staged copies on
    // the copy stream they would hold its first split layers back (8 swaps: ~24 MB, ~0.5 ms of
    // PCIe for the 30B shape); beside them they share the link. A forward that ends before they
    // land makes no swaps, so the swaps (and hit rates) of a run can depend on the copies'
    // timing; the tokens cannot (E3). In session 21's runs they always landed in time: the same
    // hit rates and swap counts as session 20's, whose forward-end sync waited for them.
    void* swap_stream_ = nullptr;             // cudaStream_t
    void* swaps_landed_ = nullptr;            // cudaEvent_t: recorded after in_flight_'s copies
    bool map_stale_ = false;                  // local_slot_ changed since d_local_slot_'s last upload
    int32_t* d_local_slot_ = nullptr;         // device copy of local_slot_ (the doorbell maps ids by it)
    // The doorbell (ring): rings so far in h_bell_, written by the kernel; the host counts the
    // rings it has waited for (every ring is waited for once: plan_window).
    uint32_t* h_bell_ = nullptr;              // pinned, mapped [1]
    uint32_t* d_bell_ = nullptr;              // h_bell_ as the device addresses it
    uint32_t* d_ring_state_ = nullptr;        // device [2] (routing_bell::state)
    uint32_t rings_waited_ = 0;
    std::vector<void*> dev_allocs_;
    // Per-window buffers, for max_rows_ rows (RK = max_rows_ * k_used pairs).
    int max_rows_ = 0;
    int32_t* h_ids_ = nullptr;      // pinned, mapped [RK] routed ids, written by the doorbell
    float* h_xn_ = nullptr;         // pinned, mapped [max_rows_, n_embd] normalised input, likewise
    int32_t* d_h_ids_ = nullptr;    // h_ids_ as the device addresses it
    float* d_h_xn_ = nullptr;       // h_xn_ as the device addresses it
    int32_t* d_mm_ = nullptr;       // device [RK]: each pair's resident slot (-1: another lane's)
    int32_t* h_slot_ = nullptr;     // pinned [2, RK]: join's slots (-1: CPU pair), then staging slots
    int32_t* d_slot_ = nullptr;     // device copy of h_slot_
    float* h_ey_ = nullptr;         // pinned, mapped [RK, n_embd]: the CPU lane's pair rows
    float* d_ey_host_ = nullptr;    // h_ey_ as the device addresses it
    std::vector<int32_t> cpu_ids_;  // [RK] expert of a CPU pair, -1 for a GPU pair
    moe::expert_scratch scratch_;
    int64_t pairs_ = 0, cpu_pairs_ = 0;   // the current layer's
    bool grouped_ok_ = false;             // expert formats take the grouped (skipping) matmul
    // GPU lane timing: an event pair per layer, and whether this forward recorded it.
    std::vector<void*> events_;           // [2 * n_layer] cudaEvent_t
    std::vector<uint8_t> recorded_;       // [n_layer]
    // The PCIe lane (staging_.n_slots > 0).
    placement::cost_model costs_;         // calibrated figures (the planner holds a copy)
    layer_slots staging_;                 // device [n_slots] of the largest gate / up / down slice
    std::vector<void*> registered_;       // host ranges registered with cudaHostRegister
    void* copy_stream_ = nullptr;         // cudaStream_t: the copy engine's queue
    void* landed_ = nullptr;              // cudaEvent_t: the current layer's copies are done
    void* staging_free_ = nullptr;        // cudaEvent_t: the last launch reading the slots is done
    std::vector<void*> pcie_events_;      // [2 * n_layer] cudaEvent_t around each layer's copies
    std::vector<uint8_t> pcie_recorded_;  // [n_layer]
    std::vector<int32_t> stage_of_;       // [n_expert] this layer's staging slot per expert, or -1
    // copy_staged's copies (gate, up, down per staged expert; capacity 3 x staging slots).
    std::vector<void*> copy_dst_;
    std::vector<const void*> copy_src_;
    std::vector<size_t> copy_bytes_;
    bool calibrated_ = false;             // the CPU figure has been measured
    std::vector<void*> between_events_;   // [2 * (n_layer + 1)] cudaEvent_t, pairs in forward order
    size_t between_done_ = 0;             // complete pairs this forward
    bool between_open_ = false;           // a begin without its end yet
    // Host phase clocks of the current forward (metrics_.host): the last sync's end, the last
    // CPU lane's end (none yet: time_point{}).
    std::chrono::steady_clock::time_point synced_at_{}, cpu_done_at_{};
    // Prefill streaming (stream_buf_[0].n_slots > 0 when open).
    int stream_rows_ = 0;                 // cuda_placement::prefill_stream_rows
    std::vector<int> split_layers_;       // layers that are not whole, ascending
    layer_slots stream_buf_[2];           // device, each [n_expert] of the largest gate / up / down slice
    void* stream_landed_[2] = {};         // cudaEvent_t: the buffer's current layer has landed
    void* stream_free_[2] = {};           // cudaEvent_t: the launches reading the buffer are done
    bool streaming_ = false;              // the current forward streams
};

}  // namespace sluice
