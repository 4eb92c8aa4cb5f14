// The routing profile's calibration pass (routing_profile.h): the text's tokens through the
// normal CPU forward, the router's choices counted by an observer on the forward's scratch.
#include "placement/routing_profile.h"

#include "core/error.h"
#include "kv/kv_cache.h"
#include "models/model.h"
#include "placement/progress.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <thread>

namespace sluice::placement {

routing_recorder::routing_recorder(int n_layer, int n_expert) : n_layer_(n_layer), n_expert_(n_expert) {
    if (n_layer < 1 || n_expert < 1) fail("routing recorder: expected >= 1 layers and experts, got {} and {}", n_layer, n_expert);
    counts_.assign(static_cast<size_t>(n_layer) * static_cast<size_t>(n_expert), 0);
}

void routing_recorder::attach(forward_scratch& s) {
    s.on_route.fn = &routing_recorder::observe;
    s.on_route.ctx = this;
}

void routing_recorder::observe(void* ctx, int layer, const int32_t* ids, int64_t n_ids) {
    auto* r = static_cast<routing_recorder*>(ctx);
    if (layer < 0 || layer >= r->n_layer_) return;
    uint64_t* c = r->counts_.data() + static_cast<size_t>(layer) * static_cast<size_t>(r->n_expert_);
    for (int64_t i = 0; i < n_ids; ++i)
        if (ids[i] >= 0 && ids[i] < r->n_expert_) ++c[ids[i]];
}

routing_profile calibrate_profile(model& net, const model_identity& id, const tokenizer& tok, std::string_view text,
                                  const calibration_options& o, progress* prog) {
    const model_hparams& hp = net.hparams();
    if (hp.n_expert < 1) fail("profile: the model ({}) has no routed experts", hp.arch);
    std::vector<token_id> tokens = tok.encode(text, false, true);
    if (o.max_tokens > 0 && tokens.size() > static_cast<size_t>(o.max_tokens)) tokens.resize(static_cast<size_t>(o.max_tokens));
    if (tokens.empty()) fail("profile: the calibration text has no tokens");
    const int n_ctx = std::clamp(o.n_ctx, 16, std::max(16, hp.n_ctx_train));
    const int n_threads = o.n_threads > 0 ? o.n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    constexpr int k_rows = 32;   // rows per forward, as the engine's prefill chunks
    thread_pool pool(n_threads);
    forward_scratch s = net.make_scratch(k_rows, pool);
    s.last_row_logits_only = true;   // nobody samples: only the routing is wanted
    routing_recorder rec(hp.n_layer, hp.n_expert);
    rec.attach(s);
    kv_cache kv(net.kv_shape_for(n_ctx));
    std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
    if (prog) prog->begin("calibrating the routing profile", tokens.size(), "tokens");
    for (size_t at = 0; at < tokens.size();) {
        if (kv.n_pos() >= n_ctx) kv.clear();   // a long text runs as several passes of n_ctx
        const size_t n = std::min({static_cast<size_t>(k_rows), tokens.size() - at, static_cast<size_t>(n_ctx - kv.n_pos())});
        net.forward(std::span<const token_id>(tokens.data() + at, n), kv.n_pos(), kv, s, logits.data());
        at += n;
        if (prog) prog->advance(n);
    }
    if (prog) prog->finish();
    routing_profile p;
    p.model = id;
    p.n_layer = static_cast<uint32_t>(hp.n_layer);
    p.n_expert = static_cast<uint32_t>(hp.n_expert);
    p.k_used = static_cast<uint32_t>(hp.n_expert_used);
    p.n_tokens = tokens.size();
    p.counts = rec.counts();
    return p;
}

}  // namespace sluice::placement
