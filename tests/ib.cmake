# InfiniBand transport (transport/ib/) on the fake verbs library (tests/fake_ib/), which the
# library loads through RR_IB_LIBRARY in place of libibverbs.so.1. docs/ib.md says what the
# fake proves and what it cannot.
if(NOT RR_HAVE_VERBS_H)
  return() # no verbs header: the library has no ib transport to test (transport/ib/absent.c)
endif()
add_library(fakeibverbs SHARED ${RR_TEST_DIR}/fake_ib/fake_ibverbs.c)
set_target_properties(fakeibverbs PROPERTIES C_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
target_link_libraries(fakeibverbs PRIVATE Threads::Threads)
set(RR_FAKE_IB $<TARGET_FILE:fakeibverbs>)
set(RR_IB_ENV "RR_TIMEOUT=60;RR_GRACE_PERIOD=2;RR_TRANSPORT=ib;RR_IB_LIBRARY=${RR_FAKE_IB}")

add_executable(test_ib ${RR_TEST_DIR}/test_ib.c)
target_link_libraries(test_ib PRIVATE rrtest)
add_dependencies(test_ib fakeibverbs)

# The collective matrix over ib (every pair forced onto verbs, RR_TRANSPORT=ib).
foreach(coll all_reduce reduce_scatter all_gather broadcast reduce gather scatter all_to_all
             all_to_allv sendrecv barrier)
  foreach(w 2 4)
    add_test(NAME ib_coll_${coll}_w${w} COMMAND test_coll ${coll} ${w})
    set_tests_properties(ib_coll_${coll}_w${w} PROPERTIES TIMEOUT 300 LABELS "ib;coll"
      ENVIRONMENT "${RR_IB_ENV}")
  endforeach()
endforeach()
foreach(w 3 5)
  add_test(NAME ib_coll_all_reduce_w${w} COMMAND test_coll all_reduce ${w})
  set_tests_properties(ib_coll_all_reduce_w${w} PROPERTIES TIMEOUT 300 LABELS "ib;coll"
    ENVIRONMENT "${RR_IB_ENV}")
endforeach()
# Eight ranks: 28 queue pairs between 8 processes (all-to-all uses every one of them).
foreach(coll all_reduce all_to_all)
  add_test(NAME ib_coll_${coll}_w8 COMMAND test_coll ${coll} 8)
  set_tests_properties(ib_coll_${coll}_w8 PROPERTIES TIMEOUT 300 LABELS "ib;coll"
    ENVIRONMENT "${RR_IB_ENV}")
endforeach()
# Tiny slot rings: 4 KiB slots, 2 of them, so every message is cut over slots, the slot
# index and the immediate's 9-bit segment number wrap many times and every send waits for
# credit.
foreach(coll all_reduce all_to_allv sendrecv)
  add_test(NAME ib_coll_${coll}_tiny_w3 COMMAND test_coll ${coll} 3)
  set_tests_properties(ib_coll_${coll}_tiny_w3 PROPERTIES TIMEOUT 300 LABELS "ib;coll"
    ENVIRONMENT "${RR_IB_ENV};RR_SEG_BYTES=4096;RR_SLOTS=2;RR_ALGO=ring")
endforeach()

add_test(NAME ib_hca COMMAND test_ib hca)
set_tests_properties(ib_hca PROPERTIES TIMEOUT 30 LABELS "ib")
# Automatic choice: shm inside a "host", ib between (RR_TRANSPORT=auto).
add_test(NAME ib_auto COMMAND test_ib auto)
set_tests_properties(ib_auto PROPERTIES TIMEOUT 240 LABELS "ib"
  ENVIRONMENT "RR_TIMEOUT=60;RR_TRANSPORT=auto;RR_IB_LIBRARY=${RR_FAKE_IB}")
add_test(NAME ib_roce COMMAND test_ib roce)
set_tests_properties(ib_roce PROPERTIES TIMEOUT 240 LABELS "ib" ENVIRONMENT "${RR_IB_ENV}")
# No usable port: tcp, and the log says why. The real libibverbs (no device here), a
# missing library, the fake with its port down; and RR_TRANSPORT=ib refusing to start.
add_test(NAME ib_fallback_real COMMAND test_ib fallback "found no RDMA device")
set_tests_properties(ib_fallback_real PROPERTIES TIMEOUT 120 LABELS "ib"
  ENVIRONMENT "RR_TIMEOUT=60;RR_TRANSPORT=auto")
add_test(NAME ib_fallback_nolib COMMAND test_ib fallback "cannot load /nonexistent/libibverbs.so.1")
set_tests_properties(ib_fallback_nolib PROPERTIES TIMEOUT 120 LABELS "ib"
  ENVIRONMENT "RR_TIMEOUT=60;RR_TRANSPORT=auto;RR_IB_LIBRARY=/nonexistent/libibverbs.so.1")
add_test(NAME ib_fallback_port_down COMMAND test_ib fallback "is not ACTIVE")
set_tests_properties(ib_fallback_port_down PROPERTIES TIMEOUT 120 LABELS "ib"
  ENVIRONMENT "RR_TIMEOUT=60;RR_TRANSPORT=auto;RR_IB_LIBRARY=${RR_FAKE_IB};RR_FAKE_IB_FAULT=port_down")
add_test(NAME ib_forced_nolib COMMAND test_ib fallback "-")
set_tests_properties(ib_forced_nolib PROPERTIES TIMEOUT 120 LABELS "ib"
  ENVIRONMENT "RR_TIMEOUT=60;RR_TRANSPORT=ib;RR_IB_LIBRARY=/nonexistent/libibverbs.so.1")
# Injected faults on rank 1: every rank fails, naming the cause, well inside the limit.
# RR_TIMEOUT=8: mute is caught by the fake's 2 s ACK timeout when a rank has writes
# outstanding to the silent one, else by the call timeout (test_ib.c).
foreach(kind retry flush rkey mute link_down)
  add_test(NAME ib_fault_${kind} COMMAND test_ib fault ${kind})
  set_tests_properties(ib_fault_${kind} PROPERTIES TIMEOUT 120 LABELS "ib;fault"
    ENVIRONMENT "${RR_IB_ENV};RR_TIMEOUT=8;RR_FAKE_IB_ACK_TIMEOUT_MS=2000")
endforeach()
add_test(NAME ib_fault_kill9 COMMAND test_fault kill9)
set_tests_properties(ib_fault_kill9 PROPERTIES TIMEOUT 120 LABELS "ib;fault"
  ENVIRONMENT "${RR_IB_ENV};RR_TIMEOUT=30")

# Between network namespaces (tests/netns.sh; root and `ip netns`, else skipped): each rank
# is its own "host", RR_TRANSPORT=auto picks ib for every pair on the fake.
foreach(w 3 4)
  add_test(NAME ib_netns_w${w} COMMAND bash ${RR_TEST_DIR}/netns.sh $<TARGET_FILE:netns_rank> ib ${w})
  set_tests_properties(ib_netns_w${w} PROPERTIES TIMEOUT 150 LABELS "ib;netns" SKIP_RETURN_CODE 77
    ENVIRONMENT "RR_TIMEOUT=60;RR_IB_LIBRARY=${RR_FAKE_IB}")
endforeach()

# Device buffers over verbs (the host fake of CUDA beside the fake verbs library): the ring
# kinds take the piped path (ring/pipe_dev.c: pinned slots on the wire, the GPU kernel
# reducing; RR_TEST_EXPECT_PIPED=1 checks every call did), 16 KiB segments, world 3, the lean
# matrix (the transport differs, not the arithmetic: tests/cuda.cmake, coll_piped_seg16k_w3).
add_test(NAME cudafake.coll_piped_ib_w3 COMMAND test_cuda --fake coll 3)
set_tests_properties(cudafake.coll_piped_ib_w3 PROPERTIES TIMEOUT 240 LABELS "cudafake;ib"
  ENVIRONMENT "${RR_IB_ENV};RR_TIMEOUT=120;RR_SEG_BYTES=16384;RR_TEST_EXPECT_IPC=0;RR_TEST_EXPECT_PIPED=1;RR_TEST_MATRIX=lean")
