// Overflow-checked arithmetic for sizes read from files. Every count, offset and shape product
// that comes from disk goes through these before it is used.
#pragma once

#include <cstdint>
#include <optional>

namespace sluice {

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
    uint64_t r;
    if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
    return r;
}

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
    uint64_t r;
    if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
    return r;
}

// Rounds v up to a multiple of align (a power of two); nullopt on overflow.
inline std::optional<uint64_t> checked_align_up(uint64_t v, uint64_t align) {
    auto r = checked_add(v, align - 1);
    if (!r) return std::nullopt;
    return *r & ~(align - 1);
}

}  // namespace sluice
