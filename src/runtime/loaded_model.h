// A model as the engines hold it: the file (mapped), its tokenizer and the network bound to
// the file's weights. Shared by the one-request engine (engine.cpp) and the serving engine.
#pragma once

#include "io/model_file.h"
#include "models/model.h"
#include "runtime/sampler.h"
#include "sluice/engine.h"
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace sluice {
namespace placement {
class progress;
}

struct loaded_model {
    std::filesystem::path path;
    std::unique_ptr<model_file> file;
    std::unique_ptr<tokenizer> tok;
    std::unique_ptr<model> net;

    // Opens the file, its tokenizer and the network; throws when the tokenizer has more ids
    // than the model has logits.
    // gpu >= 0: the network on that CUDA device, its routed experts under vram_budget bytes
    // (models/cuda_model.h: cuda_placement, with the profile beside the model when present).
    // access: the file mapped or read into memory (io/mmap.h).
    // prefill_stream_rows, prog: load_model_on's; prog also shows a --no-mmap read.
    static loaded_model open(const std::filesystem::path& path, int n_ctx, int gpu = -1,
                             uint64_t vram_budget = UINT64_MAX, file_access access = file_access::map,
                             int prefill_stream_rows = -1, placement::progress* prog = nullptr);
    // Every token's bytes, by id (for the draft model's vocabulary check).
    std::vector<std::string> vocab() const;
};

// The target model of an engine's options: o.model_path (or the default model), on o.gpu under
// o.vram_budget, with the load's progress shown and reported as o asks (show_load_progress,
// on_load_phase). Shared by the one-request and the serving engine.
loaded_model open_target(const engine_options& o);

// The network of file f (opened from path): on the CPU (gpu < 0), or on CUDA device gpu with its
// routed experts under vram_budget bytes. Fails with what to do in a build without CUDA.
// prog (optional): the CUDA load's long steps as progress phases (cuda_placement::progress).
std::unique_ptr<model> load_model_on(const std::filesystem::path& path, const model_file& f, int n_ctx, int gpu,
                                     uint64_t vram_budget, int prefill_stream_rows = -1,
                                     placement::progress* prog = nullptr);

// A --no-mmap read's pieces as progress phases, one a file ("reading model.gguf"), on prog.
read_progress reading_progress(placement::progress& prog);

// Rows per prefill forward for net on that backend (gpu < 0: the CPU): k_cpu_prefill_rows,
// k_gpu_prefill_rows, or k_gpu_stream_prefill_rows for a CUDA model whose split experts stream
// for prefill (sluice/engine.h says why). Any value gives the same bits (E1).
int default_prefill_rows(const model& net, int gpu);

// The keyed sampler's parameters of a request (logit_bias left empty: the serving API carries
// it beside the parameters). Shared by both engines so they sample alike.
sampling_params sampling_params_of(const generate_params& p);

}  // namespace sluice
