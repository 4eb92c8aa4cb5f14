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

// Where a network runs: the CPU (gpu < 0) or CUDA device gpu, its routed experts under
// vram_budget bytes, with prefill streaming and the adaptive cache as asked
// (models/cuda_model.h: cuda_placement's fields of the same names).
struct device_options {
    int gpu = -1;
    uint64_t vram_budget = UINT64_MAX;
    int prefill_stream_rows = -1;
    bool adaptive_cache = true;
};

struct loaded_model {
    std::filesystem::path path;
    std::unique_ptr<model_file> file;
    std::unique_ptr<tokenizer> tok;
    std::unique_ptr<model> net;

    // Opens the file, its tokenizer and the network; throws when the tokenizer has more ids
    // than the model has logits.
    // dev: where the network runs (load_model_on). access: the file mapped or read into memory
    // (io/mmap.h). prog: load_model_on's; it also shows a --no-mmap read.
    static loaded_model open(const std::filesystem::path& path, int n_ctx, const device_options& dev = {},
                             file_access access = file_access::map, placement::progress* prog = nullptr);
    // Every token's bytes, by id (for the draft model's vocabulary check).
    std::vector<std::string> vocab() const;
};

// Fails unless a tokenizer of n_tokens tokens can print every id of a model output of n_vocab
// rows: equal for a GGUF file (llama.cpp's converter pads the token list with [PAD] entries),
// at most n_vocab for a Hugging Face directory (which may pad only its embeddings). `where`
// names the model in the error.
void check_tokenizer_covers_output(int64_t n_tokens, int64_t n_vocab, bool hf_directory, const std::string& where);

// The target model of an engine's options: o.model_path (or the default model), where
// device_options_of(o) says, with the load's progress shown and reported as o asks (show_load_progress,
// on_load_phase). Shared by the one-request and the serving engine.
loaded_model open_target(const engine_options& o);

device_options device_options_of(const engine_options& o);

// The network of file f (opened from path) where dev says: on the CPU, or on a CUDA device with
// its routed experts under the budget, ranked by the profile beside the model when present.
// Fails with what to do in a build without CUDA.
// prog (optional): the CUDA load's long steps as progress phases (cuda_placement::progress).
std::unique_ptr<model> load_model_on(const std::filesystem::path& path, const model_file& f, int n_ctx,
                                     const device_options& dev, placement::progress* prog = nullptr);

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
