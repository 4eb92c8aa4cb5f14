// The HTTP server of `sluice serve`: OpenAI's API (GET /v1/models, POST /v1/chat/completions and
// /v1/completions, JSON or server-sent events), GET /health, /ready, /metrics, /openapi.json, and
// the chat page's static files at /. It listens before the model is loaded (/ready answers 503
// with the phase meanwhile) and drains on shutdown: new requests get 503, in-flight ones finish.
//
// No exception leaves a handler: a request's failure is its own 4xx/5xx reply and never touches
// another request (each has its own session object; the backend's callbacks only see theirs).
#pragma once

#include "server/backend.h"
#include "server/metrics.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

namespace sluice {

// Seconds a connection may wait for the client's next byte (request line, headers, body); stop()
// waits at most this long for a connection stalled mid-request.
inline constexpr int k_read_timeout_s = 10;

struct server_options {
    std::string chat_template;            // used instead of the model's when not empty (--chat-template)
    std::string host = "127.0.0.1";
    int port = 8080;                      // 0: any free port (bind() returns it)
    std::string api_key;                  // non-empty: /v1/* needs "Authorization: Bearer <key>"
    std::filesystem::path web_root;       // static files at / (empty: none)
    size_t max_body_bytes = size_t(4) << 20;  // larger bodies get 413
    int max_n = 16;                       // choices per request
    drafter_kind drafter = drafter_kind::none;  // --spec / --draft-model
    int max_window = 16;                  // rows per verify window when drafting
    bool adaptive_depth = true;           // false: every window drafts max_window - 1 (--draft-depth fixed)
    int http_threads = 64;                // connections served at once (streams hold one each)
    std::chrono::milliseconds poll{100};  // how often a waiting stream checks its client
};

class http_server {
public:
    explicit http_server(server_options o);
    ~http_server();

    // The engine, once loaded. Throws sluice::error when its chat template cannot be parsed.
    void set_backend(std::shared_ptr<serving_backend> b);
    // What /ready reports while there is no backend ("loading", or why loading failed).
    void set_phase(std::string phase);

    int bind();       // binds host:port; returns the port; throws sluice::error when it cannot
    void run();       // serves until stop(); call after bind()
    void stop();      // stops listening; open streams end

    // Stop taking completion requests (503) and report "stopping" on /ready.
    void begin_drain();
    int in_flight() const;  // completion requests not yet answered

    server_metrics& metrics();

private:
    struct impl;
    std::unique_ptr<impl> p_;
};

// The OpenAPI 3 document of the endpoints above (GET /openapi.json), with the served model's
// token id range (n_vocab 0: unknown yet) and the choices-per-request limit filled in.
// template_shows_tools: the chat template renders tools and tool calls (else they are refused).
std::string openapi_document(int32_t n_vocab, int max_n, bool template_shows_tools);

// The `web/` folder with index.html next to the running binary or in one of its parents
// (empty when none is found).
std::filesystem::path find_web_root();

}  // namespace sluice
