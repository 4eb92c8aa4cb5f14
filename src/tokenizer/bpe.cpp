#include "tokenizer/bpe.h"

#include "core/error.h"
#include "tokenizer/byte_level.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

namespace sluice {

bool is_eot_text(std::string_view t) {
    static const std::unordered_set<std::string_view> k{
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
        "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"};
    return k.count(t) != 0;
}

bool is_eog_text(std::string_view t) {
    static const std::unordered_set<std::string_view> k{
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
        "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
        "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
        "<｜end▁of▁sentence｜>", "[e~["};
    return k.count(t) != 0;
}

bool is_fim_pad_text(std::string_view t) {
    return t == "<|fim_pad|>" || t == "<fim-pad>" || t == "<fim_pad>" || t == "<PAD>" || t == "[PAD]";
}
bool is_fim_rep_text(std::string_view t) {
    return t == "<|fim_repo|>" || t == "<|repo_name|>" || t == "<fim-repo>" || t == "<REPO>" || t == "<reponame>";
}
bool is_fim_sep_text(std::string_view t) { return t == "<|file_sep|>"; }

namespace {

class bpe_tokenizer final : public tokenizer {
public:
    explicit bpe_tokenizer(bpe_spec spec);

    std::vector<token_id> encode(std::string_view text, bool parse_special, bool add_bos) const override;
    std::string token_bytes(token_id id) const override;
    int32_t n_vocab() const override { return static_cast<int32_t>(bytes_.size()); }
    token_id bos() const override { return bos_; }
    token_id eos() const override { return eos_; }
    bool is_end_of_generation(token_id id) const override {
        return id >= 0 && id < n_vocab() && eog_[id];
    }
    token_id find_special(std::string_view text) const override {
        for (token_id id : specials_)
            if (bytes_[id] == text) return id;
        return -1;
    }
    bool adds_bos() const override { return add_bos_; }
    token_id eot() const override { return eot_; }
    std::string_view chat_template() const override { return chat_template_; }
    std::string_view pre_tokenizer_name() const override { return name(pre_.kind()); }

private:
    struct merge {
        int32_t rank;      // position in the merges list: lower merges first
        token_id result;   // the token the pair becomes
    };
    static uint64_t pair_key(token_id a, token_id b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    // A pair of adjacent symbols that a merge would join.
    struct cand {
        int32_t rank;   // the merge's rank: lower merges first
        int left;       // byte position of the left symbol: leftmost first among equal ranks
        token_id a, b, result;  // the pair as it was when queued (stale once either changed)
        bool operator>(const cand& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
    };
    // Per-encode() working memory: one call's buffers and its cache of words already merged
    // (text repeats its words; a cached word costs one hash lookup instead of a BPE run).
    struct scratch {
        std::vector<std::pair<size_t, size_t>> pieces;
        std::unordered_map<std::string, std::vector<token_id>> cache;
        std::vector<token_id> sym;
        std::vector<int> prev, next;
        std::vector<cand> heap;
    };
    void encode_text(std::string_view text, scratch& sc, std::vector<token_id>& out) const;
    void encode_word(std::string_view word, scratch& sc, std::vector<token_id>& out) const;
    void merge_word(std::string_view word, scratch& sc, std::vector<token_id>& out) const;

    std::vector<std::string> bytes_;      // [n_vocab] the bytes each token stands for
    std::vector<int32_t> types_;          // [n_vocab] token_type
    std::vector<uint8_t> eog_;            // [n_vocab] 1 = ends generation
    std::array<token_id, 256> byte_token_{};  // [256] the token of a single byte, -1 when none
    std::unordered_map<uint64_t, merge> merges_;  // (left, right) -> rank, result
    std::unordered_map<std::string, token_id> whole_;  // raw bytes -> token, for ignore_merges
    std::vector<token_id> specials_;      // control/unknown/user-defined tokens, longest text first
    std::array<std::vector<token_id>, 256> specials_by_first_{};  // by first byte, longest first
    pre_tokenizer pre_;
    bool ignore_merges_;
    token_id bos_, eos_, eot_;
    bool add_bos_;
    std::string chat_template_;
};

bpe_tokenizer::bpe_tokenizer(bpe_spec s)
    : pre_(s.pre), ignore_merges_(s.ignore_merges), bos_(s.bos), eos_(s.eos), eot_(s.eot),
      add_bos_(s.add_bos), chat_template_(std::move(s.chat_template)) {
    const size_t n = s.tokens.size();
    if (n == 0) fail("tokenizer: {}: '{}' is empty: a vocabulary needs at least one token", s.source, s.tokens_key);
    if (n > static_cast<size_t>(INT32_MAX)) fail("tokenizer: {}: '{}' has {} tokens, more than token ids hold", s.source, s.tokens_key, n);
    if (s.types.empty()) s.types.assign(n, tt_normal);
    types_ = std::move(s.types);

    // Text -> id as llama.cpp builds it (a later duplicate wins), in stored (GPT-2) form.
    std::unordered_map<std::string, token_id> text_to_id;
    text_to_id.reserve(n * 2);
    for (size_t i = 0; i < n; ++i) text_to_id[s.tokens[i]] = static_cast<token_id>(i);

    // End of generation, as llama.cpp decides it: EOS, EOT, EOM, the FIM pad/repo/separator
    // tokens, and every token whose text is in its list. When a key is absent the first token
    // (by id) with a matching text stands in for it.
    auto first_with = [&](bool (*pred)(std::string_view)) -> token_id {
        for (size_t i = 0; i < n; ++i)
            if (pred(s.tokens[i])) return static_cast<token_id>(i);
        return -1;
    };
    if (eot_ < 0) eot_ = first_with(is_eot_text);
    if (s.fim_pad < 0) s.fim_pad = first_with(is_fim_pad_text);
    if (s.fim_rep < 0) s.fim_rep = first_with(is_fim_rep_text);
    if (s.fim_sep < 0) s.fim_sep = first_with(is_fim_sep_text);
    eog_.assign(n, 0);
    for (size_t i = 0; i < n; ++i)
        if (is_eog_text(s.tokens[i])) eog_[i] = 1;
    for (token_id id : {eos_, eot_, s.eom, s.fim_pad, s.fim_rep, s.fim_sep})
        if (id >= 0) eog_[id] = 1;
    if (s.llama_cpp_fixups) {
        // Control-looking tokens are control tokens even when the converter marked them normal
        // or user-defined, so their text is matched before pre-tokenizing (only with parse_special).
        auto make_control = [&](token_id id) {
            if (id >= 0 && types_[id] != tt_control) types_[id] = tt_control;
        };
        for (size_t i = 0; i < n; ++i)
            if (is_eog_text(s.tokens[i])) make_control(static_cast<token_id>(i));
        for (token_id id : {eot_, s.eom, s.fim_pad, s.fim_rep, s.fim_sep}) make_control(id);
        // FIM prefix/suffix/middle only change type (they do not end generation).
        static const std::unordered_set<std::string_view> fim_pre{
            "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"};
        static const std::unordered_set<std::string_view> fim_suf{
            "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"};
        static const std::unordered_set<std::string_view> fim_mid{
            "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"};
        for (const auto* set : {&fim_pre, &fim_suf, &fim_mid})
            for (size_t i = 0; i < n; ++i)
                if (set->count(s.tokens[i])) {
                    make_control(static_cast<token_id>(i));
                    break;
                }
    }

    bytes_.resize(n);
    for (size_t i = 0; i < n; ++i) {
        const int32_t t = types_[i];
        if (t == tt_control || t == tt_user_defined || t == tt_unknown) {
            bytes_[i] = s.tokens[i];  // special text stands for itself
            if (!s.tokens[i].empty()) specials_.push_back(static_cast<token_id>(i));
        } else {
            byte_level::decode(s.tokens[i], bytes_[i]);
        }
    }
    std::stable_sort(specials_.begin(), specials_.end(),
                     [&](token_id a, token_id b) { return bytes_[a].size() > bytes_[b].size(); });
    for (token_id id : specials_) specials_by_first_[static_cast<unsigned char>(bytes_[id][0])].push_back(id);

    for (unsigned b = 0; b < 256; ++b) {
        auto it = text_to_id.find(byte_level::encode(std::string(1, static_cast<char>(b))));
        byte_token_[b] = it == text_to_id.end() ? -1 : it->second;
    }

    merges_.reserve(s.merges.size() * 2);
    for (size_t r = 0; r < s.merges.size(); ++r) {
        const auto& [a, b] = s.merges[r];
        auto ia = text_to_id.find(a), ib = text_to_id.find(b), ic = text_to_id.find(a + b);
        if (ia == text_to_id.end() || ib == text_to_id.end() || ic == text_to_id.end()) {
            const std::string& missing = ia == text_to_id.end() ? a : ib == text_to_id.end() ? b : a + b;
            fail("tokenizer: {}: '{}'[{}] = '{} {}' names '{}', which is not in the vocabulary ('{}')",
                 s.source, s.merges_key, r, a, b, missing, s.tokens_key);
        }
        // The first listing of a pair is its rank (later duplicates never fire).
        merges_.try_emplace(pair_key(ia->second, ib->second), merge{static_cast<int32_t>(r), ic->second});
    }
    if (ignore_merges_) {
        whole_.reserve(n * 2);
        for (size_t i = 0; i < n; ++i)
            if (types_[i] != tt_control && types_[i] != tt_user_defined && types_[i] != tt_unknown)
                whole_[bytes_[i]] = text_to_id.at(s.tokens[i]);
    }
}

std::string bpe_tokenizer::token_bytes(token_id id) const {
    if (id < 0 || id >= n_vocab())
        fail("tokenizer: token id {} is out of range: the vocabulary has {} tokens", id, n_vocab());
    return bytes_[id];
}

std::vector<token_id> bpe_tokenizer::encode(std::string_view text, bool parse_special, bool add_bos) const {
    std::vector<token_id> out;
    out.reserve(text.size() / 3 + 2);
    if (add_bos && add_bos_ && bos_ >= 0) out.push_back(bos_);
    // Special tokens split the text first, leftmost-longest (Hugging Face's added-token matcher;
    // llama.cpp agrees whenever special texts do not overlap). Control and unknown tokens only
    // when parse_special; user-defined tokens always, as both libraries do.
    scratch sc;
    size_t start = 0, i = 0;
    while (i < text.size()) {
        token_id hit = -1;
        for (token_id id : specials_by_first_[static_cast<unsigned char>(text[i])]) {
            if (!parse_special && types_[id] != tt_user_defined) continue;
            const std::string& sp = bytes_[id];
            if (text.size() - i >= sp.size() && text.compare(i, sp.size(), sp) == 0) {
                hit = id;
                break;
            }
        }
        if (hit < 0) {
            ++i;
            continue;
        }
        encode_text(text.substr(start, i - start), sc, out);
        out.push_back(hit);
        i += bytes_[hit].size();
        start = i;
    }
    encode_text(text.substr(start), sc, out);
    return out;
}

void bpe_tokenizer::encode_text(std::string_view text, scratch& sc, std::vector<token_id>& out) const {
    // Valid UTF-8 runs are pre-tokenized; each byte that is not part of valid UTF-8 is a piece
    // of its own and becomes its byte token, so every input round-trips exactly when the
    // vocabulary has all 256 byte tokens (llama.cpp replaces such bytes with U+FFFD instead;
    // Hugging Face cannot take them at all).
    auto& pieces = sc.pieces;
    size_t i = 0;
    while (i < text.size()) {
        size_t j = i;
        while (j < text.size()) {
            size_t n = byte_level::valid_utf8_len(text, j);
            if (n == 0) break;
            j += n;
        }
        if (j > i) {
            pieces.clear();
            pre_.split(text.substr(i, j - i), pieces);
            for (auto [b, e] : pieces) encode_word(text.substr(i + b, e - b), sc, out);
        }
        if (j < text.size()) {
            const token_id b = byte_token_[static_cast<unsigned char>(text[j])];
            // A vocabulary without this byte's token (SmolLM2 has none for 0xC0, 0xF5..0xFF)
            // gets U+FFFD, the replacement llama.cpp makes for every invalid byte.
            if (b >= 0) out.push_back(b);
            else encode_word("\xEF\xBF\xBD", sc, out);
            ++j;
        }
        i = j;
    }
}

void bpe_tokenizer::encode_word(std::string_view word, scratch& sc, std::vector<token_id>& out) const {
    if (word.empty()) return;
    if (word.size() == 1 || word.size() > 64) {  // single bytes need no BPE; long pieces are rare: no caching
        merge_word(word, sc, out);
        return;
    }
    auto [it, fresh] = sc.cache.try_emplace(std::string(word));
    if (fresh) merge_word(word, sc, it->second);
    out.insert(out.end(), it->second.begin(), it->second.end());
}

void bpe_tokenizer::merge_word(std::string_view word, scratch& sc, std::vector<token_id>& out) const {
    if (word.size() == 1) {
        if (byte_token_[static_cast<unsigned char>(word[0])] >= 0) out.push_back(byte_token_[static_cast<unsigned char>(word[0])]);
        return;
    }
    if (ignore_merges_) {
        auto it = whole_.find(std::string(word));
        if (it != whole_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    // Symbols start as single bytes in a doubly linked list; a min-heap of candidate pairs
    // (rank, left position) merges the lowest rank first, leftmost among equals, as both
    // llama.cpp and Hugging Face do. Stale heap entries are recognised by the ids they name.
    const int n = static_cast<int>(word.size());
    auto& sym = sc.sym;    // [n] token of the symbol starting at byte i; -2 = merged away
    auto& prev = sc.prev;  // [n] neighbours in the list, -1 at the ends
    auto& next = sc.next;
    sym.resize(n);
    prev.resize(n);
    next.resize(n);
    for (int k = 0; k < n; ++k) {
        sym[k] = byte_token_[static_cast<unsigned char>(word[k])];
        prev[k] = k - 1;
        next[k] = k + 1 < n ? k + 1 : -1;
    }
    auto& heap = sc.heap;  // min-heap on (rank, left) through std::greater
    heap.clear();
    auto consider = [&](int l) {
        if (l < 0) return;
        int r = next[l];
        if (r < 0 || sym[l] < 0 || sym[r] < 0) return;
        auto it = merges_.find(pair_key(sym[l], sym[r]));
        if (it == merges_.end()) return;
        heap.push_back(cand{it->second.rank, l, sym[l], sym[r], it->second.result});
        std::push_heap(heap.begin(), heap.end(), std::greater<cand>());
    };
    for (int k = 0; k + 1 < n; ++k) consider(k);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end(), std::greater<cand>());
        const cand c = heap.back();
        heap.pop_back();
        const int l = c.left, r = next[l];
        if (sym[l] != c.a || r < 0 || sym[r] != c.b) continue;  // stale
        sym[l] = c.result;
        sym[r] = -2;
        next[l] = next[r];
        if (next[r] >= 0) prev[next[r]] = l;
        consider(prev[l]);
        consider(l);
    }
    for (int k = 0; k >= 0; k = next[k])
        if (sym[k] >= 0) out.push_back(sym[k]);  // a byte without a token is dropped, as in llama.cpp
}

}  // namespace

std::unique_ptr<tokenizer> make_bpe(bpe_spec spec) {
    const size_t n = spec.tokens.size();
    if (!spec.types.empty() && spec.types.size() != n)
        fail("tokenizer: {}: token_type has {} entries but '{}' has {} tokens", spec.source,
             spec.types.size(), spec.tokens_key, n);
    for (size_t i = 0; i < spec.types.size(); ++i)
        if (spec.types[i] < tt_undefined || spec.types[i] > tt_byte)
            fail("tokenizer: {}: token_type[{}] = {} is not a token type (0..6)", spec.source, i, spec.types[i]);
    return std::make_unique<bpe_tokenizer>(std::move(spec));
}

}  // namespace sluice
