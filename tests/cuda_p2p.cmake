# CUDA IPC only between GPUs that can take it (group/direct.c, rr__pg_ipc_agreed; docs/cuda.md
# "When CUDA IPC cannot be used"): on the fake (label cudafake), its two devices without peer
# access (RR_FAKE_CUDA_NO_P2P=1) or without IPC handles (RR_FAKE_CUDA_NO_IPC=1, as a MIG
# instance), every ring and chain kind is turned away from CUDA IPC and exact; with peer
# access, every call goes through it. A few seconds each.
add_executable(test_cuda_p2p_check ${RR_TEST_DIR}/test_cuda_p2p_check.c)
target_link_libraries(test_cuda_p2p_check PRIVATE rrtest rr_fake_cuda)
function(rr_ipccheck_test name env)
  add_test(NAME cudafake.ipccheck_${name} COMMAND test_cuda_p2p_check --fake ${ARGN})
  set_tests_properties(cudafake.ipccheck_${name} PROPERTIES LABELS "cudafake" TIMEOUT 120
    ENVIRONMENT "RR_TIMEOUT=60;RR_GRACE_PERIOD=2;RR_TEST_FAKE_DEVICES=2;RR_CUDA_IPC=1;${env}")
endfunction()
foreach(w 2 3)
  rr_ipccheck_test(nop2p_w${w} "RR_FAKE_CUDA_NO_P2P=1;RR_TEST_EXPECT_DECLINED=1" coll ${w})
  rr_ipccheck_test(peer_w${w} "RR_TEST_EXPECT_DECLINED=0" coll ${w})
endforeach()
rr_ipccheck_test(noipc_w2 "RR_FAKE_CUDA_NO_IPC=1;RR_TEST_EXPECT_DECLINED=1" coll 2)
