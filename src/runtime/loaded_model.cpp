#include "runtime/loaded_model.h"

#include "core/error.h"
#include "models/cuda_model.h"
#include "placement/model_identity.h"
#include "placement/progress.h"
#include "placement/routing_profile.h"

namespace sluice {

std::unique_ptr<model> load_model_on(const std::filesystem::path& path, const model_file& f, int n_ctx,
                                     const device_options& dev, placement::progress* prog) {
    const int gpu = dev.gpu;
    if (gpu < 0) return load_model(f, load_options{n_ctx});
#ifdef SLUICE_HAVE_CUDA
    if (!cuda_model_supports(f.architecture()))
        fail("--gpu {}: no CUDA forward for architecture '{}' yet (run it on the CPU: leave out --gpu)", gpu,
             f.architecture());
    cuda_placement p;
    p.vram_budget = dev.vram_budget;
    p.prefill_stream_rows = dev.prefill_stream_rows;
    p.adaptive_cache = dev.adaptive_cache;
    p.progress = prog;
    // The profile ranks what the budget holds; only read when the budget splits the experts.
    if (dev.vram_budget != UINT64_MAX) p.profile = placement::load_profile_for(path, placement::identify_model(path, f));
    return load_model_cuda(f, load_options{n_ctx}, gpu, p);
#else
    (void)path;
    (void)prog;
    fail("--gpu {}: this build of sluice has no CUDA backend (configure with -DSLUICE_CUDA=ON and nvcc, or leave out "
         "--gpu to run on the CPU)", gpu);
#endif
}

read_progress reading_progress(placement::progress& prog) {
    return [&prog](const std::filesystem::path& file, uint64_t done, uint64_t total) {
        if (done == 0) {
            prog.begin("reading " + file.filename().string(), total);
            return;
        }
        prog.advance(done - prog.done());
        if (done >= total) prog.finish();
    };
}

int default_prefill_rows(const model& net, int gpu) {
    if (gpu < 0) return k_cpu_prefill_rows;
#ifdef SLUICE_HAVE_CUDA
    if (cuda_placement_of(net).prefill_stream) return k_gpu_stream_prefill_rows;
#else
    (void)net;
#endif
    return k_gpu_prefill_rows;
}

loaded_model loaded_model::open(const std::filesystem::path& path, int n_ctx, const device_options& dev,
                                file_access access, placement::progress* prog) {
    loaded_model m;
    m.path = path;
    const read_progress reading = prog ? reading_progress(*prog) : read_progress{};
    m.file = model_file::open(path, access, prog ? &reading : nullptr);
    m.tok = tokenizer::for_model(*m.file, path);
    m.net = load_model_on(path, *m.file, n_ctx, dev, prog);
    check_tokenizer_covers_output(m.tok->n_vocab(), m.net->hparams().n_vocab, std::filesystem::is_directory(path),
                                  path.string());
    return m;
}

void check_tokenizer_covers_output(int64_t n_tokens, int64_t n_vocab, bool hf_directory, const std::string& where) {
    // Fewer tokens than a GGUF file's output rows would let generation pick an id it cannot
    // print: the request would end in an error halfway.
    if (n_tokens > n_vocab || (!hf_directory && n_tokens != n_vocab))
        fail("model: {}: the tokenizer has {} tokens but the model's output has {}{}", where, n_tokens, n_vocab,
             hf_directory ? "" : " (a GGUF file lists a token for every output row)");
}

loaded_model open_target(const engine_options& o) {
    placement::progress prog(stderr, o.show_load_progress ? placement::progress_style::automatic : placement::progress_style::silent);
    if (o.on_load_phase) prog.on_phase(o.on_load_phase);
    return loaded_model::open(o.model_path.empty() ? engine::default_model_path() : o.model_path, o.n_ctx,
                              device_options_of(o), o.mmap ? file_access::map : file_access::read, &prog);
}

device_options device_options_of(const engine_options& o) {
    return {.gpu = o.gpu, .vram_budget = o.vram_budget, .prefill_stream_rows = o.prefill_stream_rows,
            .adaptive_cache = o.adaptive_cache};
}

std::vector<std::string> loaded_model::vocab() const {
    std::vector<std::string> v(static_cast<size_t>(tok->n_vocab()));
    for (int32_t i = 0; i < tok->n_vocab(); ++i) v[static_cast<size_t>(i)] = tok->token_bytes(i);
    return v;
}

sampling_params sampling_params_of(const generate_params& p) {
    sampling_params sp;
    sp.temperature = p.temperature;
    sp.top_k = p.top_k;
    sp.top_p = p.top_p;
    sp.min_p = p.min_p;
    sp.seed = p.seed;
    sp.repeat_penalty = p.repeat_penalty;
    sp.frequency_penalty = p.frequency_penalty;
    sp.presence_penalty = p.presence_penalty;
    sp.penalty_last_n = p.penalty_last_n;
    return sp;
}

}  // namespace sluice
