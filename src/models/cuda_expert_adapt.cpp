// The adaptive VRAM cache of a split MoE model (issue 10, part 4; cuda_expert_lanes.h).
//
// plan_window counts each window's routed ids (placement::expert_cache::observe). At a forward's
// end, with the stream idle, adapt() lets the cache make up to cache_swaps_per_step swaps (8),
// each within a layer (a layer's slots are one device array of its blob size):
//   1. the swaps of an earlier forward whose copies have landed (their event, queried, never
//      waited for): their experts enter both slot maps; while they are still copying the cache
//      only counts this step (one batch of swaps in flight at most);
//   2. the cache's new swaps: each evicted expert leaves both maps at once, and its slot's copy
//      (the new expert's gate, up and down from the registered file pages) is enqueued on the swap
//      stream, so that it lands while the next forward runs, beside its staged copies;
//   3. the device's map is uploaded on the stream, before the next forward's first ring.
// The host's map (local_slot_: the plan, the join and CPU slots) and the device's (d_local_slot_:
// the doorbell's resident slots) change at the same point in stream order, so the lanes always
// agree on a pair; a slot whose copy is in flight is in neither, so nothing reads it. Which lane
// computes a pair never changes its bits (E3): swaps change speed only.
#ifdef SLUICE_HAVE_CUDA

#include "models/cuda_expert_lanes.h"

#include "core/error.h"
#include "kernels/cpu/ops.h"

#include <cuda_runtime.h>

namespace sluice {

namespace {

void ck(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("cuda expert cache: {}: {}", what, cudaGetErrorString(e));
}

}  // namespace

void cuda_expert_lanes::adapt() {
    if (!adaptive_) return;
    const size_t X = static_cast<size_t>(hp_.n_expert);
    auto ss = static_cast<cudaStream_t>(swap_stream_);
    if (!in_flight_.empty()) {
        const cudaError_t q = cudaEventQuery(static_cast<cudaEvent_t>(swaps_landed_));
        if (q == cudaErrorNotReady) {
            cache_.end_step(/*allow_swaps=*/false);   // the counts decay and grow; no swap
            return;
        }
        ck(q, "swap copies");
    }
    for (const placement::cache_swap& s : in_flight_) {
        cache_.copy_landed(s.slot);
        local_slot_[static_cast<size_t>(s.loaded.layer) * X + static_cast<size_t>(s.loaded.expert)] =
            local_of_slot_[static_cast<size_t>(s.slot)];
        map_stale_ = true;
    }
    in_flight_.clear();
    // The event follows whatever copies were enqueued, also when a copy call throws part way
    // (else the next query would find an older event and take those copies as landed). Where
    // the record itself fails, the copies are waited for here instead, so that a query of the
    // older event cannot let a slot with a copy in flight into the maps.
    struct record_after {
        std::vector<placement::cache_swap>& in_flight;
        void* event;
        cudaStream_t stream;
        ~record_after() {
            if (in_flight.empty() || cudaEventRecord(static_cast<cudaEvent_t>(event), stream) == cudaSuccess) return;
            cudaGetLastError();
            cudaStreamSynchronize(stream);
        }
    } record{in_flight_, swaps_landed_, ss};
    for (const placement::cache_swap& s : cache_.end_step()) {
        local_slot_[static_cast<size_t>(s.evicted.layer) * X + static_cast<size_t>(s.evicted.expert)] = -1;
        map_stale_ = true;
        const moe::expert_bank& b = banks_[static_cast<size_t>(s.loaded.layer)];
        const layer_slots& dst = slots_[static_cast<size_t>(s.loaded.layer)];
        const size_t k = static_cast<size_t>(local_of_slot_[static_cast<size_t>(s.slot)]);
        const tensor_view* src[3] = {b.gate, b.up, b.down};
        std::byte* const mats[3] = {dst.gate, dst.up, dst.down};
        for (int m = 0; m < 3; ++m) {
            const tensor_view slice = kernels::expert_slice(*src[m], s.loaded.expert);
            ck(cudaMemcpyAsync(mats[m] + k * slice.nbytes, slice.data, slice.nbytes, cudaMemcpyHostToDevice, ss),
               "swap copy");
        }
        // Landed at the next forward's end only once its copies are enqueued: a swap whose copy
        // call failed keeps its slot copying (out of both maps) for good.
        in_flight_.push_back(s);
        ++metrics_.swaps;
        metrics_.swap_bytes += s.bytes;
    }
    sync_slot_map();
}

void cuda_expert_lanes::sync_slot_map() {
    if (!map_stale_) return;
    // From pageable memory: the call has read the map when it returns, and the next ring (later
    // on the same stream) reads the new one. 4 bytes a pair: 24 KiB for 48 layers of 128 experts.
    ck(cudaMemcpyAsync(d_local_slot_, local_slot_.data(), local_slot_.size() * sizeof(int32_t), cudaMemcpyHostToDevice,
                       static_cast<cudaStream_t>(stream_)),
       "slot map upload");
    map_stale_ = false;
}

}  // namespace sluice

#endif  // SLUICE_HAVE_CUDA
