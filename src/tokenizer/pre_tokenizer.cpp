#include "tokenizer/pre_tokenizer.h"

#include "core/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace sluice {

std::string_view name(pre_kind k) {
    switch (k) {
        case pre_kind::gpt2: return "gpt2";
        case pre_kind::llama3: return "llama-bpe";
        case pre_kind::qwen2: return "qwen2";
        case pre_kind::smollm: return "smollm";
    }
    return "?";
}

namespace {

// The regex lists, as llama.cpp's llm_tokenizer_bpe uses them for each pre-tokenizer type
// (llama.cpp spells case-insensitive contractions as [sS] so its own regex engine can run them;
// we keep that spelling: PCRE2's (?i) would also fold U+017F and U+212A into 's'/'k').
const char* const k_gpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const k_llama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_qwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_digit = R"(\p{N})";

std::vector<const char*> regex_list(pre_kind k) {
    switch (k) {
        case pre_kind::gpt2: return {k_gpt2};
        case pre_kind::llama3: return {k_llama3};
        case pre_kind::qwen2: return {k_qwen2};
        case pre_kind::smollm: return {k_digit, k_gpt2};
    }
    return {};
}

}  // namespace

struct pre_tokenizer::compiled {
    pcre2_code* code = nullptr;
    ~compiled() { pcre2_code_free(code); }
};

pre_tokenizer::pre_tokenizer(pre_kind kind) : kind_(kind) {
    for (const char* pattern : regex_list(kind)) {
        int err = 0;
        PCRE2_SIZE err_off = 0;
        auto c = std::make_unique<compiled>();
        c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                PCRE2_UTF | PCRE2_UCP, &err, &err_off, nullptr);
        if (!c->code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            fail("tokenizer: pre-tokenizer '{}': regex does not compile at offset {}: {}", name(kind),
                 err_off, reinterpret_cast<const char*>(msg));
        }
        // JIT is an optimisation only: the interpreter gives the same matches when it is absent.
        pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);
        regexes_.push_back(std::move(c));
    }
}

pre_tokenizer::~pre_tokenizer() = default;
pre_tokenizer::pre_tokenizer(pre_tokenizer&&) noexcept = default;
pre_tokenizer& pre_tokenizer::operator=(pre_tokenizer&&) noexcept = default;

void pre_tokenizer::split(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
    std::vector<std::pair<size_t, size_t>> cur{{0, text.size()}}, next;
    if (text.empty()) return;
    pcre2_match_data* md = nullptr;
    for (const auto& re : regexes_) {
        if (!md) md = pcre2_match_data_create(1, nullptr);
        next.clear();
        for (auto [b, e] : cur) {
            // Each piece is matched on its own: lookaheads see the piece's end, not the text's.
            const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + b);
            const size_t len = e - b;
            size_t pos = 0, gap = 0;  // gap: start of the unmatched text before the next match
            while (pos < len) {
                int rc = pcre2_match(re->code, subject, len, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
                // JIT's default 32 KiB stack can run out on pathological pieces: the interpreter
                // finds the same match.
                if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
                    rc = pcre2_match(re->code, subject, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                                     nullptr);
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) {
                    pcre2_match_data_free(md);
                    fail("tokenizer: pre-tokenizer '{}': regex match failed at byte {} (PCRE2 error {})",
                         name(kind_), b + pos, rc);
                }
                const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
                size_t ms = ov[0], me = ov[1];
                if (me == ms) {  // no pattern here matches empty; guard anyway: step one code point
                    pos = ms + 1;
                    while (pos < len && (static_cast<unsigned char>(subject[pos]) & 0xC0) == 0x80) ++pos;
                    continue;
                }
                if (ms > gap) next.emplace_back(b + gap, b + ms);
                next.emplace_back(b + ms, b + me);
                pos = gap = me;
            }
            if (gap < len) next.emplace_back(b + gap, e);
        }
        std::swap(cur, next);
    }
    if (md) pcre2_match_data_free(md);
    out.insert(out.end(), cur.begin(), cur.end());
}

}  // namespace sluice
