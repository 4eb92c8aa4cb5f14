// SHA-256 against FIPS 180-4's example vectors, and token_sha's byte layout.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/token_sha.h"

namespace sluice {
namespace {

std::string sha_hex(const std::string& s) {
    sha256 h;
    h.update(s.data(), s.size());
    return h.hex();
}

TEST(token_sha, sha256_matches_standard_vectors) {
    EXPECT_EQ(sha_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    sha256 h;
    std::string a1000(1000, 'a');
    for (int i = 0; i < 1000; ++i) h.update(a1000.data(), a1000.size());
    EXPECT_EQ(h.hex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(token_sha, incremental_updates_equal_one_shot) {
    std::string msg;
    for (int i = 0; i < 300; ++i) msg.push_back(char('a' + (i * 7) % 26));
    std::string whole = sha_hex(msg);
    // Every split point, including the 55/56/64-byte padding boundaries.
    for (size_t cut = 0; cut <= msg.size(); cut += 1) {
        sha256 h;
        h.update(msg.data(), cut);
        std::string mid = h.hex();  // reading the digest must not disturb the running state
        h.update(msg.data() + cut, msg.size() - cut);
        ASSERT_EQ(h.hex(), whole) << "split at " << cut;
        ASSERT_EQ(mid, sha_hex(msg.substr(0, cut))) << "prefix " << cut;
    }
}

TEST(token_sha, hashes_ids_as_little_endian_u32) {
    std::vector<int32_t> ids = {1, 256, 0x01020304, -1, 151643};
    std::string bytes;
    for (int32_t id : ids) {
        uint32_t u = uint32_t(id);
        for (int i = 0; i < 4; ++i) bytes.push_back(char(uint8_t(u >> (8 * i))));
    }
    EXPECT_EQ(token_sha_hex(ids), sha_hex(bytes));
    token_sha running;
    for (int32_t id : ids) running.update(id);
    EXPECT_EQ(running.hex(), sha_hex(bytes));
    EXPECT_EQ(running.count(), 5);
    // An empty generation hashes the empty message; order matters.
    EXPECT_EQ(token_sha_hex({}), sha_hex(""));
    std::vector<int32_t> swapped = {256, 1, 0x01020304, -1, 151643};
    EXPECT_NE(token_sha_hex(swapped), token_sha_hex(ids));
}

}  // namespace
}  // namespace sluice
