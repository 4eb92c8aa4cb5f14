// How deeply a JSON text nests its arrays and objects, by a scan that allocates nothing, so a
// parser's input can be refused before it builds (and later walks or copies) the tree.
// nlohmann's parser is iterative, but a tree nested 400,000 deep is copied recursively when an
// ordered_json object grows, which overflowed a server thread's stack.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace sluice {

// The deepest nesting of [ and { outside strings; malformed text gives some depth, never a fault.
inline size_t json_nesting_depth(std::string_view text) {
    size_t depth = 0, deepest = 0;
    bool in_string = false, escaped = false;
    for (char ch : text) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (ch == '\\') escaped = true;
            else if (ch == '"') in_string = false;
        } else if (ch == '"') {
            in_string = true;
        } else if (ch == '[' || ch == '{') {
            deepest = std::max(deepest, ++depth);
        } else if ((ch == ']' || ch == '}') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

}  // namespace sluice
