// Stop strings (OpenAI's `stop`): generation ends at the first occurrence of any of them, and the
// stop string itself is not returned. While streaming, text that may be the beginning of a stop
// string is held back until it is known not to be one, and flushed at the end.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sluice {

class stop_matcher {
public:
    explicit stop_matcher(std::vector<std::string> stops = {});

    // Feeds newly generated text; returns what is safe to emit now. When a stop string appears the
    // returned text ends right before it, stopped() becomes true and later calls return "".
    std::string push(std::string_view text);
    // The held-back text, at the end of generation (nothing once a stop string was found).
    std::string flush();
    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stops_;  // non-empty strings
    std::string held_;                // a suffix of the text that is a proper prefix of a stop string
    bool stopped_ = false;
};

// Length of the longest suffix of `text` that is a proper prefix of one of `markers` (text that
// may begin a marker once more arrives). Shared with the tool-call parser.
size_t partial_marker_suffix(std::string_view text, const std::vector<std::string>& markers);

}  // namespace sluice
