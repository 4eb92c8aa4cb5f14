// GET /metrics: Prometheus text exposition (version 0.0.4) of what the server and the engine
// measure. Only figures that exist are exposed: the engine's counters come from
// serving_backend::metrics(), the HTTP ones from here; nothing is a placeholder.
#pragma once

#include "sluice/serving.h"

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace sluice {

class server_metrics {
public:
    // One finished HTTP exchange on an API path (/v1/...), by path and status code.
    void count_request(const std::string& path, int status);
    // Seconds from receiving a completion request to its first generated token.
    void observe_ttft(double seconds);
    // Seconds from receiving a completion request to its last byte.
    void observe_request_seconds(double seconds);

    // The exposition text; `engine` is null while the model is loading.
    std::string render(const serving_metrics* engine) const;

    // Upper bounds of the latency histograms' buckets, in seconds (+Inf is implicit).
    static constexpr std::array<double, 12> k_buckets{0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                      0.5,   1.0,  2.5,   5.0,  10.0, 30.0};

private:
    struct histogram {
        std::array<int64_t, k_buckets.size()> counts{};  // per bucket, not cumulative
        int64_t count = 0;
        double sum = 0.0;
        void observe(double v);
        void render(std::string& out, const char* name, const char* help) const;
    };
    mutable std::mutex m_;
    std::map<std::pair<std::string, int>, int64_t> requests_;  // (path, status) -> count
    histogram ttft_, request_seconds_;
};

}  // namespace sluice
