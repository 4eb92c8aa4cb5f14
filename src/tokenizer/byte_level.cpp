#include "tokenizer/byte_level.h"

namespace sluice::byte_level {

namespace {

bool printable(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); }

struct tables {
    std::array<uint32_t, 256> to_cpt{};  // [256] byte -> code point
    std::array<int16_t, 324> to_byte{};  // [U+0000..U+0143] code point -> byte, -1 when none
    tables() {
        to_byte.fill(-1);
        uint32_t next = 256;
        for (unsigned b = 0; b < 256; ++b) {
            to_cpt[b] = printable(b) ? b : next++;
            to_byte[to_cpt[b]] = static_cast<int16_t>(b);
        }
    }
};

const tables& t() {
    static const tables tab;
    return tab;
}

}  // namespace

uint32_t byte_to_cpt(uint8_t b) { return t().to_cpt[b]; }

std::optional<uint8_t> cpt_to_byte(uint32_t cpt) {
    if (cpt >= t().to_byte.size() || t().to_byte[cpt] < 0) return std::nullopt;
    return static_cast<uint8_t>(t().to_byte[cpt]);
}

void append_utf8(std::string& out, uint32_t c) {
    if (c < 0x80) {
        out += static_cast<char>(c);
    } else if (c < 0x800) {
        out += static_cast<char>(0xC0 | (c >> 6));
        out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
        out += static_cast<char>(0xE0 | (c >> 12));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (c >> 18));
        out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (c & 0x3F));
    }
}

std::string encode(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (unsigned char b : bytes) append_utf8(out, byte_to_cpt(b));
    return out;
}

size_t valid_utf8_len(std::string_view s, size_t i) {
    auto at = [&](size_t k) -> unsigned { return static_cast<unsigned char>(s[k]); };
    const unsigned b0 = at(i);
    if (b0 < 0x80) return 1;
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        n = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 3;
        if (b0 == 0xE0) lo = 0xA0;  // overlong
        if (b0 == 0xED) hi = 0x9F;  // surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 4;
        if (b0 == 0xF0) lo = 0x90;  // overlong
        if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    if (at(i + 1) < lo || at(i + 1) > hi) return 0;
    for (size_t k = 2; k < n; ++k)
        if ((at(i + k) & 0xC0) != 0x80) return 0;
    return n;
}

bool decode(std::string_view text, std::string& out) {
    bool all_mapped = true;
    size_t i = 0;
    while (i < text.size()) {
        size_t n = valid_utf8_len(text, i);
        if (n == 0) {  // not UTF-8 at all: keep the byte
            out += text[i++];
            all_mapped = false;
            continue;
        }
        uint32_t c;
        const auto u = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(text[i + k])); };
        if (n == 1) c = u(0);
        else if (n == 2) c = ((u(0) & 0x1F) << 6) | (u(1) & 0x3F);
        else if (n == 3) c = ((u(0) & 0x0F) << 12) | ((u(1) & 0x3F) << 6) | (u(2) & 0x3F);
        else c = ((u(0) & 0x07) << 18) | ((u(1) & 0x3F) << 12) | ((u(2) & 0x3F) << 6) | (u(3) & 0x3F);
        if (auto b = cpt_to_byte(c)) {
            out += static_cast<char>(*b);
        } else {
            out.append(text.substr(i, n));
            all_mapped = false;
        }
        i += n;
    }
    return all_mapped;
}

}  // namespace sluice::byte_level
