// Chat templates over our Jinja2 subset (see chat_template.h and jinja_ast.h).
#include "server/chat_template.h"

#include "core/error.h"
#include "io/metadata.h"
#include "server/jinja_ast.h"

namespace sluice {

chat_template::chat_template(std::string_view text) : root_(jinja::parse(jinja::lex(text))) {}
chat_template::~chat_template() = default;
chat_template::chat_template(chat_template&&) noexcept = default;
chat_template& chat_template::operator=(chat_template&&) noexcept = default;

std::string chat_template::render(const chat_request& req) const {
    if (!req.messages.is_array())
        fail("chat template: messages: expected a JSON array, got {}", req.messages.type_name());
    if (!req.tools.is_null() && !req.tools.is_array())
        fail("chat template: tools: expected a JSON array or null, got {}", req.tools.type_name());
    if (!req.extra.is_object()) fail("chat template: extra variables: expected a JSON object, got {}", req.extra.type_name());
    jinja::dict_t vars;
    // Same variables, same order of precedence as transformers: its keyword arguments
    // (special tokens, enable_thinking, ...) come last and may not override these three.
    vars.emplace_back("messages", jinja::from_json(req.messages));
    vars.emplace_back("tools", jinja::from_json(req.tools));
    vars.emplace_back("add_generation_prompt", jinja::value::boolean(req.add_generation_prompt));
    // transformers always passes documents (None unless the caller gives RAG documents).
    jinja::value documents = jinja::value::none();
    for (const auto& [k, v] : req.extra.items()) {
        if (k == "messages" || k == "tools" || k == "add_generation_prompt")
            fail("chat template: extra variable '{}' would shadow a request field", k);
        if (k == "documents") documents = jinja::from_json(v);
        else vars.emplace_back(k, jinja::from_json(v));
    }
    vars.emplace_back("documents", documents);
    return jinja::render(*root_, vars);
}

std::string render_chat_template(std::string_view text, const chat_request& req) {
    return chat_template(text).render(req);
}

std::optional<std::string> chat_template_from_metadata(const metadata& md) {
    return md.get_string("tokenizer.chat_template");
}

std::optional<std::string> chat_template_from_tokenizer_config(const nlohmann::json& config, std::string_view name) {
    if (!config.is_object()) fail("tokenizer_config.json: expected a JSON object, got {}", config.type_name());
    auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) return std::nullopt;
    if (it->is_string()) return it->get<std::string>();
    if (!it->is_array())
        fail("tokenizer_config.json: chat_template: expected a string or a list of {{name, template}}, got {}",
             it->type_name());
    for (const auto& e : *it) {
        if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
            !e["template"].is_string())
            fail("tokenizer_config.json: chat_template: expected entries {{\"name\": str, \"template\": str}}, got {}",
                 e.dump());
        if (e["name"].get<std::string>() == name) return e["template"].get<std::string>();
    }
    fail("tokenizer_config.json: chat_template: no template named '{}'", name);
}

}  // namespace sluice
