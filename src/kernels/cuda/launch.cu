// The process-wide switch for programmatic dependent launch (launch.cuh). In a file of its own:
// every kernel file calls it, and a program that links one kernel file (act_quant_parity) must
// not pull in the others.
#include "kernels/cuda/launch.cuh"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace sluice::cuda {
namespace {
// -1: not decided yet (decided at the first launch: on for a current device of compute
// capability 9.0 or later unless SLUICE_CUDA_PDL=0), else 0 / 1.
std::atomic<int> g_programmatic{-1};

int default_mode() {
    if (const char* e = std::getenv("SLUICE_CUDA_PDL"); e && std::strcmp(e, "0") == 0) return 0;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return 0;
    return major >= 9 ? 1 : 0;
}
}  // namespace

bool programmatic_launch() {
    int m = g_programmatic.load(std::memory_order_relaxed);
    if (m < 0) {
        int expected = -1;
        const int d = default_mode();
        g_programmatic.compare_exchange_strong(expected, d, std::memory_order_relaxed);
        m = g_programmatic.load(std::memory_order_relaxed);
    }
    return m == 1;
}
void set_programmatic_launch(bool on) { g_programmatic.store(on ? 1 : 0, std::memory_order_relaxed); }

#ifdef SLUICE_STEP_TRACE
namespace {
std::vector<void (*)(step_trace*)>& step_trace_setters() {
    static std::vector<void (*)(step_trace*)> v;   // filled at static initialisation, before main
    return v;
}
}  // namespace
void register_step_trace_setter(void (*set)(step_trace*)) { step_trace_setters().push_back(set); }
void set_step_trace(step_trace* t) {
    for (auto* set : step_trace_setters()) set(t);
}
#endif

}  // namespace sluice::cuda
