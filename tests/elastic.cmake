# Elastic groups (issue 26, docs/elastic.md): revoke, and the checks that nothing leaks.
# Each scenario over TCP and over shared memory; RR_TIMEOUT is 30 s, so a call that waits
# for the timeout instead of failing at the revoke fails the test's own 5 s bound.
# Label "elastic" (in the default suite: each takes a few seconds); "soak" ones are long.
set(RR_ELASTIC_ENV "RR_TIMEOUT=30;RR_GRACE_PERIOD=2")
rr_core_test(test_elastic)
foreach(tp tcp shm)
  foreach(s revoke_blocked revoke_kill9 revoke_leaks)
    add_test(NAME elastic_${s}_${tp} COMMAND test_elastic ${s})
    set_tests_properties(elastic_${s}_${tp} PROPERTIES TIMEOUT 120 LABELS "core;elastic"
      ENVIRONMENT "${RR_ELASTIC_ENV};RR_TRANSPORT=${tp}")
  endforeach()
endforeach()
