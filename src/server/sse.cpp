#include "server/sse.h"

namespace sluice {

std::string json_text(const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string json_text(const nlohmann::ordered_json& j) {
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::ordered_json& data) { return "data: " + json_text(data) + "\n\n"; }

std::vector<std::string> sse_payloads(std::string_view stream) {
    std::vector<std::string> out;
    std::string data;
    bool have_data = false;
    size_t pos = 0;
    while (pos <= stream.size()) {
        size_t eol = stream.find('\n', pos);
        const bool last = eol == std::string_view::npos;
        std::string_view line = stream.substr(pos, last ? std::string_view::npos : eol - pos);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) {  // a blank line dispatches the event
            if (have_data) out.push_back(data);
            data.clear();
            have_data = false;
        } else if (line.front() != ':') {
            const size_t colon = line.find(':');
            std::string_view field = line.substr(0, colon), value;
            if (colon != std::string_view::npos) {
                value = line.substr(colon + 1);
                if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
            }
            if (field == "data") {
                if (have_data) data += '\n';
                data.append(value);
                have_data = true;
            }
        }
        if (last) break;
        pos = eol + 1;
    }
    return out;  // an event without its blank line is incomplete and not dispatched
}

}  // namespace sluice
