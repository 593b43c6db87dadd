# Shared-memory transport (transport/shm.c): its own tests, then the collective matrix and
# the fault cases again with the transport chosen automatically (shm: all ranks of a test
# share this host).
rr_core_test(test_shm)
set(RR_SHM_ENV "RR_TIMEOUT=60;RR_GRACE_PERIOD=2;RR_TRANSPORT=auto")

# Small slots make every size path and the full-ring waits happen often.
add_test(NAME shm_unit COMMAND test_shm unit)
set_tests_properties(shm_unit PROPERTIES TIMEOUT 120 LABELS "shm"
  ENVIRONMENT "${RR_SHM_ENV};RR_SEG_BYTES=16384")
add_test(NAME shm_unit_default COMMAND test_shm unit)
set_tests_properties(shm_unit_default PROPERTIES TIMEOUT 120 LABELS "shm" ENVIRONMENT "${RR_SHM_ENV}")
# The same with random pauses at every point where a wrong wake-up protocol would lose a
# wake-up (this file's own copy of transport/shm.c, built with RR__SHM_TEST_RACES).
add_executable(test_shm_race ${RR_TEST_DIR}/test_shm.c ${CMAKE_SOURCE_DIR}/transport/shm.c)
target_compile_definitions(test_shm_race PRIVATE RR__SHM_TEST_RACES)
target_link_libraries(test_shm_race PRIVATE rrtest)
add_test(NAME shm_unit_races COMMAND test_shm_race unit)
set_tests_properties(shm_unit_races PROPERTIES TIMEOUT 300 LABELS "shm"
  ENVIRONMENT "${RR_SHM_ENV};RR_SEG_BYTES=16384")
foreach(m shm tcp hostid)
  if(m STREQUAL "tcp")
    set(env "RR_TIMEOUT=60;RR_GRACE_PERIOD=2;RR_TRANSPORT=tcp")
  else()
    set(env "${RR_SHM_ENV}")
  endif()
  add_test(NAME shm_select_${m} COMMAND test_shm select ${m})
  set_tests_properties(shm_select_${m} PROPERTIES TIMEOUT 120 LABELS "shm" ENVIRONMENT "${env}")
endforeach()
add_test(NAME shm_kill COMMAND test_shm kill)
set_tests_properties(shm_kill PROPERTIES TIMEOUT 120 LABELS "shm" ENVIRONMENT "${RR_SHM_ENV}")
add_test(NAME shm_leak COMMAND test_shm leak)
set_tests_properties(shm_leak PROPERTIES TIMEOUT 300 LABELS "shm" ENVIRONMENT "${RR_SHM_ENV}")

# The collective matrix over shm.
foreach(coll all_reduce reduce_scatter all_gather broadcast reduce gather scatter all_to_all
             all_to_allv sendrecv barrier)
  foreach(w 2 3 4 8)
    add_test(NAME shm_coll_${coll}_w${w} COMMAND test_coll ${coll} ${w})
    set_tests_properties(shm_coll_${coll}_w${w} PROPERTIES TIMEOUT 300 LABELS "shm;coll"
      ENVIRONMENT "${RR_SHM_ENV}")
  endforeach()
endforeach()
# Tiny segments (so slots of 4 KiB), two slots, and more sockets asked for (shm keeps one
# lane): messages cut over slots, rings full all the time.
foreach(coll all_reduce reduce_scatter all_gather broadcast reduce gather scatter all_to_all
             all_to_allv sendrecv)
  add_test(NAME shm_coll_${coll}_small_w5 COMMAND test_coll ${coll} 5)
  set_tests_properties(shm_coll_${coll}_small_w5 PROPERTIES TIMEOUT 300 LABELS "shm;coll"
    ENVIRONMENT "${RR_SHM_ENV};RR_NSOCKS=2;RR_SEG_BYTES=4096;RR_SLOTS=2")
endforeach()
foreach(algo ring rd)
  add_test(NAME shm_coll_all_reduce_${algo}_small_w3 COMMAND test_coll all_reduce 3)
  set_tests_properties(shm_coll_all_reduce_${algo}_small_w3 PROPERTIES TIMEOUT 300 LABELS "shm;coll"
    ENVIRONMENT "${RR_SHM_ENV};RR_NSOCKS=2;RR_SEG_BYTES=4096;RR_SLOTS=2;RR_ALGO=${algo}")
endforeach()
# 64 MiB buffers.
foreach(coll all_reduce reduce_scatter all_gather broadcast reduce gather scatter all_to_all
             all_to_allv sendrecv)
  add_test(NAME shm_coll_${coll}_64MiB_w4 COMMAND test_coll ${coll} 4 large)
  set_tests_properties(shm_coll_${coll}_64MiB_w4 PROPERTIES TIMEOUT 300 LABELS "shm;coll;large"
    ENVIRONMENT "${RR_SHM_ENV}")
endforeach()
# Faults over shm: a killed rank, mismatched calls (found by peeking at headers).
foreach(s kill9 mismatch destroy_early abort)
  set(exe test_fault)
  if(s STREQUAL "mismatch")
    set(exe test_fault_args)
  endif()
  add_test(NAME shm_fault_${s} COMMAND ${exe} ${s})
  set_tests_properties(shm_fault_${s} PROPERTIES TIMEOUT 120 LABELS "shm;fault"
    ENVIRONMENT "RR_TIMEOUT=30;RR_GRACE_PERIOD=2;RR_TRANSPORT=auto")
endforeach()
