# Core tests: the collective matrix over world sizes 1-8, algorithms and lanes, process
# groups, faults and bad input. Every test is a real multi-process run on loopback.
add_library(rrtest STATIC ${RR_TEST_DIR}/harness.c)
target_link_libraries(rrtest PUBLIC ringreduce_internal m)
target_include_directories(rrtest PUBLIC ${CMAKE_SOURCE_DIR})

function(rr_core_test name)
  add_executable(${name} ${RR_TEST_DIR}/${name}.c)
  target_link_libraries(${name} PRIVATE rrtest)
endfunction()
rr_core_test(test_coll)

# A call that hangs must fail inside the library (RR_TIMEOUT) before CTest's limit.
# This matrix pins the TCP transport (ranks on one host would otherwise pair over shared
# memory); tests/shm.cmake runs the same matrix over shm.
set(RR_TEST_ENV "RR_TIMEOUT=60;RR_GRACE_PERIOD=2;RR_TRANSPORT=tcp")

foreach(coll all_reduce reduce_scatter all_gather broadcast reduce gather scatter all_to_all
             all_to_allv sendrecv barrier)
  foreach(w 1 2 3 4 5 6 7 8)
    add_test(NAME coll_${coll}_w${w} COMMAND test_coll ${coll} ${w})
    set_tests_properties(coll_${coll}_w${w} PROPERTIES TIMEOUT 300 LABELS "core;coll"
      ENVIRONMENT "${RR_TEST_ENV}")
  endforeach()
endforeach()

# Both all-reduce algorithms on every size and world (auto picks by size), and the
# pipeline under stress: three lanes, tiny segments, two slots.
foreach(algo ring rd)
  foreach(w 2 3 5 7 8)
    add_test(NAME coll_all_reduce_${algo}_w${w} COMMAND test_coll all_reduce ${w})
    set_tests_properties(coll_all_reduce_${algo}_w${w} PROPERTIES TIMEOUT 300 LABELS "core;coll"
      ENVIRONMENT "${RR_TEST_ENV};RR_ALGO=${algo}")
  endforeach()
endforeach()
# The parameter-server baseline of bench/scaling, over sockets and over shared memory.
foreach(w 2 3 5)
  add_test(NAME coll_all_reduce_star_w${w} COMMAND test_coll all_reduce ${w})
  set_tests_properties(coll_all_reduce_star_w${w} PROPERTIES TIMEOUT 300 LABELS "core;coll"
    ENVIRONMENT "${RR_TEST_ENV};RR_ALGO=star;RR_TRANSPORT=tcp")
  add_test(NAME coll_all_reduce_star_shm_w${w} COMMAND test_coll all_reduce ${w})
  set_tests_properties(coll_all_reduce_star_shm_w${w} PROPERTIES TIMEOUT 300 LABELS "core;coll"
    ENVIRONMENT "${RR_TEST_ENV};RR_ALGO=star")
endforeach()
foreach(coll all_reduce reduce_scatter all_gather broadcast reduce gather scatter all_to_all
             all_to_allv sendrecv)
  add_test(NAME coll_${coll}_lanes_w5 COMMAND test_coll ${coll} 5)
  set_tests_properties(coll_${coll}_lanes_w5 PROPERTIES TIMEOUT 300 LABELS "core;coll"
    ENVIRONMENT "${RR_TEST_ENV};RR_NSOCKS=3;RR_SEG_BYTES=4096;RR_SLOTS=2;RR_ALGO=ring")
endforeach()

# Which socket carries which bytes (tests/test_lanes.c): one-way lanes spread over RR_NSOCKS/2
# sockets each way (an odd last one unused), one two-way socket with RR_NSOCKS=1.
rr_core_test(test_lanes)
foreach(cfg w2_n4 w3_n4 w2_n3 w3_n2 w2_n1 w3_n1)
  string(REGEX MATCH "w([0-9]+)_n([0-9]+)" _ ${cfg})
  add_test(NAME tcp_lanes_${cfg} COMMAND test_lanes ${CMAKE_MATCH_1})
  set_tests_properties(tcp_lanes_${cfg} PROPERTIES TIMEOUT 120 LABELS "core;coll"
    ENVIRONMENT "${RR_TEST_ENV};RR_ALGO=ring;RR_NSOCKS=${CMAKE_MATCH_2}")
endforeach()

# 64 MiB buffers.
foreach(coll all_reduce reduce_scatter all_gather broadcast reduce gather scatter all_to_all
             all_to_allv sendrecv)
  add_test(NAME coll_${coll}_64MiB_w4 COMMAND test_coll ${coll} 4 large)
  set_tests_properties(coll_${coll}_64MiB_w4 PROPERTIES TIMEOUT 300 LABELS "core;coll;large"
    ENVIRONMENT "${RR_TEST_ENV}")
endforeach()
foreach(w 2 3 8)
  add_test(NAME coll_all_reduce_64MiB_w${w} COMMAND test_coll all_reduce ${w} large)
  set_tests_properties(coll_all_reduce_64MiB_w${w} PROPERTIES TIMEOUT 300 LABELS "core;coll;large"
    ENVIRONMENT "${RR_TEST_ENV}")
endforeach()

# Bad input and faults: every rank gets a status and a message naming the rank and the
# cause, within a bounded time.
rr_core_test(test_fault)
rr_core_test(test_fault_args)
foreach(s invalid_args mismatch role_args coll_args transport_mismatch late_rank kill9 timeout
          wait_timeout destroy_early abort abort_destroy duplicate_rank world_mismatch port_in_use unreachable
          env_errors env_params env_transport env_debug env_ranges)
  set(exe test_fault)
  if(s MATCHES "^(invalid_args|mismatch|role_args|coll_args)$")
    set(exe test_fault_args)
  endif()
  add_test(NAME fault_${s} COMMAND ${exe} ${s})
  set_tests_properties(fault_${s} PROPERTIES TIMEOUT 120 LABELS "core;fault"
    ENVIRONMENT "RR_TIMEOUT=30;RR_GRACE_PERIOD=2;RR_TRANSPORT=tcp")
endforeach()
# The barrier race of issue 22: 40 trials at 4 ranks, sleeping at once in every wait (no
# spinning widens the window in which an abort can overtake a rank leaving the barrier).
add_test(NAME fault_role_race COMMAND test_fault_args role_race)
set_tests_properties(fault_role_race PROPERTIES TIMEOUT 180 LABELS "core;fault"
  ENVIRONMENT "RR_TIMEOUT=30;RR_GRACE_PERIOD=2;RR_SPIN_US=0")
# A broadcast beside an all_reduce (issue 38): each rank's message names both calls as the
# ranks made them, never the completion notice one of them was waiting for; tcp and shm.
rr_core_test(test_mismatch_kind)
add_test(NAME fault_mismatch_kind COMMAND test_mismatch_kind bcast_all_reduce)
set_tests_properties(fault_mismatch_kind PROPERTIES TIMEOUT 120 LABELS "core;fault"
  ENVIRONMENT "RR_TIMEOUT=30;RR_GRACE_PERIOD=2;RR_TRANSPORT=tcp")
add_test(NAME fault_mismatch_kind_shm COMMAND test_mismatch_kind bcast_all_reduce)
set_tests_properties(fault_mismatch_kind_shm PROPERTIES TIMEOUT 120 LABELS "core;fault"
  ENVIRONMENT "RR_TIMEOUT=30;RR_GRACE_PERIOD=2;RR_TRANSPORT=shm")

# Wire formats and the token PRF.
rr_core_test(test_wire)
add_test(NAME wire_formats COMMAND test_wire)
set_tests_properties(wire_formats PROPERTIES TIMEOUT 60 LABELS "core;wire")

# RR_TRACE=1 on the example that docs/ring.md walks through.
add_test(NAME trace_ring_demo COMMAND bash ${RR_TEST_DIR}/test_trace.sh $<TARGET_FILE:rrun> $<TARGET_FILE:ring_demo>)
set_tests_properties(trace_ring_demo PROPERTIES TIMEOUT 60 LABELS "core;trace")
