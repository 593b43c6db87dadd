# The layering (docs/layout.md): no folder of the library includes one above it, includes
# another folder's private headers, or calls into a folder it may not use (ddp/: the public
# API and its named allow-list); inside ring/ and group/ calls point down the folder's order
# of files; every function pointer of a header is a listed table or sanctioned callback; and
# no internal symbol is dead. `layers` checks the tree, its calls on this build's own object
# files (rr_objects'; any that are older than their source are compiled again by the
# script); `layers_selftest` plants a violation of each rule in a scratch copy and passes
# only if the check catches each (and nothing before), so the check itself cannot rot into
# a no-op. The selftest compiles a dozen files and preprocesses a few: about 20 s on two
# idle cores, several times that on busy ones.
add_test(NAME layers COMMAND bash ${CMAKE_SOURCE_DIR}/tools/check_layers.sh ${CMAKE_SOURCE_DIR}
  ${CMAKE_BINARY_DIR}/CMakeFiles/rr_objects.dir)
add_test(NAME layers_selftest COMMAND bash ${CMAKE_SOURCE_DIR}/tools/check_layers.sh --selftest)
set_tests_properties(layers PROPERTIES TIMEOUT 120)
set_tests_properties(layers_selftest PROPERTIES TIMEOUT 240)
set_tests_properties(layers layers_selftest PROPERTIES LABELS layout
  ENVIRONMENT "CC=${CMAKE_C_COMPILER}")

# The tracked C, C++ and CUDA files are as clang-format 14 leaves them (.clang-format;
# tools/check_format.sh --fix formats them). Without clang-format 14 it skips (exit 2):
# tests/run.sh installs it.
add_test(NAME format COMMAND bash ${CMAKE_SOURCE_DIR}/tools/check_format.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(format PROPERTIES TIMEOUT 120 SKIP_RETURN_CODE 2 LABELS layout)
