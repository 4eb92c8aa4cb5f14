// Byte-level helpers shared by the BPE tokenizer: GPT-2's bytes_to_unicode table (every byte
// has a printable code point, so vocabularies can store byte strings as text) and UTF-8 checks.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice::byte_level {

// The code point GPT-2 uses for byte b: printable Latin-1 bytes ('!'..'~', 0xA1..0xAC,
// 0xAE..0xFF) stand for themselves, the other 68 bytes map to U+0100.. in byte order.
uint32_t byte_to_cpt(uint8_t b);
// The inverse; nullopt for a code point that is not in the table.
std::optional<uint8_t> cpt_to_byte(uint32_t cpt);

// Raw bytes -> their GPT-2 text (UTF-8).
std::string encode(std::string_view bytes);
// GPT-2 text -> raw bytes. Code points outside the table (some vocabularies store plain
// UTF-8 in a few tokens) are kept as their UTF-8 bytes; returns false when that happened.
bool decode(std::string_view text, std::string& out);

// Length of the strictly valid UTF-8 sequence (no overlongs, no surrogates, <= U+10FFFF)
// starting at s[i], or 0 when the bytes there are not one.
size_t valid_utf8_len(std::string_view s, size_t i);
// Appends the UTF-8 encoding of cpt.
void append_utf8(std::string& out, uint32_t cpt);

}  // namespace sluice::byte_level
