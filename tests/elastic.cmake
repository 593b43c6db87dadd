# Elastic groups (issue 26, docs/elastic.md): revoke, and the checks that nothing leaks.
# Each scenario over TCP and over shared memory; RR_TIMEOUT is 30 s, so a call that waits
# for the timeout instead of failing at the revoke fails the test's own 5 s bound.
# Label "elastic" (in the default suite: each takes a few seconds); "soak" ones are long.
set(RR_ELASTIC_ENV "RR_TIMEOUT=30;RR_GRACE_PERIOD=2")
rr_core_test(test_elastic)
foreach(tp tcp shm)
  foreach(s revoke_blocked revoke_kill9 revoke_leaks shrink_leaks)
    add_test(NAME elastic_${s}_${tp} COMMAND test_elastic ${s})
    set_tests_properties(elastic_${s}_${tp} PROPERTIES TIMEOUT 120 LABELS "core;elastic"
      ENVIRONMENT "${RR_ELASTIC_ENV};RR_TRANSPORT=${tp}")
  endforeach()
endforeach()

# Shrink: a random rank killed by SIGKILL at a random iteration, the survivors shrink, check
# the members (an all_gather of the member list) and run an exact all_reduce on the new
# group; a second rank killed at a random moment inside its shrink; a survivor too slow to
# vote. A few trials each here (seconds); the soak runs 100 per world.
foreach(tp tcp shm)
  foreach(w 3 4)
    add_test(NAME elastic_shrink_w${w}_${tp} COMMAND test_elastic shrink ${w} 3)
    set_tests_properties(elastic_shrink_w${w}_${tp} PROPERTIES TIMEOUT 120
      LABELS "core;elastic" ENVIRONMENT "RR_TIMEOUT=5;RR_GRACE_PERIOD=2;RR_TRANSPORT=${tp}")
    add_test(NAME elastic_shrink_soak_w${w}_${tp} COMMAND test_elastic shrink ${w} 100)
    set_tests_properties(elastic_shrink_soak_w${w}_${tp} PROPERTIES TIMEOUT 1800
      LABELS "soak" ENVIRONMENT "RR_TIMEOUT=5;RR_GRACE_PERIOD=2;RR_TRANSPORT=${tp}")
  endforeach()
  add_test(NAME elastic_shrink_second_w5_${tp} COMMAND test_elastic shrink_second 5 3)
  set_tests_properties(elastic_shrink_second_w5_${tp} PROPERTIES TIMEOUT 120
    LABELS "core;elastic" ENVIRONMENT "RR_TIMEOUT=5;RR_GRACE_PERIOD=2;RR_TRANSPORT=${tp}")
  add_test(NAME elastic_shrink_second_soak_w5_${tp} COMMAND test_elastic shrink_second 5 100)
  set_tests_properties(elastic_shrink_second_soak_w5_${tp} PROPERTIES TIMEOUT 1800
    LABELS "soak" ENVIRONMENT "RR_TIMEOUT=5;RR_GRACE_PERIOD=2;RR_TRANSPORT=${tp}")
  add_test(NAME elastic_shrink_slow_w5_${tp} COMMAND test_elastic shrink_slow 5 3)
  set_tests_properties(elastic_shrink_slow_w5_${tp} PROPERTIES TIMEOUT 120
    LABELS "core;elastic" ENVIRONMENT "RR_TIMEOUT=1;RR_GRACE_PERIOD=2;RR_TRANSPORT=${tp}")
endforeach()

# Growing back (tests/test_grow.c): kill, shrink to 3, grow by one or two newcomer
# processes; a growth nobody comes to (short timeout: the members fail and keep their old
# group); a newcomer with another job's token; nothing leaks over rounds of growth.
rr_core_test(test_grow)
foreach(tp tcp shm)
  foreach(s back back2 nobody token leaks pending orphan requeue extra)
    add_test(NAME elastic_grow_${s}_${tp} COMMAND test_grow ${s})
    set_tests_properties(elastic_grow_${s}_${tp} PROPERTIES TIMEOUT 120 LABELS "core;elastic"
      ENVIRONMENT "RR_TIMEOUT=10;RR_GRACE_PERIOD=2;RR_TRANSPORT=${tp}")
  endforeach()
endforeach()

# The training example grows back (tests/test_grow_train.sh): a rank killed, the survivors
# shrink to 3, a newcomer process joins them at a step boundary (started by hand, or by
# rrun --replace), 4 ranks finish.
if(TARGET mlp_digits)
  foreach(tp tcp shm)
    foreach(case hand replace)
      add_test(NAME ddp.train_grow_${case}_w4_${tp}
        COMMAND bash ${RR_TEST_DIR}/test_grow_train.sh $<TARGET_FILE:rrun>
          $<TARGET_FILE:mlp_digits> ${case})
      set_tests_properties(ddp.train_grow_${case}_w4_${tp} PROPERTIES LABELS "ddp;train;elastic"
        TIMEOUT 180 ENVIRONMENT "RR_TIMEOUT=10;RR_TRANSPORT=${tp}")
    endforeach()
  endforeach()
endif()
