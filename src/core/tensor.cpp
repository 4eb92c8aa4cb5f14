#include "core/tensor.h"

#include <fmt/format.h>

namespace sluice {

std::string tensor_view::shape_string() const {
    std::string s = "[";
    for (int i = 0; i < n_dims; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
    return s + "]";
}

}  // namespace sluice
