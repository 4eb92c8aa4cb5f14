#include "server/stop_strings.h"

#include <algorithm>

namespace sluice {

size_t partial_marker_suffix(std::string_view text, const std::vector<std::string>& markers) {
    size_t best = 0;
    for (const std::string& m : markers) {
        // Longest k < |m| with text ending in m[0, k); k is bounded by both lengths.
        for (size_t k = std::min(m.size() - 1, text.size()); k > best; --k)
            if (text.substr(text.size() - k) == std::string_view(m).substr(0, k)) {
                best = k;
                break;
            }
    }
    return best;
}

stop_matcher::stop_matcher(std::vector<std::string> stops) {
    for (std::string& s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));
}

std::string stop_matcher::push(std::string_view text) {
    if (stopped_) return {};
    held_.append(text);
    // held_ never contains a whole stop string before this call, so the earliest occurrence in
    // it is the first in the generated text.
    size_t first = std::string::npos;
    for (const std::string& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
        std::string out = held_.substr(0, first);
        held_.clear();
        stopped_ = true;
        return out;
    }
    // A held suffix starts with a stop string's first byte, a UTF-8 lead byte, so the cut never
    // splits a code point.
    const size_t keep = partial_marker_suffix(held_, stops_);
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string stop_matcher::flush() {
    std::string out;
    out.swap(held_);
    return stopped_ ? std::string{} : out;
}

}  // namespace sluice
