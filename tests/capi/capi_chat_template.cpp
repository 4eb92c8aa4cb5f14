// C ABI over the chat-template renderer, for tests/server/test_chat_template*.py (ctypes).
// Every function catches every exception: 0 ok, -1 error (message copied into err), -2 output
// buffer too small (*n_out says how many bytes are needed).
#include "core/error.h"
#include "io/model_file.h"
#include "server/chat_template.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <exception>
#include <string>

namespace {

void copy_message(const char* msg, char* err, size_t err_len) {
    if (!err || err_len == 0) return;
    std::strncpy(err, msg, err_len - 1);
    err[err_len - 1] = '\0';
}

}  // namespace

// request_json: {"messages": [...], "tools": [...] or null, "add_generation_prompt": bool,
// "extra": {"enable_thinking": false, "bos_token": "...", ...}}. The rendered text (not NUL
// terminated) goes to out[0..*n_out).
extern "C" int sluice_chat_template_render(const char* template_text, const char* request_json, char* out,
                                           size_t* n_out, char* err, size_t err_len) {
    try {
        auto j = nlohmann::ordered_json::parse(request_json);
        sluice::chat_request req;
        if (j.contains("messages")) req.messages = j["messages"];
        if (j.contains("tools")) req.tools = j["tools"];
        if (j.contains("add_generation_prompt")) req.add_generation_prompt = j["add_generation_prompt"].get<bool>();
        if (j.contains("extra")) req.extra = j["extra"];
        std::string s = sluice::render_chat_template(template_text, req);
        size_t cap = *n_out;
        *n_out = s.size();
        if (s.size() > cap) return -2;
        std::memcpy(out, s.data(), s.size());
        return 0;
    } catch (const std::exception& e) {
        copy_message(e.what(), err, err_len);
    } catch (...) {
        copy_message("unknown exception", err, err_len);
    }
    return -1;
}

// The chat template stored in a model file (GGUF: tokenizer.chat_template), read by our own GGUF
// reader. Returns 1 (and *n_out = 0) when the file has none.
extern "C" int sluice_chat_template_from_model(const char* path, char* out, size_t* n_out, char* err, size_t err_len) {
    try {
        auto file = sluice::model_file::open(path);
        auto t = sluice::chat_template_from_metadata(file->meta());
        size_t cap = *n_out;
        *n_out = t ? t->size() : 0;
        if (!t) return 1;
        if (t->size() > cap) return -2;
        std::memcpy(out, t->data(), t->size());
        return 0;
    } catch (const std::exception& e) {
        copy_message(e.what(), err, err_len);
    } catch (...) {
        copy_message("unknown exception", err, err_len);
    }
    return -1;
}
