# Host reductions and dtype/op names (ring/op.c). One binary, one ctest entry per section so
# each stays well inside its time limit even under sanitizers.
add_executable(test_op ${RR_TEST_DIR}/test_op.c ${RR_TEST_DIR}/test_op_ref.c
  ${RR_TEST_DIR}/test_op_names.c ${RR_TEST_DIR}/test_op_convert.c
  ${RR_TEST_DIR}/test_op_reduce.c ${RR_TEST_DIR}/test_op_paths.c)
target_link_libraries(test_op PRIVATE rrtest)
foreach(section names check convert reduce reduce_portable paths)
  add_test(NAME op.${section} COMMAND test_op ${section})
  set_tests_properties(op.${section} PROPERTIES LABELS op TIMEOUT 60 SKIP_RETURN_CODE 77)
endforeach()
