// C ABI over the Hugging Face directory reader, for tests/io_hf/test_*.py (ctypes).
// Every function catches every exception and returns an error code: 0 ok, -1 error (message
// copied into err), -2 absent key / index out of range.
#include "core/error.h"
#include "io/model_file.h"
#include "io/safetensors.h"

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
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

const sluice::model_file* as_model(void* h) { return static_cast<const sluice::model_file*>(h); }

}  // namespace

extern "C" {

// Opens a directory (through model_file::open when via_model_file, else open_hf_directory).
int sluice_hf_open(const char* dir, int via_model_file, void** out, char* err, size_t err_len) {
    return guarded(err, err_len, [&] {
        *out = nullptr;
        auto m = via_model_file ? sluice::model_file::open(dir) : sluice::open_hf_directory(dir);
        *out = m.release();
        return 0;
    });
}

void sluice_hf_close(void* h) { delete as_model(h); }

int64_t sluice_hf_tensor_count(void* h) {
    return static_cast<int64_t>(as_model(h)->tensors().size());
}

// Tensor i: name (valid while the model is open), GGML type id, dims, ne[4], data, bytes.
int sluice_hf_tensor(void* h, int64_t i, const char** name, uint32_t* type, int32_t* n_dims,
                     int64_t* ne, const void** data, uint64_t* nbytes) {
    auto ts = as_model(h)->tensors();
    if (i < 0 || static_cast<size_t>(i) >= ts.size()) return -2;
    const auto& t = ts[static_cast<size_t>(i)];
    *name = t.name.c_str();
    *type = static_cast<uint32_t>(t.type);
    *n_dims = t.n_dims;
    for (int d = 0; d < 4; ++d) ne[d] = t.ne[d];
    *data = t.data;
    *nbytes = t.nbytes;
    return 0;
}

const char* sluice_hf_format(void* h) { return as_model(h)->format().data(); }

// The GGUF value type of a key (meta_type id), or -2 when absent.
int sluice_hf_meta_type(void* h, const char* key) {
    const auto* v = as_model(h)->meta().find(key);
    return v ? static_cast<int>(v->type) : -2;
}

int sluice_hf_meta_int(void* h, const char* key, int64_t* out) {
    const auto* v = as_model(h)->meta().find(key);
    if (!v || !v->as_int()) return -2;
    *out = *v->as_int();
    return 0;
}

int sluice_hf_meta_float(void* h, const char* key, double* out) {
    const auto* v = as_model(h)->meta().find(key);
    if (!v || !v->as_float()) return -2;
    *out = *v->as_float();
    return 0;
}

int sluice_hf_meta_bool(void* h, const char* key, int* out) {
    const auto* v = as_model(h)->meta().find(key);
    if (!v || !v->as_bool()) return -2;
    *out = *v->as_bool() ? 1 : 0;
    return 0;
}

// An integer or bool array: its element type (meta_type id) and up to cap values into out;
// returns the array's length, or -2 when the key is absent or not such an array.
int64_t sluice_hf_meta_int_array(void* h, const char* key, int* elem, int64_t* out, int64_t cap) {
    const auto* v = as_model(h)->meta().find(key);
    const sluice::meta_array* a = v ? v->as_array() : nullptr;
    if (!a || !a->floats.empty() || !a->strings.empty() || !a->arrays.empty()) return -2;
    *elem = static_cast<int>(a->elem);
    for (size_t i = 0; i < a->ints.size() && static_cast<int64_t>(i) < cap; ++i) out[i] = a->ints[i];
    return static_cast<int64_t>(a->ints.size());
}

int sluice_hf_meta_string(void* h, const char* key, char* buf, size_t len) {
    const auto* v = as_model(h)->meta().find(key);
    if (!v || !v->as_string()) return -2;
    copy_message(v->as_string()->c_str(), buf, len);
    return 0;
}

// Validates one safetensors image in memory (the header parser alone); returns its tensor
// count, or -1 with the message.
int64_t sluice_st_parse(const void* bytes, size_t n, char* err, size_t err_len) {
    int64_t count = 0;
    int rc = guarded(err, err_len, [&] {
        auto h = sluice::parse_safetensors(
            std::span<const std::byte>(static_cast<const std::byte*>(bytes), n), "<memory>");
        count = static_cast<int64_t>(h.tensors.size());
        return 0;
    });
    return rc == 0 ? count : -1;
}

}  // extern "C"
