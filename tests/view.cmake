# RR_TRACE=<file> and tools/ringreduce-view (docs/ring.md, "See the ring").
# view_trace runs the library (every algorithm writing its JSON lines, 2 to 16 ranks), so it
# stays in the sanitizer passes; the other two test the Python tool and the page alone
# (label "view"; tests/run.sh leaves that label out of the ASan and TSan passes).
add_test(NAME view_trace COMMAND bash ${RR_TEST_DIR}/test_view_trace.sh $<TARGET_FILE:rrun>
  $<TARGET_FILE:ring_demo> ${PROJECT_SOURCE_DIR}/tools/ringreduce-view)
set_tests_properties(view_trace PROPERTIES TIMEOUT 180 LABELS "core;trace")
add_test(NAME view_errors COMMAND bash ${RR_TEST_DIR}/test_view_errors.sh
  ${PROJECT_SOURCE_DIR}/tools/ringreduce-view ${RR_TEST_DIR}/data/view/ring4.jsonl)
set_tests_properties(view_errors PROPERTIES TIMEOUT 60 LABELS "view")
# Headless Chromium (tools/deps.sh installs Debian's); skipped (77) where there is none.
add_test(NAME view_browser COMMAND bash ${RR_TEST_DIR}/test_view_browser.sh $<TARGET_FILE:rrun>
  $<TARGET_FILE:ring_demo> ${PROJECT_SOURCE_DIR}/tools/ringreduce-view ${CMAKE_BINARY_DIR}/view-shots)
set_tests_properties(view_browser PROPERTIES TIMEOUT 300 LABELS "view" SKIP_RETURN_CODE 77)
# The lesson's pages from one command (the benchmark half needs root and a minute: not here).
add_test(NAME view_lesson COMMAND bash ${PROJECT_SOURCE_DIR}/tools/lesson.sh --no-bench
  --build ${CMAKE_BINARY_DIR} --out ${CMAKE_BINARY_DIR}/lesson)
set_tests_properties(view_lesson PROPERTIES TIMEOUT 60 LABELS "view"
  PASS_REGULAR_EXPRESSION "ring: buffer S = 32 B; rank 0: 48 B out / 48 B in.*star: buffer S = 32 B; rank 0: 96 B out / 96 B in.*file://.*/ring.html.*file://.*/star.html")
