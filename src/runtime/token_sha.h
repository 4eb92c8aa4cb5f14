// token_sha: the SHA-256 of the generated token ids, each as a little-endian u32, in hex.
// Every reply carries it (DESIGN.md, "The exactness contract"): two runs that print the same
// token_sha generated the same ids, whatever the window size, batch, threads or placement.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace sluice {

// SHA-256 (FIPS 180-4), incremental. Our own implementation: the tests check it against the
// standard's vectors ("", "abc", the 448-bit message, a million 'a').
class sha256 {
public:
    sha256() { reset(); }
    void reset();
    void update(const void* data, size_t n);
    // The digest of everything updated so far; the object stays usable (finishing works on a
    // copy), so a running token_sha can be read after every token.
    std::array<uint8_t, 32> digest() const;
    std::string hex() const;

private:
    void block(const uint8_t* p);  // one 64-byte block into state_
    uint32_t state_[8];
    uint8_t buf_[64];    // the partial block not yet compressed
    size_t buf_len_;     // bytes used in buf_, < 64
    uint64_t total_;     // message length in bytes
};

// The running token_sha of one generation: update once per committed token.
class token_sha {
public:
    void reset() { h_.reset(); n_ = 0; }
    void update(int32_t token);
    void update(std::span<const int32_t> tokens);
    std::string hex() const { return h_.hex(); }
    int64_t count() const { return n_; }

private:
    sha256 h_;
    int64_t n_ = 0;
};

// token_sha of a whole list of ids, in one call.
std::string token_sha_hex(std::span<const int32_t> tokens);

}  // namespace sluice
