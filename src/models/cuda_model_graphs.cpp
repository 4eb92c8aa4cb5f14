// A split model's decode step and verify windows as CUDA graphs (cuda_model_impl.h:
// split_graph): captured on the first run for a (cache, logits, rows) key, cut where the host works (the plan, the PCIe
// copies, the CPU lane), and replayed from then on with the same host work between segments.
// The graphs launch what the uncaptured step launches, with the same arguments, so the bits are
// the same (tests/gpu/placement_parity decodes through them against the CPU model).
#ifdef SLUICE_HAVE_CUDA

#include "models/cuda_model_impl.h"

#include "core/error.h"
#include "kernels/cuda/matmul.cuh"

namespace sluice::cuda_impl {

bool cuda_model::split_graphs_apply(std::span<const batch_segment> batch, int64_t n) const {
    // One sequence's decode step, or its verify window of up to k_split_max_rows rows that all
    // want logits: the launches depend on the rows only, not on the routing (each lane's matmuls
    // skip the other lanes' pairs on the device; a grouped launch reads its tile count from the
    // device), and the position comes from device memory, so one set of graphs per row count
    // serves every position. A streaming forward (a prefill chunk) stays uncaptured.
    return graphs_ && lanes_ && !lanes_->streaming() && graph_shaped(batch, n);
}

void cuda_model::enqueue_split_step(std::span<const batch_segment> batch, const std::vector<float*>& kv_bufs, int64_t n) {
    const graph_key key{kv_bufs[0], batch[0].kv->shape().n_ctx, batch[0].n_logits, n};
    for (const split_graph& g : split_graphs_)
        if (g.key == key) return replay_split(g);
    if (split_graphs_.size() >= k_split_graphs_max) clear_graphs();
    split_graph g{key, {}};
    segment_out_ = &g.segments;
    try {
        segment_begin();
        enqueue(batch, kv_bufs, n, d_pos_);
        segment_cut();
    } catch (...) {
        cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
        if (cudaStreamIsCapturing(stream_, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
            cudaGraph_t partial = nullptr;
            cudaStreamEndCapture(stream_, &partial);
            if (partial) cudaGraphDestroy(partial);
        }
        cudaStreamSynchronize(stream_);   // the segments already launched, before they go
        cudaGetLastError();
        segment_out_ = nullptr;
        for (cudaGraphExec_t e : g.segments) cudaGraphExecDestroy(e);
        throw;
    }
    segment_out_ = nullptr;
    split_graphs_.push_back(std::move(g));
}

void cuda_model::segment_begin() {
    ck(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
}

void cuda_model::segment_cut() {
    cudaGraph_t g = nullptr;
    ck(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    ck(e, "cudaGraphInstantiate");
    segment_out_->push_back(exec);
    ck(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
}

void cuda_model::captured_split_layer(const dlayer& l, int il, int64_t n, bool g_act) {
    segment_cut();   // the segment up to this layer's router
    lanes_->gpu_begin(il);
    segment_begin();
    lanes_->ring(il, n, ids_, xn_, /*captured=*/true);
    const int n_resident = lanes_->slots(il).n_slots;
    if (n_resident > 0) {
        slot_experts(l, n_resident, n, lanes_->slot_ids(), g_act);
        g_act = false;   // act_ now holds the down projection's input
    }
    shared_expert(l, n);   // on the GPU while the host plans and the CPU lane runs (it reads xn_ only)
    g_act = false;         // its launches quantised their own rows into act_
    segment_cut();         // hits: the doorbell, the resident experts, the shared expert
    lanes_->plan_window(il, n);   // polls the doorbell while the GPU goes on
    const bool staging = lanes_->staging().n_slots > 0;
    if (staging) {
        lanes_->staged_begin();   // the stream waits for this window's copies (outside the graph)
        segment_begin();
        lanes_->upload_slots(n);
        staged_experts(l, n, lanes_->stage_ids(n), g_act);
        segment_cut();            // staged
        lanes_->staged_end();
    }
    lanes_->gpu_end(il);
    lanes_->run_cpu(n, *pool_, il);
    segment_begin();
    if (!staging) lanes_->upload_slots(n);     // the join's slots
    lanes_->join(n, ey_, /*captured=*/true);   // the tail segment goes on from here
}

void cuda_model::replay_split(const split_graph& g) {
    // The same host work, in the same order, as captured_split_layer between its cuts.
    const int64_t n = g.key.rows;
    const bool staged = lanes_->staging().n_slots > 0;
    const size_t want = 1 + lanes_->split_layers().size() * (staged ? 3 : 2);
    if (g.segments.size() != want) fail("cuda model: a split decode step of {} graph segments, expected {}", g.segments.size(), want);
    size_t k = 0;
    ck(cudaGraphLaunch(g.segments[k++], stream_), "cudaGraphLaunch");   // head
    const std::vector<int>& split = lanes_->split_layers();
    for (int il : split) {
        lanes_->gpu_begin(il);
        ck(cudaGraphLaunch(g.segments[k++], stream_), "cudaGraphLaunch");   // hits
        lanes_->plan_window(il, n);
        if (staged) {
            lanes_->staged_begin();
            ck(cudaGraphLaunch(g.segments[k++], stream_), "cudaGraphLaunch");
            lanes_->staged_end();
        }
        lanes_->gpu_end(il);
        lanes_->run_cpu(n, *pool_, il);
        lanes_->between_begin();
        ck(cudaGraphLaunch(g.segments[k++], stream_), "cudaGraphLaunch");   // tail
        if (il != split.back()) lanes_->between_end();   // the last tail ends with the logits
    }
}

}  // namespace sluice::cuda_impl

#endif  // SLUICE_HAVE_CUDA
