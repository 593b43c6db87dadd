# rr_spawn (group/spawn.c), torch.multiprocessing.spawn in C: success, and each failure path —
# a non-zero return stops the others with SIGTERM, SIGKILL after RR_GRACE_PERIOD for one
# that ignores SIGTERM, death by a signal, return values outside 0..255, and children of the
# caller that rr_spawn must not reap, and the store's port held from before the workers
# start (store_listener). Each case sets RR_GRACE_PERIOD and RR_TIMEOUT itself.
add_executable(test_spawn ${RR_TEST_DIR}/test_spawn.c)
target_link_libraries(test_spawn PRIVATE rrtest)
foreach(t success fail_code grace_kill signal exit_codes unrelated_child store_listener)
  add_test(NAME spawn.${t} COMMAND test_spawn ${t})
  set_tests_properties(spawn.${t} PROPERTIES LABELS "core;spawn" TIMEOUT 60)
endforeach()
