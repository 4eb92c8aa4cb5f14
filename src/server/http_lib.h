// cpp-httplib as Debian builds it: the header declares, libcpp-httplib.so defines. The library is
// compiled with OpenSSL, zlib and Brotli support, and httplib::Request has an extra member under
// CPPHTTPLIB_OPENSSL_SUPPORT, so every translation unit that includes httplib.h must see the same
// three macros (a different class layout on each side of the .so boundary is undefined behaviour).
// Include this header, never httplib.h directly. (A machine without those headers, e.g. the GPU
// machine's minimal dependency set, still compiles the server; it needs a matching library to link.)
#pragma once

#if __has_include(<openssl/ssl.h>) && __has_include(<zlib.h>) && __has_include(<brotli/decode.h>)
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
#endif
#include <httplib.h>
