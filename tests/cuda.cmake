# CUDA (docs/cuda.md). test_cuda_elem runs everywhere: the kernels' element functions
# (cuda/reduce_elem.cuh) against ring/op.c, bit for bit, compiled as host C. The test_cuda
# entries need a GPU: without one, or in a build without CUDA, they print
# "skipped: no CUDA device" and exit 77, which CTest shows as skipped (not passed).
# tests/gpu/run.sh runs the label "cuda" on a GPU machine.
add_executable(test_cuda_elem ${RR_TEST_DIR}/test_cuda_elem.c)
target_link_libraries(test_cuda_elem PRIVATE ringreduce_internal)
target_include_directories(test_cuda_elem PRIVATE ${CMAKE_SOURCE_DIR})
add_test(NAME cuda_elem_vs_op COMMAND test_cuda_elem)
set_tests_properties(cuda_elem_vs_op PROPERTIES LABELS "op;cuda_elem" TIMEOUT 120)

# Where nvcc is: the device's float16 / bfloat16 conversions (cuda_fp16.h, cuda_bf16.h, their
# host versions), run on the host. test_cuda_conv: against common/half.h for every 16-bit
# input and every float rounding case (cuda_conv_all_floats: all 2^32 floats, label large);
# test_cuda_elem_conv: test_cuda_elem.c again with the element functions converting that way.
if(RR_HAVE_CUDA)
  add_executable(test_cuda_conv ${RR_TEST_DIR}/test_cuda_conv.cu)
  target_include_directories(test_cuda_conv PRIVATE ${CMAKE_SOURCE_DIR})
  add_test(NAME cuda_conv_vs_half COMMAND test_cuda_conv)
  set_tests_properties(cuda_conv_vs_half PROPERTIES LABELS "op;cuda_elem" TIMEOUT 120)
  add_test(NAME cuda_conv_all_floats COMMAND test_cuda_conv --all)
  set_tests_properties(cuda_conv_all_floats PROPERTIES LABELS "op;cuda_elem;large" TIMEOUT 900)
  add_executable(test_cuda_elem_conv ${RR_TEST_DIR}/test_cuda_elem_conv.cu)
  target_link_libraries(test_cuda_elem_conv PRIVATE ringreduce_internal)
  target_include_directories(test_cuda_elem_conv PRIVATE ${CMAKE_SOURCE_DIR})
  add_test(NAME cuda_elem_conv_vs_op COMMAND test_cuda_elem_conv)
  set_tests_properties(cuda_elem_conv_vs_op PROPERTIES LABELS "op;cuda_elem" TIMEOUT 120)
endif()

# Toolkits before CUDA 12.5 lack cudaGetDriverEntryPointByVersion: cuda/real.c then takes
# cudaGetDriverEntryPoint. That branch is compiled here too, forced, so a newer toolkit shows
# it still builds (deprecated there: that warning alone is allowed). Only where nvcc is.
if(RR_HAVE_CUDA)
  add_library(rr_cuda_entry_legacy OBJECT ${CMAKE_SOURCE_DIR}/cuda/real.c)
  target_compile_definitions(rr_cuda_entry_legacy PRIVATE RR_HAVE_CUDA=1 RR__CUDA_ENTRY_LEGACY=1)
  target_compile_options(rr_cuda_entry_legacy PRIVATE -Wno-deprecated-declarations)
  target_include_directories(rr_cuda_entry_legacy PRIVATE ${CMAKE_SOURCE_DIR}
    ${CMAKE_SOURCE_DIR}/include)
  target_include_directories(rr_cuda_entry_legacy SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
endif()

# The host fake of the CUDA table (tests/fake_cuda/): plain C, built in every configuration
# (nvcc or not, sanitizers or not), linked only into tests.
add_library(rr_fake_cuda STATIC ${RR_TEST_DIR}/fake_cuda/fake_cuda.c ${RR_TEST_DIR}/fake_cuda/fake_gpu.c ${RR_TEST_DIR}/fake_cuda/fake_ipc.c ${RR_TEST_DIR}/fake_cuda/fake_events.c ${RR_TEST_DIR}/fake_cuda/fake_memops.c
  ${RR_TEST_DIR}/fake_cuda/fake_devices.c ${RR_TEST_DIR}/fake_cuda/fake_kernels.c)
target_link_libraries(rr_fake_cuda PUBLIC ringreduce_internal)
target_include_directories(rr_fake_cuda PUBLIC ${CMAKE_SOURCE_DIR})

add_executable(test_cuda ${RR_TEST_DIR}/test_cuda.c)
target_link_libraries(test_cuda PRIVATE rrtest rr_fake_cuda)
# RR_CUDA_DIRECT=0: on a machine with one GPU every rank shares it, and the one-kernel form
# would take the ring kinds these tests check the ring on (tests/cuda_direct.cmake tests it).
set(RR_CUDA_TEST_ENV "RR_TIMEOUT=120;RR_GRACE_PERIOD=2;RR_CUDA_DIRECT=0")
foreach(t ptr kernel)
  add_test(NAME cuda_${t} COMMAND test_cuda ${t})
  set_tests_properties(cuda_${t} PROPERTIES LABELS "cuda" TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
foreach(w 1 2 3 4)
  # Ranks on one host pair over shared memory by default; _tcp forces sockets.
  add_test(NAME cuda_coll_w${w} COMMAND test_cuda coll ${w})
  add_test(NAME cuda_coll_tcp_w${w} COMMAND test_cuda coll ${w})
  # CUDA IPC (the default; RR_CUDA_IPC=1 said anyway): every collective through it (checked),
  # send / recv staged; _tcp: the ring kinds
  # piped through pinned slots, reduced on the GPU (checked), the rest staged.
  # cuda_coll_staged_w2: RR_CUDA_IPC=0 and RR_CUDA_PIPE=0, staged only.
  set_tests_properties(cuda_coll_w${w} PROPERTIES LABELS "cuda" TIMEOUT 600
    SKIP_RETURN_CODE 77 ENVIRONMENT "${RR_CUDA_TEST_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_IPC=1")
  set_tests_properties(cuda_coll_tcp_w${w} PROPERTIES LABELS "cuda" TIMEOUT 600
    SKIP_RETURN_CODE 77 ENVIRONMENT "${RR_CUDA_TEST_ENV};RR_CUDA_IPC=1;RR_TRANSPORT=tcp;RR_TEST_EXPECT_IPC=0;RR_TEST_EXPECT_PIPED=1")
endforeach()
add_test(NAME cuda_coll_staged_w2 COMMAND test_cuda coll 2)
set_tests_properties(cuda_coll_staged_w2 PROPERTIES LABELS "cuda" TIMEOUT 600
  SKIP_RETURN_CODE 77 ENVIRONMENT "${RR_CUDA_TEST_ENV};RR_CUDA_IPC=0;RR_CUDA_PIPE=0;RR_TEST_EXPECT_IPC=0;RR_TEST_EXPECT_PIPED=0")
add_test(NAME cuda_coll_shm_w3 COMMAND test_cuda coll 3)
set_tests_properties(cuda_coll_shm_w3 PROPERTIES LABELS "cuda" TIMEOUT 600
  SKIP_RETURN_CODE 77 ENVIRONMENT "${RR_CUDA_TEST_ENV};RR_CUDA_IPC=1;RR_TRANSPORT=shm;RR_TEST_EXPECT_IPC=0")
# The ring and chain kinds through CUDA IPC cut at RR_IPC_SEG_BYTES, the rest at RR_SEG_BYTES
# (group/run.c): exactly one IPC segment per step when a chunk is one IPC segment.
add_test(NAME cuda_ipcseg_w2 COMMAND test_cuda ipcseg 2)
set_tests_properties(cuda_ipcseg_w2 PROPERTIES LABELS "cuda" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${RR_CUDA_TEST_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_IPC=1;RR_SEG_BYTES=16384;RR_IPC_SEG_BYTES=65536")
add_test(NAME cuda_large_w4 COMMAND test_cuda large 4)
set_tests_properties(cuda_large_w4 PROPERTIES LABELS "cuda;large" TIMEOUT 600
  SKIP_RETURN_CODE 77 ENVIRONMENT "${RR_CUDA_TEST_ENV}")
add_test(NAME cuda_large_tcp_w2 COMMAND test_cuda large 2)
set_tests_properties(cuda_large_tcp_w2 PROPERTIES LABELS "cuda;large" TIMEOUT 600
  SKIP_RETURN_CODE 77 ENVIRONMENT "${RR_CUDA_TEST_ENV};RR_TRANSPORT=tcp")
foreach(w 1 2)
  add_test(NAME cuda_stream_w${w} COMMAND test_cuda stream ${w})
  set_tests_properties(cuda_stream_w${w} PROPERTIES LABELS "cuda" TIMEOUT 300
    SKIP_RETURN_CODE 77 ENVIRONMENT "${RR_CUDA_TEST_ENV}")
endforeach()
foreach(t noctx workerctx pgdevice ipc perthread)
  add_test(NAME cuda_${t} COMMAND test_cuda ${t})
  set_tests_properties(cuda_${t} PROPERTIES LABELS "cuda" TIMEOUT 120 SKIP_RETURN_CODE 77
    ENVIRONMENT "${RR_CUDA_TEST_ENV}")
endforeach()
add_test(NAME cuda_device1_w2 COMMAND test_cuda device1 2)
set_tests_properties(cuda_device1_w2 PROPERTIES LABELS "cuda" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${RR_CUDA_TEST_ENV}")
add_test(NAME cuda_nosync_w2 COMMAND test_cuda nosync 2)
set_tests_properties(cuda_nosync_w2 PROPERTIES LABELS "cuda" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${RR_CUDA_TEST_ENV}")
add_test(NAME cuda_nosync_managed_w2 COMMAND test_cuda nosync_managed 2)
set_tests_properties(cuda_nosync_managed_w2 PROPERTIES LABELS "cuda" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${RR_CUDA_TEST_ENV}")
add_test(NAME cuda_managed_w2 COMMAND test_cuda managed 2)
set_tests_properties(cuda_managed_w2 PROPERTIES LABELS "cuda" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${RR_CUDA_TEST_ENV}")
add_test(NAME cuda_capture_w2 COMMAND test_cuda capture 2)
set_tests_properties(cuda_capture_w2 PROPERTIES LABELS "cuda" TIMEOUT 300 SKIP_RETURN_CODE 77
  ENVIRONMENT "${RR_CUDA_TEST_ENV}")

# The same tests on the host fake of the CUDA table (tests/fake_cuda/, docs/cuda.md "The
# fake"): label "cudafake", in every CI pass (plain, ASan, TSan), no GPU or nvcc needed.
# RR_FAKE_CUDA_DELAY_US: how long each queued operation waits before it runs (the kernel
# test is about arithmetic, not ordering: no delay there).
set(RR_FAKE_ENV "RR_TIMEOUT=120;RR_GRACE_PERIOD=2")
function(rr_fake_test name)
  add_test(NAME cudafake.${name} COMMAND test_cuda --fake ${ARGN})
  set_tests_properties(cudafake.${name} PROPERTIES LABELS "cudafake" TIMEOUT 240
    ENVIRONMENT "${RR_FAKE_ENV}")
endfunction()
rr_fake_test(ptr ptr)
rr_fake_test(kernel kernel)
set_tests_properties(cudafake.kernel PROPERTIES ENVIRONMENT "RR_FAKE_CUDA_DELAY_US=0")
# On one host, every collective and point to point on device buffers goes through CUDA IPC by
# default (transport/cuda_ipc.c; RR_TEST_EXPECT_IPC=1 checks every call did; a device send to
# a peer without device slots yet goes as host bytes, tests/test_cuda_kinds.h);
# RR_CUDA_IPC=0 (coll_staged_w2, and the staged twins of the stream, nosync and
# capture tests) stages everything. Two fake
# devices: ranks share them (LOCAL_RANK mod 2: in w3 ranks 2 -> 0 are one GPU's pair);
# coll_1gpu_w4 puts all four ranks on one GPU. RR_TRANSPORT=shm and tcp: staged only.
rr_fake_test(coll_w1 coll 1)
foreach(w 2 3 4)
  rr_fake_test(coll_w${w} coll ${w})
  set_tests_properties(cudafake.coll_w${w} PROPERTIES ENVIRONMENT
    "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_IPC=1;RR_TEST_EXPECT_PIPED=0;RR_TEST_EXPECT_MEMOPS=1")
endforeach()
# Devices without stream memory operations (RR_FAKE_CUDA_NO_MEMOPS, as a driver without them):
# the ring and chain kinds keep the host hand-off, chosen at setup (issue 39 part 1).
rr_fake_test(coll_nomemops_w3 coll 3)
set_tests_properties(cudafake.coll_nomemops_w3 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_IPC=1;RR_TEST_EXPECT_MEMOPS=0;RR_FAKE_CUDA_NO_MEMOPS=1")
# RR_CUDA_MEMOPS=0 on devices that have them: the host hand-off too (the ipcseg case: device
# all_reduces, point to point and host calls on one group, a fraction of a second; the
# device without them above runs every kind).
rr_fake_test(ipcseg_memops_off_w2 ipcseg 2)
set_tests_properties(cudafake.ipcseg_memops_off_w2 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_IPC=1;RR_TEST_EXPECT_MEMOPS=0;RR_CUDA_MEMOPS=0;RR_SEG_BYTES=16384;RR_IPC_SEG_BYTES=65536")
# The flag words' epochs start 40 short of 2^32: 16 KiB segments through 8 slots wrap them
# within the first calls (the waits compare cyclically). RR_SLOTS=8: a step's window is then
# all of a lane's slots, so a sender that did not wait for its slot's release would overwrite
# a segment still unread (with fewer, the ring's order alone keeps them apart).
rr_fake_test(coll_wrap_w2 coll 2)
set_tests_properties(cudafake.coll_wrap_w2 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_MEMOPS=1;RR_SEG_BYTES=16384;RR_IPC_SEG_BYTES=16384;RR_SLOTS=8;RR_IPC_EPOCH0=4294967256")
rr_fake_test(coll_1gpu_w4 coll 4)
set_tests_properties(cudafake.coll_1gpu_w4 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_IPC=1;RR_TEST_FAKE_DEVICES=1;RR_CUDA_DIRECT=0")
# Small segments: many rounds through each slot, so a slot reused before the receiver's
# kernel read it shows up as wrong data (RR_IPC_SEG_BYTES: the ring and chain kinds' device
# segments, 4 MiB by default, would otherwise be one per chunk here).
rr_fake_test(coll_seg16k_w2 coll 2)
set_tests_properties(cudafake.coll_seg16k_w2 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_IPC=1;RR_TEST_EXPECT_MEMOPS=1;RR_SEG_BYTES=16384;RR_IPC_SEG_BYTES=16384")
# World 3: a reduce chain has a middle rank, whose landing slots in the device scratch are
# reused many times per call (one reused before its forward's copy read it: wrong data).
rr_fake_test(coll_seg16k_w3 coll 3)
set_tests_properties(cudafake.coll_seg16k_w3 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_IPC=1;RR_TEST_EXPECT_MEMOPS=1;RR_SEG_BYTES=16384;RR_IPC_SEG_BYTES=16384")
# Both sizes on one group: IPC collectives at 64 KiB, point to point and host calls at 16
# KiB (test_cuda ipcseg counts the IPC segments of an all_reduce: 2(w-1)).
foreach(w 2 3)
  rr_fake_test(ipcseg_w${w} ipcseg ${w})
  set_tests_properties(cudafake.ipcseg_w${w} PROPERTIES ENVIRONMENT
    "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_IPC=1;RR_SEG_BYTES=16384;RR_IPC_SEG_BYTES=65536")
endforeach()
# Ranks as threads of one process: CUDA IPC uses the peers' pointers, never its own handles.
rr_fake_test(threads_w3 threads 3)
set_tests_properties(cudafake.threads_w3 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_IPC=1")
# Without CUDA IPC the ring kinds are piped (ring/pipe_dev.c: each segment through pinned
# slots, reduced by the kernel on the device; RR_TEST_EXPECT_PIPED=1 checks every call was),
# over shm or TCP; RR_CUDA_PIPE=0 stages whole buffers instead (coll_staged_w2). The IPC
# tests above check that none was piped. seg16k: many segments per step, so a pinned slot
# refilled before the device read it, or a send slot before its copy, gives wrong data.
rr_fake_test(coll_staged_w2 coll 2)
set_tests_properties(cudafake.coll_staged_w2 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_CUDA_IPC=0;RR_CUDA_PIPE=0;RR_TEST_EXPECT_IPC=0;RR_TEST_EXPECT_PIPED=0")
rr_fake_test(coll_shm_w3 coll 3)
set_tests_properties(cudafake.coll_shm_w3 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_IPC=0;RR_TRANSPORT=shm;RR_TEST_EXPECT_PIPED=1")
rr_fake_test(coll_tcp_w2 coll 2)
set_tests_properties(cudafake.coll_tcp_w2 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_TRANSPORT=tcp;RR_TEST_EXPECT_IPC=0;RR_TEST_EXPECT_PIPED=1")
# Rank 0 on host memory, the others on device buffers, over TCP: piped beside the host path.
rr_fake_test(mixed_tcp_w3 mixed 3)
set_tests_properties(cudafake.mixed_tcp_w3 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_TRANSPORT=tcp;RR_SEG_BYTES=16384;RR_TEST_EXPECT_PIPED=1")
rr_fake_test(coll_piped_seg16k_w3 coll 3)
set_tests_properties(cudafake.coll_piped_seg16k_w3 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_TRANSPORT=tcp;RR_SEG_BYTES=16384;RR_TEST_EXPECT_IPC=0;RR_TEST_EXPECT_PIPED=1")
# The variants above differ from coll_w2..w4 (IPC) and coll_tcp_w2 / coll_staged_w2 (piped,
# staged) by how segments travel or who runs the ranks, not by arithmetic: they run the lean
# matrix (tests/harness.h, t_lean: one dtype of each element size, sum and one more op) in
# every stage. Half of the plain stage's cudafake time went to their full matrices.
set_property(TEST cudafake.coll_nomemops_w3 cudafake.coll_wrap_w2 cudafake.coll_1gpu_w4
  cudafake.coll_seg16k_w2 cudafake.coll_seg16k_w3 cudafake.threads_w3 cudafake.coll_shm_w3
  cudafake.coll_piped_seg16k_w3 APPEND PROPERTY ENVIRONMENT RR_TEST_MATRIX=lean)
foreach(w 1 2)
  rr_fake_test(stream_w${w} stream ${w})
endforeach()
set_tests_properties(cudafake.stream_w2 PROPERTIES ENVIRONMENT "${RR_FAKE_ENV};RR_CUDA_IPC=0")
rr_fake_test(managed_w2 managed 2)
# A call on a stream capturing a CUDA graph: refused on its rank, the peers told (issue 24
# item 1.4); both with the staged path and through CUDA IPC.
rr_fake_test(capture_w2 capture 2)
set_tests_properties(cudafake.capture_w2 PROPERTIES ENVIRONMENT "${RR_FAKE_ENV};RR_CUDA_IPC=0")
# Pointer attributes that fail are never taken for host memory (issue 24 item 1.3).
rr_fake_test(ptrfail_w2 ptrfail 2)
set_tests_properties(cudafake.ptrfail_w2 PROPERTIES ENVIRONMENT "${RR_FAKE_ENV};RR_FAKE_CUDA_PTR_FAIL=1")
rr_fake_test(capture_ipc_w2 capture 2)
set_tests_properties(cudafake.capture_ipc_w2 PROPERTIES ENVIRONMENT "${RR_FAKE_ENV};RR_CUDA_IPC=1")
rr_fake_test(nosync_w2 nosync 2)
set_tests_properties(cudafake.nosync_w2 PROPERTIES
  ENVIRONMENT "${RR_FAKE_ENV};RR_FAKE_CUDA_DELAY_US=50000;RR_CUDA_IPC=0")
rr_fake_test(nosync_managed_w2 nosync_managed 2)
set_tests_properties(cudafake.nosync_managed_w2 PROPERTIES
  ENVIRONMENT "${RR_FAKE_ENV};RR_FAKE_CUDA_DELAY_US=50000")
# The same stream-order checks with the calls through CUDA IPC.
rr_fake_test(stream_ipc_w2 stream 2)
set_tests_properties(cudafake.stream_ipc_w2 PROPERTIES ENVIRONMENT "${RR_FAKE_ENV};RR_CUDA_IPC=1")
rr_fake_test(nosync_ipc_w2 nosync 2)
set_tests_properties(cudafake.nosync_ipc_w2 PROPERTIES
  ENVIRONMENT "${RR_FAKE_ENV};RR_FAKE_CUDA_DELAY_US=50000;RR_CUDA_IPC=1")
foreach(t noctx workerctx pgdevice ipc perthread)
  rr_fake_test(${t} ${t})
endforeach()
# Every rank's buffers on device 1, the calls waited for on a thread that never chose a
# device: no context on device 0, no wait on its legacy stream (issue 24 item 1.1); without
# CUDA IPC (piped or staged), and through it.
rr_fake_test(device1_w2 device1 2)
set_tests_properties(cudafake.device1_w2 PROPERTIES ENVIRONMENT "${RR_FAKE_ENV};RR_CUDA_IPC=0")
rr_fake_test(device1_ipc_w2 device1 2)
set_tests_properties(cudafake.device1_ipc_w2 PROPERTIES ENVIRONMENT
  "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_TEST_EXPECT_IPC=1;RR_CUDA_DIRECT=0")
# A rank SIGKILLed while all three loop over 4 MiB device all-reduces through CUDA IPC: the
# survivors fail naming it, destroy their group and exit (issue 24 item 2; on a GPU too).
add_executable(test_cuda_ipc_kill ${RR_TEST_DIR}/test_cuda_ipc_kill.c)
target_link_libraries(test_cuda_ipc_kill PRIVATE rrtest rr_fake_cuda)
add_test(NAME cudafake.ipc_kill_w3 COMMAND test_cuda_ipc_kill --fake)
set_tests_properties(cudafake.ipc_kill_w3 PROPERTIES LABELS "cudafake" TIMEOUT 150
  ENVIRONMENT "${RR_FAKE_ENV}")
# Only the kinds handed over by stream memory operations: the survivors' streams wait on words
# the dead rank never writes, until their hosts release them (issue 39 part 1).
add_test(NAME cudafake.memop_kill_w3 COMMAND test_cuda_ipc_kill --fake)
set_tests_properties(cudafake.memop_kill_w3 PROPERTIES LABELS "cudafake" TIMEOUT 150
  ENVIRONMENT "${RR_FAKE_ENV};RR_TEST_KILL_RING=1;RR_TEST_EXPECT_MEMOPS=1")
# The same over TCP: the all-reduces piped through pinned slots (ring/pipe_dev.c).
add_test(NAME cudafake.piped_kill_w3 COMMAND test_cuda_ipc_kill --fake)
set_tests_properties(cudafake.piped_kill_w3 PROPERTIES LABELS "cudafake" TIMEOUT 150
  ENVIRONMENT "${RR_FAKE_ENV};RR_TRANSPORT=tcp")
add_test(NAME cuda_ipc_kill_w3 COMMAND test_cuda_ipc_kill)
set_tests_properties(cuda_ipc_kill_w3 PROPERTIES LABELS "cuda" TIMEOUT 150 SKIP_RETURN_CODE 77
  ENVIRONMENT "${RR_CUDA_TEST_ENV}")

if(TARGET reduce_kernel_perf)
  add_test(NAME cuda_reduce_kernel_perf COMMAND reduce_kernel_perf -b 1M -e 16M -f 4)
  set_tests_properties(cuda_reduce_kernel_perf PROPERTIES LABELS "cuda;bench" TIMEOUT 300
    SKIP_RETURN_CODE 77)
endif()

# Calls on device buffers of growing sizes free no CUDA memory (a free waits for the whole
# device): the group's pinned staging buffer (RR_CUDA_PIPE=0, staged) and the ring's device
# scratch (piped over TCP, world 3: reduce_scatter's partial blocks), counted through a
# wrapped fake table (tests/test_cuda_grow.c; issue 24 item 1.6).
add_executable(test_cuda_grow ${RR_TEST_DIR}/test_cuda_grow.c)
target_link_libraries(test_cuda_grow PRIVATE rrtest rr_fake_cuda)
add_test(NAME cudafake.grow_staged_w2 COMMAND test_cuda_grow 2)
set_tests_properties(cudafake.grow_staged_w2 PROPERTIES LABELS "cudafake" TIMEOUT 240
  ENVIRONMENT "${RR_FAKE_ENV};RR_CUDA_PIPE=0;RR_CUDA_IPC=0;RR_TEST_EXPECT_PIPED=0")
add_test(NAME cudafake.grow_piped_tcp_w3 COMMAND test_cuda_grow 3)
set_tests_properties(cudafake.grow_piped_tcp_w3 PROPERTIES LABELS "cudafake" TIMEOUT 240
  ENVIRONMENT "${RR_FAKE_ENV};RR_CUDA_IPC=0;RR_TRANSPORT=tcp;RR_TEST_EXPECT_PIPED=1")
add_test(NAME cudafake.grow_lists COMMAND test_cuda_grow lists)
set_tests_properties(cudafake.grow_lists PROPERTIES LABELS "cudafake" TIMEOUT 60
  ENVIRONMENT "${RR_FAKE_ENV}")

# Stream memory operations and the shared GPU as the fake encodes them (issue 39 part 1):
# waits and writes (cyclic >=, ==, a wait nobody writes, the host's release), two processes
# answering each other's writes, and the planted design the fake must catch: a kernel that
# spins on another process's word (RR_FAKE_CUDA_WATCHDOG_MS: the fake's watchdog, short
# here). The first two also on a GPU (tests/gpu/run.sh's probe piece).
add_executable(test_cuda_memops ${RR_TEST_DIR}/test_cuda_memops.c)
target_link_libraries(test_cuda_memops PRIVATE rrtest rr_fake_cuda)
foreach(t rules pingpong spin)
  add_test(NAME cudafake.memops_${t} COMMAND test_cuda_memops --fake ${t})
  set_tests_properties(cudafake.memops_${t} PROPERTIES LABELS "cudafake" TIMEOUT 120
    ENVIRONMENT "${RR_FAKE_ENV};RR_FAKE_CUDA_WATCHDOG_MS=1500")
endforeach()
# Ranks that disagree on the hand-off (one device without stream memory operations) fail
# with RR_EMISMATCH through the call header instead of hanging.
add_test(NAME cudafake.memops_handoff COMMAND test_cuda_memops --fake handoff)
set_tests_properties(cudafake.memops_handoff PROPERTIES LABELS "cudafake" TIMEOUT 60
  ENVIRONMENT "${RR_FAKE_ENV};RR_CUDA_IPC=1")
# The flag page's place in the pair's mapping on 4, 16 and 64 KiB host pages (no CUDA).
add_test(NAME cudafake.memops_layout COMMAND test_cuda_memops --fake layout)
set_tests_properties(cudafake.memops_layout PROPERTIES LABELS "cudafake" TIMEOUT 30
  ENVIRONMENT "${RR_FAKE_ENV}")
# A peer dead before the lane opened its slots: RR_EPEER naming it, not RR_ECUDA.
add_test(NAME cudafake.memops_early COMMAND test_cuda_memops --fake early)
set_tests_properties(cudafake.memops_early PROPERTIES LABELS "cudafake" TIMEOUT 60
  ENVIRONMENT "${RR_FAKE_ENV};RR_CUDA_IPC=1")
# An exporter frees its slots only after the peer closed its mapping of them.
add_test(NAME cudafake.memops_freeclose COMMAND test_cuda_memops --fake freeclose)
set_tests_properties(cudafake.memops_freeclose PROPERTIES LABELS "cudafake" TIMEOUT 60
  ENVIRONMENT "${RR_FAKE_ENV};RR_CUDA_IPC=1")
# The form of a ring kind by size (group/ipc.c's table): staged, the host hand-off, memops.
add_test(NAME cudafake.memops_forms COMMAND test_cuda_memops --fake forms)
set_tests_properties(cudafake.memops_forms PROPERTIES LABELS "cudafake" TIMEOUT 60
  ENVIRONMENT "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_CUDA_STAGED_BYTES=4096;RR_CUDA_MEMOPS_BYTES=262144")
foreach(t rules pingpong)
  add_test(NAME cuda_memops_${t} COMMAND test_cuda_memops ${t})
  set_tests_properties(cuda_memops_${t} PROPERTIES LABELS "cuda" TIMEOUT 120 SKIP_RETURN_CODE 77
    ENVIRONMENT "${RR_CUDA_TEST_ENV}")
endforeach()
# The all-gather's pull (issue 39 part 3; tests/test_cuda_pull.c): all_gather and all_reduce
# read each all-gather segment from the sender's output, counted (pulled, nothing of it into
# slots), results exact, worlds 2, 3, 4; the size bound on both sides; an output freed and
# allocated again at one address; an output without an IPC handle (and one whose BUFFER_ID
# is 0, as VMM memory); the fence (a sender's call
# ends only after its successor read it); RR_CUDA_PULL_BYTES differing between the ranks
# (RR_EMISMATCH); a rank killed mid-call. About 5 s together on two cores.
# RR_IPC_SEG_BYTES=4096: a block of 20011 elements is 20 segments (each lane's slots wrap).
add_executable(test_cuda_pull ${RR_TEST_DIR}/test_cuda_pull.c)
target_link_libraries(test_cuda_pull PRIVATE rrtest rr_fake_cuda)
set(RR_PULL_ENV "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_CUDA_DIRECT=0;RR_IPC_SEG_BYTES=4096")
foreach(w 2 3 4)
  add_test(NAME cudafake.pull_coll_w${w} COMMAND test_cuda_pull --fake coll)
  set_tests_properties(cudafake.pull_coll_w${w} PROPERTIES LABELS "cudafake" TIMEOUT 120
    ENVIRONMENT "${RR_PULL_ENV};RR_TEST_WORLD=${w}")
endforeach()
add_test(NAME cudafake.pull_bound_w2 COMMAND test_cuda_pull --fake bound)
set_tests_properties(cudafake.pull_bound_w2 PROPERTIES LABELS "cudafake" TIMEOUT 60
  ENVIRONMENT "${RR_PULL_ENV};RR_CUDA_PULL_BYTES=65536")
foreach(t stale noexport vmm fence)
  add_test(NAME cudafake.pull_${t}_w3 COMMAND test_cuda_pull --fake ${t})
  set_tests_properties(cudafake.pull_${t}_w3 PROPERTIES LABELS "cudafake" TIMEOUT 60
    ENVIRONMENT "${RR_PULL_ENV};RR_TEST_WORLD=3")
endforeach()
add_test(NAME cudafake.pull_mismatch_w2 COMMAND test_cuda_pull --fake mismatch)
set_tests_properties(cudafake.pull_mismatch_w2 PROPERTIES LABELS "cudafake" TIMEOUT 60
  ENVIRONMENT "${RR_PULL_ENV}")
add_test(NAME cudafake.pull_kill_w3 COMMAND test_cuda_pull --fake kill)
set_tests_properties(cudafake.pull_kill_w3 PROPERTIES LABELS "cudafake" TIMEOUT 150
  ENVIRONMENT "${RR_FAKE_ENV};RR_CUDA_IPC=1;RR_CUDA_DIRECT=0;RR_TEST_WORLD=3")
add_test(NAME cuda_pull_coll COMMAND test_cuda_pull coll)
set_tests_properties(cuda_pull_coll PROPERTIES LABELS "cuda" TIMEOUT 120 SKIP_RETURN_CODE 77
  ENVIRONMENT "${RR_CUDA_TEST_ENV};RR_IPC_SEG_BYTES=4096;RR_TEST_WORLD=2")
