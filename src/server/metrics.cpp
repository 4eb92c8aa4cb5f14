#include "server/metrics.h"

#include <fmt/format.h>

#include <string_view>

namespace sluice {

void server_metrics::histogram::observe(double v) {
    for (size_t i = 0; i < k_buckets.size(); ++i)
        if (v <= k_buckets[i]) {
            ++counts[i];
            break;
        }
    ++count;
    sum += v;
}

void server_metrics::histogram::render(std::string& out, const char* name, const char* help) const {
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    int64_t cumulative = 0;
    for (size_t i = 0; i < k_buckets.size(); ++i) {
        cumulative += counts[i];
        out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, k_buckets[i], cumulative);
    }
    out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count, name, sum, name, count);
}

void server_metrics::count_request(const std::string& path, int status) {
    // The path label takes a fixed set of values: a client's own URL would add a series per
    // distinct path (without bound) and carry quotes and newlines into the exposition text.
    static constexpr std::string_view k_api_paths[] = {"/v1/models", "/v1/chat/completions", "/v1/completions"};
    std::string label = "other";
    for (std::string_view p : k_api_paths)
        if (path == p) label = p;
    std::lock_guard<std::mutex> lock(m_);
    ++requests_[{label, status}];
}

void server_metrics::observe_ttft(double seconds) {
    std::lock_guard<std::mutex> lock(m_);
    ttft_.observe(seconds);
}

void server_metrics::observe_request_seconds(double seconds) {
    std::lock_guard<std::mutex> lock(m_);
    request_seconds_.observe(seconds);
}

namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

}  // namespace

std::string server_metrics::render(const serving_metrics* e) const {
    std::string out;
    {
        std::lock_guard<std::mutex> lock(m_);
        out += "# HELP sluice_requests_total HTTP requests to the API, by path and status code\n"
               "# TYPE sluice_requests_total counter\n";
        for (const auto& [key, n] : requests_)
            out += fmt::format("sluice_requests_total{{path=\"{}\",status=\"{}\"}} {}\n", key.first, key.second, n);
        ttft_.render(out, "sluice_time_to_first_token_seconds",
                     "Seconds from receiving a completion request to its first generated token");
        request_seconds_.render(out, "sluice_request_duration_seconds",
                                "Seconds from receiving a completion request to the end of its reply");
    }
    metric(out, "sluice_ready", "gauge", "1 when the model is loaded and the scheduler is running",
           e && e->ready ? 1.0 : 0.0);
    if (!e) return out;
    metric(out, "sluice_queue_depth", "gauge", "Requests waiting for a batch slot", static_cast<double>(e->queue_depth));
    metric(out, "sluice_requests_active", "gauge", "Requests decoding", static_cast<double>(e->active));
    metric(out, "sluice_prompt_tokens_total", "counter", "Prompt tokens of all requests",
           static_cast<double>(e->prompt_tokens));
    metric(out, "sluice_prompt_tokens_cached_total", "counter", "Prompt tokens restored from the prefix cache",
           static_cast<double>(e->cached_prompt_tokens));
    metric(out, "sluice_generated_tokens_total", "counter", "Tokens generated", static_cast<double>(e->generated_tokens));
    metric(out, "sluice_decode_seconds_total", "counter", "Seconds spent in decode steps", e->decode_seconds);
    metric(out, "sluice_decode_tokens_per_second", "gauge",
           "Generated tokens per second of decoding, over the server's life",
           e->decode_seconds > 0 ? static_cast<double>(e->generated_tokens) / e->decode_seconds : 0.0);
    metric(out, "sluice_drafted_tokens_total", "counter", "Draft tokens proposed by speculative decoding",
           static_cast<double>(e->drafted));
    metric(out, "sluice_accepted_tokens_total", "counter", "Draft tokens accepted (equal to the keyed pick)",
           static_cast<double>(e->accepted));
    metric(out, "sluice_draft_acceptance", "gauge", "Accepted / drafted over the server's life",
           e->drafted > 0 ? static_cast<double>(e->accepted) / static_cast<double>(e->drafted) : 0.0);
    // By draft depth (1 = the first draft of a window), over the depths that saw drafts: where a
    // drafter's chain stops paying (the MTP head chains up to 4).
    out += "# HELP sluice_drafted_tokens_by_depth_total Draft tokens proposed at each depth of their window\n"
           "# TYPE sluice_drafted_tokens_by_depth_total counter\n";
    for (size_t d = 0; d < e->drafted_at.size() && e->drafted_at[d] > 0; ++d)
        out += fmt::format("sluice_drafted_tokens_by_depth_total{{depth=\"{}\"}} {}\n", d + 1, e->drafted_at[d]);
    out += "# HELP sluice_accepted_tokens_by_depth_total Draft tokens accepted at each depth of their window\n"
           "# TYPE sluice_accepted_tokens_by_depth_total counter\n";
    for (size_t d = 0; d < e->drafted_at.size() && e->drafted_at[d] > 0; ++d)
        out += fmt::format("sluice_accepted_tokens_by_depth_total{{depth=\"{}\"}} {}\n", d + 1, e->accepted_at[d]);
    return out;
}

}  // namespace sluice
