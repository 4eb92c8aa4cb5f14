// The decode-step trace of a STEP_TRACE=1 build (bench/gpu/build.sh), for bench/gpu/step_trace.cu:
// block (0, 0) of every kernel records, in wait_prior_grids (launch.cuh), when it entered the wait
// and when the wait returned (%globaltimer), so that a decode step's kernels can be timed as they
// run in a graph with programmatic launch, where a profiler serialises them. Declarations only
// (no fmt: the bench compiles as C++20 under nvcc); defined in launch.cu for that build.
#pragma once

namespace sluice::cuda {

struct step_trace_record {
    unsigned long long entered = 0, waited = 0;   // ns
    unsigned grid_x = 0, grid_y = 0, block = 0;
    unsigned mark = 0;   // 0: a kernel's wait; else trace_mark's id (launch.cuh; grid_x, grid_y: the block, the grid's width)
};
struct step_trace {
    unsigned n = 0;                     // records written (may pass cap: the rest are dropped)
    unsigned cap = 0;
    step_trace_record* rec = nullptr;   // device [cap]
};
// Points every kernel file's kernels at t (device memory; null: off). Host only.
void set_step_trace(step_trace* t);
// Each kernel file's own setter, registered at static initialisation (launch.cu keeps them).
void register_step_trace_setter(void (*set)(step_trace*));

}  // namespace sluice::cuda
