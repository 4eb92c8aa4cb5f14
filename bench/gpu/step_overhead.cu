// step_overhead: what a decode step pays on the host side of the GPU, one probe at a time, on
// this machine (the lent H200 runs its processes under a sandboxed kernel, where a driver call
// may cost far more than on bare metal). Each line is the median of REPS rounds, microseconds:
//   - a sync of an idle stream; an empty kernel launched and synced;
//   - a captured graph of 1 and of 100 empty kernels (chained), launched and synced, and the
//     host time of cudaGraphLaunch alone;
//   - copies a decode step makes: 8 KB up from pinned memory, a 151,936-float logits row down
//     into pageable and into pinned memory, and the host memcpy of that row;
//   - waiting for the 100-kernel graph by cudaStreamSynchronize against spinning on cudaEventQuery;
//   - cudaSetDevice (the model calls it at every forward).
// Sums of these against decode_bench's per-step time say how much of a step is not the kernels.
//   step_overhead [REPS]
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

cudaGraphExec_t chain_graph(cudaStream_t s, int kernels) {
    cudaGraph_t g = nullptr;
    ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "capture");
    for (int i = 0; i < kernels; ++i) empty_kernel<<<1, 32, 0, s>>>();
    ck(cudaStreamEndCapture(s, &g), "end capture");
    cudaGraphExec_t e = nullptr;
    ck(cudaGraphInstantiate(&e, g, 0), "instantiate");
    cudaGraphDestroy(g);
    return e;
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
    std::printf("PASS: step_overhead done\n");
    return 0;
}
