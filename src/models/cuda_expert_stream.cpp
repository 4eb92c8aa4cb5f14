// Prefill streaming of a split MoE model's experts (issue 10, part 5; cuda_expert_lanes.h).
//
// A prefill chunk routes its rows to nearly every expert of a layer (512 rows x 8 of 128
// experts leave an expert unused with probability (120/128)^512 ~ 4e-15), and each expert takes
// tens of rows. The split path then computes most of the layer on the CPU, which is slow at many
// rows (on the H200 machine the 16-core CPU prefills at ~60 tok/s against ~2,800 on the GPU).
// Streaming instead copies each split layer's experts to the GPU whole and runs the layer as the
// all-GPU model does: the copy engine reads the file's registered pages at PCIe speed while the
// GPU computes the layer before; two layer buffers alternate, so layer k + 1's copy overlaps
// layer k's compute and layer k + 2's copy waits only for layer k's launches. A layer's buffer
// holds expert e at slot e for the experts not resident; the resident ones are computed from
// their cache slots by a launch of their own (split_streamed gives each launch its pairs). They
// were copied into the buffer from their slots before (device to device), which took twice the
// prediction once a routing profile scattered them (H200, 30B shape at 2 GiB: 61.6 GB streamed in
// 2.665 s against 1.282 s with whole runs; each small copy waits behind the prefill's kernels).
// The host never waits inside the forward: copies and launches are ordered by events.
// The streamed layer reads the file's bytes with the all-GPU model's kernels: the same bits (E3).
#ifdef SLUICE_HAVE_CUDA

#include "models/cuda_expert_lanes.h"

#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/expert_rows.cuh"
#include "placement/cost_model.h"

#include <cuda_runtime.h>

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace sluice {

namespace {

void ck(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail("cuda expert stream: {}: {}", what, cudaGetErrorString(e));
}

// Bytes of one expert's slice of a 3-D expert tensor.
size_t slice_of(const tensor_view& t) { return kernels::expert_slice(t, 0).nbytes; }

}  // namespace

void cuda_expert_lanes::open_stream(int prefill_stream_rows) {
    stream_rows_ = prefill_stream_rows;
    size_t gs = 0, us = 0, ds = 0;
    for (const moe::expert_bank& b : banks_) {
        gs = std::max(gs, slice_of(*b.gate));
        us = std::max(us, slice_of(*b.up));
        ds = std::max(ds, slice_of(*b.down));
    }
    const size_t X = static_cast<size_t>(hp_.n_expert);
    const size_t sizes[3] = {gs * X, us * X, ds * X};
    std::vector<void*> got;   // freed again if a later allocation fails
    for (layer_slots& buf : stream_buf_) {
        std::byte** mats[3] = {&buf.gate, &buf.up, &buf.down};
        for (int m = 0; m < 3; ++m) {
            void* d = nullptr;
            const cudaError_t e = cudaMalloc(&d, sizes[m]);
            if (e != cudaSuccess) {
                cudaGetLastError();   // the model goes on without streaming
                for (void* p : got) cudaFree(p);
                info_.stream_note = fmt::format("no VRAM for the two layer buffers ({} bytes): {}",
                                                2 * (sizes[0] + sizes[1] + sizes[2]), cudaGetErrorString(e));
                stream_buf_[0] = stream_buf_[1] = layer_slots{};
                return;
            }
            got.push_back(d);
            *mats[m] = static_cast<std::byte*>(d);
        }
        buf.n_slots = hp_.n_expert;
    }
    dev_allocs_.insert(dev_allocs_.end(), got.begin(), got.end());
    for (void** ev : {&stream_landed_[0], &stream_landed_[1], &stream_free_[0], &stream_free_[1]}) {
        cudaEvent_t e = nullptr;
        ck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
        *ev = e;
    }
    info_.prefill_stream = true;
    info_.stream_bytes = 2 * (sizes[0] + sizes[1] + sizes[2]);
    info_.stream_rows = prefill_stream_rows > 0 ? prefill_stream_rows : 0;
}

int64_t cuda_expert_lanes::stream_cutover() const {
    std::vector<placement::stream_layer> layers;
    for (const int il : split_layers_) {
        const moe::expert_bank& b = banks_[static_cast<size_t>(il)];
        placement::stream_layer l;
        l.k_used = hp_.n_expert_used;
        l.n_expert = hp_.n_expert;
        l.missing = hp_.n_expert - slots_[static_cast<size_t>(il)].n_slots;
        l.blob_bytes = slice_of(*b.gate) + slice_of(*b.up) + slice_of(*b.down);
        l.type = b.gate->type;
        l.staging_slots = staging_.n_slots;
        layers.push_back(l);
    }
    return placement::stream_cutover_rows(costs_, layers);
}

bool cuda_expert_lanes::begin_stream(int64_t n) {
    streaming_ = false;
    if (stream_buf_[0].n_slots == 0 || split_layers_.empty()) return false;
    if (stream_rows_ < 0 && info_.stream_rows == 0) info_.stream_rows = stream_cutover();   // once, after calibrate
    if (n < info_.stream_rows) return false;
    streaming_ = true;
    for (size_t k = 0; k < std::min<size_t>(2, split_layers_.size()); ++k) copy_layer(k);
    return true;
}

void cuda_expert_lanes::copy_layer(size_t k) {
    auto cs = static_cast<cudaStream_t>(copy_stream_);
    const int il = split_layers_[k];
    const size_t buf = k % 2;
    const moe::expert_bank& b = banks_[static_cast<size_t>(il)];
    const layer_slots& dst = stream_buf_[buf];
    const int32_t* local = local_slot_.data() + static_cast<size_t>(il) * static_cast<size_t>(hp_.n_expert);
    const tensor_view* src[3] = {b.gate, b.up, b.down};
    std::byte* const dst_mats[3] = {dst.gate, dst.up, dst.down};
    // The buffer is free once the launches of the layer that used it last are done.
    ck(cudaStreamWaitEvent(cs, static_cast<cudaEvent_t>(stream_free_[buf]), 0), "cudaStreamWaitEvent");
    ck(cudaEventRecord(static_cast<cudaEvent_t>(pcie_events_[2 * static_cast<size_t>(il)]), cs), "cudaEventRecord");
    uint64_t host_bytes = 0;
    // Runs of experts not resident: one copy per matrix per run (slices of consecutive experts are
    // consecutive in the file's tensor and in the buffer).
    for (int e0 = 0; e0 < hp_.n_expert;) {
        if (local[e0] >= 0) {
            ++e0;
            continue;
        }
        int e1 = e0 + 1;
        while (e1 < hp_.n_expert && local[e1] < 0) ++e1;
        const size_t count = static_cast<size_t>(e1 - e0);
        for (int m = 0; m < 3; ++m) {
            const size_t sb = slice_of(*src[m]);
            ck(cudaMemcpyAsync(dst_mats[m] + static_cast<size_t>(e0) * sb, kernels::expert_slice(*src[m], e0).data, count * sb,
                               cudaMemcpyHostToDevice, cs),
               "stream copy");
            host_bytes += count * sb;
        }
        e0 = e1;
    }
    ck(cudaEventRecord(static_cast<cudaEvent_t>(pcie_events_[2 * static_cast<size_t>(il) + 1]), cs), "cudaEventRecord");
    pcie_recorded_[static_cast<size_t>(il)] = 1;
    ck(cudaEventRecord(static_cast<cudaEvent_t>(stream_landed_[buf]), cs), "cudaEventRecord");
    metrics_.add_streamed(host_bytes, static_cast<double>(host_bytes) / (costs_.pcie_gb_s * 1e9));
}

const cuda_expert_lanes::layer_slots& cuda_expert_lanes::stream_acquire(int il) {
    const auto it = std::lower_bound(split_layers_.begin(), split_layers_.end(), il);
    if (!streaming_ || it == split_layers_.end() || *it != il) fail("cuda expert stream: layer {} is not streamed", il);
    const size_t buf = static_cast<size_t>(it - split_layers_.begin()) % 2;
    ck(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream_), static_cast<cudaEvent_t>(stream_landed_[buf]), 0),
       "cudaStreamWaitEvent");
    return stream_buf_[buf];
}

const int32_t* cuda_expert_lanes::split_streamed(int il, int64_t n, const int32_t* d_ids) {
    if (!streaming_) fail("cuda expert stream: layer {} is not streamed", il);
    if (n > max_rows_) fail("cuda expert lanes: {} rows, buffers for {}", n, max_rows_);
    // d_slot_'s first half (the join's slots of a planned window: none in a streamed forward).
    cuda::split_streamed_pairs(d_ids, n * hp_.n_expert_used, d_local_slot_ + static_cast<size_t>(il) * static_cast<size_t>(hp_.n_expert),
                               hp_.n_expert, d_mm_, d_slot_, stream_);
    return d_slot_;
}

void cuda_expert_lanes::stream_release(int il) {
    const auto it = std::lower_bound(split_layers_.begin(), split_layers_.end(), il);
    if (!streaming_ || it == split_layers_.end() || *it != il) fail("cuda expert stream: layer {} is not streamed", il);
    const size_t k = static_cast<size_t>(it - split_layers_.begin());
    ck(cudaEventRecord(static_cast<cudaEvent_t>(stream_free_[k % 2]), static_cast<cudaStream_t>(stream_)), "cudaEventRecord");
    if (k + 2 < split_layers_.size()) copy_layer(k + 2);
}

}  // namespace sluice

#endif  // SLUICE_HAVE_CUDA
