// A model file built in memory for tests: metadata set key by key and random tensors quantised
// to any format, so model-level tests need no file on disk.
#pragma once

#include "io/model_file.h"
#include "quant/quant.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace sluice::test_support {

class mem_model_file final : public model_file {
public:
    metadata m;
    std::vector<tensor_view> ts;
    std::vector<std::vector<std::byte>> store;
    // > 0: add() quantises only this many rows of a tensor and fills the others with copies of
    // them in a random order (the I-quant quantisers search grids and are slow; any mix of valid
    // rows tests the same promises).
    int64_t max_distinct_rows = 0;

    const metadata& meta() const override { return m; }
    std::span<const tensor_view> tensors() const override { return ts; }
    std::string_view format() const override { return "gguf"; }

    void set_int(const std::string& k, int64_t v) { m.set(k, meta_value{meta_type::u32, v}); }
    void set_float(const std::string& k, double v) { m.set(k, meta_value{meta_type::f32, v}); }
    void set_bool(const std::string& k, bool v) { m.set(k, meta_value{meta_type::boolean, v}); }
    void set_string(const std::string& k, std::string v) { m.set(k, meta_value{meta_type::string, std::move(v)}); }

    // A tensor of shape ne (GGML order) holding N(0, scale) values (1 + that for names with
    // "norm"), stored as `type`.
    void add(const std::string& name, std::vector<int64_t> ne, std::mt19937& g, dtype type = dtype::f32,
             float scale = 0.2f) {
        int64_t n = 1;
        for (auto e : ne) n *= e;
        std::normal_distribution<float> d(0.0f, scale);
        std::vector<float> v(static_cast<size_t>(n));
        for (auto& x : v) x = d(g);
        if (name.find("norm") != std::string::npos)
            for (auto& x : v) x = 1.0f + x;
        tensor_view t;
        t.name = name;
        t.type = type;
        t.n_dims = static_cast<int>(ne.size());
        for (size_t i = 0; i < ne.size(); ++i) t.ne[i] = ne[i];
        const uint64_t row_bytes = *bytes_for(type, static_cast<uint64_t>(ne[0]));
        const int64_t rows = n / ne[0];
        std::vector<std::byte> bytes(row_bytes * static_cast<uint64_t>(rows));
        const int64_t distinct = max_distinct_rows > 0 ? std::min(rows, max_distinct_rows) : rows;
        for (int64_t r = 0; r < distinct; ++r)
            quant::quantize_row(type, v.data() + r * ne[0], bytes.data() + r * row_bytes, ne[0]);
        if (distinct < rows) {
            std::uniform_int_distribution<int64_t> pick(0, distinct - 1);
            for (int64_t r = distinct; r < rows; ++r)
                std::memcpy(bytes.data() + r * row_bytes, bytes.data() + pick(g) * row_bytes, row_bytes);
        }
        store.push_back(std::move(bytes));
        t.data = store.back().data();
        t.nbytes = store.back().size();
        ts.push_back(t);
    }
};

}  // namespace sluice::test_support
