// Random expert banks for the expert-pool tests (test_expert_pool, test_expert_subset, test_numa).
#pragma once

#include "core/tensor.h"
#include "quant/quant.h"

#include <cstring>
#include <random>
#include <vector>

namespace sluice::test_support {

// A 3-D expert tensor ne = {n_in, n_out, n_expert} of N(0, 0.5) weights stored as `t`.
struct expert_tensor {
    std::vector<std::byte> bytes;
    tensor_view view;
};

// distinct_rows > 0: only that many random rows are quantised and every weight row is a random
// pick of them (the I-quant quantisers search grids and are slow; any mix of valid rows tests the
// same promises); 0: every row quantised from its own random values.
inline expert_tensor make_experts(dtype t, int64_t n_in, int64_t n_out, int64_t n_expert, std::mt19937& g,
                                  int distinct_rows = 0) {
    expert_tensor x;
    std::normal_distribution<float> d(0.0f, 0.5f);
    const uint64_t row = *bytes_for(t, static_cast<uint64_t>(n_in));
    const int64_t rows = n_out * n_expert;
    x.bytes.resize(row * static_cast<uint64_t>(rows));
    std::vector<float> v(static_cast<size_t>(n_in));
    const int64_t quantised = distinct_rows > 0 ? distinct_rows : rows;
    std::vector<std::byte> pool(distinct_rows > 0 ? row * static_cast<uint64_t>(distinct_rows) : 0);
    std::byte* const dst = distinct_rows > 0 ? pool.data() : x.bytes.data();
    for (int64_t i = 0; i < quantised; ++i) {
        for (auto& f : v) f = d(g);
        quant::quantize_row(t, v.data(), dst + static_cast<uint64_t>(i) * row, n_in);
    }
    if (distinct_rows > 0) {
        std::uniform_int_distribution<int> pick(0, distinct_rows - 1);
        for (int64_t r = 0; r < rows; ++r)
            std::memcpy(x.bytes.data() + static_cast<uint64_t>(r) * row, pool.data() + static_cast<uint64_t>(pick(g)) * row, row);
    }
    x.view.name = "experts";
    x.view.type = t;
    x.view.n_dims = 3;
    x.view.ne = {n_in, n_out, n_expert, 1};
    x.view.data = x.bytes.data();
    x.view.nbytes = x.bytes.size();
    return x;
}

}  // namespace sluice::test_support
