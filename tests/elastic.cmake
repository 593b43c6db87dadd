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
  # The leak check at world 8 too (4 is the one above): more pairs, more lanes remade.
  add_test(NAME elastic_shrink_leaks_w8_${tp} COMMAND test_elastic shrink_leaks 8)
  set_tests_properties(elastic_shrink_leaks_w8_${tp} PROPERTIES TIMEOUT 120
    LABELS "core;elastic" ENVIRONMENT "${RR_ELASTIC_ENV};RR_TRANSPORT=${tp}")
endforeach()

# Shrink: a random rank killed by SIGKILL at a random iteration, the survivors shrink, check
# the members (an all_gather of the member list) and run an exact all_reduce on the new
# group; a second rank killed at a random moment inside its shrink; a survivor too slow to
# vote. A few trials each here (seconds); the soak runs 100 per world.
foreach(tp tcp shm)
  foreach(w 3 4 8)
    add_test(NAME elastic_shrink_w${w}_${tp} COMMAND test_elastic shrink ${w} 3)
    set_tests_properties(elastic_shrink_w${w}_${tp} PROPERTIES TIMEOUT 120
      LABELS "core;elastic" ENVIRONMENT "RR_TIMEOUT=5;RR_GRACE_PERIOD=2;RR_TRANSPORT=${tp}")
    add_test(NAME elastic_shrink_soak_w${w}_${tp} COMMAND test_elastic shrink ${w} 100)
    set_tests_properties(elastic_shrink_soak_w${w}_${tp} PROPERTIES TIMEOUT 1800
      LABELS "soak" ENVIRONMENT "RR_TIMEOUT=5;RR_GRACE_PERIOD=2;RR_TRANSPORT=${tp}")
  endforeach()
  foreach(w 5 8)
    add_test(NAME elastic_shrink_second_w${w}_${tp} COMMAND test_elastic shrink_second ${w} 3)
    set_tests_properties(elastic_shrink_second_w${w}_${tp} PROPERTIES TIMEOUT 120
      LABELS "core;elastic" ENVIRONMENT "RR_TIMEOUT=5;RR_GRACE_PERIOD=2;RR_TRANSPORT=${tp}")
    add_test(NAME elastic_shrink_second_soak_w${w}_${tp} COMMAND test_elastic shrink_second ${w} 100)
    set_tests_properties(elastic_shrink_second_soak_w${w}_${tp} PROPERTIES TIMEOUT 1800
      LABELS "soak" ENVIRONMENT "RR_TIMEOUT=5;RR_GRACE_PERIOD=2;RR_TRANSPORT=${tp}")
  endforeach()
  add_test(NAME elastic_shrink_slow_w5_${tp} COMMAND test_elastic shrink_slow 5 3)
  set_tests_properties(elastic_shrink_slow_w5_${tp} PROPERTIES TIMEOUT 120
    LABELS "core;elastic" ENVIRONMENT "RR_TIMEOUT=1;RR_GRACE_PERIOD=2;RR_TRANSPORT=${tp}")
endforeach()
# rr_pg_set_timeout(INT64_MAX) on every rank, then the same kill and shrink: no deadline of
# the agreement may overflow.
add_test(NAME elastic_shrink_notimeout_w4_tcp COMMAND test_elastic shrink 4 2)
set_tests_properties(elastic_shrink_notimeout_w4_tcp PROPERTIES TIMEOUT 120
  LABELS "core;elastic" ENVIRONMENT "RR_TIMEOUT=5;RR_GRACE_PERIOD=2;RR_TRANSPORT=tcp;RR_TEST_NO_TIMEOUT=1")

# A network partition (tests/netns_partition.sh; root and `ip netns`, else 77 "skipped"): a
# job of 5 split over two namespaces, cut apart mid-loop (nobody killed). The 3 form one
# group of exactly themselves, the 2 fail with the no-majority error; once with rank 0 (the
# store's host) on the smaller side, which gives it no right; that case also with
# RR_TRANSPORT=auto (shared memory inside a namespace). RR_TIMEOUT=1: 5-8 s each. Label
# netns: left out of the sanitizer runs (tests/run.sh), like the other namespace tests.
add_executable(netns_shrink_rank ${RR_TEST_DIR}/netns_shrink_rank.c)
target_link_libraries(netns_shrink_rank PRIVATE rrtest)
foreach(c "minority;3,4;tcp" "rank0_minority;0,3;tcp" "rank0_minority_auto;0,3;auto")
  list(GET c 0 name)
  list(GET c 1 onb)
  list(GET c 2 tp)
  add_test(NAME elastic_partition_w5_${name}
    COMMAND bash ${RR_TEST_DIR}/netns_partition.sh $<TARGET_FILE:netns_shrink_rank> 5 ${onb})
  set_tests_properties(elastic_partition_w5_${name} PROPERTIES TIMEOUT 150
    LABELS "core;elastic;netns" SKIP_RETURN_CODE 77
    ENVIRONMENT "RR_TIMEOUT=1;RR_GRACE_PERIOD=2;RR_TRANSPORT=${tp}")
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

# Strangers on the job's ports (tests/test_stranger.c, issue 38 items 2 and 3): another
# local process without the job token connects to the growth's port (no growth may start,
# steps stay fast), squats it when it is let go (it must not be, and a port taken before the
# group listens must not fail a healthy job), and holds a silent connection on every port
# the ranks listen on while they shrink (every survivor gets the group within the timeout).
# Needs no root (the same user can do all of it). About 1 s each.
rr_core_test(test_stranger)
foreach(s grow_knock grow_squat shrink)
  add_test(NAME elastic_stranger_${s} COMMAND test_stranger ${s})
  set_tests_properties(elastic_stranger_${s} PROPERTIES TIMEOUT 120 LABELS "core;elastic"
    ENVIRONMENT "RR_TIMEOUT=3;RR_GRACE_PERIOD=2")
endforeach()
