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

add_executable(test_cuda ${RR_TEST_DIR}/test_cuda.c)
target_link_libraries(test_cuda PRIVATE rrtest)
if(RR_HAVE_CUDA)
  target_link_libraries(test_cuda PRIVATE CUDA::cudart_static)
  target_include_directories(test_cuda SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
endif()
set(RR_CUDA_TEST_ENV "RR_TIMEOUT=120;RR_GRACE_PERIOD=2")
foreach(t ptr kernel)
  add_test(NAME cuda_${t} COMMAND test_cuda ${t})
  set_tests_properties(cuda_${t} PROPERTIES LABELS "cuda" TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
foreach(w 1 2 3 4)
  # Ranks on one host pair over shared memory by default; _tcp forces sockets.
  add_test(NAME cuda_coll_w${w} COMMAND test_cuda coll ${w})
  add_test(NAME cuda_coll_tcp_w${w} COMMAND test_cuda coll ${w})
  set_tests_properties(cuda_coll_w${w} PROPERTIES LABELS "cuda" TIMEOUT 600
    SKIP_RETURN_CODE 77 ENVIRONMENT "${RR_CUDA_TEST_ENV}")
  set_tests_properties(cuda_coll_tcp_w${w} PROPERTIES LABELS "cuda" TIMEOUT 600
    SKIP_RETURN_CODE 77 ENVIRONMENT "${RR_CUDA_TEST_ENV};RR_TRANSPORT=tcp")
endforeach()
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
if(TARGET reduce_kernel_perf)
  add_test(NAME cuda_reduce_kernel_perf COMMAND reduce_kernel_perf -b 1M -e 16M -f 4)
  set_tests_properties(cuda_reduce_kernel_perf PROPERTIES LABELS "cuda;bench" TIMEOUT 300
    SKIP_RETURN_CODE 77)
endif()
