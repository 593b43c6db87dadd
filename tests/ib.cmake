# InfiniBand transport (transport/ib/) on the fake verbs library (tests/fake_ib/), which the
# library loads through RR_IB_LIBRARY in place of libibverbs.so.1. docs/ib.md says what the
# fake proves and what it cannot.
add_library(fakeibverbs SHARED ${RR_TEST_DIR}/fake_ib/fake_ibverbs.c)
set_target_properties(fakeibverbs PROPERTIES C_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
target_link_libraries(fakeibverbs PRIVATE Threads::Threads)
set(RR_FAKE_IB $<TARGET_FILE:fakeibverbs>)
set(RR_IB_ENV "RR_TIMEOUT=60;RR_GRACE_PERIOD=2;RR_TRANSPORT=ib;RR_IB_LIBRARY=${RR_FAKE_IB}")
