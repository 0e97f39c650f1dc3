# Debian's OpenPGM (libpgm-dev), looked up once for every user: the interop tests
# (tests/interop) and the bench/compare.sh baseline (bench/compare/pgm_perf.c). Both are C
# programs on the OpenPGM API. Sets OPENPGM_FOUND and the global target PkgConfig::OPENPGM.
include_guard(GLOBAL)
include(CheckLanguage)
check_language(C)
find_package(PkgConfig)
if(CMAKE_C_COMPILER AND PkgConfig_FOUND)
    enable_language(C)
    pkg_check_modules(OPENPGM IMPORTED_TARGET GLOBAL openpgm-5.3)
endif()
