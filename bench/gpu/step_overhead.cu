// step_overhead: what a decode step pays on the host side of the GPU, one probe at a time, on
// this machine (the lent H200 runs its processes under a sandboxed kernel, where a driver call
// may cost far more than on bare metal). Each line is the median of REPS rounds, microseconds:
//   - a sync of an idle stream; an empty kernel launched and synced;
//   - a captured graph of 1 and of 100 empty kernels (chained), launched and synced, and the
//     host time of cudaGraphLaunch alone;
//   - copies a decode step makes: 8 KB up from pinned memory, a 151,936-float logits row down
//     into pageable and into pinned memory, and the host memcpy of that row;
//   - waiting for the 100-kernel graph by cudaStreamSynchronize against spinning on cudaEventQuery;
//   - cudaSetDevice (the model calls it at every forward);
//   - a split layer's handoff of its routing to the host (the ids and an 8 KB input row) after a
//     graph of 100 kernels: two copies and cudaStreamSynchronize, against the doorbell kernel
//     (kernels/cuda/expert_rows.cuh) polled by the host, alone and with a second graph of 100
//     kernels queued behind it (the resident experts that run while the host plans).
// Sums of these against decode_bench's per-step time say how much of a step is not the kernels.
//   step_overhead [REPS]
#include "kernels/cuda/expert_rows.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

namespace {

void ck(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::printf("FAIL: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

double now_us() {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

__global__ void empty_kernel() {}

// Median microseconds of `reps` rounds of f (after 3 untimed ones).
double median_us(int reps, const std::function<void()>& f) {
    for (int i = 0; i < 3; ++i) f();
    std::vector<double> t;
    t.reserve(static_cast<size_t>(reps));
    for (int i = 0; i < reps; ++i) {
        const double t0 = now_us();
        f();
        t.push_back(now_us() - t0);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// A graph of `kernels` chained empty kernels, then whatever `tail` enqueues.
cudaGraphExec_t chain_graph(cudaStream_t s, int kernels, const std::function<void()>& tail = {}) {
    cudaGraph_t g = nullptr;
    ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
    for (int i = 0; i < kernels; ++i) empty_kernel<<<1, 32, 0, s>>>();
    if (tail) tail();
    ck(cudaStreamEndCapture(s, &g), "end capture");
    cudaGraphExec_t e = nullptr;
    ck(cudaGraphInstantiate(&e, g, 0), "instantiate");
    cudaGraphDestroy(g);
    return e;
}

// The routing's handoff to the host after a graph of 100 kernels (a layer's work up to its router),
// three ways; prints one line each.
void routing_handoff(cudaStream_t s, int reps, const std::function<void(const char*, double)>& line) {
    const int pairs = 8, embd = 2048, n_expert = 128;
    int32_t *d_ids = nullptr, *d_local = nullptr, *d_mm = nullptr, *h_ids = nullptr, *dh_ids = nullptr;
    float *d_xn = nullptr, *h_xn = nullptr, *dh_xn = nullptr;
    uint32_t *d_state = nullptr, *h_bell = nullptr, *dh_bell = nullptr;
    ck(cudaMalloc(&d_ids, pairs * 4), "malloc");
    ck(cudaMemset(d_ids, 0, pairs * 4), "memset");
    ck(cudaMalloc(&d_local, n_expert * 4), "malloc");
    ck(cudaMemset(d_local, 0xff, n_expert * 4), "memset");
    ck(cudaMalloc(&d_mm, pairs * 4), "malloc");
    ck(cudaMalloc(&d_xn, embd * 4), "malloc");
    ck(cudaMemset(d_xn, 0, embd * 4), "memset");
    ck(cudaMalloc(&d_state, 8), "malloc");
    ck(cudaMemset(d_state, 0, 8), "memset");
    ck(cudaHostAlloc(&h_ids, pairs * 4, cudaHostAllocMapped), "host alloc");
    ck(cudaHostAlloc(&h_xn, embd * 4, cudaHostAllocMapped), "host alloc");
    ck(cudaHostAlloc(&h_bell, 4, cudaHostAllocMapped), "host alloc");
    *h_bell = 0;
    ck(cudaHostGetDevicePointer(&dh_ids, h_ids, 0), "device pointer");
    ck(cudaHostGetDevicePointer(&dh_xn, h_xn, 0), "device pointer");
    ck(cudaHostGetDevicePointer(&dh_bell, h_bell, 0), "device pointer");
    const sluice::cuda::routing_bell b{.ids = d_ids, .xn = d_xn, .pairs = pairs, .xn_count = embd, .local_slot = d_local,
                                       .n_expert = n_expert, .host_ids = dh_ids, .host_xn = dh_xn, .mm_ids = d_mm,
                                       .state = d_state, .bell = dh_bell};
    const cudaGraphExec_t copies = chain_graph(s, 100, [&] {
        ck(cudaMemcpyAsync(h_ids, d_ids, pairs * 4, cudaMemcpyDeviceToHost, s), "copy");
        ck(cudaMemcpyAsync(h_xn, d_xn, embd * 4, cudaMemcpyDeviceToHost, s), "copy");
    });
    const cudaGraphExec_t ringing = chain_graph(s, 100, [&] { sluice::cuda::ring_routing_bell(b, s); });
    const cudaGraphExec_t behind = chain_graph(s, 100);
    uint32_t rings = 0;
    auto poll = [&] {
        ++rings;
        const volatile uint32_t* bell = h_bell;
        while (*bell != rings) {
        }
    };
    line("graph of 100 + ids and 8 KB down by 2 copies + sync", median_us(reps, [&] {
             ck(cudaGraphLaunch(copies, s), "launch");
             ck(cudaStreamSynchronize(s), "sync");
         }));
    line("graph of 100 + the doorbell, launch + poll", median_us(reps, [&] {
             ck(cudaGraphLaunch(ringing, s), "launch");
             poll();
         }));
    ck(cudaStreamSynchronize(s), "sync");
    std::vector<double> t;
    for (int i = 0; i < reps + 3; ++i) {   // timed to the bell; the graph behind it finishes untimed
        const double t0 = now_us();
        ck(cudaGraphLaunch(ringing, s), "launch");
        ck(cudaGraphLaunch(behind, s), "launch");
        poll();
        if (i >= 3) t.push_back(now_us() - t0);
        ck(cudaStreamSynchronize(s), "sync");
    }
    std::sort(t.begin(), t.end());
    line("  ... with a graph of 100 queued behind it", t[t.size() / 2]);
    line("  ... the doorbell's graph + sync (no poll)", median_us(reps, [&] {
             ck(cudaGraphLaunch(ringing, s), "launch");
             ck(cudaStreamSynchronize(s), "sync");
             ++rings;
         }));
    for (cudaGraphExec_t g : {copies, ringing, behind}) cudaGraphExecDestroy(g);
    for (void* p : {static_cast<void*>(d_ids), static_cast<void*>(d_local), static_cast<void*>(d_mm), static_cast<void*>(d_xn),
                    static_cast<void*>(d_state)})
        cudaFree(p);
    for (void* p : {static_cast<void*>(h_ids), static_cast<void*>(h_xn), static_cast<void*>(h_bell)}) cudaFreeHost(p);
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    const int reps = argc > 1 ? std::max(10, std::atoi(argv[1])) : 200;
    cudaStream_t s = nullptr;
    ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
    const size_t logits_bytes = 151936 * 4;
    void *d_small = nullptr, *d_logits = nullptr, *h_small = nullptr, *h_pinned = nullptr;
    ck(cudaMalloc(&d_small, 8192), "malloc");
    ck(cudaMalloc(&d_logits, logits_bytes), "malloc");
    ck(cudaMemset(d_logits, 0, logits_bytes), "memset");
    ck(cudaMallocHost(&h_small, 8192), "malloc host");
    ck(cudaMallocHost(&h_pinned, logits_bytes), "malloc host");
    std::vector<float> pageable(151936), pageable2(151936);
    const cudaGraphExec_t g1 = chain_graph(s, 1), g100 = chain_graph(s, 100);
    cudaEvent_t ev = nullptr;
    ck(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "event");

    auto line = [](const char* what, double us) { std::printf("%-60s %9.1f us\n", what, us); };
    line("cudaStreamSynchronize, idle stream", median_us(reps, [&] { ck(cudaStreamSynchronize(s), "sync"); }));
    line("cudaSetDevice(0)", median_us(reps, [&] { ck(cudaSetDevice(0), "set device"); }));
    line("empty kernel, launch + sync", median_us(reps, [&] {
             empty_kernel<<<1, 32, 0, s>>>();
             ck(cudaStreamSynchronize(s), "sync");
         }));
    line("graph of 1 empty kernel, launch + sync", median_us(reps, [&] {
             ck(cudaGraphLaunch(g1, s), "launch");
             ck(cudaStreamSynchronize(s), "sync");
         }));
    line("graph of 100 empty kernels, launch + sync", median_us(reps, [&] {
             ck(cudaGraphLaunch(g100, s), "launch");
             ck(cudaStreamSynchronize(s), "sync");
         }));
    double launch_host = 0;
    median_us(reps, [&] {
        const double t0 = now_us();
        ck(cudaGraphLaunch(g100, s), "launch");
        launch_host += now_us() - t0;
        ck(cudaStreamSynchronize(s), "sync");
    });
    line("  ... cudaGraphLaunch alone (host, mean)", launch_host / (reps + 3));
    line("graph of 100, launch + spin on cudaEventQuery", median_us(reps, [&] {
             ck(cudaGraphLaunch(g100, s), "launch");
             ck(cudaEventRecord(ev, s), "record");
             while (cudaEventQuery(ev) == cudaErrorNotReady) {
             }
         }));
    line("8 KB pinned -> device + sync", median_us(reps, [&] {
             ck(cudaMemcpyAsync(d_small, h_small, 8192, cudaMemcpyHostToDevice, s), "copy");
             ck(cudaStreamSynchronize(s), "sync");
         }));
    line("logits row (608 KB) device -> pageable + sync", median_us(reps, [&] {
             ck(cudaMemcpyAsync(pageable.data(), d_logits, logits_bytes, cudaMemcpyDeviceToHost, s), "copy");
             ck(cudaStreamSynchronize(s), "sync");
         }));
    line("logits row device -> pinned + sync", median_us(reps, [&] {
             ck(cudaMemcpyAsync(h_pinned, d_logits, logits_bytes, cudaMemcpyDeviceToHost, s), "copy");
             ck(cudaStreamSynchronize(s), "sync");
         }));
    line("logits row host memcpy (pinned -> pageable)",
         median_us(reps, [&] { std::memcpy(pageable2.data(), h_pinned, logits_bytes); }));
    // The host's first read of a logits row: after the driver copied it into pageable memory,
    // and after a memcpy from the pinned row (decode_bench's argmax saw 0.70 ms a token).
    auto argmax = [](const std::vector<float>& x) {
        size_t b = 0;
        for (size_t i = 1; i < x.size(); ++i)
            if (x[i] > x[b]) b = i;
        return b;
    };
    size_t sink = 0;
    double t_dma = 0, t_copy = 0;
    for (int i = 0; i < reps; ++i) {
        ck(cudaMemcpyAsync(pageable.data(), d_logits, logits_bytes, cudaMemcpyDeviceToHost, s), "copy");
        ck(cudaStreamSynchronize(s), "sync");
        double t0 = now_us();
        sink += argmax(pageable);
        t_dma += now_us() - t0;
        ck(cudaMemcpyAsync(h_pinned, d_logits, logits_bytes, cudaMemcpyDeviceToHost, s), "copy");
        ck(cudaStreamSynchronize(s), "sync");
        std::memcpy(pageable2.data(), h_pinned, logits_bytes);
        t0 = now_us();
        sink += argmax(pageable2);
        t_copy += now_us() - t0;
    }
    line("argmax of a row the driver copied into pageable memory (mean)", t_dma / reps);
    line("argmax of a row memcpy'd from pinned memory (mean)", t_copy / reps);
    if (sink == 1) std::printf("\n");   // keeps the scans
    line("graph of 100 + 8 KB up + logits down to pinned + sync", median_us(reps, [&] {
             ck(cudaMemcpyAsync(d_small, h_small, 8192, cudaMemcpyHostToDevice, s), "copy");
             ck(cudaGraphLaunch(g100, s), "launch");
             ck(cudaMemcpyAsync(h_pinned, d_logits, logits_bytes, cudaMemcpyDeviceToHost, s), "copy");
             ck(cudaStreamSynchronize(s), "sync");
         }));
    routing_handoff(s, reps, line);
    std::printf("PASS: step_overhead done\n");
    return 0;
}
