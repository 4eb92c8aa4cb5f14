#include "runtime/loaded_model.h"

#include "core/error.h"

namespace sluice {

loaded_model loaded_model::open(const std::filesystem::path& path, int n_ctx) {
    loaded_model m;
    m.path = path;
    m.file = model_file::open(path);
    m.tok = tokenizer::for_model(*m.file, path);
    m.net = load_model(*m.file, load_options{n_ctx});
    if (m.tok->n_vocab() > m.net->hparams().n_vocab)
        fail("model: {}: the tokenizer has {} tokens but the model's output has {}", path.string(), m.tok->n_vocab(),
             m.net->hparams().n_vocab);
    return m;
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
