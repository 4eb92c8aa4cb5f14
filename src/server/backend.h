// What the HTTP layer needs from the engine: the serving API of include/sluice/serving.h as an
// interface, so that the server's tests run against a scripted backend (tests/unit) and
// `sluice serve` against the real continuous-batching engine (engine_backend below).
#pragma once

#include "sluice/serving.h"

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice {

class serving_backend {
public:
    virtual ~serving_backend() = default;

    // Same contract as serving_engine::submit: 0 when queued, else the queue depth (429).
    // on_token runs on the backend's thread and must not block; on_done is called once, last.
    virtual int64_t submit(completion_request r, token_callback on_token, done_callback on_done) = 0;

    virtual std::vector<int32_t> tokenize(std::string_view text, bool parse_special) const = 0;
    virtual std::string token_text(int32_t id) const = 0;  // the token's bytes
    virtual int32_t n_vocab() const = 0;
    virtual int32_t n_ctx() const = 0;
    virtual bool is_eog(int32_t id) const = 0;
    virtual std::string chat_template() const = 0;  // "" when the model has none
    virtual std::string bos_text() const = 0;
    virtual std::string eos_text() const = 0;
    virtual std::string model_name() const = 0;
    virtual serving_metrics metrics() const = 0;
    // The expert placement's Prometheus lines ("" when the experts are not split).
    virtual std::string placement_metrics_text() const { return {}; }
    virtual void shutdown(bool cancel_in_flight) = 0;

    // The guarantees of the exactness contract that hold for every reply of this backend. E5
    // (resumed = fresh) is added per reply when its prompt was restored from the prefix cache;
    // E3 (placement) only means something once experts can live on a GPU.
    virtual std::vector<std::string> exact_guarantees() const { return {"E1", "E2", "E4"}; }
};

// The real engine behind the interface. Inline on purpose: only the code that constructs it
// (src/cli/serve.cpp) links against serving_engine.
class engine_backend final : public serving_backend {
public:
    explicit engine_backend(std::unique_ptr<serving_engine> e) : e_(std::move(e)) {}
    int64_t submit(completion_request r, token_callback t, done_callback d) override {
        return e_->submit(std::move(r), std::move(t), std::move(d));
    }
    std::vector<int32_t> tokenize(std::string_view text, bool parse_special) const override {
        return e_->tokenize(text, parse_special);
    }
    std::string token_text(int32_t id) const override { return e_->token_text(id); }
    int32_t n_vocab() const override { return e_->n_vocab(); }
    int32_t n_ctx() const override { return e_->n_ctx(); }
    bool is_eog(int32_t id) const override { return e_->is_eog(id); }
    std::string chat_template() const override { return e_->chat_template(); }
    std::string bos_text() const override { return e_->bos_text(); }
    std::string eos_text() const override { return e_->eos_text(); }
    std::string model_name() const override { return e_->model_name(); }
    serving_metrics metrics() const override { return e_->metrics(); }
    std::string placement_metrics_text() const override { return e_->placement_metrics_text(); }
    void shutdown(bool cancel_in_flight) override { e_->shutdown(cancel_in_flight); }

private:
    std::unique_ptr<serving_engine> e_;
};

}  // namespace sluice
