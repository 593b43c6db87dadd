# Where a group's lanes are made and how a call waits on them (issue 42 item 4): the spin
# policy of the comm's wait (transport/comm.c) against docs/env.md's RR_SPIN_US / RR_SPIN_YIELD.
rr_core_test(test_spin)
add_test(NAME spin_policy COMMAND test_spin)
set_tests_properties(spin_policy PROPERTIES TIMEOUT 60 LABELS "core")
