#!/usr/bin/env bash
# tools/pack_gpu_deps.sh: bundle the Debian build dependencies (headers, CMake configs, static
# libraries) into .gpudeps/usr (git-ignored) so that sluice builds on a machine that has a
# compiler and CUDA but none of these packages and no network (the lent GPU machine). Carry the
# folder there and configure with
#   cmake -DCMAKE_PREFIX_PATH=$PWD/.gpudeps/usr ...   (PKG_CONFIG_PATH=$PWD/.gpudeps/usr/lib/x86_64-linux-gnu/pkgconfig)
# PCRE2 is linked statically (libpcre2-8.a); fmt's shared library travels beside its config.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpudeps/usr
lib=/usr/lib/x86_64-linux-gnu
for p in libfmt-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libgtest-dev libgmock-dev libcpp-httplib-dev libssl-dev zlib1g-dev libbrotli-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || { echo "pack_gpu_deps.sh: install $p first (bash tools/dev.sh build)" >&2; exit 1; }
done
rm -rf "$out"
mkdir -p "$out/include" "$out/lib/x86_64-linux-gnu/pkgconfig" "$out/lib/x86_64-linux-gnu/cmake" "$out/share/cmake"
cp -r /usr/include/{fmt,nlohmann,CLI,httplib.h,pcre2.h,gtest,gmock} "$out/include/"
cp -r /usr/share/cmake/{nlohmann_json,CLI11} "$out/share/cmake/"
cp -r $lib/cmake/{fmt,GTest} "$out/lib/x86_64-linux-gnu/cmake/"
cp -a $lib/libfmt.so* $lib/libpcre2-8.a $lib/lib{gtest,gtest_main,gmock,gmock_main}.a "$out/lib/x86_64-linux-gnu/"
# Debian's cpp-httplib is a shared library built with OpenSSL, zlib and Brotli; the header must see
# the same three (src/server/http_lib.h), so their headers travel too, and the libraries for the
# runtime (the binary finds them through its build-tree RPATH or LD_LIBRARY_PATH).
cp -a $lib/libcpp-httplib.so* $lib/libbrotli{common,dec,enc}.so* /lib/x86_64-linux-gnu/lib{ssl,crypto}.so.3 /lib/x86_64-linux-gnu/libz.so.1* "$out/lib/x86_64-linux-gnu/"
cp -r /usr/include/openssl /usr/include/brotli /usr/include/zlib.h /usr/include/zconf.h "$out/include/"
cp /usr/include/x86_64-linux-gnu/openssl/* "$out/include/openssl/"
# pkg-config files name an absolute prefix; make it relative to the file so the bundle can move.
sed 's|^prefix=.*|prefix=${pcfiledir}/../../..|' $lib/pkgconfig/libpcre2-8.pc > "$out/lib/x86_64-linux-gnu/pkgconfig/libpcre2-8.pc"
grep -qx '/.gpudeps/' .git/info/exclude 2>/dev/null || echo '/.gpudeps/' >> .git/info/exclude
du -sh .gpudeps
