// --vram-budget SIZE, parsed in one place for `sluice run`, `serve` and `bench`: how many bytes of
// GPU memory the routed experts may hold (dense weights, attention, router and KV are outside it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::placement {

// "12G", "512M", "1.5GiB", "64k", "4096", "0" -> bytes. Suffixes K, M, G, T are binary (1024^n),
// optionally followed by "i" and/or "B" ("GiB", "GB", "G" mean the same); a bare number is bytes.
// Throws "--vram-budget 'x': expected a size such as 12G, 512M or 0 (...)" on anything else,
// including a negative number, an empty string and a value past 2^63 bytes.
uint64_t parse_size(std::string_view text, std::string_view what = "--vram-budget");

// 1536 -> "1.5 KiB", 12 << 30 -> "12.0 GiB": for messages and progress lines.
std::string format_bytes(uint64_t bytes);

// The line a CPU-only run prints when a budget was asked for: every routed expert runs on the
// CPU (empty when the budget is 0, which asks for nothing).
std::string cpu_only_budget_note(uint64_t budget_bytes);

}  // namespace sluice::placement
