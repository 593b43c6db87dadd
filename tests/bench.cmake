# Tests of the *_perf tools (bench/): each case runs a tool under the real launcher and
# checks its table against nccl-tests' format and arithmetic (tests/test_bench.sh), and its
# JSON against nccl-tests' document (tests/test_bench_json.py). Run them with
# `ctest -L bench`. Together about 20 s on 2 cores under a load average of 20 (2026-12-07);
# per_iter, alltoallv, more_tools, cycles and the longer json and bad_flags (issue 41) are
# about 7 s of it.
set(RR_BENCH_CASES
  ar_np1 ar_np2 ar_np3 ar_np4 ag_np3 rs_np3 bc_np3 red_np3 sr_np3
  types_ar types_rs types_bcast nocheck bad_flags help json extras corrupt
  per_iter alltoallv more_tools cycles)
foreach(case IN LISTS RR_BENCH_CASES)
  add_test(NAME bench_${case}
    COMMAND bash ${RR_TEST_DIR}/test_bench.sh $<TARGET_FILE:rrun>
            $<TARGET_FILE_DIR:all_reduce_perf> ${case})
  # A worker that fails takes the others down in 2 s, and a hung call fails in 60 s.
  set_tests_properties(bench_${case} PROPERTIES TIMEOUT 120 LABELS bench SKIP_RETURN_CODE 77
    ENVIRONMENT "RR_TIMEOUT=60;RR_GRACE_PERIOD=2")
endforeach()
# bench/compare's statistics (median, spread, flagged rounds, issue 27's verdicts) on made-up
# rounds whose answers are known: no benchmark runs.
find_program(RR_PYTHON3 python3)
if(RR_PYTHON3)
  add_test(NAME bench_compare_stats COMMAND ${RR_PYTHON3} ${RR_TEST_DIR}/test_compare_stats.py)
  set_tests_properties(bench_compare_stats PROPERTIES TIMEOUT 60 LABELS bench)
endif()
