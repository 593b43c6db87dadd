# The layering (docs/layout.md): no folder of the library includes one above it, includes
# another folder's private headers, or calls into a folder it may not use. `layers` checks
# the tree, its calls on this build's own object files (rr_objects'; any that are older than
# their source are compiled again by the script); `layers_selftest` plants forbidden
# includes and calls in a scratch copy and passes only if the check catches each, so the
# check itself cannot rot into a no-op.
add_test(NAME layers COMMAND bash ${CMAKE_SOURCE_DIR}/tools/check_layers.sh ${CMAKE_SOURCE_DIR}
  ${CMAKE_BINARY_DIR}/CMakeFiles/rr_objects.dir)
add_test(NAME layers_selftest COMMAND bash ${CMAKE_SOURCE_DIR}/tools/check_layers.sh --selftest)
set_tests_properties(layers layers_selftest PROPERTIES TIMEOUT 60 LABELS layout
  ENVIRONMENT "CC=${CMAKE_C_COMPILER}")
