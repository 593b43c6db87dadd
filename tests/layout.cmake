# The layering (docs/layout.md): no folder of the library includes one above it. `layers`
# checks the tree; `layers_selftest` plants two forbidden includes in a scratch copy and
# passes only if the check catches both, so the check itself cannot rot into a no-op.
add_test(NAME layers COMMAND bash ${CMAKE_SOURCE_DIR}/tools/check_layers.sh ${CMAKE_SOURCE_DIR})
add_test(NAME layers_selftest COMMAND bash ${CMAKE_SOURCE_DIR}/tools/check_layers.sh --selftest)
set_tests_properties(layers layers_selftest PROPERTIES TIMEOUT 60 LABELS layout)
