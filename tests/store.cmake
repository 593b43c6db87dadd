# The rendezvous store (rendezvous/store*.c): TCP and file stores through the public API, and the
# TCP server's wire protocol through raw sockets. Each test is its own process (argv[1]).
set(RR_STORE_TESTS
  tcp_semantics tcp_large tcp_add_procs tcp_get_blocks tcp_get_timeout tcp_goodbye
  tcp_client_first
  tcp_unreachable tcp_port_in_use tcp_master_dies tcp_master_frozen tcp_many_clients
  tcp_threads tcp_ipv6
  file_semantics file_add_procs file_get_blocks file_get_timeout file_refcount file_threads
  file_corrupt)
set(RR_STORE_PROTO_TESTS proto_wire proto_garbage proto_stalls proto_token proto_preauth_memory
  proto_preauth_deadline proto_replay proto_goodbye_stop)

add_executable(test_store ${RR_TEST_DIR}/test_store.c ${RR_TEST_DIR}/test_store_common.c
  ${RR_TEST_DIR}/test_store_tcp.c ${RR_TEST_DIR}/test_store_file.c)
target_link_libraries(test_store PRIVATE ringreduce Threads::Threads)
add_executable(test_store_proto ${RR_TEST_DIR}/test_store_proto.c)
target_link_libraries(test_store_proto PRIVATE ringreduce_internal)

foreach(t ${RR_STORE_TESTS})
  add_test(NAME store.${t} COMMAND test_store ${t})
  set_tests_properties(store.${t} PROPERTIES LABELS store TIMEOUT 60 SKIP_RETURN_CODE 77)
endforeach()
foreach(t ${RR_STORE_PROTO_TESTS})
  add_test(NAME store.${t} COMMAND test_store_proto ${t})
  set_tests_properties(store.${t} PROPERTIES LABELS store TIMEOUT 60 SKIP_RETURN_CODE 77)
endforeach()
