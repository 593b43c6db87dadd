# The GPU commands (tests/gpu/run.sh quick-a, quick-b) checked here without a GPU, in seconds:
# their dry run (RR_GPU_DRY=1: every piece prints its commands) and tests/gpu/report.py's two
# bounds on a made-up run (tests/gpu/fixture). tests/gpu/dry_check.sh says what it checks.
add_test(NAME gpu_run_dry COMMAND bash ${CMAKE_SOURCE_DIR}/tests/gpu/dry_check.sh)
set_tests_properties(gpu_run_dry PROPERTIES LABELS "layout" TIMEOUT 60)
