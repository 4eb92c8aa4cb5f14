#include "core/checked.h"
#include "core/dtype.h"
#include "core/error.h"

#include <gtest/gtest.h>

#include <limits>

namespace sluice {

TEST(core, with_commas_groups_thousands) {
    EXPECT_EQ(with_commas(0), "0");
    EXPECT_EQ(with_commas(999), "999");
    EXPECT_EQ(with_commas(1000), "1,000");
    EXPECT_EQ(with_commas(8421376), "8,421,376");
    EXPECT_EQ(with_commas(123456789012ULL), "123,456,789,012");
}

TEST(core, checked_mul_detects_overflow) {
    EXPECT_FALSE(checked_mul(std::numeric_limits<uint64_t>::max() / 2 + 1, 2).has_value());
    EXPECT_EQ(checked_mul(3, 5).value(), 15u);
    EXPECT_FALSE(checked_add(std::numeric_limits<uint64_t>::max(), 1).has_value());
    EXPECT_EQ(checked_align_up(33, 32).value(), 64u);
    EXPECT_FALSE(checked_align_up(std::numeric_limits<uint64_t>::max() - 3, 32).has_value());
}

TEST(core, dtype_table_rejects_unknown_ids) {
    EXPECT_FALSE(find_dtype(4).has_value());     // Q4_2, removed from GGML
    EXPECT_FALSE(find_dtype(1000).has_value());
    EXPECT_EQ(find_dtype(12)->name, "Q4_K");
    EXPECT_EQ(bytes_for(dtype::q4_k, 512).value(), 288u);
    EXPECT_FALSE(bytes_for(dtype::q4_k, 100).has_value());  // not a whole block
}

}  // namespace sluice
