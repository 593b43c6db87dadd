# The one-kernel form for ranks that share a GPU (group/direct.c; issue 39 part 2): on the fake
# (label cudafake, every CI pass) and, where there is a GPU, on it (label cuda: every rank
# shares the machine's GPU 0 ... LOCAL_RANK modulo the devices; skipped with 77 without one).
add_executable(test_cuda_direct ${RR_TEST_DIR}/test_cuda_direct.c)
target_link_libraries(test_cuda_direct PRIVATE rrtest rr_fake_cuda)
function(rr_direct_test name env)
  add_test(NAME cudafake.direct_${name} COMMAND test_cuda_direct --fake ${ARGN})
  set_tests_properties(cudafake.direct_${name} PROPERTIES LABELS "cudafake" TIMEOUT 180
    ENVIRONMENT "RR_TIMEOUT=60;RR_GRACE_PERIOD=2;${env}")
endfunction()
# Every rank on one fake GPU: every call with elements runs as one kernel (world 1: none).
rr_direct_test(coll_w1 "RR_TEST_FAKE_DEVICES=1;RR_TEST_EXPECT_DIRECT=0" coll 1)
foreach(w 2 3 4)
  rr_direct_test(coll_w${w} "RR_TEST_FAKE_DEVICES=1;RR_TEST_EXPECT_DIRECT=1" coll ${w})
endforeach()
# Ranks on two GPUs (0, 1, 0): the ring over CUDA IPC, none as one kernel; and the form off.
rr_direct_test(mixed_w3 "RR_TEST_FAKE_DEVICES=2;RR_TEST_EXPECT_DIRECT=0" coll 3)
rr_direct_test(off_w2 "RR_TEST_FAKE_DEVICES=1;RR_CUDA_DIRECT=0;RR_TEST_EXPECT_DIRECT=0" coll 2)
# Its size bound (RR_CUDA_DIRECT_BYTES, docs/cuda.md "Which form, by size"): 16396 bytes is a
# float32 all_reduce of 4099 elements exactly: calls at the bound, below it and above it
# (int8 ... int64, reduce_scatter's and all_gather's n blocks) each take their side.
rr_direct_test(bound_w2 "RR_TEST_FAKE_DEVICES=1;RR_CUDA_DIRECT_BYTES=16396;RR_TEST_DIRECT_UPTO=16396" coll 2)
# The leader's cache of mapped peer buffers (freed and reused memory), the scratch fallback.
rr_direct_test(cache_w2 "RR_TEST_FAKE_DEVICES=1" cache 2)
rr_direct_test(cache_w4 "RR_TEST_FAKE_DEVICES=1" cache 4)
# A rank's buffers moved to another GPU: every call fails, naming it.
rr_direct_test(wrongdev_w2 "RR_TEST_FAKE_DEVICES=2" wrongdev)
# The leader, then a peer, SIGKILLed mid-call: the survivors fail naming it, never hang.
rr_direct_test(kill_leader_w3 "RR_TEST_FAKE_DEVICES=1" kill 0)
rr_direct_test(kill_peer_w3 "RR_TEST_FAKE_DEVICES=1" kill 1)
foreach(t coll:2 coll:4 cache:2)
  string(REPLACE ":" ";" tw ${t})
  list(GET tw 0 c)
  list(GET tw 1 w)
  add_test(NAME cuda_direct_${c}_w${w} COMMAND test_cuda_direct ${c} ${w})
  set_tests_properties(cuda_direct_${c}_w${w} PROPERTIES LABELS "cuda" TIMEOUT 300
    SKIP_RETURN_CODE 77 ENVIRONMENT "RR_TIMEOUT=120;RR_TEST_EXPECT_DIRECT=1")
endforeach()
add_test(NAME cuda_direct_kill_w3 COMMAND test_cuda_direct kill 1)
set_tests_properties(cuda_direct_kill_w3 PROPERTIES LABELS "cuda" TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "RR_TIMEOUT=60")
# test_cuda's device1 case on the one-kernel form: every rank's buffers on device 1, the
# calls waited for on a thread that never chose a device: no context made on device 0.
add_test(NAME cudafake.direct_device1_w2 COMMAND test_cuda --fake device1 2)
set_tests_properties(cudafake.direct_device1_w2 PROPERTIES LABELS "cudafake" TIMEOUT 180
  ENVIRONMENT "RR_TIMEOUT=120;RR_GRACE_PERIOD=2;RR_CUDA_IPC=1;RR_CUDA_DIRECT=1")
# Ranks that mix threads of one process with other processes (tests/test_cuda_mixed.c; issue
# 39): "01-23" is ranks 0 and 1 threads of one process, 2 and 3 of another; "01-2" ranks 0 and
# 1 threads of one process, rank 2 alone. Every lane of such a group keeps the host hand-off
# (group/ipc.c; each process's counters checked around every call), and every rank declines
# the one-kernel form: on one fake GPU with RR_CUDA_DIRECT=1 (both layouts) and on two. 4 KiB
# segments. A few seconds each. RR_CUDA_MEMOPS_MIXED=1 (tests only) lets the lanes between
# processes take stream memory operations as they did at first: the "mixed" cases.
add_executable(test_cuda_mixed ${RR_TEST_DIR}/test_cuda_mixed.c)
target_link_libraries(test_cuda_mixed PRIVATE rrtest rr_fake_cuda)
function(rr_mixproc_test name env)
  add_test(NAME cudafake.mixproc_${name} COMMAND test_cuda_mixed --fake ${ARGN})
  set_tests_properties(cudafake.mixproc_${name} PROPERTIES LABELS "cudafake" TIMEOUT 180
    ENVIRONMENT "RR_TIMEOUT=60;RR_GRACE_PERIOD=2;RR_CUDA_DIRECT=1;${env}")
endfunction()
rr_mixproc_test(1gpu_w4 "RR_TEST_FAKE_DEVICES=1;RR_IPC_SEG_BYTES=4096" coll 01-23)
rr_mixproc_test(1gpu_w3 "RR_TEST_FAKE_DEVICES=1;RR_IPC_SEG_BYTES=4096" coll 01-2)
rr_mixproc_test(2gpu_w4 "RR_TEST_FAKE_DEVICES=2;RR_IPC_SEG_BYTES=4096" coll 01-23)
# Both hand-offs in one call (the knob): the lanes between threads by the host, those between
# processes by the streams; the largest count, 2047, keeps every lane at most 8 segments (its
# slots) per call, since more hang (below).
rr_mixproc_test(mixed_1gpu_w4 "RR_TEST_FAKE_DEVICES=1;RR_IPC_SEG_BYTES=4096;RR_CUDA_MEMOPS_MIXED=1" coll 01-23)
rr_mixproc_test(mixed_2gpu_w3 "RR_TEST_FAKE_DEVICES=2;RR_IPC_SEG_BYTES=4096;RR_CUDA_MEMOPS_MIXED=1" coll 01-2)
# 20011 float32 a block: 20 segments a lane in a step. With both hand-offs in one call this hung
# (a reduce_scatter at world 3 timed out): the host hand-off's requests complete late, so
# ring/pipe_dev.c's rr__mem_memop no longer queues each stream's sends and receives in the
# batches that keep the streams from waiting on each other in a circle. seg_w3: the group
# keeps the host hand-off on every lane (group/ipc.c) and passes; seg_mixed_w3, with the knob,
# still hangs and stays off (DISABLED) until the ring queues in a safe order for it.
rr_mixproc_test(seg_w3 "RR_TEST_FAKE_DEVICES=1;RR_IPC_SEG_BYTES=4096" coll 01-2 20011)
rr_mixproc_test(seg_mixed_w3 "RR_TEST_FAKE_DEVICES=1;RR_IPC_SEG_BYTES=4096;RR_CUDA_MEMOPS_MIXED=1" coll 01-2 20011)
set_tests_properties(cudafake.mixproc_seg_mixed_w3 PROPERTIES DISABLED TRUE)
# RR_CUDA_MEMOPS=0: every lane on the host hand-off; 12289 elements are 12 segments, so each
# lane's 8 slots wrap within a step.
rr_mixproc_test(hosted_w3 "RR_TEST_FAKE_DEVICES=1;RR_IPC_SEG_BYTES=4096;RR_CUDA_MEMOPS=0" coll 01-2 12289)
# SIGKILLed mid-call (256 KiB calls, one segment per step): the process holding ranks 0 and 1,
# whose peer, the lone rank 2, must fail naming one of them within 20 s, with nothing left
# queued and destroy returning; then the lone rank 2 with RR_CUDA_MEMOPS=0: both threads of the
# other process must name it.
rr_mixproc_test(kill_pair_w3 "RR_TEST_FAKE_DEVICES=1" kill 01-2 0)
rr_mixproc_test(kill_lone_hosted_w3 "RR_TEST_FAKE_DEVICES=1;RR_CUDA_MEMOPS=0" kill 01-2 1)
# With the knob, the lone rank 2 killed: a survivor whose host-handed copy to its own thread
# sits on its stream behind a stream wait for rank 2's word. transport/comm.c's wait used to
# return on the lane's "own device work: look again at once" POLLOUT before it looked at the
# control sockets, the pidfds or the deadline, and spun for ever (TSan: 2 runs of 11 before,
# 0 of 11 after).
rr_mixproc_test(kill_lone_mixed_w3 "RR_TEST_FAKE_DEVICES=1;RR_CUDA_MEMOPS_MIXED=1" kill 01-2 1)
