// Helpers behind `sluice inspect` (include/sluice/inspect.h) that other layers reuse: the
// group a tensor's bytes count under, and metadata values as text and JSON.
#pragma once

#include "io/metadata.h"

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace sluice {

// "embeddings", "routed experts" (*_exps), "shared experts" (*_shexp), "output"
// (output.weight/bias) or "attention/dense" (everything else, norms and routers included).
std::string_view tensor_group(std::string_view tensor_name);

// For people: arrays longer than max_elems become "[49152 strings]", strings are cut at
// max_chars with control characters escaped.
std::string meta_value_text(const meta_value& v, size_t max_elems = 8, size_t max_chars = 100);

// The value as JSON; f32 values are written as the double they convert to exactly.
nlohmann::json meta_value_json(const meta_value& v);

}  // namespace sluice
