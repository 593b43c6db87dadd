# Receives from any rank (RR_ANY_SOURCE, rr_recv_any, rr_work_source): tests/test_p2p_any.c.
# Each scenario is its own set of processes with a time limit; the group's deadline
# (RR_TIMEOUT) is well below it, so a hang fails inside the library with a message. Ranks on
# one host pair over shared memory by default; the _tcp entries force sockets.
add_executable(test_p2p_any ${RR_TEST_DIR}/test_p2p_any.c)
target_link_libraries(test_p2p_any PRIVATE rrtest rr_fake_cuda)

function(rr_p2p_test name env)
  add_test(NAME ${name} COMMAND test_p2p_any ${ARGN})
  set_tests_properties(${name} PROPERTIES TIMEOUT 180 LABELS "core;p2p" SKIP_RETURN_CODE 77
    ENVIRONMENT "RR_TIMEOUT=60;RR_GRACE_PERIOD=2${env}")
endfunction()

foreach(w 2 3 4)
  rr_p2p_test(p2p_any_gather_w${w} "" gather ${w})
  rr_p2p_test(p2p_any_gather_tcp_w${w} ";RR_TRANSPORT=tcp" gather ${w})
endforeach()
foreach(s order fair)
  rr_p2p_test(p2p_any_${s}_w4 "" ${s} 4)
  rr_p2p_test(p2p_any_${s}_tcp_w4 ";RR_TRANSPORT=tcp" ${s} 4)
endforeach()
foreach(s mismatch_count mismatch_dtype invalid)
  rr_p2p_test(p2p_any_${s}_w3 "" ${s} 3)
endforeach()
rr_p2p_test(p2p_any_mismatch_count_tcp_w2 ";RR_TRANSPORT=tcp" mismatch_count 2)
# The receive's own deadline is 0.7 s (rr_pg_set_timeout); RR_TIMEOUT bounds the rest.
rr_p2p_test(p2p_any_timeout_w3 "" timeout 3)
rr_p2p_test(p2p_any_timeout_tcp_w3 ";RR_TRANSPORT=tcp" timeout 3)
rr_p2p_test(p2p_any_timeout_async_w2 "" timeout_async 2)
# A sender that dies, and rr_abort, end the wait at once (RR_TIMEOUT is 60 s).
rr_p2p_test(p2p_any_dies_w3 "" dies 3)
rr_p2p_test(p2p_any_dies_tcp_w3 ";RR_TRANSPORT=tcp" dies 3)
rr_p2p_test(p2p_any_abort_w3 "" abort 3)
# Device and managed buffers are refused: on the host fake of CUDA everywhere (label
# cudafake, as tests/cuda.cmake), and on a GPU where there is one (77 elsewhere).
rr_p2p_test(cudafake.p2p_any_device_w2 "" --fake device 2)
set_tests_properties(cudafake.p2p_any_device_w2 PROPERTIES LABELS "cudafake;p2p")
rr_p2p_test(cuda_p2p_any_device_w2 "" device 2)
set_tests_properties(cuda_p2p_any_device_w2 PROPERTIES LABELS "cuda;p2p")
# Over InfiniBand, on the fake verbs library (tests/ib.cmake): the sender is found by peeking
# at the verbs lane's receive ring.
if(TARGET fakeibverbs)
  foreach(c gather:3 order:4 fair:4 timeout:3)
    string(REPLACE ":" ";" cw ${c})
    list(GET cw 0 s)
    list(GET cw 1 w)
    add_test(NAME ib_p2p_any_${s}_w${w} COMMAND test_p2p_any ${s} ${w})
    set_tests_properties(ib_p2p_any_${s}_w${w} PROPERTIES TIMEOUT 180 LABELS "ib;p2p"
      ENVIRONMENT "${RR_IB_ENV}")
  endforeach()
endif()
