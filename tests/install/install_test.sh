#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds examples/hello out of tree
# against it twice: with CMake's find_package(prizma) and with pkg-config. Each hello must
# run (mem:// channel) and deliver its 10 messages. Also checks what the install holds.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log"
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$prefix/include/prizma/prizma.hpp" ] || fail "no public headers installed"
[ -f "$prefix/include/prizma/version.hpp" ] || fail "no generated version.hpp installed"
[ -f "$prefix/lib/cmake/prizma/prizmaConfig.cmake" ] || fail "no prizmaConfig.cmake"
[ -f "$prefix/lib/pkgconfig/prizma.pc" ] || fail "no prizma.pc"
[ -x "$prefix/bin/prizma-send" ] || fail "tools not installed in bin/"
if find "$prefix/include" -name '*.hpp' | grep -v '/include/prizma/' | grep -q .; then
    fail "private headers installed: $(find "$prefix/include" -name '*.hpp' | grep -v /prizma/)"
fi
# Every installed header compiles on its own, with nothing but the install's include dir.
for h in "$prefix"/include/prizma/*.hpp; do
    echo "#include <prizma/$(basename "$h")>" | g++ -std=c++20 -fsyntax-only -x c++ \
        -I"$prefix/include" - || fail "$(basename "$h") does not compile alone from the install"
done

echo "== find_package(prizma)"
cmake -S "$src/examples/hello" -B "$tmp/hello-cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/cmake.log" || { cat "$tmp/cmake.log"; fail "configure"; }
cmake --build "$tmp/hello-cmake" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; fail "build"; }
"$tmp/hello-cmake/hello" | tee "$tmp/out1"
grep -q "^10 of 10 received" "$tmp/out1" || fail "find_package hello did not deliver 10"

echo "== a subset: prizma::core + prizma::memory + prizma::udp, without the verbs transport"
mkdir -p "$tmp/subset"
cat >"$tmp/subset/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(subset LANGUAGES CXX)
find_package(prizma REQUIRED)
add_executable(subset subset.cpp)
target_link_libraries(subset PRIVATE prizma::core prizma::memory prizma::udp)
CMAKE
cat >"$tmp/subset/subset.cpp" <<'CPP'
#include <cstdio>
#include <prizma/prizma.hpp>
int main() {
    prizma::TransportRegistry reg;  // only what this program links: mem and udp
    prizma::memory::register_transport(reg);
    prizma::udp::register_transport(reg);
    auto ctx = prizma::Context::create(std::move(reg));
    if (!ctx) {
        return 1;
    }
    auto mem = ctx->add_subscriber("mem://subset:7500");
    auto verbs = ctx->add_subscriber("verbs://rxe0/239.1.1.1:7500");
    std::printf("mem: %s; verbs: %s\n", mem ? "ok" : mem.error().message().c_str(),
                verbs ? "ok" : verbs.error().message().c_str());
    return mem && !verbs && verbs.error() == prizma::Errc::unsupported ? 0 : 1;
}
CPP
cmake -S "$tmp/subset" -B "$tmp/subset/build" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
      >"$tmp/subset.log" || { cat "$tmp/subset.log"; fail "subset configure"; }
cmake --build "$tmp/subset/build" >"$tmp/subset.log" 2>&1 || { cat "$tmp/subset.log"; fail "subset build"; }
"$tmp/subset/build/subset" || fail "the core + memory + udp subset"

echo "== pkg-config prizma"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
pkg-config --modversion prizma
# shellcheck disable=SC2046
g++ -O2 -o "$tmp/hello-pc" "$src/examples/hello/hello.cpp" $(pkg-config --cflags --libs prizma) \
    || fail "pkg-config build"
"$tmp/hello-pc" | tee "$tmp/out2"
grep -q "^10 of 10 received" "$tmp/out2" || fail "pkg-config hello did not deliver 10"
echo "PASS: installed package builds hello with find_package and with pkg-config"
