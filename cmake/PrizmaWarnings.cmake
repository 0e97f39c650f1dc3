# Warning and sanitizer flags, scoped to our own targets through prizma_warnings (never global).
add_library(prizma_warnings INTERFACE)
add_library(prizma::warnings ALIAS prizma_warnings)
target_compile_options(prizma_warnings INTERFACE
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wnon-virtual-dtor
    -Wold-style-cast -Woverloaded-virtual -Wcast-align -Wnull-dereference -Wdouble-promotion
    -Wimplicit-fallthrough -Wformat=2
    $<$<CXX_COMPILER_ID:GNU>:-Wduplicated-cond -Wduplicated-branches -Wlogical-op -Wuseless-cast>)
if(PRIZMA_WARNINGS_AS_ERRORS)
    target_compile_options(prizma_warnings INTERFACE -Werror)
endif()
if(PRIZMA_SANITIZE)
    target_compile_options(prizma_warnings INTERFACE -fsanitize=${PRIZMA_SANITIZE} -fno-omit-frame-pointer
        -fno-sanitize-recover=all)
    target_link_options(prizma_warnings INTERFACE -fsanitize=${PRIZMA_SANITIZE})
endif()
