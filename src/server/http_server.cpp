#include "server/http_server.h"

#include "core/error.h"
#include "server/chat_template.h"
#include "server/http_lib.h"
#include "server/openai_request.h"
#include "server/openai_session.h"
#include "server/sse.h"

#include <fmt/core.h>

#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

namespace sluice {

namespace {

using ojson = nlohmann::ordered_json;
using clock_type = std::chrono::steady_clock;

// ChatML, for models without a chat template (the format engine::format_prompt writes).
constexpr const char* k_chatml =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + (message['content'] or '') + "
    "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

void send_json(httplib::Response& res, int status, const ojson& body) {
    res.status = status;
    res.set_content(json_text(body), "application/json");
}

void send_error(httplib::Response& res, const api_error& e) { send_json(res, e.status, error_body(e)); }

// Sends the response already set, then ends the connection: for a request whose body was left
// partly unread, whose bytes would otherwise be read as the client's next request. httplib 0.11
// keeps a connection open whatever the response's Connection header says; it closes one when
// writing the response fails, so the body goes through a content provider that writes it all
// and then reports failure.
void close_after(const httplib::Request& req, httplib::Response& res) {
    auto body = std::make_shared<std::string>(std::move(res.body));
    res.body.clear();
    const std::string type = res.get_header_value("Content-Type");
    res.headers.erase("Content-Type");
    // httplib writes the header itself when the request asked to close (it would appear twice).
    if (req.get_header_value("Connection") != "close") res.set_header("Connection", "close");
    // httplib passes a Range header's offset and length through unchecked: held to the body (a
    // 'Range: bytes=0-20000' on a 54-byte error sent 20 KB of the heap after it).
    res.set_content_provider(body->size(), type, [body](size_t offset, size_t length, httplib::DataSink& sink) {
        if (offset < body->size()) sink.write(body->data() + offset, std::min(length, body->size() - offset));
        return false;
    });
}

api_error make_error(int status, std::string message, std::string type, std::string code = {}, std::string param = {}) {
    api_error e;
    e.status = status;
    e.message = std::move(message);
    e.type = std::move(type);
    e.code = std::move(code);
    e.param = std::move(param);
    return e;
}

// Whether a chat template renders tools and the calls made before (it names both).
bool shows_tools(const std::string& template_text) {
    return template_text.find("tools") != std::string::npos && template_text.find("tool_calls") != std::string::npos;
}

api_error body_too_large() {
    return make_error(413, "the request body is too large", "invalid_request_error", "payload_too_large");
}

uint64_t random_seed() {
    static std::mutex m;
    static std::mt19937_64 rng{std::random_device{}()};
    std::lock_guard<std::mutex> lock(m);
    return rng() >> 33;  // 31 bits: exact in every JSON reader, JavaScript's included
}

// cpp-httplib 0.11 listens with a backlog of 5: sixteen clients connecting at once (a load test,
// a burst of browser tabs) overflow it and some connections fail. Listening again on the bound
// socket raises the backlog (Linux updates it in place); the socket is a protected member.
class listening_server : public httplib::Server {
public:
    void raise_backlog(int backlog) {
        const auto sock = svr_sock_.load();
        if (sock != INVALID_SOCKET) ::listen(sock, backlog);
    }
};

// The socket of the connection a request came on, found by its two ends (httplib 0.11 does not
// hand it to handlers), or -1. While a handler runs its connection stays open, so the descriptor
// cannot be closed and reused under it.
int connection_fd(const httplib::Request& req) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        int fd = -1;
        try {
            fd = std::stoi(e.path().filename().string());
        } catch (...) {
            continue;
        }
        sockaddr_storage peer{}, local{};
        socklen_t pn = sizeof peer, ln = sizeof local;
        if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pn) != 0) continue;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ln) != 0) continue;
        char host[NI_MAXHOST], pport[NI_MAXSERV], lport[NI_MAXSERV];
        if (::getnameinfo(reinterpret_cast<sockaddr*>(&peer), pn, host, sizeof host, pport, sizeof pport,
                          NI_NUMERICHOST | NI_NUMERICSERV) != 0)
            continue;
        if (::getnameinfo(reinterpret_cast<sockaddr*>(&local), ln, nullptr, 0, lport, sizeof lport, NI_NUMERICSERV) != 0)
            continue;
        if (req.remote_addr == host && std::to_string(req.remote_port) == pport &&
            std::to_string(req.local_port) == lport)
            return fd;
    }
    return -1;
}

// Whether the client closed its end: a peek that reads end-of-file (or an error) says so; data
// (a pipelined next request) or nothing yet both mean it is still there.
bool client_gone(int fd) {
    if (fd < 0) return false;
    char c;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

}  // namespace

struct http_server::impl {
    server_options o;
    listening_server svr;
    server_metrics stats;

    mutable std::mutex m;  // guards backend, tmpl, tmpl_error, phase
    std::shared_ptr<serving_backend> backend;
    std::shared_ptr<const chat_template> tmpl;
    std::string tmpl_text, tmpl_error;
    std::string phase = "loading";
    std::atomic<bool> draining{false};
    // stop() may come before run() has started listening (a model that fails to load at once):
    // httplib's stop() does nothing until the listen loop runs, which would then block forever.
    std::atomic<bool> stop_requested{false}, run_returned{false};
    std::atomic<int> in_flight{0};

    explicit impl(server_options opts) : o(std::move(opts)) {}

    std::shared_ptr<serving_backend> get_backend() const {
        std::lock_guard<std::mutex> lock(m);
        return backend;
    }

    void routes();
    bool read_body(const httplib::Request& req, const httplib::ContentReader& reader, httplib::Response& res,
                   std::string& body) const;
    void completion(const httplib::Request& req, httplib::Response& res, endpoint kind, const std::string& body);
    bool prepare(const openai_request& r, serving_backend& b, std::vector<int32_t>& prompt, session_config& sc,
                 httplib::Response& res);
};

http_server::http_server(server_options o) : p_(std::make_unique<impl>(std::move(o))) { p_->routes(); }

http_server::~http_server() = default;

server_metrics& http_server::metrics() { return p_->stats; }
int http_server::in_flight() const { return p_->in_flight.load(); }
void http_server::begin_drain() { p_->draining.store(true); }
void http_server::stop() {
    p_->stop_requested = true;
    // Until the listen loop runs, or run() has seen the request and returned without listening.
    while (!p_->run_returned && !p_->svr.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    p_->svr.stop();
}

void http_server::set_phase(std::string phase) {
    std::lock_guard<std::mutex> lock(p_->m);
    p_->phase = std::move(phase);
}

void http_server::set_backend(std::shared_ptr<serving_backend> b) {
    std::string text = !b ? std::string{} : p_->o.chat_template.empty() ? b->chat_template() : p_->o.chat_template;
    std::shared_ptr<const chat_template> t;
    std::string err;
    if (b) {
        try {
            t = std::make_shared<const chat_template>(text.empty() ? std::string(k_chatml) : text);
        } catch (const std::exception& e) {
            // Completions still work; chat requests say why they cannot.
            err = std::string("the model's chat template cannot be used: ") + e.what();
        }
    }
    std::lock_guard<std::mutex> lock(p_->m);
    p_->backend = std::move(b);
    p_->tmpl = std::move(t);
    p_->tmpl_text = text.empty() ? std::string(k_chatml) : text;
    p_->tmpl_error = std::move(err);
}

int http_server::bind() {
    p_->svr.new_task_queue = [n = p_->o.http_threads] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
    int port = p_->o.port;
    if (port == 0) {
        port = p_->svr.bind_to_any_port(p_->o.host);
        if (port < 0) fail("serve: cannot listen on {}: no free port", p_->o.host);
    } else if (!p_->svr.bind_to_port(p_->o.host, port)) {
        fail("serve: cannot listen on {}:{} (in use, or not an address of this machine)", p_->o.host, port);
    }
    p_->svr.raise_backlog(1024);
    return port;
}

void http_server::run() {
    if (!p_->stop_requested) p_->svr.listen_after_bind();
    p_->run_returned = true;
}

void http_server::impl::routes() {
    svr.set_payload_max_length(o.max_body_bytes);
    svr.set_tcp_nodelay(true);  // stream chunks leave at once, not after Nagle's delay
    // A read that waits this long for the client's next byte ends the connection. It also bounds
    // how long stop() waits for a connection stalled mid-request (30 s outlasted a 3 s shutdown
    // grace and the exit watchdog): k_read_timeout_s.
    svr.set_read_timeout(k_read_timeout_s, 0);
    svr.set_write_timeout(30, 0);

    if (!o.web_root.empty()) svr.set_mount_point("/", o.web_root.string());

    // Bearer authentication for the API; the page, /health, /ready and /metrics stay open (a
    // load balancer or Prometheus does not hold the key).
    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        // Bodies come with a Content-Length or chunked, as they are or compressed with the codings
        // httplib decodes (read_body bounds the decoded size). Other framings and codings are
        // refused before the body is read, and the connection ends: its unread bytes cannot be
        // told apart from a next request. httplib compares the coding names exactly, so "GZIP"
        // would pass the body through still compressed; it is refused with the rest.
        // Only the completions read their bodies through read_body's bound: httplib reads a chunked
        // or compressed body to any size, so other paths take neither.
        // Framing that two readers could take two ways (a proxy in front and this server) is refused
        // (RFC 9112 section 6.3): Content-Lengths that disagree, or one beside Transfer-Encoding.
        const size_t n_lengths = req.get_header_value_count("Content-Length");
        bool lengths_differ = false;
        for (size_t i = 1; i < n_lengths; ++i)
            lengths_differ = lengths_differ || req.get_header_value("Content-Length", i) != req.get_header_value("Content-Length");
        if (lengths_differ || (n_lengths > 0 && req.has_header("Transfer-Encoding"))) {
            send_error(res, make_error(400, "the request's framing is ambiguous: Content-Length values that differ, or "
                                            "Content-Length with Transfer-Encoding",
                                       "invalid_request_error", "invalid_body"));
            close_after(req, res);
            return httplib::Server::HandlerResponse::Handled;
        }
        std::string te = req.get_header_value("Transfer-Encoding");
        for (char& c : te) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));   // as httplib reads it
        const std::string ce = req.get_header_value("Content-Encoding");
        const bool bounded = req.method == "POST" && (req.path == "/v1/chat/completions" || req.path == "/v1/completions");
        const bool te_ok = te.empty() || (bounded && te == "chunked");
        const bool ce_ok = ce.empty() || ce == "identity" || (bounded && (ce == "gzip" || ce == "deflate" || ce == "br"));
        if (!te_ok || !ce_ok) {
            send_error(res, te_ok ? make_error(415, fmt::format("Content-Encoding '{}' is not accepted: send the body "
                                                                "as it is, or with gzip, deflate or br", ce),
                                               "invalid_request_error", "unsupported_media_type")
                                  : make_error(501, fmt::format("Transfer-Encoding '{}' is not accepted: send the body "
                                                                "with a Content-Length, or chunked", te),
                                               "invalid_request_error", "not_implemented"));
            close_after(req, res);
            return httplib::Server::HandlerResponse::Handled;
        }
        if (o.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
        // The scheme name is case-insensitive (RFC 9110 section 11.1); the key is compared exactly.
        const std::string auth = req.get_header_value("Authorization");
        const bool bearer = auth.size() > 7 && auth[6] == ' ' &&
                            std::equal(auth.begin(), auth.begin() + 6, "bearer", [](char a, char b) {
                                return static_cast<char>(std::tolower(static_cast<unsigned char>(a))) == b;
                            });
        if (bearer && auth.compare(7, std::string::npos, o.api_key) == 0) return httplib::Server::HandlerResponse::Unhandled;
        res.set_header("WWW-Authenticate", "Bearer");
        send_error(res, make_error(401, "invalid or missing API key: send 'Authorization: Bearer <key>'",
                                   "invalid_request_error", "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
    });

    // Errors httplib produces itself (404, 413, 400 on a bad request line...) get an OpenAI body.
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_) return;
        if (res.status == 413) return send_error(res, body_too_large());
        std::string msg = res.status == 404 ? fmt::format("no such endpoint: {} {}", req.method, req.path)
                                            : fmt::format("HTTP {}", res.status);
        send_error(res, make_error(res.status, msg, "invalid_request_error", res.status == 404 ? "not_found" : ""));
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
            if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        send_error(res, make_error(500, "internal error: " + what, "server_error"));
    });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        if (req.path.rfind("/v1/", 0) == 0) stats.count_request(req.path, res.status);
    });

    svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
        send_json(res, 200, ojson{{"status", "ok"}});
    });
    svr.Get("/ready", [this](const httplib::Request&, httplib::Response& res) {
        auto b = get_backend();
        std::string phase;
        {
            std::lock_guard<std::mutex> lock(m);
            phase = this->phase;
        }
        bool ready = false;
        if (b) {
            const serving_metrics sm = b->metrics();
            ready = sm.ready;
            phase = sm.phase;
        }
        if (draining.load()) ready = false, phase = "stopping";
        send_json(res, ready ? 200 : 503, ojson{{"status", ready ? "ready" : phase}});
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        auto b = get_backend();
        std::optional<serving_metrics> sm;
        if (b) sm = b->metrics();
        std::string text = stats.render(sm ? &*sm : nullptr);
        if (b) text += b->placement_metrics_text();   // sluice_expert_*: only when experts are split
        res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
    });
    svr.Get("/openapi.json", [this](const httplib::Request&, httplib::Response& res) {
        auto b = get_backend();
        std::string text;
        {
            std::lock_guard<std::mutex> lock(m);
            text = tmpl_text;
        }
        res.set_content(openapi_document(b ? b->n_vocab() : 0, o.max_n, shows_tools(text)), "application/json");
    });
    auto model_object = [](serving_backend& b) {
        ojson model{{"id", b.model_name()}, {"object", "model"}, {"created", 0}, {"owned_by", "sluice"}};
        model["meta"] = ojson{{"n_ctx", b.n_ctx()}, {"n_vocab", b.n_vocab()}};
        return model;
    };
    svr.Get("/v1/models", [this, model_object](const httplib::Request&, httplib::Response& res) {
        auto b = get_backend();
        if (!b) return send_error(res, make_error(503, "the model is loading", "server_error", "loading"));
        send_json(res, 200, ojson{{"object", "list"}, {"data", ojson::array({model_object(*b)})}});
    });
    // The SDK's models.retrieve(id).
    svr.Get(R"(/v1/models/(.+))", [this, model_object](const httplib::Request& req, httplib::Response& res) {
        auto b = get_backend();
        if (!b) return send_error(res, make_error(503, "the model is loading", "server_error", "loading"));
        const std::string id = req.matches[1];
        if (id != b->model_name())
            return send_error(res, make_error(404, fmt::format("no model '{}': this server has '{}'", id, b->model_name()),
                                              "invalid_request_error", "model_not_found"));
        send_json(res, 200, model_object(*b));
    });
    // The completions read their bodies themselves (read_body): httplib would read a chunked or
    // compressed one whole, to any size.
    svr.Post("/v1/chat/completions",
             [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
                 std::string body;
                 if (read_body(req, reader, res, body)) completion(req, res, endpoint::chat, body);
             });
    svr.Post("/v1/completions",
             [this](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader) {
                 std::string body;
                 if (read_body(req, reader, res, body)) completion(req, res, endpoint::completions, body);
             });

    // Another method on a known path is a 405 that names the allowed one, not a 404.
    const std::pair<const char*, const char*> known[] = {
        {"/health", "GET"},       {"/ready", "GET"}, {"/metrics", "GET"}, {"/openapi.json", "GET"},
        {"/v1/models", "GET"}, {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}};
    for (const auto& [path, allowed] : known) {
        auto refuse = [allowed = std::string(allowed)](const httplib::Request& req, httplib::Response& res) {
            res.set_header("Allow", allowed);
            send_error(res, make_error(405, fmt::format("{} {}: method not allowed (use {})", req.method, req.path, allowed),
                                       "invalid_request_error", "method_not_allowed"));
        };
        if (std::string(allowed) != "GET") svr.Get(path, refuse);
        if (std::string(allowed) != "POST") svr.Post(path, refuse);
        svr.Put(path, refuse);
        svr.Patch(path, refuse);
        svr.Delete(path, refuse);
        svr.Options(path, refuse);
    }
}

// The prompt's tokens and the session's settings; false (with the error sent) when the request
// cannot be served.
bool http_server::impl::prepare(const openai_request& r, serving_backend& b, std::vector<int32_t>& prompt,
                                session_config& sc, httplib::Response& res) {
    if (r.kind == endpoint::chat) {
        std::shared_ptr<const chat_template> t;
        std::string text, err;
        {
            std::lock_guard<std::mutex> lock(m);
            t = tmpl;
            text = tmpl_text;
            err = tmpl_error;
        }
        if (!t) return send_error(res, make_error(500, err, "server_error")), false;
        // A template that does not render tools (the test /openapi.json states too) renders the
        // request as if it had none: the model would not see the tools, or what it called before,
        // and answer anyway.
        const bool history_calls = std::any_of(r.messages.begin(), r.messages.end(), [](const ojson& m) {
            return m.contains("tool_calls") && !m["tool_calls"].empty();
        });
        if ((!r.tools.is_null() || history_calls) && !shows_tools(text)) {
            const bool tools = !r.tools.is_null();
            return send_error(res, make_error(400,
                                              fmt::format("the model's chat template does not render tools and tool "
                                                          "calls: the request's '{}' would be dropped (serve "
                                                          "--chat-template gives the model one that does)",
                                                          tools ? "tools" : "tool_calls"),
                                              "invalid_request_error", "unsupported_parameter",
                                              tools ? "tools" : "messages")),
                   false;
        }
        chat_request cr;
        cr.messages = r.messages;
        cr.tools = r.tools;
        cr.add_generation_prompt = true;
        cr.extra = ojson{{"bos_token", b.bos_text()}, {"eos_token", b.eos_text()}};
        for (auto it = r.template_kwargs.begin(); it != r.template_kwargs.end(); ++it) cr.extra[it.key()] = it.value();
        std::string rendered;
        try {
            rendered = t->render(cr);
        } catch (const std::exception& e) {
            // raise_exception in the template ("Conversation roles must alternate...") is the
            // request's fault.
            return send_error(res, make_error(400, std::string("chat template: ") + e.what(), "invalid_request_error",
                                              "invalid_messages", "messages")),
                   false;
        }
        prompt = b.tokenize(rendered, /*parse_special=*/true);
        sc.parser.tool_calls = r.parse_tool_calls;
        if (r.parse_tool_calls) sc.parser.param_types = tool_param_types(r.tools);
        sc.parser.think = text.find("<think>") != std::string::npos;
        sc.parser.start_in_think = sc.parser.think && prompt_opens_think(rendered);
    } else if (r.prompt_is_ids) {
        prompt = r.prompt_ids;
        for (int32_t id : prompt) sc.prompt_bytes += b.token_text(id).size();
    } else {
        prompt = b.tokenize(r.prompt, /*parse_special=*/true);
        sc.prompt_bytes = r.prompt.size();
    }
    if (prompt.empty())
        return send_error(res, make_error(400, "the prompt is empty after tokenization", "invalid_request_error", "",
                                          r.kind == endpoint::chat ? "messages" : "prompt")),
               false;
    const int n_ctx = b.n_ctx();
    if (static_cast<int64_t>(prompt.size()) >= n_ctx)
        return send_error(res, make_error(400,
                                          fmt::format("the prompt has {} tokens but the context holds {} (leaving "
                                                      "no room for a reply): shorten the prompt",
                                                      prompt.size(), n_ctx),
                                          "invalid_request_error", "context_length_exceeded",
                                          r.kind == endpoint::chat ? "messages" : "prompt")),
               false;
    return true;
}

// The request body, decoded (chunks joined; gzip, deflate or br inflated as it arrives), into
// body; false, with the error sent, when it is malformed or larger than --max-body-mb. A chunked
// or compressed body is measured as it is decoded. Past the limit the rest is still read and
// dropped, up to k_drain_factor times the limit, so the 413 reaches a client that is still
// sending (closing a socket with bytes unread resets it, and the client may lose the reply) and
// the connection stays in step; a body that goes on past that is cut off with the connection.
bool http_server::impl::read_body(const httplib::Request& req, const httplib::ContentReader& reader,
                                  httplib::Response& res, std::string& body) const {
    constexpr size_t k_drain_factor = 4;
    // A declared length is judged before any byte is read: httplib reads a body past the limit
    // to its declared end before its 413 (a client that declared 5 MB and sent 30 bytes waited
    // for the 30 s read timeout), and took -1 as 2^64 - 1. Closer to the limit httplib skips the
    // body as above.
    if (req.has_header("Content-Length")) {
        const std::string cl = req.get_header_value("Content-Length");
        uint64_t n = 0;
        const auto [end, ec] = std::from_chars(cl.data(), cl.data() + cl.size(), n);
        if (cl.empty() || ec != std::errc() || end != cl.data() + cl.size()) {
            send_error(res, make_error(400, fmt::format("Content-Length '{}' is not a byte count", cl),
                                       "invalid_request_error", "invalid_body"));
            return close_after(req, res), false;
        }
        if (n > k_drain_factor * o.max_body_bytes) return send_error(res, body_too_large()), close_after(req, res), false;
    }
    size_t decoded = 0;
    const bool read = reader([&](const char* data, size_t n) {
        decoded += n;
        if (decoded <= o.max_body_bytes) body.append(data, n);
        return decoded <= k_drain_factor * o.max_body_bytes;
    });
    if (read && decoded <= o.max_body_bytes) return true;
    // httplib leaves 413 (a Content-Length past the limit: it read the body to its end, so the
    // connection is in step) or 400 (malformed framing or compressed data, or the client went
    // away) in res.status.
    const bool skipped = !read && res.status == 413 && decoded == 0;
    if (decoded > o.max_body_bytes || res.status == 413)
        send_error(res, body_too_large());
    else
        send_error(res, make_error(400, "the request body could not be read: malformed chunked framing or compressed "
                                        "data, or the connection ended early",
                                   "invalid_request_error", "invalid_body"));
    if (!read && !skipped) close_after(req, res);
    return false;
}

void http_server::impl::completion(const httplib::Request& req, httplib::Response& res, endpoint kind,
                                   const std::string& body) {
    const auto t0 = clock_type::now();
    auto b = get_backend();
    if (draining.load())
        return send_error(res, make_error(503, "the server is shutting down", "server_error", "shutting_down"));
    if (!b) return send_error(res, make_error(503, "the model is loading", "server_error", "loading"));

    request_limits lim;
    lim.n_vocab = b->n_vocab();
    lim.max_n = o.max_n;
    parse_result pr = parse_openai_request(kind, body, lim);
    if (auto* e = std::get_if<api_error>(&pr)) return send_error(res, *e);
    const openai_request& r = std::get<openai_request>(pr);

    std::vector<int32_t> prompt;
    session_config sc;
    if (!prepare(r, *b, prompt, sc, res)) return;

    sc.kind = kind;
    sc.id = new_reply_id(kind == endpoint::chat ? "chatcmpl-" : "cmpl-");
    sc.model = b->model_name();
    sc.created = static_cast<int64_t>(std::time(nullptr));
    sc.stream = r.stream;
    sc.include_usage = r.stream && r.include_usage;
    sc.logprobs = r.logprobs;
    sc.top_logprobs = r.top_logprobs;
    sc.stop = r.stop;
    sc.prompt_tokens = static_cast<int>(prompt.size());
    sc.exact = b->exact_guarantees();
    const uint64_t base_seed = r.seed ? *r.seed : random_seed();
    for (int i = 0; i < r.n; ++i) sc.seeds.push_back(base_seed + static_cast<uint64_t>(i));

    auto session = std::make_shared<openai_session>(std::move(sc), b);
    auto on_first = [this, t0] {
        stats.observe_ttft(std::chrono::duration<double>(clock_type::now() - t0).count());
    };
    // Default for completions is OpenAI's 16 tokens; chat replies run to the end of the context.
    const int n_predict = r.max_tokens > 0 ? r.max_tokens : kind == endpoint::completions ? 16 : -1;
    for (int i = 0; i < r.n; ++i) {
        completion_request cr;
        cr.prompt = prompt;
        cr.params.n_predict = n_predict;
        cr.params.temperature = r.temperature;
        cr.params.top_k = r.top_k;
        // top_p 0 (OpenAI allows it) keeps only the most likely token, as the smallest positive
        // top_p does; the sampler takes only positive values.
        cr.params.top_p = r.top_p > 0.0f ? r.top_p : std::numeric_limits<float>::min();
        cr.params.min_p = r.min_p;
        cr.params.seed = base_seed + static_cast<uint64_t>(i);
        cr.params.repeat_penalty = r.repetition_penalty;
        cr.params.frequency_penalty = r.frequency_penalty;
        cr.params.presence_penalty = r.presence_penalty;
        cr.params.drafter = r.speculative ? o.drafter : drafter_kind::none;  // "speculative": false
        cr.params.max_window = o.max_window;
        cr.params.adaptive_depth = o.adaptive_depth;
        cr.logit_bias = r.logit_bias;
        cr.top_logprobs = r.logprobs ? r.top_logprobs : -1;
        cr.cancel = session->cancel_flag(i);
        const int64_t queued = b->submit(std::move(cr), session->on_token(i, on_first), session->on_done(i));
        if (queued != 0) {
            session->cancel();  // the choices already queued end at their first step
            res.set_header("Retry-After", "1");
            return send_error(res, make_error(429,
                                              fmt::format("the server is busy: {} requests are queued; retry later",
                                                          queued),
                                              "rate_limit_exceeded", "rate_limit_exceeded"));
        }
    }

    ++in_flight;
    // Checked at every poll, prefill included: a client that went away ends its request within a
    // step even before (or without) a token to write.
    const int fd = connection_fd(req);
    if (!r.stream) {
        while (!session->wait(o.poll))
            if (!session->cancelled() && client_gone(fd)) session->cancel();
        --in_flight;
        stats.observe_request_seconds(std::chrono::duration<double>(clock_type::now() - t0).count());
        if (auto e = session->failure()) return send_error(res, *e);
        return send_json(res, 200, session->reply());
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    // HTTP/1.0 has no chunked encoding: the stream goes as it is and ends with the connection,
    // which a provider without a length closes by returning false after the last event (httplib
    // would keep it open for an HTTP/1.0 client that sent Connection: Keep-Alive).
    const bool close_at_end = req.version == "HTTP/1.0";
    auto events = [session, poll = o.poll, fd, close_at_end](size_t, httplib::DataSink& sink) {
        session->wait(poll);
        if (client_gone(fd)) {
            session->cancel();
            return false;
        }
        const std::string text = session->take_events();
        // A failed write means the client is gone: the backend drops the request at its next
        // token (every callback of a cancelled session returns false).
        if (!text.empty() && !sink.write(text.data(), text.size())) {
            session->cancel();
            return false;
        }
        if (session->stream_ended()) {
            sink.done();
            return !close_at_end;
        }
        if (sink.is_writable && !sink.is_writable()) {
            session->cancel();
            return false;
        }
        return true;
    };
    auto released = [this, session, t0](bool success) {
        if (!success) session->cancel();
        --in_flight;
        stats.observe_request_seconds(std::chrono::duration<double>(clock_type::now() - t0).count());
    };
    if (close_at_end)
        res.set_content_provider("text/event-stream", std::move(events), std::move(released));
    else
        res.set_chunked_content_provider("text/event-stream", std::move(events), std::move(released));
}

std::filesystem::path find_web_root() {
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return {};
    for (auto dir = exe.parent_path(); !dir.empty(); dir = dir.parent_path()) {
        if (std::filesystem::is_regular_file(dir / "web" / "index.html", ec)) return dir / "web";
        if (dir == dir.root_path()) break;
    }
    return {};
}

}  // namespace sluice
