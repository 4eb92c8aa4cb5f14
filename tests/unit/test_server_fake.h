// A scripted serving backend for the server's tests: a byte-level "tokenizer" (ids 0..255 are
// bytes), one end-of-generation token, and replies made of the pieces a test sets. A scheduler
// thread emits one token per active request per step, like the real engine's continuous
// batching, and honours on_token returning false, the per-request cancel flag, n_predict, the
// queue bound and shutdown.
#pragma once

#include "runtime/token_sha.h"
#include "server/backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <thread>

namespace sluice::test {

class fake_backend final : public serving_backend {
public:
    static constexpr int32_t k_eog = 256;

    // `pieces`: the reply, one token each (ids 257...). `step`: time per decode step.
    explicit fake_backend(std::vector<std::string> pieces, std::chrono::milliseconds step = std::chrono::milliseconds(2),
                          int max_active = 4, int max_queue = 4, int32_t n_ctx = 64)
        : pieces_(std::move(pieces)), step_(step), max_active_(max_active), max_queue_(max_queue), n_ctx_(n_ctx) {
        worker_ = std::thread([this] { run(); });
    }
    ~fake_backend() override { shutdown(true); }

    int64_t submit(completion_request r, token_callback on_token, done_callback on_done) override {
        std::lock_guard<std::mutex> lock(m_);
        if (static_cast<int>(queue_.size()) >= max_queue_) return static_cast<int64_t>(queue_.size());
        job j;
        j.req = std::move(r);
        j.on_token = std::move(on_token);
        j.on_done = std::move(on_done);
        last_request_ = j.req;
        ++submitted_;
        queue_.push_back(std::move(j));
        cv_.notify_all();
        return 0;
    }
    std::vector<int32_t> tokenize(std::string_view text, bool) const override {
        std::vector<int32_t> ids;
        for (unsigned char c : text) ids.push_back(c);
        return ids;
    }
    std::string token_text(int32_t id) const override {
        if (id >= 0 && id < 256) return std::string(1, static_cast<char>(id));
        if (id == k_eog) return "<eog>";
        if (id > k_eog && id < n_vocab()) return pieces_[static_cast<size_t>(id - k_eog - 1)];
        return {};
    }
    int32_t n_vocab() const override { return k_eog + 1 + static_cast<int32_t>(pieces_.size()); }
    int32_t n_ctx() const override { return n_ctx_; }
    bool is_eog(int32_t id) const override { return id == k_eog; }
    std::string chat_template() const override { return template_; }
    std::string bos_text() const override { return ""; }
    std::string eos_text() const override { return "<eog>"; }
    std::string model_name() const override { return "fake-model"; }
    serving_metrics metrics() const override {
        std::lock_guard<std::mutex> lock(m_);
        serving_metrics s;
        s.queue_depth = static_cast<int64_t>(queue_.size());
        s.active = static_cast<int64_t>(active_.size());
        s.generated_tokens = generated_;
        s.prompt_tokens = prompt_tokens_;
        s.decode_seconds = 0.5;
        s.ready = !stopping_;
        s.phase = stopping_ ? "stopping" : "ready";
        return s;
    }
    void shutdown(bool cancel_in_flight) override {
        {
            std::lock_guard<std::mutex> lock(m_);
            stopping_ = true;
            cancel_all_ = cancel_all_ || cancel_in_flight;
            cv_.notify_all();
        }
        if (worker_.joinable()) worker_.join();
    }

    // Test controls and observations.
    std::string template_;          // the chat template ("" : the server's ChatML)
    completion_request last_request() const {
        std::lock_guard<std::mutex> lock(m_);
        return last_request_;
    }
    int cancelled() const { return cancelled_.load(); }
    int submitted() const {
        std::lock_guard<std::mutex> lock(m_);
        return submitted_;
    }
    void set_paused(bool p) {
        std::lock_guard<std::mutex> lock(m_);
        paused_ = p;
        cv_.notify_all();
    }

private:
    struct job {
        completion_request req;
        token_callback on_token;
        done_callback on_done;
        std::vector<int32_t> tokens;
        bool stopped_by_client = false;
    };

    void finish(job& j, const char* reason) {
        completion_result r;
        r.finish_reason = reason;
        r.stats.n_prompt = static_cast<int>(j.req.prompt.size());
        r.stats.tokens = j.tokens;
        r.stats.n_decoded = static_cast<int>(j.tokens.size());
        r.stats.token_sha = token_sha_hex(j.tokens);
        r.stats.drafter = "none";
        r.stats.stop_reason = reason;
        if (std::string(reason) == "cancelled") ++cancelled_;
        j.on_done(r);
    }

    void run() {
        std::unique_lock<std::mutex> lock(m_);
        for (;;) {
            cv_.wait(lock, [&] { return stopping_ || (!paused_ && (!queue_.empty() || !active_.empty())); });
            if (stopping_ && (cancel_all_ || (queue_.empty() && active_.empty()))) break;
            if (paused_) continue;
            while (!queue_.empty() && static_cast<int>(active_.size()) < max_active_) {
                prompt_tokens_ += static_cast<int64_t>(queue_.front().req.prompt.size());
                active_.push_back(std::move(queue_.front()));
                queue_.pop_front();
            }
            std::list<job> running;
            running.swap(active_);
            lock.unlock();
            for (auto it = running.begin(); it != running.end();) {
                job& j = *it;
                bool done = false;
                if (j.req.cancel && j.req.cancel->load()) {
                    finish(j, "cancelled"), done = true;
                } else {
                    const size_t k = j.tokens.size();
                    if (k == pieces_.size()) {
                        finish(j, "stop"), done = true;  // the end-of-generation token
                    } else {
                        token_event ev;
                        ev.id = k_eog + 1 + static_cast<int32_t>(k);
                        ev.text = pieces_[k];
                        ev.logprob = -0.25f * static_cast<float>(k + 1);
                        if (j.req.top_logprobs > 0)
                            for (int a = 0; a < j.req.top_logprobs; ++a)
                                ev.top.push_back(token_logprob{a, std::string(1, static_cast<char>('a' + a)),
                                                               -1.0f - static_cast<float>(a)});
                        j.tokens.push_back(ev.id);
                        ++generated_;
                        const bool go_on = j.on_token(ev);
                        const int n_predict = j.req.params.n_predict;
                        if (n_predict >= 0 && static_cast<int>(j.tokens.size()) >= n_predict)
                            finish(j, "length"), done = true;
                        else if (!go_on)
                            finish(j, "cancelled"), done = true;
                    }
                }
                it = done ? running.erase(it) : std::next(it);
            }
            std::this_thread::sleep_for(step_);  // the step's "forward"
            lock.lock();
            active_.splice(active_.end(), running);
        }
        for (auto& j : active_) finish(j, "cancelled");
        for (auto& j : queue_) finish(j, "cancelled");
        active_.clear();
        queue_.clear();
    }

    std::vector<std::string> pieces_;
    std::chrono::milliseconds step_;
    int max_active_, max_queue_;
    int32_t n_ctx_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    std::deque<job> queue_;
    std::list<job> active_;
    completion_request last_request_;
    bool stopping_ = false, cancel_all_ = false, paused_ = false;
    int submitted_ = 0;
    std::atomic<int> cancelled_{0};
    int64_t generated_ = 0, prompt_tokens_ = 0;
    std::thread worker_;
};

}  // namespace sluice::test
