#include "spec/draft_vocab.h"

#include "core/error.h"

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace sluice {
namespace {

// The next line that is not blank or a comment, trimmed; false at the end of the text.
bool next_line(std::string_view text, size_t& at, int& line_no, std::string_view& out) {
    while (at < text.size()) {
        size_t end = text.find('\n', at);
        if (end == std::string_view::npos) end = text.size();
        std::string_view l = text.substr(at, end - at);
        at = end + 1;
        ++line_no;
        while (!l.empty() && (l.back() == '\r' || l.back() == ' ' || l.back() == '\t')) l.remove_suffix(1);
        while (!l.empty() && (l.front() == ' ' || l.front() == '\t')) l.remove_prefix(1);
        if (l.empty() || l.front() == '#') continue;
        out = l;
        return true;
    }
    return false;
}

// A whole-line non-negative decimal integer.
bool parse_int(std::string_view s, int64_t& v) {
    if (s.empty() || s.size() > 12) return false;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && p == s.data() + s.size() && v >= 0;
}

// "key <int>" on one line.
int64_t keyed_int(std::string_view line, std::string_view key, std::string_view where, int line_no) {
    int64_t v = 0;
    if (line.substr(0, key.size()) != key || line.size() <= key.size() || line[key.size()] != ' ' ||
        !parse_int(line.substr(key.size() + 1), v))
        fail("draft vocabulary {}: line {}: expected '{} <integer>', got '{}'", where, line_no, key, line);
    return v;
}

}  // namespace

draft_vocab parse_draft_vocab(std::string_view text, int32_t n_vocab, std::string_view where) {
    size_t at = 0;
    int line_no = 0;
    std::string_view l;
    if (!next_line(text, at, line_no, l) || l != "sluice-draft-vocab 1")
        fail("draft vocabulary {}: line {}: expected the header 'sluice-draft-vocab 1' (tools/make_draft_vocab.py "
             "writes it), got '{}'",
             where, line_no, l);
    if (!next_line(text, at, line_no, l)) fail("draft vocabulary {}: ends before its 'n_vocab' line", where);
    const int64_t nv = keyed_int(l, "n_vocab", where, line_no);
    if (nv != n_vocab)
        fail("draft vocabulary {}: made for a vocabulary of {} ids but the model has {} (a file of another model?)",
             where, nv, n_vocab);
    if (!next_line(text, at, line_no, l)) fail("draft vocabulary {}: ends before its 'count' line", where);
    const int64_t count = keyed_int(l, "count", where, line_no);
    if (count < 1 || count > n_vocab)
        fail("draft vocabulary {}: line {}: count {}: expected 1..{}", where, line_no, count, n_vocab);
    draft_vocab v;
    v.n_vocab = n_vocab;
    v.ids.reserve(static_cast<size_t>(count));
    std::vector<bool> seen(static_cast<size_t>(n_vocab), false);
    while (next_line(text, at, line_no, l)) {
        int64_t id = 0;
        if (!parse_int(l, id) || id >= n_vocab)
            fail("draft vocabulary {}: line {}: '{}': expected a token id in [0, {})", where, line_no, l, n_vocab);
        if (seen[static_cast<size_t>(id)]) fail("draft vocabulary {}: line {}: id {} is listed twice", where, line_no, id);
        if (static_cast<int64_t>(v.ids.size()) == count)
            fail("draft vocabulary {}: line {}: more ids than its count of {}", where, line_no, count);
        seen[static_cast<size_t>(id)] = true;
        v.ids.push_back(static_cast<int32_t>(id));
    }
    if (static_cast<int64_t>(v.ids.size()) != count)
        fail("draft vocabulary {}: lists {} ids but its count says {} (a truncated file?)", where, v.ids.size(), count);
    return v;
}

draft_vocab read_draft_vocab(const std::filesystem::path& path, int32_t n_vocab) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("draft vocabulary {}: cannot open the file", path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    return parse_draft_vocab(ss.str(), n_vocab, path.string());
}

std::filesystem::path default_draft_vocab_path(const std::filesystem::path& model) {
    if (std::filesystem::is_directory(model)) return model / "draft-vocab";
    std::filesystem::path p = model;
    p += ".draft-vocab";
    return p;
}

}  // namespace sluice
