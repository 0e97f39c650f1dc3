// SPDX-License-Identifier: Apache-2.0
// Catch2 runner for environment-dependent test binaries (UDP multicast, RDMA devices): the
// binary's prizma_probe() decides whether the environment is usable; if not, exit 77 so ctest
// reports the test as skipped (Catch2 2.13 has no SKIP). Built without our warning flags:
// it compiles Catch2's implementation, which trips GCC 12 false positives at -O2.
#define CATCH_CONFIG_RUNNER
#include "tests/support/catch.hpp"

/// Returns 0 when the tests can run, otherwise prints why and returns non-zero.
int prizma_probe();

int main(int argc, char** argv) {
    if (prizma_probe() != 0) {
        return 77;
    }
    return Catch::Session().run(argc, argv);
}
