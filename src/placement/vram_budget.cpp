#include "placement/vram_budget.h"

#include "core/error.h"

#include <fmt/core.h>

#include <cctype>
#include <cmath>

namespace sluice::placement {

uint64_t parse_size(std::string_view text, std::string_view what) {
    const auto bad = [&](std::string_view why) -> uint64_t {
        fail("{} '{}': expected a size such as 12G, 512M or 0 ({})", what, text, why);
    };
    size_t i = 0;
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    const size_t num0 = i;
    uint64_t whole = 0;
    bool digits = false;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
        const uint64_t d = static_cast<uint64_t>(text[i] - '0');
        if (whole > (UINT64_MAX - d) / 10) return bad("too large");
        whole = whole * 10 + d;
        digits = true;
        ++i;
    }
    // A fraction: at most 9 digits, kept as an integer numerator over 10^n so that "1.5G" is exact.
    uint64_t frac = 0, frac_den = 1;
    if (i < text.size() && text[i] == '.') {
        ++i;
        while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
            if (frac_den >= 1000000000ull) return bad("too many decimals");
            frac = frac * 10 + static_cast<uint64_t>(text[i] - '0');
            frac_den *= 10;
            digits = true;
            ++i;
        }
    }
    if (!digits) return bad(i == num0 && i < text.size() && text[i] == '-' ? "negative" : "no number");
    int shift = 0;
    if (i < text.size()) {
        switch (std::toupper(static_cast<unsigned char>(text[i]))) {
            case 'K': shift = 10; ++i; break;
            case 'M': shift = 20; ++i; break;
            case 'G': shift = 30; ++i; break;
            case 'T': shift = 40; ++i; break;
            case 'B': break;
            default: return bad("unknown unit");
        }
        if (shift != 0 && i < text.size() && (text[i] == 'i' || text[i] == 'I')) ++i;
        if (i < text.size() && (text[i] == 'B' || text[i] == 'b')) ++i;
    }
    while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
    if (i != text.size()) return bad("unexpected characters after the unit");
    if (shift == 0 && frac != 0) return bad("a fraction of a byte");
    const uint64_t unit = uint64_t{1} << shift;
    if (whole > (uint64_t{1} << 63) / unit) return bad("too large");
    // frac / frac_den of a unit, rounded down (128-bit: frac < 10^9 times a unit up to 2^40).
    const uint64_t part = static_cast<uint64_t>(static_cast<unsigned __int128>(frac) * unit / frac_den);
    const uint64_t total = whole * unit + part;
    if (total > (uint64_t{1} << 63)) return bad("too large");
    return total;
}

std::string format_bytes(uint64_t bytes) {
    static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 1024) return fmt::format("{} B", bytes);
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        ++u;
    }
    return fmt::format("{:.1f} {}", v, units[u]);
}

std::string cpu_only_budget_note(uint64_t budget_bytes) {
    if (budget_bytes == 0) return {};
    return fmt::format("vram-budget: {} asked for, but no CUDA device is in use: every routed expert runs on the CPU",
                       format_bytes(budget_bytes));
}

}  // namespace sluice::placement
