#include "core/half.h"

#include <bit>

namespace sluice {
namespace {

uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
float bits_f32(uint32_t u) { return std::bit_cast<float>(u); }

}  // namespace

float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
    if (exp == 0x1F) return bits_f32(sign | 0x7F800000u | (mant << 13));   // inf / NaN, payload kept
    if (exp == 0) {
        if (mant == 0) return bits_f32(sign);
        return bits_f32(sign | f32_bits(static_cast<float>(mant) * 0x1p-24f));   // subnormal: exact
    }
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t fp32_to_fp16(float f) {
    const uint32_t x = f32_bits(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return sign | 0x7E00u | static_cast<uint16_t>((ax >> 13) & 0x3FFu);   // quiet NaN
    if (ax >= 0x477FF000u) return sign | 0x7C00u;   // >= 65520 rounds to inf
    const uint32_t e = ax >> 23;
    if (ax < 0x38800000u) {   // below 2^-14: f16 subnormal, value / 2^-24 rounded to nearest even
        if (e < 102) return sign;   // below 2^-25: rounds to zero
        const uint32_t mant = (ax & 0x7FFFFFu) | 0x800000u;
        const uint32_t shift = 126 - e;   // 14..24
        uint32_t r = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) ++r;
        return sign | static_cast<uint16_t>(r);
    }
    uint32_t r = (ax >> 13) - (112u << 10);
    const uint32_t rem = ax & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) ++r;   // a carry into the exponent is right
    return sign | static_cast<uint16_t>(r);
}

float bf16_to_fp32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
    uint32_t n = f32_bits(f);
    if ((n & 0x7FFFFFFFu) > 0x7F800000u) n = (n & 0xFFFF0000u) | (64u << 16);   // NaN: force quiet
    return static_cast<uint16_t>((static_cast<uint64_t>(n) + (0x7FFFu + ((n >> 16) & 1u))) >> 16);
}

}  // namespace sluice
