// libFuzzer target for the routing profile's parser (src/placement/routing_profile.h): any bytes
// give a profile or a sluice::error, never a crash; an accepted profile keeps every promise the
// parser makes (counts per layer sum to 0 or n_tokens * k_used, none above n_tokens) and writes
// back to exactly the bytes it was read from.
#include "core/error.h"
#include "placement/routing_profile.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    sluice::placement::routing_profile p;
    try {
        p = sluice::placement::parse_profile(bytes, "fuzz");
    } catch (const sluice::error&) {
        return 0;
    }
    if (p.n_layer < 1 || p.n_expert < 1 || p.k_used < 1 || p.k_used > p.n_expert) std::abort();
    if (p.counts.size() != static_cast<size_t>(p.n_layer) * p.n_expert) std::abort();
    for (uint32_t l = 0; l < p.n_layer; ++l) {
        uint64_t sum = 0;
        for (uint32_t e = 0; e < p.n_expert; ++e) {
            if (p.count(static_cast<int>(l), static_cast<int>(e)) > p.n_tokens) std::abort();
            sum += p.count(static_cast<int>(l), static_cast<int>(e));
        }
        if (sum != 0 && sum != p.n_tokens * p.k_used) std::abort();
    }
    const auto again = sluice::placement::serialize_profile(p);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
    return 0;
}
