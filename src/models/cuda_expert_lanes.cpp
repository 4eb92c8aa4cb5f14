// The expert lanes of a split MoE model (cuda_expert_lanes.h).
#ifdef SLUICE_HAVE_CUDA

#include "models/cuda_expert_lanes.h"

#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/expert_rows.cuh"
#include "kernels/cuda/matmul.cuh"
#include "moe/expert_pool.h"
#include "placement/progress.h"
#include "quant/act.h"

#include <cuda_runtime.h>

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

namespace sluice {

namespace {

void ck(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("cuda expert lanes: {}: {}", what, cudaGetErrorString(e));
}

// Bytes of one expert's slice of a 3-D expert tensor.
size_t slice_bytes(const tensor_view& t) { return t.row_bytes() * static_cast<size_t>(t.ne[1]); }

std::vector<uint64_t> blob_bytes_of(const std::vector<moe::expert_bank>& banks) {
    std::vector<uint64_t> b;
    for (const moe::expert_bank& k : banks) b.push_back(slice_bytes(*k.gate) + slice_bytes(*k.up) + slice_bytes(*k.down));
    return b;
}

// The counts the cache ranks by: the profile's, or without one none. Then a fixed cache fills
// whole layers in layer order (expert_cache: (layer, expert) order): a layer with every expert
// resident skips the host round trip (cuda_model_moe.cpp computes it as the all-GPU model does),
// while a split layer pays it whatever its hit rate (on the H200 a split layer's serial part is
// ~170 us against ~65 us for a whole GPU layer), so for a set that never changes whole layers
// beat an even spread (30B shape, 4 GiB: 70.7 tok/s against 72.2 for a scattered fixed set,
// within noise). An adaptive cache starts from an even share of every layer (cache_options::
// spread) and moves each share to its layer's hot experts: 90.6 tok/s from the scattered set
// with 2 swaps a forward, 127.0 from the spread with 8 (2026-12-04). A profile knows better
// which experts are hot: then its counts rank.
std::vector<uint64_t> ranking_of(const model_hparams& hp, const cuda_placement& p) {
    const size_t L = static_cast<size_t>(hp.n_layer), X = static_cast<size_t>(hp.n_expert);
    if (p.profile) {
        if (p.profile->n_layer != L || p.profile->n_expert != X || p.profile->counts.size() != L * X)
            fail("cuda placement: the routing profile is for {} layers x {} experts, the model has {} x {}",
                 p.profile->n_layer, p.profile->n_expert, L, X);
        return p.profile->counts;
    }
    return {};
}

placement::cache_options cache_options_of(const model_hparams& hp, const cuda_placement& p) {
    placement::cache_options o;
    o.budget_bytes = p.vram_budget;
    // A layer's slots are one device array of its blob size (layer_slots), made at load: a swap
    // replaces an expert of the same layer, and no slot is added.
    o.same_layer = true;
    o.adaptive = p.adaptive_cache;
    o.spread = p.adaptive_cache;
    o.half_life_steps = p.cache_half_life_steps;
    o.max_swaps_per_step = p.cache_swaps_per_step;
    o.k_used = std::max(hp.n_expert_used, 1);
    return o;
}

std::vector<dtype> gate_types_of(const std::vector<moe::expert_bank>& banks) {
    std::vector<dtype> t;
    for (const moe::expert_bank& k : banks) t.push_back(k.gate->type);
    return t;
}

// Staging slots start empty: open_pcie_lane sets the planner's count once the lane is open.
placement::planner_options planner_options_of(const cuda_placement& p) {
    placement::planner_options o;
    o.gpu = true;
    o.staging_slots = 0;
    o.forced_pcie_share = p.pcie_share;
    return o;
}

size_t page_size() {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<size_t>(p) : 4096;
}

}  // namespace

cuda_expert_lanes::cuda_expert_lanes(const model_hparams& hp, std::vector<moe::expert_bank> banks,
                                     const cuda_placement& p, void* stream)
    : hp_(hp),
      banks_(std::move(banks)),
      stream_(stream),
      cache_(hp.n_layer, hp.n_expert, blob_bytes_of(banks_), ranking_of(hp, p), cache_options_of(hp, p)),
      planner_(hp.n_layer, hp.n_expert, blob_bytes_of(banks_), gate_types_of(banks_), placement::cost_model{},
               planner_options_of(p)),
      plan_(planner_.make_layer_plan()) {
    if (banks_.size() != static_cast<size_t>(hp.n_layer)) fail("cuda expert lanes: {} banks for {} layers", banks_.size(), hp.n_layer);
    const size_t X = static_cast<size_t>(hp.n_expert);
    local_slot_.assign(static_cast<size_t>(hp.n_layer) * X, -1);
    slots_.resize(static_cast<size_t>(hp.n_layer));
    // The grouped matmul (a prefill window's pairs by slot, and the staged launches) needs every
    // layer's expert formats to be int8 ones; float experts take a pair a block.
    grouped_ok_ = hp.n_expert <= cuda::k_group_max_experts;
    info_.total = hp.n_layer * hp.n_expert;
    // The cache's initial set: its slots' bytes are the blobs uploaded below.
    local_of_slot_.assign(static_cast<size_t>(cache_.n_slots()), -1);
    if (p.progress && cache_.used_bytes() > 0) p.progress->begin("experts to the GPU", cache_.used_bytes());
    for (int il = 0; il < hp.n_layer; ++il) {
        const moe::expert_bank& b = banks_[static_cast<size_t>(il)];
        for (const tensor_view* t : {b.gate, b.up, b.down})
            if (quant::act_format_for(t->type) == quant::act_format::f32) grouped_ok_ = false;
        info_.total_bytes += cache_.blob_bytes(il) * X;
        // Local slots in ascending expert order, uploaded from the file's slices.
        layer_slots& s = slots_[static_cast<size_t>(il)];
        std::vector<int32_t> resident;
        for (int e = 0; e < hp.n_expert; ++e)
            if (cache_.slot_of(il, e) >= 0) resident.push_back(e);
        s.n_slots = static_cast<int>(resident.size());
        if (s.n_slots == 0) continue;
        const size_t gs = slice_bytes(*b.gate), us = slice_bytes(*b.up), ds = slice_bytes(*b.down);
        std::byte* mats[3] = {};
        const size_t sizes[3] = {gs, us, ds};
        for (int m = 0; m < 3; ++m) {
            void* d = nullptr;
            ck(cudaMalloc(&d, sizes[m] * resident.size()), "cudaMalloc (expert slots)");
            dev_allocs_.push_back(d);
            mats[m] = static_cast<std::byte*>(d);
        }
        s.gate = mats[0];
        s.up = mats[1];
        s.down = mats[2];
        for (size_t k = 0; k < resident.size(); ++k) {
            const int32_t e = resident[k];
            local_slot_[static_cast<size_t>(il) * X + static_cast<size_t>(e)] = static_cast<int32_t>(k);
            local_of_slot_[static_cast<size_t>(cache_.slot_of(il, e))] = static_cast<int32_t>(k);
            const tensor_view* src[3] = {b.gate, b.up, b.down};
            for (int m = 0; m < 3; ++m)
                ck(cudaMemcpy(mats[m] + k * sizes[m], kernels::expert_slice(*src[m], e).data, sizes[m], cudaMemcpyHostToDevice),
                   "expert slot upload");
            cache_.copy_landed(cache_.slot_of(il, e));
            if (p.progress) p.progress->advance(gs + us + ds);
        }
        info_.resident += s.n_slots;
        if (s.n_slots == hp.n_expert) ++info_.whole_layers;
        info_.resident_bytes += cache_.blob_bytes(il) * resident.size();
    }
    if (p.progress) p.progress->finish();
    info_.split = info_.resident < info_.total;
    {
        void* d = nullptr;
        ck(cudaMalloc(&d, local_slot_.size() * 4), "cudaMalloc (slot map)");
        dev_allocs_.push_back(d);
        d_local_slot_ = static_cast<int32_t*>(d);
        ck(cudaMemcpy(d_local_slot_, local_slot_.data(), local_slot_.size() * 4, cudaMemcpyHostToDevice), "slot map upload");
        ck(cudaMalloc(&d, 2 * sizeof(uint32_t)), "cudaMalloc (doorbell)");
        dev_allocs_.push_back(d);
        d_ring_state_ = static_cast<uint32_t*>(d);
        ck(cudaMemset(d_ring_state_, 0, 2 * sizeof(uint32_t)), "cudaMemset (doorbell)");
        ck(cudaHostAlloc(reinterpret_cast<void**>(&h_bell_), sizeof(uint32_t), cudaHostAllocMapped), "cudaHostAlloc (doorbell)");
        *h_bell_ = 0;
        ck(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_bell_), h_bell_, 0), "cudaHostGetDevicePointer");
    }
    for (int il = 0; il < hp.n_layer; ++il)
        if (!whole_layer(il)) split_layers_.push_back(il);
    events_.assign(2 * static_cast<size_t>(hp.n_layer), nullptr);
    for (void*& ev : events_) {
        cudaEvent_t e = nullptr;
        ck(cudaEventCreate(&e), "cudaEventCreate");
        ev = e;
    }
    recorded_.assign(static_cast<size_t>(hp.n_layer), 0);
    between_events_.assign(2 * (static_cast<size_t>(hp.n_layer) + 1), nullptr);
    for (void*& ev : between_events_) {
        cudaEvent_t e = nullptr;
        ck(cudaEventCreate(&e), "cudaEventCreate");
        ev = e;
    }
    if (p.pcie_share > 1.0) fail("cuda placement: PCIe share {}: expected <= 1 (< 0: the cost model)", p.pcie_share);
    if (!info_.split) info_.pcie_note = "every routed expert is in VRAM";
    else if (p.staging_slots <= 0) info_.pcie_note = "no staging slots asked for";
    else if (!grouped_ok_) info_.pcie_note = "float expert weights (the staged launch needs the grouped int8 matmul)";
    else if (p.pcie_share == 0.0) info_.pcie_note = "PCIe share 0 asked for";
    // Swaps have something to do where a split layer holds some of its experts.
    bool adaptable = false;
    for (const layer_slots& s : slots_) adaptable = adaptable || (s.n_slots > 0 && s.n_slots < hp.n_expert);
    const bool want_pcie = info_.split && info_.pcie_note.empty();
    const bool want_adapt = info_.split && p.adaptive_cache && adaptable;
    const std::string copies_failed = want_pcie || want_adapt ? open_copies(p.progress) : std::string();
    if (want_pcie) {
        if (copies_failed.empty()) open_pcie_lane(p.staging_slots);
        else info_.pcie_note = copies_failed;
    }
    if (!p.adaptive_cache) info_.adaptive_note = "adaptation off (asked for)";
    else if (!info_.split) info_.adaptive_note = "every routed expert is in VRAM";
    else if (!adaptable) info_.adaptive_note = "no split layer holds resident experts";
    else if (!copies_failed.empty()) info_.adaptive_note = copies_failed;
    adaptive_ = info_.adaptive_note.empty();
    info_.adaptive_cache = adaptive_;
    in_flight_.reserve(static_cast<size_t>(std::max(cache_options_of(hp, p).max_swaps_per_step, 0)));
    if (!info_.split) info_.stream_note = info_.pcie_note;
    else if (p.prefill_stream_rows == 0) info_.stream_note = "prefill streaming off (asked for)";
    else if (!info_.pcie_lane) info_.stream_note = "no PCIe lane: " + info_.pcie_note;
    else open_stream(p.prefill_stream_rows);
}

std::string cuda_expert_lanes::open_copies(placement::progress* prog) {
    // The expert tensors' pages, page-aligned and merged where they touch, registered read-only:
    // the copy engine then reads the file's mapping directly (GPU-MACHINE.md: 8 GiB in 0.24 s,
    // copies at 51-55 GB/s), instead of through a staging copy in pageable memory.
    const size_t pg = page_size();
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    for (const moe::expert_bank& b : banks_)
        for (const tensor_view* t : {b.gate, b.up, b.down}) {
            const auto a = reinterpret_cast<uintptr_t>(t->data);
            ranges.emplace_back(a / pg * pg, (a + t->nbytes + pg - 1) / pg * pg);
        }
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uintptr_t, uintptr_t>> merged;
    for (const auto& r : ranges)
        if (!merged.empty() && r.first <= merged.back().second) merged.back().second = std::max(merged.back().second, r.second);
        else merged.push_back(r);
    // A range's pages are read in from the disk as they are pinned, unless the page cache has
    // them: minutes for a large model on a first start, hence the progress.
    if (prog) {
        uint64_t total = 0;
        for (const auto& [lo, hi] : merged) total += hi - lo;
        prog->begin("pinning expert pages", total);
    }
    for (const auto& [lo, hi] : merged) {
        void* ptr = reinterpret_cast<void*>(lo);
        const cudaError_t e = cudaHostRegister(ptr, hi - lo, cudaHostRegisterReadOnly);
        if (e != cudaSuccess) {
            cudaGetLastError();   // clear it: the model goes on without the copies
            if (prog) prog->finish();
            return fmt::format("cudaHostRegister of {} bytes of expert weights failed: {}", hi - lo, cudaGetErrorString(e));
        }
        registered_.push_back(ptr);
        if (prog) prog->advance(hi - lo);
    }
    if (prog) prog->finish();
    cudaStream_t cs = nullptr;
    ck(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking), "cudaStreamCreate (copies)");
    copy_stream_ = cs;
    cudaStream_t ss = nullptr;
    ck(cudaStreamCreateWithFlags(&ss, cudaStreamNonBlocking), "cudaStreamCreate (swaps)");
    swap_stream_ = ss;
    cudaEvent_t landed = nullptr;
    ck(cudaEventCreateWithFlags(&landed, cudaEventDisableTiming), "cudaEventCreate (swaps)");
    swaps_landed_ = landed;
    return {};
}

void cuda_expert_lanes::open_pcie_lane(int staging_slots) {
    // A layer never stages more experts than it has (and the grouped launch's tile buffers are
    // sized for n_expert groups).
    staging_slots = std::min(staging_slots, hp_.n_expert);
    // Slots sized for the largest slice of each matrix over the layers (formats differ by layer).
    size_t gs = 0, us = 0, ds = 0;
    for (const moe::expert_bank& b : banks_) {
        gs = std::max(gs, slice_bytes(*b.gate));
        us = std::max(us, slice_bytes(*b.up));
        ds = std::max(ds, slice_bytes(*b.down));
    }
    const size_t S = static_cast<size_t>(staging_slots);
    std::byte** mats[3] = {&staging_.gate, &staging_.up, &staging_.down};
    const size_t sizes[3] = {gs, us, ds};
    for (int m = 0; m < 3; ++m) {
        void* d = nullptr;
        ck(cudaMalloc(&d, sizes[m] * S), "cudaMalloc (staging slots)");
        dev_allocs_.push_back(d);
        *mats[m] = static_cast<std::byte*>(d);
    }
    staging_.n_slots = staging_slots;
    for (void** ev : {&landed_, &staging_free_}) {
        cudaEvent_t e = nullptr;
        ck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
        *ev = e;
    }
    pcie_events_.assign(2 * static_cast<size_t>(hp_.n_layer), nullptr);
    for (void*& ev : pcie_events_) {
        cudaEvent_t e = nullptr;
        ck(cudaEventCreate(&e), "cudaEventCreate");
        ev = e;
    }
    pcie_recorded_.assign(static_cast<size_t>(hp_.n_layer), 0);
    stage_of_.assign(static_cast<size_t>(hp_.n_expert), -1);
    copy_bytes_.reserve(3 * S);
    copy_dst_.reserve(3 * S);
    copy_src_.reserve(3 * S);
    info_.pcie_lane = true;
    info_.staging_slots = staging_slots;
    info_.staging_bytes = (gs + us + ds) * S;
    calibrate_pcie();
    placement::planner_options o = planner_.options();
    o.staging_slots = staging_slots;
    planner_ = placement::planner(hp_.n_layer, hp_.n_expert, blob_bytes_of(banks_), gate_types_of(banks_), costs_, o);
}

void cuda_expert_lanes::calibrate_pcie() {
    // The slots filled with layer 0's first experts, three times; the last two timed (the first
    // wakes the copy engine): bytes over the mean time, including each copy's fixed cost.
    auto cs = static_cast<cudaStream_t>(copy_stream_);
    const moe::expert_bank& b = banks_[0];
    const int n = std::min(staging_.n_slots, hp_.n_expert);
    const size_t gs = slice_bytes(*b.gate), us = slice_bytes(*b.up), ds = slice_bytes(*b.down);
    cudaEvent_t t0 = static_cast<cudaEvent_t>(pcie_events_[0]), t1 = static_cast<cudaEvent_t>(pcie_events_[1]);
    for (int rep = 0; rep < 3; ++rep) {
        if (rep == 1) ck(cudaEventRecord(t0, cs), "cudaEventRecord");
        for (int e = 0; e < n; ++e) {
            const size_t k = static_cast<size_t>(e);
            ck(cudaMemcpyAsync(staging_.gate + k * gs, kernels::expert_slice(*b.gate, e).data, gs, cudaMemcpyHostToDevice, cs),
               "staging copy");
            ck(cudaMemcpyAsync(staging_.up + k * us, kernels::expert_slice(*b.up, e).data, us, cudaMemcpyHostToDevice, cs),
               "staging copy");
            ck(cudaMemcpyAsync(staging_.down + k * ds, kernels::expert_slice(*b.down, e).data, ds, cudaMemcpyHostToDevice, cs),
               "staging copy");
        }
    }
    ck(cudaEventRecord(t1, cs), "cudaEventRecord");
    ck(cudaEventSynchronize(t1), "PCIe calibration");
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, t0, t1), "cudaEventElapsedTime");
    const double bytes = 2.0 * static_cast<double>(n) * static_cast<double>(gs + us + ds);
    if (ms > 0) {
        costs_.pcie_gb_s = bytes / (ms * 1e-3) / 1e9;
        costs_.pcie_latency_s = 0;   // included in the measured rate (three copies an expert, as in a step)
    }
    info_.pcie_gb_s = costs_.pcie_gb_s;
}

void cuda_expert_lanes::calibrate(thread_pool& pool) {
    if (calibrated_) return;
    calibrated_ = true;
    placement::calibrate_cpu(costs_, pool, banks_[0]);
    info_.cpu_gb_s = costs_.cpu_gb_s(banks_[0].gate->type);
    // Every layer is planned with its gate format's figure: the formats layer 0 does not have
    // take its figure too (a per-format measurement per layer would cost seconds on a big model).
    for (const moe::expert_bank& b : banks_)
        if (costs_.cpu_gb_s_by_type[static_cast<size_t>(b.gate->type)] <= 0) costs_.set_cpu_gb_s(b.gate->type, info_.cpu_gb_s);
    planner_.set_costs(costs_);
}

cuda_expert_lanes::~cuda_expert_lanes() {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    if (copy_stream_) {
        cudaStreamSynchronize(static_cast<cudaStream_t>(copy_stream_));
        cudaStreamDestroy(static_cast<cudaStream_t>(copy_stream_));
    }
    if (swap_stream_) {
        cudaStreamSynchronize(static_cast<cudaStream_t>(swap_stream_));
        cudaStreamDestroy(static_cast<cudaStream_t>(swap_stream_));
    }
    for (void* e : {swaps_landed_, landed_, staging_free_, stream_landed_[0], stream_landed_[1], stream_free_[0], stream_free_[1]})
        if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
    for (void* e : pcie_events_)
        if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
    for (void* p : registered_) cudaHostUnregister(p);
    free_host();
    if (h_bell_) cudaFreeHost(h_bell_);
    for (void* p : dev_allocs_) cudaFree(p);
    for (const std::vector<void*>* v : {&events_, &between_events_})
        for (void* e : *v)
            if (e) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

void cuda_expert_lanes::free_host() {
    if (h_ids_) cudaFreeHost(h_ids_);
    if (h_xn_) cudaFreeHost(h_xn_);
    if (h_slot_) cudaFreeHost(h_slot_);
    if (h_ey_) cudaFreeHost(h_ey_);
    if (d_slot_) cudaFree(d_slot_);
    if (d_mm_) cudaFree(d_mm_);
    d_mm_ = nullptr;
    d_h_ids_ = nullptr;
    d_h_xn_ = nullptr;
    h_ids_ = nullptr;
    h_xn_ = nullptr;
    h_slot_ = nullptr;
    h_ey_ = nullptr;
    d_slot_ = nullptr;
    d_ey_host_ = nullptr;
    max_rows_ = 0;
}

bool cuda_expert_lanes::ensure(int max_rows) {
    if (max_rows <= max_rows_) return false;
    free_host();
    const size_t R = static_cast<size_t>(max_rows), K = static_cast<size_t>(std::max(hp_.n_expert_used, 1));
    const size_t E = static_cast<size_t>(hp_.n_embd), RK = R * K;
    ck(cudaHostAlloc(reinterpret_cast<void**>(&h_ids_), RK * 4, cudaHostAllocMapped), "cudaHostAlloc (ids)");
    ck(cudaHostAlloc(reinterpret_cast<void**>(&h_xn_), R * E * 4, cudaHostAllocMapped), "cudaHostAlloc (input)");
    ck(cudaHostAlloc(reinterpret_cast<void**>(&h_slot_), 2 * RK * 4, cudaHostAllocDefault), "cudaHostAlloc (slots)");
    ck(cudaHostAlloc(reinterpret_cast<void**>(&h_ey_), RK * E * 4, cudaHostAllocMapped), "cudaHostAlloc (CPU rows)");
    ck(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_ey_host_), h_ey_, 0), "cudaHostGetDevicePointer");
    ck(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_h_ids_), h_ids_, 0), "cudaHostGetDevicePointer");
    ck(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_h_xn_), h_xn_, 0), "cudaHostGetDevicePointer");
    ck(cudaMalloc(reinterpret_cast<void**>(&d_slot_), 2 * RK * 4), "cudaMalloc (slots)");
    ck(cudaMalloc(reinterpret_cast<void**>(&d_mm_), RK * 4), "cudaMalloc (resident slots)");
    cpu_ids_.assign(RK, -1);
    scratch_ = moe::make_expert_scratch(max_rows, static_cast<int>(K), hp_.n_expert, hp_.n_embd, hp_.n_ff_exp);
    max_rows_ = max_rows;
    return true;
}

void cuda_expert_lanes::ring(int il, int64_t n, const int32_t* d_ids, const float* d_xn, bool captured) {
    if (n > max_rows_) fail("cuda expert lanes: {} rows, buffers for {}", n, max_rows_);
    cuda::ring_routing_bell({.ids = d_ids, .xn = d_xn, .pairs = n * hp_.n_expert_used, .xn_count = n * hp_.n_embd,
                             .local_slot = d_local_slot_ + static_cast<size_t>(il) * static_cast<size_t>(hp_.n_expert),
                             .n_expert = hp_.n_expert, .host_ids = d_h_ids_, .host_xn = d_h_xn_, .mm_ids = d_mm_,
                             .state = d_ring_state_, .bell = d_bell_},
                            stream_);
    if (!captured) between_end();
}

void cuda_expert_lanes::wait_for_bell() {
    const uint32_t want = ++rings_waited_;
    // Acquire loads of the mapped word (GPU-MACHINE.md: the host sees a captured kernel's write
    // this way as soon as the kernel is done): the ids and input the kernel wrote before it are
    // visible after it. Now and then the stream's state, so that a fault on the device, or a
    // ring that was never enqueued, is an error instead of a hang.
    const std::atomic_ref<uint32_t> bell(*h_bell_);
    for (uint32_t spins = 1;; ++spins) {
        if (static_cast<int32_t>(bell.load(std::memory_order_acquire) - want) >= 0) break;
        if (spins % 1024 != 0) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#elif defined(__aarch64__)
            asm volatile("yield" ::: "memory");
#endif
            continue;
        }
        const cudaError_t e = cudaStreamQuery(static_cast<cudaStream_t>(stream_));
        if (e == cudaErrorNotReady) continue;
        if (e != cudaSuccess) ck(e, "waiting for the routing doorbell");
        const uint32_t now = bell.load(std::memory_order_acquire);
        if (static_cast<int32_t>(now - want) >= 0) break;
        fail("cuda expert lanes: the stream is idle and the routing doorbell reads {}, expected {}", now, want);
    }
}

void cuda_expert_lanes::between_begin() {
    if (2 * between_done_ + 1 >= between_events_.size()) return;
    ck(cudaEventRecord(static_cast<cudaEvent_t>(between_events_[2 * between_done_]), static_cast<cudaStream_t>(stream_)),
       "cudaEventRecord");
    between_open_ = true;
}

void cuda_expert_lanes::between_end() {
    if (!between_open_) return;
    ck(cudaEventRecord(static_cast<cudaEvent_t>(between_events_[2 * between_done_ + 1]), static_cast<cudaStream_t>(stream_)),
       "cudaEventRecord");
    ++between_done_;
    between_open_ = false;
}

void cuda_expert_lanes::upload_slots(int64_t n) {
    const size_t P = static_cast<size_t>(n * hp_.n_expert_used);
    ck(cudaMemcpyAsync(d_slot_, h_slot_, 2 * P * 4, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream_)),
       "slots to device");
}

cuda_expert_lanes::routed cuda_expert_lanes::plan_window(int il, int64_t n) {
    const int64_t K = hp_.n_expert_used, P = n * K;
    if (n > max_rows_) fail("cuda expert lanes: {} rows, buffers for {}", n, max_rows_);
    using clock = std::chrono::steady_clock;
    const clock::time_point t0 = clock::now();
    if (cpu_done_at_ != clock::time_point{}) metrics_.host.between += std::chrono::duration<double>(t0 - cpu_done_at_).count();
    wait_for_bell();   // the one host wait of the layer
    synced_at_ = clock::now();
    metrics_.host.routing_wait += std::chrono::duration<double>(synced_at_ - t0).count();
    const std::span<const int32_t> ids(h_ids_, static_cast<size_t>(P));
    planner_.plan_layer(il, ids, &cache_, plan_);
    metrics_.add(plan_);
    if (plan_.n_pcie > 0) copy_staged(il);   // first: the copies start while the rest is set up
    const int32_t* local = local_slot_.data() + static_cast<size_t>(il) * static_cast<size_t>(hp_.n_expert);
    routed r;
    int32_t* join_slot = h_slot_;
    int32_t* stage = h_slot_ + P;
    for (int64_t p = 0; p < P; ++p) {
        const int32_t e = h_ids_[p];
        if (e < 0 || e >= hp_.n_expert) fail("cuda expert lanes: layer {}: routed id {} outside 0..{}", il, e, hp_.n_expert - 1);
        const int32_t slot = local[e];
        const int32_t staged = slot < 0 && !stage_of_.empty() ? stage_of_[static_cast<size_t>(e)] : -1;
        // join copies the CPU's rows: pairs with join slot -1. A PCIe pair is a GPU row (>= 0).
        join_slot[p] = slot >= 0 ? slot : staged >= 0 ? 0 : -1;
        stage[p] = staged;
        cpu_ids_[static_cast<size_t>(p)] = slot >= 0 || staged >= 0 ? -1 : e;
        if (slot >= 0) ++r.gpu_pairs;
        else if (staged >= 0) ++r.pcie_pairs;
        else ++r.cpu_pairs;
    }
    for (const placement::planned_expert& x : plan_.experts)
        if (x.where == placement::lane::pcie) stage_of_[static_cast<size_t>(x.expert)] = -1;
    pairs_ = P;
    cpu_pairs_ = r.cpu_pairs;
    if (adaptive_) cache_.observe(il, ids);   // after the copies and the slots: off the layer's serial path
    return r;
}

void cuda_expert_lanes::copy_staged(int il) {
    auto cs = static_cast<cudaStream_t>(copy_stream_);
    const moe::expert_bank& b = banks_[static_cast<size_t>(il)];
    const size_t gs = slice_bytes(*b.gate), us = slice_bytes(*b.up), ds = slice_bytes(*b.down);
    // The slots are free once the last launch that read them (the previous layer's) is done.
    ck(cudaStreamWaitEvent(cs, static_cast<cudaEvent_t>(staging_free_), 0), "cudaStreamWaitEvent");
    ck(cudaEventRecord(static_cast<cudaEvent_t>(pcie_events_[2 * static_cast<size_t>(il)]), cs), "cudaEventRecord");
    copy_dst_.clear();
    copy_src_.clear();
    copy_bytes_.clear();
    for (const placement::planned_expert& x : plan_.experts) {
        if (x.where != placement::lane::pcie) continue;
        if (x.slot < 0 || x.slot >= staging_.n_slots) fail("cuda expert lanes: staging slot {} of {}", x.slot, staging_.n_slots);
        const size_t k = static_cast<size_t>(x.slot);
        stage_of_[static_cast<size_t>(x.expert)] = x.slot;
        copy_dst_.insert(copy_dst_.end(), {staging_.gate + k * gs, staging_.up + k * us, staging_.down + k * ds});
        copy_src_.insert(copy_src_.end(), {kernels::expert_slice(*b.gate, x.expert).data,
                                           kernels::expert_slice(*b.up, x.expert).data,
                                           kernels::expert_slice(*b.down, x.expert).data});
        copy_bytes_.insert(copy_bytes_.end(), {gs, us, ds});
    }
#if CUDART_VERSION >= 13000
    // One call for the layer's copies: the host's time on this layer's serial path was 74 us more
    // with the PCIe lane than without (session 16, 80B shape: 112.6 against 38.7 us before the
    // CPU lane), most of it three cudaMemcpyAsync calls per staged expert.
    if (!copy_dst_.empty()) {
        cudaMemcpyAttributes attr{};
        attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
        size_t attr_index = 0;
        ck(cudaMemcpyBatchAsync(copy_dst_.data(), copy_src_.data(), copy_bytes_.data(), copy_dst_.size(), &attr, &attr_index, 1, cs),
           "staging copies");
    }
#else
    for (size_t i = 0; i < copy_dst_.size(); ++i)
        ck(cudaMemcpyAsync(copy_dst_[i], copy_src_[i], copy_bytes_[i], cudaMemcpyHostToDevice, cs), "staging copy");
#endif
    ck(cudaEventRecord(static_cast<cudaEvent_t>(pcie_events_[2 * static_cast<size_t>(il) + 1]), cs), "cudaEventRecord");
    pcie_recorded_[static_cast<size_t>(il)] = 1;
    ck(cudaEventRecord(static_cast<cudaEvent_t>(landed_), cs), "cudaEventRecord");
}

void cuda_expert_lanes::staged_begin() {
    ck(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), static_cast<cudaEvent_t>(landed_), 0), "cudaStreamWaitEvent");
}

void cuda_expert_lanes::staged_end() {
    ck(cudaEventRecord(static_cast<cudaEvent_t>(staging_free_), static_cast<cudaStream_t>(stream_)), "cudaEventRecord");
}

void cuda_expert_lanes::gpu_begin(int il) {
    ck(cudaEventRecord(static_cast<cudaEvent_t>(events_[2 * static_cast<size_t>(il)]), static_cast<cudaStream_t>(stream_)),
       "cudaEventRecord");
}

void cuda_expert_lanes::gpu_end(int il) {
    ck(cudaEventRecord(static_cast<cudaEvent_t>(events_[2 * static_cast<size_t>(il) + 1]),
                       static_cast<cudaStream_t>(stream_)),
       "cudaEventRecord");
    recorded_[static_cast<size_t>(il)] = 1;
}

void cuda_expert_lanes::run_cpu(int64_t n, thread_pool& pool, int il) {
    const auto t0 = std::chrono::steady_clock::now();
    metrics_.host.launch += std::chrono::duration<double>(t0 - synced_at_).count();
    cpu_done_at_ = t0;
    if (cpu_pairs_ == 0) return;
    moe::run_expert_pairs(pool, banks_[static_cast<size_t>(il)], h_xn_, cpu_ids_.data(), n, scratch_, h_ey_, hp_.n_embd);
    cpu_done_at_ = std::chrono::steady_clock::now();
    metrics_.add_measured(0, 0, std::chrono::duration<double>(cpu_done_at_ - t0).count());
}

void cuda_expert_lanes::join(int64_t n, float* d_ey, bool captured) {
    if (!captured) between_begin();
    if (cpu_pairs_ > 0 || captured)
        cuda::copy_cpu_pair_rows(d_ey, d_ey_host_, d_slot_, n * hp_.n_expert_used, hp_.n_embd, stream_);
}

namespace {
// Seconds between the recorded event pairs (2 il, 2 il + 1) of the flagged layers; clears the flags.
double elapsed_s(const std::vector<void*>& events, std::vector<uint8_t>& recorded) {
    double s = 0;
    for (size_t il = 0; il < recorded.size(); ++il) {
        if (!recorded[il]) continue;
        float ms = 0;
        if (cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(events[2 * il]), static_cast<cudaEvent_t>(events[2 * il + 1])) ==
            cudaSuccess)
            s += ms * 1e-3;
        recorded[il] = 0;
    }
    return s;
}
}  // namespace

void cuda_expert_lanes::abandon_forward() noexcept {
    streaming_ = false;
    cpu_done_at_ = {};
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    if (copy_stream_) cudaStreamSynchronize(static_cast<cudaStream_t>(copy_stream_));
    if (swap_stream_) cudaStreamSynchronize(static_cast<cudaStream_t>(swap_stream_));
    cudaGetLastError();
    // A ring enqueued (or captured) but never waited for: the count restarts from what rang.
    if (h_bell_) rings_waited_ = std::atomic_ref<uint32_t>(*h_bell_).load(std::memory_order_acquire);
    std::fill(recorded_.begin(), recorded_.end(), uint8_t{0});
    std::fill(pcie_recorded_.begin(), pcie_recorded_.end(), uint8_t{0});
    between_done_ = 0;
    between_open_ = false;
}

void cuda_expert_lanes::end_forward() {
    // A streaming forward's copy-stream events time whole layers' copies (copy_layer), the
    // others' the staging slots' (copy_staged): they go to different lanes.
    const bool streamed = streaming_;
    streaming_ = false;
    cpu_done_at_ = {};   // the next forward's first split layer has no layer before it
    const double gpu_s = elapsed_s(events_, recorded_);
    double pcie_s = 0;
    if (copy_stream_) {
        ck(cudaStreamSynchronize(static_cast<cudaStream_t>(copy_stream_)), "copy stream");
        pcie_s = elapsed_s(pcie_events_, pcie_recorded_);
    }
    metrics_.add_measured(gpu_s, streamed ? 0 : pcie_s, 0);
    for (size_t k = 0; k < between_done_; ++k) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(between_events_[2 * k]),
                                 static_cast<cudaEvent_t>(between_events_[2 * k + 1])) == cudaSuccess)
            metrics_.gpu_between += ms * 1e-3;
    }
    between_done_ = 0;
    between_open_ = false;
    if (streamed) metrics_.add_stream_measured(pcie_s);
    adapt();
}

}  // namespace sluice

#endif  // SLUICE_HAVE_CUDA
