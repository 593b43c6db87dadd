# Tests of the installed package (tests/test_install.sh): the build is installed into a fresh
# prefix and a consumer program, built out of tree through find_package or pkg-config, runs an
# all-reduce under the installed rrun. Run them with `ctest -L install` after a full build
# (cmake --install copies what the build made; it builds nothing). About 1 s each (3 s under
# ASan), each into its own prefix, so they may run side by side.
get_target_property(RR_INSTALL_LIB_TYPE ringreduce TYPE)
foreach(mode cmake pkgconfig)
  add_test(NAME install.consumer_${mode}
    COMMAND bash ${RR_TEST_DIR}/test_install.sh ${mode} ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}
            ${CMAKE_COMMAND} ${CMAKE_C_COMPILER} ${CMAKE_INSTALL_LIBDIR} "${RR_SANITIZE}")
  # 77: pkg-config is missing (tools/deps.sh installs it) or CMAKE_INSTALL_LIBDIR is absolute
  # (it would not follow the test's prefix). A consumer rank that fails takes the other down
  # in 2 s, and a hung call fails in 60 s.
  set_tests_properties(install.consumer_${mode} PROPERTIES TIMEOUT 180 LABELS install
    SKIP_RETURN_CODE 77 ENVIRONMENT "RR_TIMEOUT=60;RR_GRACE_PERIOD=2")
  # The checks are written for the shared library (SONAME, RUNPATH of the tools); with
  # BUILD_SHARED_LIBS=OFF ctest lists the tests as disabled rather than failing them.
  if(NOT RR_INSTALL_LIB_TYPE STREQUAL "SHARED_LIBRARY")
    set_tests_properties(install.consumer_${mode} PROPERTIES DISABLED TRUE)
  endif()
endforeach()
