# Tests of the ExecLog example (label execlog; the big trial counts under long). Real processes
# over UDP multicast on a loopback of their own (test/execlog_test.py re-runs itself under
# `unshare -n`, so that the second core has its own address, 127.0.0.2, and no other test's
# traffic is heard; each case has its own group where it cannot); /usr/bin/python3 checks the
# results with its own reference model. Label integration too; they share nothing, so they
# run in parallel with the other tests, but one ExecLog case at a time (CPU: see below).
set(EXECLOG_BIN $<TARGET_FILE_DIR:execlog-core>)
set(EXECLOG_TEST ${CMAKE_CURRENT_LIST_DIR}/execlog_test.py)

# --help exits 0, a bad flag exits 2 (the tools' convention).
foreach(p ${EXECLOG_PROGRAMS})
    add_test(NAME execlog.${p}_usage
             COMMAND sh -c "\"$0\" --help >/dev/null || exit 1
                            \"$0\" --no-such-flag 2>/dev/null; test $? -eq 2" $<TARGET_FILE:${p}>)
    set_tests_properties(execlog.${p}_usage PROPERTIES LABELS execlog TIMEOUT 30)
endforeach()
# The example uses prizma's public API only: no lib/, transports/ or other private header.
add_test(NAME execlog.public_headers_only
         COMMAND sh -c "! grep -rn --include=*.cpp --include=*.hpp '^#include [\"<]\\(lib\\|transports\\|pgm\\|protocol\\|pubsub\\|runtime\\|posix\\)/\\|<prizma/detail' ."
         WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR}/..)
set_tests_properties(execlog.public_headers_only PROPERTIES LABELS execlog TIMEOUT 30)

# name, trials in CI, trials under long
set(EXECLOG_CASES consistency 1 10 kill_core 1 20 kill_consumers 1 20 kill_archiver 1 20 sigstop 1 10
    loss 1 10 loss_netns 1 10 order_file 1 0 bad_orders 1 0 unknown_type 1 0 divergence 1 0
    stale_epoch 1 0 silent_tail 1 5 order_limits 1 0 fix_sessions 1 5
    session_end_guard 1 5 divergence_active 1 0 divergence_continue 1 0
    divergence_quorum 1 0 divergence_majority 1 0)
list(LENGTH EXECLOG_CASES n)
math(EXPR last "${n} - 1")
foreach(i RANGE 0 ${last} 3)
    math(EXPR j "${i} + 1")
    math(EXPR k "${i} + 2")
    list(GET EXECLOG_CASES ${i} case)
    list(GET EXECLOG_CASES ${j} ci)
    list(GET EXECLOG_CASES ${k} long)
    if(ci GREATER 0)
        add_test(NAME execlog.${case} COMMAND /usr/bin/python3 ${EXECLOG_TEST} ${case} ${EXECLOG_BIN}
                                              --trials ${ci})
        # One case at a time (RESOURCE_LOCK; other tests still run beside it): each is a
        # system of six or seven ASan processes on one host, whose receivers share one NAK
        # requester address. Two at once on 2 vCPUs made NAK storms that failed 1 to 2
        # cases per run (docs/EXECLOG.md, "Known problems").
        set_tests_properties(execlog.${case} PROPERTIES LABELS "execlog;integration" TIMEOUT 180
                             SKIP_RETURN_CODE 77 RESOURCE_LOCK execlog_host)
    endif()
    if(long GREATER 0)
        add_test(NAME long.execlog_${case}
                 COMMAND /usr/bin/python3 ${EXECLOG_TEST} ${case} ${EXECLOG_BIN} --trials ${long})
        set_tests_properties(long.execlog_${case} PROPERTIES LABELS long TIMEOUT 1800
                             RUN_SERIAL TRUE SKIP_RETURN_CODE 77)
    endif()
endforeach()
add_test(NAME execlog.demo COMMAND ${CMAKE_CURRENT_LIST_DIR}/../demo.sh ${EXECLOG_BIN})
set_tests_properties(execlog.demo PROPERTIES LABELS "execlog;integration" TIMEOUT 120
                     RESOURCE_LOCK execlog_host)

# The parts, in one process: the state-file writer, the engine's limits, the FIX numbers and
# the FIX file's recovery (test/unit_test.cpp).
find_package(Catch2 2.13 REQUIRED)
add_executable(execlog_unit_tests ${CMAKE_CURRENT_LIST_DIR}/unit_test.cpp)
target_link_libraries(execlog_unit_tests PRIVATE execlog_common execlog_quickfix Catch2::Catch2WithMain
                      $<BUILD_INTERFACE:prizma_warnings>)
set_target_properties(execlog_unit_tests PROPERTIES CXX_EXTENSIONS OFF)
# The metrics table of the docs, compared with the programs' (execlog::kMetricFamilies).
target_compile_definitions(execlog_unit_tests PRIVATE
                           EXECLOG_DOC="${PROJECT_SOURCE_DIR}/docs/EXECLOG.md")
add_test(NAME execlog.unit COMMAND execlog_unit_tests)
set_tests_properties(execlog.unit PROPERTIES LABELS execlog TIMEOUT 60)

# The firms' side of execlog.fix_sessions: a QuickFIX initiator that cracks every message with
# QuickFIX's FIX 4.4 classes (test/fix_client.cpp; C++14 like execlog/fix_acceptor.cpp).
add_executable(execlog-fix-client ${CMAKE_CURRENT_LIST_DIR}/fix_client.cpp)
target_include_directories(execlog-fix-client SYSTEM PRIVATE ${QUICKFIX_INCLUDE_DIR})
target_link_libraries(execlog-fix-client PRIVATE ${QUICKFIX_LIBRARY} $<BUILD_INTERFACE:prizma_warnings>)
set_target_properties(execlog-fix-client PROPERTIES CXX_STANDARD 14 CXX_STANDARD_REQUIRED ON
                      CXX_EXTENSIONS OFF)
add_dependencies(execlog execlog-fix-client)
