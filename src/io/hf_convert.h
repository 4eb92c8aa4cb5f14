// The byte work of the hybrid Qwen MoEs' converter steps (conversion/qwen.py) on one HF tensor:
// qwen35moe's V-head reorder (rows from a point on, or columns) and the element-wise -exp(A_log)
// and +1 of the zero-centred norms, computed in f32 and rounded back to the tensor's type (F32,
// F16, BF16) as torch does. The names and which step applies come from hf_names.h.
#pragma once

#include "io/hf_config.h"
#include "io/hf_names.h"
#include "io/safetensors.h"

#include <cstddef>
#include <string_view>

namespace sluice {

// Writes t's converted bytes of the HF tensor `st` (at src) into dst (st.nbytes). `where` names
// the file in errors; a shape the step does not fit, or a float step on another type, fails.
void convert_hybrid_tensor(const hf_target& t, const hf_config& c, const safetensors_tensor& st, const std::byte* src,
                           std::byte* dst, std::string_view where);

}  // namespace sluice
