# Tests of the rrun launcher (tools/rrun*.c). tests/test_rrun.sh runs one case per CTest test,
# with tests/helpers/rrun_helper.c as the worker program. Run them with `ctest -L rrun`.
add_executable(rrun_helper ${RR_TEST_DIR}/helpers/rrun_helper.c)
# A worker that joins the job and checks an all-reduce (the two-node case).
add_executable(rrun_allreduce ${RR_TEST_DIR}/helpers/rrun_allreduce.c)
target_link_libraries(rrun_allreduce PRIVATE ringreduce)
target_include_directories(rrun_allreduce PRIVATE ${PROJECT_SOURCE_DIR}) # tests/test_port.h
# A worker whose rank DEAD dies during the group's setup, and a writer of rrun's notices with
# any token (the setup_death cases).
add_executable(rrun_setup_death ${RR_TEST_DIR}/helpers/rrun_setup_death.c)
target_link_libraries(rrun_setup_death PRIVATE ringreduce)
add_executable(rrun_notice_forge ${RR_TEST_DIR}/helpers/rrun_notice_forge.c)
target_link_libraries(rrun_notice_forge PRIVATE ringreduce_internal)
# So that building the rrun target is enough before `ctest -L rrun`.
add_dependencies(rrun rrun_helper rrun_allreduce rrun_setup_death rrun_notice_forge)

set(RRUN_TEST_CASES
  env_nproc1 env_nproc4 env_multinode underscores standalone
  fail_stops_others keep_going grace_kill process_group rrun_killed rrun_killed_grandchild keeper_pid_reuse stopped_worker
  fd_exhaustion fd_exhaustion_setup signalled exec_fail signals
  tee tee_modes tee_stalled_reader leftover_writer no_zombies restart bad_flags bind_to two_nodes_local
  setup_death setup_death_rank0 setup_death_published setup_death_forged)
foreach(case IN LISTS RRUN_TEST_CASES)
  add_test(NAME rrun_${case}
    COMMAND bash ${RR_TEST_DIR}/test_rrun.sh $<TARGET_FILE:rrun> $<TARGET_FILE:rrun_helper> ${case}
      $<TARGET_FILE:rrun_allreduce> $<TARGET_FILE:rrun_setup_death>
      $<TARGET_FILE:rrun_notice_forge>)
  # 77: the case needs something this machine lacks (a usable 127.0.0.1).
  set_tests_properties(rrun_${case} PROPERTIES TIMEOUT 60 LABELS rrun SKIP_RETURN_CODE 77)
endforeach()
# fd_exhaustion and fd_exhaustion_setup start real groups without --standalone, each on a
# random port of its own (job_port in test_rrun.sh), not rrun's default 29500.

# rrun --bind-to's plan on machine shapes this one is not (tools/rrun_bind.c, linked alone).
add_executable(test_rrun_bind ${RR_TEST_DIR}/test_rrun_bind.c ${PROJECT_SOURCE_DIR}/tools/rrun_bind.c)
add_test(NAME rrun_bind_plan COMMAND test_rrun_bind)
set_tests_properties(rrun_bind_plan PROPERTIES TIMEOUT 60 LABELS rrun)
