// sluice::error: the one exception type for load-time and request-time failures.
// Messages say what, where, and what was expected, e.g.
//   gguf: tensor 'blk.3.ffn_up_exps.weight': data [offset 8,421,376, 1,179,648 bytes] ends past
//   the end of the file (9,437,184 bytes)
// The per-token hot loop never throws: everything it touches was validated at load.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace sluice {

class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
    throw error(fmt::format(f, std::forward<Args>(args)...));
}

// Formats 8421376 as "8,421,376": byte counts in errors are read by people.
std::string with_commas(unsigned long long v);

}  // namespace sluice
