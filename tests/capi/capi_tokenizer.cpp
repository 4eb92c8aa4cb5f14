// C ABI over the tokenizer, for tests/tokenizer/test_*.py (ctypes). Every function catches every
// exception: 0 ok, -1 error (message copied into err), -2 output buffer too small (*n_out says
// how much is needed).
#include "core/error.h"
#include "io/metadata.h"
#include "io/model_file.h"
#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

namespace {

void copy_message(const char* msg, char* err, size_t err_len) {
    if (!err || err_len == 0) return;
    std::strncpy(err, msg, err_len - 1);
    err[err_len - 1] = '\0';
}

template <class F>
int guarded(char* err, size_t err_len, F&& f) {
    try {
        return f();
    } catch (const std::exception& e) {
        copy_message(e.what(), err, err_len);
    } catch (...) {
        copy_message("unknown exception", err, err_len);
    }
    return -1;
}

const sluice::tokenizer* as_tok(void* h) { return static_cast<const sluice::tokenizer*>(h); }

// JSON value -> metadata value as the GGUF converter types it: non-negative integers u32,
// negative i32, arrays of integers i32 (token_type), arrays of strings string.
sluice::meta_value to_meta(const nlohmann::json& v, const std::string& key) {
    using sluice::meta_type;
    sluice::meta_value m;
    if (v.is_string()) {
        m.type = meta_type::string;
        m.v = v.get<std::string>();
    } else if (v.is_boolean()) {
        m.type = meta_type::boolean;
        m.v = v.get<bool>();
    } else if (v.is_number_integer()) {
        int64_t i = v.get<int64_t>();
        m.type = i < 0 ? meta_type::i32 : meta_type::u32;
        m.v = i;
    } else if (v.is_array()) {
        auto a = std::make_shared<sluice::meta_array>();
        a->elem = meta_type::string;
        if (!v.empty() && v[0].is_number_integer()) a->elem = meta_type::i32;
        for (const auto& e : v) {
            if (a->elem == meta_type::string) a->strings.push_back(e.get<std::string>());
            else a->ints.push_back(e.get<int64_t>());
        }
        m.type = meta_type::array;
        m.v = a;
    } else {
        sluice::fail("capi: metadata key '{}': unsupported JSON value {}", key, v.dump());
    }
    return m;
}

int copy_out(const std::string& s, char* out, size_t cap, size_t* n_out) {
    *n_out = s.size();
    if (s.size() > cap) return -2;
    if (!s.empty()) std::memcpy(out, s.data(), s.size());
    return 0;
}

}  // namespace

extern "C" {

// A tokenizer from a JSON object of metadata keys (tokenizer.ggml.*), through from_metadata.
int sluice_tok_from_meta_json(const char* json_text, void** out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        *out = nullptr;
        const auto j = nlohmann::json::parse(json_text);
        sluice::metadata meta;
        for (auto it = j.begin(); it != j.end(); ++it) meta.set(it.key(), to_meta(it.value(), it.key()));
        *out = sluice::tokenizer::from_metadata(meta).release();
        return 0;
    });
}

int sluice_tok_from_hf_dir(const char* dir, void** out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        *out = nullptr;
        *out = sluice::tokenizer::from_hf_dir(dir).release();
        return 0;
    });
}

// Opens a model (GGUF file or HF directory) with model_file::open and uses tokenizer::for_model.
int sluice_tok_for_model(const char* path, void** out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        *out = nullptr;
        auto f = sluice::model_file::open(path);
        *out = sluice::tokenizer::for_model(*f, path).release();
        return 0;
    });
}

void sluice_tok_free(void* h) { delete as_tok(h); }

int sluice_tok_info(void* h, int32_t* n_vocab, int32_t* bos, int32_t* eos, int32_t* eot, int32_t* add_bos) {
    auto t = as_tok(h);
    *n_vocab = t->n_vocab();
    *bos = t->bos();
    *eos = t->eos();
    *eot = t->eot();
    *add_bos = t->adds_bos() ? 1 : 0;
    return 0;
}

int sluice_tok_is_eog(void* h, int32_t id) { return as_tok(h)->is_end_of_generation(id) ? 1 : 0; }

int32_t sluice_tok_find_special(void* h, const char* text) { return as_tok(h)->find_special(text); }

int sluice_tok_encode(void* h, const char* text, size_t len, int parse_special, int add_bos, int32_t* out,
                      size_t cap, size_t* n_out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        auto ids = as_tok(h)->encode(std::string_view(text, len), parse_special != 0, add_bos != 0);
        *n_out = ids.size();
        if (ids.size() > cap) return -2;
        if (!ids.empty()) std::memcpy(out, ids.data(), ids.size() * sizeof(int32_t));
        return 0;
    });
}

int sluice_tok_decode(void* h, const int32_t* ids, size_t n, char* out, size_t cap, size_t* n_out, char* err,
                      size_t err_len) {
    return guarded(err, err_len, [&] {
        return copy_out(as_tok(h)->decode(std::vector<int32_t>(ids, ids + n)), out, cap, n_out);
    });
}

// Streams ids through stream_decoder; piece_ends[i] (n + 1 entries, the last for flush()) is
// the end offset in out after push(ids[i]).
int sluice_tok_stream(void* h, const int32_t* ids, size_t n, char* out, size_t cap, size_t* n_out,
                      size_t* piece_ends, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        sluice::stream_decoder d(*as_tok(h));
        std::string all;
        for (size_t i = 0; i < n; ++i) {
            all += d.push(ids[i]);
            piece_ends[i] = all.size();
        }
        all += d.flush();
        piece_ends[n] = all.size();
        return copy_out(all, out, cap, n_out);
    });
}

}  // extern "C"
