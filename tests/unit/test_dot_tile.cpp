// src/kernels/cpu/dot.h column tiles (dot_tile_impl.h): every output of a tile kernel is
// dot_ref's bits (memcmp of the floats) for 1..64 rows, unaligned weight rows and strides,
// extreme codes and scales, inf/NaN scales; and matmul, which runs them, gives dot_ref's bits
// for every element whatever the thread count and whether the last tile is whole (E1, E2, E3).
#include "core/thread_pool.h"
#include "kernels/cpu/dot.h"
#include "kernels/cpu/dot_ref.h"
#include "kernels/cpu/ops.h"
#include "quant/act.h"
#include "quant/quant.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace sluice::kernels {
namespace {

// The 32-wide formats have tiles at both ISAs; the 256-wide ones (dot_ktile_impl.h) with
// AVX-512 VNNI only.
constexpr dtype k_tile_formats[] = {dtype::q8_0,   dtype::q4_0,    dtype::q4_1,   dtype::q5_0,    dtype::q5_1,
                                    dtype::iq4_nl, dtype::mxfp4,   dtype::q2_k,   dtype::q3_k,    dtype::q4_k,
                                    dtype::q5_k,   dtype::q6_k,    dtype::iq4_xs, dtype::iq2_xxs, dtype::iq2_xs,
                                    dtype::iq2_s,  dtype::iq3_xxs, dtype::iq3_s};
// matmul's other paths (dot_rows column by column) beside the tiles, in the matmul test.
constexpr dtype k_matmul_formats[] = {dtype::q8_0, dtype::q4_0,   dtype::q4_1,  dtype::q5_0, dtype::q5_1,
                                      dtype::iq4_nl, dtype::mxfp4, dtype::q4_k, dtype::q6_k, dtype::iq4_xs,
                                      dtype::iq3_s,  dtype::q2_k,  dtype::f16};

bool is_k(dtype t) { return info(t).block_elems == 256; }
bool has_tile(isa i, dtype t) { return i == isa::avx512 || (i == isa::avx2 && !is_k(t)); }
// Byte offsets of a block's f16 scales (MXFP4: its e8m0 byte, handled apart).
std::vector<int> scale_offsets(dtype t) {
    switch (t) {
    case dtype::q4_1: case dtype::q5_1: case dtype::q4_k: case dtype::q5_k: return {0, 2};
    case dtype::q2_k: return {80, 82};
    case dtype::q3_k: return {108};
    case dtype::q6_k: return {208};
    case dtype::mxfp4: return {};
    default: return {0};
    }
}
// Element counts: 32-wide formats take any multiple of 32, K-quants of 256.
std::vector<int64_t> sizes(dtype t) { return is_k(t) ? std::vector<int64_t>{256, 768, 2048} : std::vector<int64_t>{32, 96, 576, 4096}; }

// 8 weight rows of n elements, `stride` bytes apart, starting `shift` bytes into the buffer:
// random code bytes (fill 0: random; 1: 0xFF; 2: 0x80) with finite f16 scales (big: +-65504)
// or random e8m0 exponents.
struct wtile {
    std::vector<std::byte> buf;
    size_t stride = 0, shift = 0;
    std::byte* row(int c) { return buf.data() + shift + c * stride; }
    const std::byte* row(int c) const { return buf.data() + shift + c * stride; }
};

wtile make_tile(dtype t, int64_t n, std::mt19937& rng, int fill, bool big, size_t shift, size_t pad) {
    const auto& inf = info(t);
    const size_t bytes = static_cast<size_t>(n / inf.block_elems) * inf.block_bytes;
    wtile w;
    w.stride = bytes + pad;
    w.shift = shift;
    w.buf.resize(w.stride * 8 + shift + 64);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(-2.0f, 2.0f);
    for (int c = 0; c < 8; ++c) {
        std::byte* r = w.row(c);
        for (size_t i = 0; i < bytes; ++i)
            r[i] = static_cast<std::byte>(fill == 0 ? byte(rng) : fill == 1 ? 0xFF : 0x80);
        for (size_t b = 0; b < bytes / inf.block_bytes; ++b) {
            std::byte* blk = r + b * inf.block_bytes;
            if (t == dtype::mxfp4) {
                // Edge exponents for the vector scale decoding: row 6 only the subnormal scales
                // (0, 1) and the first normal one (a wrong subnormal would be lost beside larger
                // terms: a mutation of the e < 2 branch passed with them mixed into random rows),
                // row 7 normal scales below and above 1/2 (254 and 255 take the same formula as
                // these, and their terms would overflow to inf and hide a wrong scale).
                static constexpr uint8_t k_tiny[] = {0, 1, 2}, k_large[] = {64, 100, 127, 128, 129, 150};
                blk[0] = static_cast<std::byte>(big ? 160 : c == 6 ? k_tiny[b % 3] : c == 7 ? k_large[b % 6] : 110 + byte(rng) % 30);
                continue;
            }
            for (int off : scale_offsets(t)) {
                const uint16_t h = big ? (byte(rng) & 1 ? 0xFBFF : 0x7BFF) : quant::fp32_to_fp16(scale(rng));
                std::memcpy(blk + off, &h, 2);
            }
        }
    }
    return w;
}

// n_rows activation rows, `stride` bytes apart (row bytes + pad), `shift` bytes in. mode 0:
// quantize_act_row of normals; 1: all +127; 2: all -127; 3: random int8 with a random dx.
struct arows {
    std::vector<std::byte> buf;
    size_t stride = 0, shift = 0;
    const std::byte* row(int r) const { return buf.data() + shift + r * stride; }
};

arows make_acts(dtype t, int64_t n, int n_rows, std::mt19937& rng, int mode, size_t shift, size_t pad) {
    const quant::act_format f = quant::act_format_for(t);
    const int bw = f == quant::act_format::q8_32 ? 32 : 256;
    const size_t bsz = f == quant::act_format::q8_32 ? sizeof(quant::act_block32) : sizeof(quant::act_block256);
    arows a;
    a.stride = quant::act_row_bytes(f, n) + pad;
    a.shift = shift;
    a.buf.resize(a.stride * n_rows + shift + 64);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::uniform_int_distribution<int> q(-127, 127);
    std::vector<float> x(static_cast<size_t>(n));
    for (int r = 0; r < n_rows; ++r) {
        std::byte* dst = a.buf.data() + shift + r * a.stride;
        if (mode == 0) {
            for (auto& v : x) v = dist(rng);
            quant::quantize_act_row(f, x.data(), n, dst);
            continue;
        }
        for (int64_t b = 0; b < n / bw; ++b) {
            std::byte* blk = dst + b * bsz;
            const float dx = mode == 3 ? std::uniform_real_distribution<float>(1e-3f, 2.0f)(rng) : 0.05f;
            std::memcpy(blk, &dx, 4);
            auto* qs = reinterpret_cast<int8_t*>(blk + 4);
            for (int i = 0; i < bw; ++i) qs[i] = static_cast<int8_t>(mode == 1 ? 127 : mode == 2 ? -127 : q(rng));
            if (bw == 256) {   // the per-16 sums the K-quant kernels read
                int16_t bs[16];
                for (int j = 0; j < 16; ++j) {
                    int sum = 0;
                    for (int i = 0; i < 16; ++i) sum += qs[16 * j + i];
                    bs[j] = static_cast<int16_t>(sum);
                }
                std::memcpy(blk + offsetof(quant::act_block256, bsums), bs, sizeof bs);
            }
        }
    }
    return a;
}

// Every n_rows in 1..16 and some up to k_tile_max_rows (a is that many rows) on the same rows;
// each output against dot_ref of its (row, column).
void expect_tile_matches_ref(dot_tile_fn f, isa i, dtype t, const wtile& w, const arows& a, int64_t n, const char* what) {
    constexpr size_t os = 13;   // output rows 13 floats apart: lanes past 8 must stay untouched
    float ref[k_tile_max_rows][8];
    for (int r = 0; r < k_tile_max_rows; ++r)
        for (int c = 0; c < 8; ++c) ref[r][c] = dot_ref(t, w.row(c), a.row(r), n);
    std::vector<int> counts;
    for (int nr = 1; nr <= 16; ++nr) counts.push_back(nr);
    for (int nr : {17, 31, 33, 50, k_tile_max_rows}) counts.push_back(nr);
    for (int nr : counts) {
        std::vector<float> out(k_tile_max_rows * os);
        std::memset(out.data(), 0xA5, out.size() * 4);
        f(w.row(0), w.stride, a.row(0), a.stride, nr, n, out.data(), os);
        for (int r = 0; r < nr; ++r) {
            for (int c = 0; c < 8; ++c)
                ASSERT_EQ(0, std::memcmp(&out[r * os + c], &ref[r][c], 4))
                    << name(i) << " " << name(t) << " " << what << " n=" << n << " n_rows=" << nr << " row " << r
                    << " col " << c << ": got " << out[r * os + c] << ", dot_ref " << ref[r][c];
            uint32_t pad;
            std::memcpy(&pad, &out[r * os + 8], 4);
            ASSERT_EQ(pad, 0xA5A5A5A5u) << name(t) << ": wrote past the 8 columns";
        }
    }
}

class dot_tile : public ::testing::TestWithParam<isa> {
protected:
    void SetUp() override {
        if (!cpu_supports(GetParam())) GTEST_SKIP() << "this CPU cannot run " << name(GetParam()) << " kernels";
    }
};

TEST_P(dot_tile, exactly_the_listed_formats_have_a_tile_kernel) {
    for (uint32_t id = 0; id < 64; ++id) {
        const auto inf = find_dtype(id);
        if (!inf || !has_dot(inf->type)) continue;
        bool listed = false;
        for (dtype t : k_tile_formats) listed = listed || t == inf->type;
        EXPECT_EQ(resolve_dot_tile(GetParam(), inf->type) != nullptr, listed && has_tile(GetParam(), inf->type))
            << name(inf->type);
    }
}

TEST_P(dot_tile, random_tiles_equal_dot_ref_bits_for_1_to_16_rows) {
    std::mt19937 rng(4321);
    for (dtype t : k_tile_formats) {
        const dot_tile_fn f = resolve_dot_tile(GetParam(), t);
        if (!f) continue;
        for (int64_t n : sizes(t)) {
            const wtile w = make_tile(t, n, rng, 0, false, 0, 0);
            expect_tile_matches_ref(f, GetParam(), t, w, make_acts(t, n, k_tile_max_rows, rng, 0, 0, 0), n, "quantised normals");
            expect_tile_matches_ref(f, GetParam(), t, w, make_acts(t, n, k_tile_max_rows, rng, 3, 0, 0), n, "random int8");
        }
    }
}

TEST_P(dot_tile, extreme_codes_and_scales_equal_dot_ref_bits) {
    std::mt19937 rng(77);
    for (dtype t : k_tile_formats) {
        const dot_tile_fn f = resolve_dot_tile(GetParam(), t);
        if (!f) continue;
        for (int fill : {0, 1, 2}) {
            const wtile w = make_tile(t, 1024, rng, fill, true, 0, 0);
            for (int mode : {1, 2})
                expect_tile_matches_ref(f, GetParam(), t, w, make_acts(t, 1024, k_tile_max_rows, rng, mode, 0, 0), 1024,
                                        mode == 1 ? "max scales, x=+127" : "max scales, x=-127");
        }
    }
}

TEST_P(dot_tile, unaligned_rows_and_strides_equal_dot_ref_bits) {
    std::mt19937 rng(5);
    for (dtype t : k_tile_formats) {
        const dot_tile_fn f = resolve_dot_tile(GetParam(), t);
        if (!f) continue;
        const int64_t n = is_k(t) ? 768 : 576;
        const wtile w = make_tile(t, n, rng, 0, false, 3, 7);
        expect_tile_matches_ref(f, GetParam(), t, w, make_acts(t, n, k_tile_max_rows, rng, 0, 1, 5), n, "unaligned");
    }
}

// inf and NaN scales (f16_at's rule keeps a signalling NaN's payload; in the 32-wide tiles a
// group of 8 scales holding one is widened by that rare scalar path). One special value per
// column, so a NaN result is that value's whichever operand order the compiler picks.
TEST_P(dot_tile, inf_and_nan_scales_equal_dot_ref_bits) {
    std::mt19937 rng(11);
    for (dtype t : k_tile_formats) {
        const dot_tile_fn f = resolve_dot_tile(GetParam(), t);
        if (!f || t == dtype::mxfp4) continue;   // e8m0 has no inf; its NaN byte is dot_ref's own path
        const size_t bb = info(t).block_bytes;
        const uint16_t pinf = 0x7C00, ninf = 0xFC00, snan = 0x7C01, qnan = 0xFE00;
        const std::vector<int> offs = scale_offsets(t);
        const int n_blocks = is_k(t) ? 4 : 8;
        const int64_t n = is_k(t) ? 1024 : 256;
        wtile w = make_tile(t, n, rng, 0, false, 0, 0);
        std::memcpy(w.row(1) + 2 % n_blocks * bb + offs[0], &pinf, 2);
        std::memcpy(w.row(3) + 5 % n_blocks * bb + offs[0], &snan, 2);
        std::memcpy(w.row(6) + 0 * bb + offs[0], &ninf, 2);
        if (offs.size() > 1) std::memcpy(w.row(7) + 3 * bb + offs[1], &qnan, 2);
        expect_tile_matches_ref(f, GetParam(), t, w, make_acts(t, n, k_tile_max_rows, rng, 3, 0, 0), n, "inf/NaN scales");
    }
}

TEST_P(dot_tile, empty_rows_are_zero_like_dot_ref) {
    for (dtype t : k_tile_formats) {
        const dot_tile_fn f = resolve_dot_tile(GetParam(), t);
        if (!f) continue;
        const std::byte dummy[64] = {};
        float out[2 * 8];
        std::memset(out, 0xA5, sizeof out);
        f(dummy, 0, dummy, 0, 2, 0, out, 8);
        const float ref = dot_ref(t, dummy, dummy, 0);
        for (float v : out) EXPECT_EQ(0, std::memcmp(&v, &ref, 4)) << name(t);
    }
}

INSTANTIATE_TEST_SUITE_P(isas, dot_tile, ::testing::Values(isa::scalar, isa::avx2, isa::avx512),
                         [](const auto& info) { return std::string(name(info.param)); });

// matmul runs the tiles: every element is dot_ref's bits for 1..19 rows, with a last partial
// tile (29 columns: 3 tiles and 5 columns one by one) and 1, 2 or 3 threads; formats without a
// tile go column by column, also checked.
TEST(dot_tile_matmul, every_element_is_dot_ref_bits_for_any_rows_and_threads) {
    const int64_t n_in = 512, n_out = 29;
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> wf(static_cast<size_t>(n_in * n_out)), x(static_cast<size_t>(n_in * 70));
    for (auto& v : wf) v = dist(rng);
    for (auto& v : x) v = dist(rng);
    thread_pool p1(1), p2(2), p3(3);
    for (dtype t : k_matmul_formats) {
        const auto& inf = info(t);
        const size_t wrow = static_cast<size_t>(n_in / inf.block_elems) * inf.block_bytes;
        std::vector<std::byte> wq(wrow * n_out);
        for (int64_t j = 0; j < n_out; ++j) quant::quantize_row(t, wf.data() + j * n_in, wq.data() + j * wrow, n_in);
        tensor_view tw;
        tw.name = "w";
        tw.type = t;
        tw.n_dims = 2;
        tw.ne = {n_in, n_out, 1, 1};
        tw.data = wq.data();
        tw.nbytes = wq.size();
        for (int64_t n_rows : {1, 2, 3, 4, 16, 19, 70}) {
            std::vector<std::byte> act(matmul_act_bytes(tw, n_rows));
            const size_t arow = act.size() / static_cast<size_t>(n_rows);
            for (thread_pool* pool : {&p1, &p2, &p3}) {
                std::vector<float> y(static_cast<size_t>(n_rows * n_out), -1.0f);
                matmul(*pool, tw, x.data(), n_rows, y.data(), act.data());
                for (int64_t r = 0; r < n_rows; ++r)
                    for (int64_t j = 0; j < n_out; ++j) {
                        const float ref = dot_ref(t, tw.row(j), act.data() + r * arow, n_in);
                        ASSERT_EQ(0, std::memcmp(&ref, &y[r * n_out + j], 4))
                            << name(t) << " rows " << n_rows << " threads " << pool->n_threads() << " row " << r
                            << " col " << j;
                    }
            }
        }
    }
}

}  // namespace
}  // namespace sluice::kernels
