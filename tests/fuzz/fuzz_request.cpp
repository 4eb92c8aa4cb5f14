// libFuzzer target for what a request body reaches before the engine: the OpenAI request parser
// (any bytes: a request or a 400, never a crash), the chat template over the messages it accepts,
// and the reply's text pipeline over the same bytes taken as generated text: stop strings
// (the emitted text plus the stop string is a prefix of the input; without a stop, all of it)
// and the content / reasoning / tool-call split (token-sized pieces give what one piece gives).
#include "server/chat_template.h"
#include "server/openai_request.h"
#include "server/stop_strings.h"
#include "server/tool_calls.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace {

using namespace sluice;

const chat_template& chatml() {
    static const chat_template t(
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + "
        "'<|im_end|>' + '\\n' }}{% if message.tool_calls %}{{ message.tool_calls | tojson }}{% endif %}{% endfor %}"
        "{% if tools %}{{ tools | tojson }}{% endif %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
        "{% endif %}");
    return t;
}

void check_request(endpoint kind, std::string_view body) {
    request_limits lim;
    lim.n_vocab = 1000;
    const parse_result r = parse_openai_request(kind, body, lim);
    if (const auto* e = std::get_if<api_error>(&r)) {
        if (e->status != 400 || e->message.empty()) std::abort();
        return;
    }
    const openai_request& q = std::get<openai_request>(r);
    if (q.n < 1 || q.n > lim.max_n || static_cast<int>(q.stop.size()) > lim.max_stop) std::abort();
    for (const auto& [id, bias] : q.logit_bias)
        if (id < 0 || id >= lim.n_vocab || !(bias >= -100.0f && bias <= 100.0f)) std::abort();
    for (int32_t id : q.prompt_ids)
        if (id < 0 || id >= lim.n_vocab) std::abort();
    if (q.temperature < 0.0f || q.temperature > 2.0f || q.top_logprobs < 0 || q.top_logprobs > 20) std::abort();
    if (kind == endpoint::chat) {
        if (!q.messages.is_array() || q.messages.empty()) std::abort();
        chat_request cr;
        cr.messages = q.messages;
        cr.tools = q.tools;
        cr.add_generation_prompt = true;
        try {
            (void)chatml().render(cr);
        } catch (const std::exception&) {
            // A render error is the request's 400; only a crash is a bug.
        }
    }
}

void check_stop(std::string_view text, size_t piece) {
    const std::vector<std::string> stops{"</s>", "\n\n", std::string(text.substr(0, std::min<size_t>(3, text.size())))};
    stop_matcher m(stops);
    std::string out;
    for (size_t at = 0; at < text.size(); at += piece) out += m.push(text.substr(at, piece));
    out += m.flush();
    if (!m.stopped()) {
        if (out != text) std::abort();
        return;
    }
    if (text.substr(0, out.size()) != out) std::abort();
    bool found = false;
    for (const std::string& s : stops)
        if (!s.empty() && text.substr(out.size(), s.size()) == s) found = true;
    if (!found) std::abort();
}

void check_parser(std::string_view text, size_t piece) {
    output_parser_options o{.think = true, .start_in_think = false, .tool_calls = true};
    o.param_types["f"] = {{"n", "integer"}, {"x", "number"}, {"b", "boolean"}, {"o", "object"}, {"a", "array"}};
    output_parser whole(o), split(o);
    output_delta a = whole.push(text), b;
    a.append(whole.finish());
    for (size_t at = 0; at < text.size(); at += piece) b.append(split.push(text.substr(at, piece)));
    b.append(split.finish());
    if (a.content != b.content || a.reasoning != b.reasoning || a.calls.size() != b.calls.size()) std::abort();
    for (size_t i = 0; i < a.calls.size(); ++i)
        if (a.calls[i].name != b.calls[i].name || a.calls[i].arguments != b.calls[i].arguments) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
    check_request(data[0] & 1 ? endpoint::completions : endpoint::chat, body);
    const size_t piece = 1 + (data[0] >> 1) % 7;
    check_stop(body, piece);
    check_parser(body, piece);
    return 0;
}
