# Tests of the market-data example (label marketdata). The scripts use Debian's /usr/bin/python3
# and start their own feed and gateway on loopback multicast (iface=127.0.0.1).
find_package(Catch2 2.13 REQUIRED)
add_executable(md_unit_tests ${CMAKE_CURRENT_LIST_DIR}/unit_test.cpp)
target_link_libraries(md_unit_tests PRIVATE md_core md_gateway_parts Catch2::Catch2WithMain
                      $<BUILD_INTERFACE:prizma_warnings> md_no_null_deref_warning)
add_test(NAME marketdata.unit COMMAND md_unit_tests)
set_tests_properties(marketdata.unit PROPERTIES LABELS marketdata TIMEOUT 60)

# --help exits 0, a bad flag exits 2 (the tools' convention).
foreach(tool md-feed md-gateway md-recorder)
    add_test(NAME marketdata.${tool}_usage
             COMMAND sh -c "\"$0\" --help >/dev/null || exit 1
                            \"$0\" --no-such-flag 2>/dev/null; test $? -eq 2" $<TARGET_FILE:${tool}>)
    set_tests_properties(marketdata.${tool}_usage PROPERTIES LABELS marketdata TIMEOUT 30)
endforeach()
# md-feed and md-gateway use the public API only (no lib/, transports/ header).
add_test(NAME marketdata.public_headers_only
         COMMAND sh -c "! grep -rn --include=*.cpp --include=*.hpp '^#include \"\\(lib\\|transports\\)/\\|<prizma/detail' ."
         WORKING_DIRECTORY ${CMAKE_CURRENT_LIST_DIR}/..)
set_tests_properties(marketdata.public_headers_only PROPERTIES LABELS marketdata TIMEOUT 30)

# Real processes on loopback multicast (label integration too): each case has its own group
# (239.192.122.x), free ports and its own Redis, so they share nothing and run in parallel;
# only the http case runs alone (RUN_SERIAL): it holds 10,000 sockets.
set(md_cases reference restart gap http push redis redis_cluster ab recorder address address_race limits redis_auth liveness consistency compat)
foreach(case ${md_cases})
    add_test(NAME marketdata.${case}
             COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/md_test.py ${case}
                     $<TARGET_FILE_DIR:md-gateway>)
    set_tests_properties(marketdata.${case} PROPERTIES LABELS "marketdata;integration" TIMEOUT 240)
endforeach()
set_tests_properties(marketdata.http PROPERTIES RUN_SERIAL TRUE)
add_test(NAME marketdata.demo COMMAND ${CMAKE_CURRENT_LIST_DIR}/../demo.sh $<TARGET_FILE_DIR:md-gateway>)
set_tests_properties(marketdata.demo PROPERTIES LABELS "marketdata;integration" TIMEOUT 120)
# The chart page in headless chromium (selenium): needs scripts/fetch-web-assets.sh's output,
# which scripts/setup-debian.sh makes.
add_test(NAME marketdata.web
         COMMAND /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/web_test.py $<TARGET_FILE_DIR:md-gateway>
                 ${PROJECT_SOURCE_DIR}/build/web-assets)
# Label tree too: its screenshots go to the build tree, so it runs as the tree's owner.
set_tests_properties(marketdata.web PROPERTIES LABELS "marketdata;integration;tree" TIMEOUT 180
                     ENVIRONMENT MD_WEB_ARTEFACTS=${CMAKE_CURRENT_BINARY_DIR}/web-artefacts)
