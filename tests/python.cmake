# The PyTorch backend (python/ringreduce): torch.distributed on "ringreduce" checked against
# gloo in the same job (tests/python/). Run them with `ctest -L torch`. Every test runs twice:
# torch1.* on Debian's torch 1.13 (RR_TORCH_PYTHON, /usr/bin/python3, which is not always the
# python3 first on PATH) and torch2.* on PyPI's torch 2.x (RR_TORCH2_PYTHON: tests/run.sh
# passes the environment tools/torch_env.sh made). Labels torch, and torch1 or torch2.
# Without torch for an interpreter each of its tests exits 77 and ctest lists it as skipped.
# tools/deps.sh installs python3-torch when RR_DEPS_TORCH=1 (tests/run.sh sets it).
#
# The package is the one in this source tree (PYTHONPATH) and loads the library this build
# made (RINGREDUCE_LIBRARY), so no install step runs first. Each rank is a process that
# imports torch (1-2 s idle, far more on a loaded machine), hence the generous limits. One
# intra-op thread per rank: 2-4 ranks share the machine's cores with the other tests.
set(RR_TORCH_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with torch 1.13 for the torch1 tests")
set(RR_TORCH2_PYTHON "" CACHE FILEPATH "Python with torch 2.x for the torch2 tests (tools/torch_env.sh)")
set(rr_torch_env
  "PYTHONPATH=${CMAKE_SOURCE_DIR}/python"
  "RINGREDUCE_LIBRARY=$<TARGET_FILE:ringreduce>"
  "OMP_NUM_THREADS=1"
  "PYTHONDONTWRITEBYTECODE=1")
set(rr_py ${RR_TEST_DIR}/python)
if(RR_TORCH2_PYTHON)
  set(rr_torch2 ${RR_TORCH2_PYTHON})
else()
  # Registered all the same, so that a build without it says so instead of running fewer tests.
  # (No ';' in the command: CMake would cut it into two arguments, and sh -c would exit 0.)
  set(rr_torch2 sh -c "echo 'skipped: no torch 2.x: configure with -DRR_TORCH2_PYTHON=$(bash tools/torch_env.sh), as tests/run.sh does' && exit 77" --)
endif()

# rr_torch_test(NAME TIMEOUT SCRIPT ARGS...): torch1.NAME and torch2.NAME.
function(rr_torch_test name timeout)
  foreach(v 1 2)
    if(v EQUAL 1)
      set(py ${RR_TORCH_PYTHON})
    else()
      set(py ${rr_torch2})
    endif()
    add_test(NAME torch${v}.${name} COMMAND ${py} ${ARGN})
    set_tests_properties(torch${v}.${name} PROPERTIES LABELS "torch;torch${v}"
      TIMEOUT ${timeout} SKIP_RETURN_CODE 77 ENVIRONMENT "${rr_torch_env}")
  endforeach()
endfunction()

# Every collective, dtype, op and root against gloo and a float64 reference.
# (tests/python/torch_cuda.py, CUDA tensors, runs on a GPU machine: tests/gpu/run.sh.)
foreach(w 1 2 3 4)
  rr_torch_test(collectives_w${w} 300 ${rr_py}/torch_collectives.py ${w})
endforeach()
# torch_cuda.py itself on CPU tensors (--cpu): its calls and checks, so that a GPU window is
# not spent on a broken script (the first one was: docs/gpu-runs/2026-11-27-h200.md).
rr_torch_test(cuda_script_w2 120 ${rr_py}/torch_cuda.py 2 --cpu)
# Where a CUDA call's copy back into a non-contiguous output runs (its issuing stream and
# device, from any thread), with torch.cuda's stream functions replaced by recorders: no GPU.
rr_torch_test(stream_order 120 ${rr_py}/torch_stream_order.py)
# torch 2.x's names, coalescing, batch_isend_irecv, Work, abort/shutdown, groups, meshes,
# functional collectives, sparse and odd dtypes; each case skips where the torch lacks it.
foreach(w 1 2 3 4)
  rr_torch_test(api_w${w} 300 ${rr_py}/torch_api.py ${w})
endforeach()
# torch's own DistributedDataParallel, trained beside a gloo copy (and, from world 3, beside
# gloo copies that sum in other orders: tests/python/sumorder.py). World 2 must match gloo bit
# for bit; plain also runs at 2 and 4.
foreach(case plain fp16_hook bf16_hook unused no_sync syncbn)
  rr_torch_test(ddp_${case} 240 ${rr_py}/torch_ddp.py ${case} 3)
endforeach()
foreach(w 2 4)
  rr_torch_test(ddp_plain_w${w} 240 ${rr_py}/torch_ddp.py plain ${w})
endforeach()
# torch 2.x's users of a group, against gloo: FSDP (fully_shard), distributed checkpointing
# (saved at one world size, loaded at another), DDP's options and hooks, Join, ZeRO.
foreach(w 2 4)
  rr_torch_test(train_w${w} 600 ${rr_py}/torch_train.py ${w})
endforeach()
# torch's own distributed test suite (the one torch runs on gloo), at world 2, on gloo and on
# ringreduce: every test that passes on gloo must pass here (torch_suite.py's allow-list
# names the ones torch reserves for gloo by name, with the reason).
rr_torch_test(suite_w2 900 ${rr_py}/torch_suite.py --backend both)
# Failures as a torch user meets them: a killed rank, mismatched calls, a refused dtype,
# and 20 init/destroy rounds that must give back every descriptor and thread.
foreach(case kill9 mismatch dtype lifecycle exit)
  rr_torch_test(faults_${case} 240 ${rr_py}/torch_faults.py ${case})
endforeach()
# Issue 26 item 5: a random rank (rank 0, the store's host, included) killed by SIGKILL; the
# survivors revoke, shrink (ringreduce.torch.shrink) and go on: exact collectives on the new
# default group, or torch's DDP rebuilt on it and trained to the end against a float64
# reference; shrink_group_w4: torch 2.x's own dist.shrink_group served by the backend (torch1
# skips: 1.13 has none); digits_w4: the tutorial with --elastic, a rank killed from outside
# mid-epoch (two 4-rank runs, 12-25 s); grow_w4: the survivors grow back to 4 with a newcomer
# the test starts (ringreduce.torch.grow / join), exact collectives and a DDP step on the grown
# group; digits_grow_w4: the tutorial's kill, then a restarted worker rejoins (two 4-rank runs,
# 26-105 s). RR_TEST_SEED replays a run.
foreach(job collective_w3 collective_w4 ddp_w4 shrink_group_w4 digits_w4 grow_w4 digits_grow_w4)
  string(REGEX REPLACE "_w([0-9])$" ";\\1" rr_args ${job})
  rr_torch_test(elastic_${job} 300 ${rr_py}/torch_elastic.py ${rr_args})
  foreach(v 1 2)
    set_tests_properties(torch${v}.elastic_${job} PROPERTIES LABELS "torch;torch${v};elastic")
  endforeach()
endforeach()
# Issue 26's kill trials through the backend: the collective case above run 100 times per
# world and transport, each trial its own job (tests/python/torch_elastic_soak.py; any hang or
# wrong group fails it, a clear error from the library is counted). Label "soak" only: 7-25 s
# a trial on 2 busy cores, so up to ~45 min each; `ctest -L soak -R torch`.
foreach(v 1 2)
  if(v EQUAL 1)
    set(py ${RR_TORCH_PYTHON})
  else()
    set(py ${rr_torch2})
  endif()
  foreach(tp tcp shm)
    foreach(w 3 4 8)
      add_test(NAME torch${v}.elastic_soak_w${w}_${tp}
        COMMAND ${py} ${rr_py}/torch_elastic_soak.py ${w} 100)
      set_tests_properties(torch${v}.elastic_soak_w${w}_${tp} PROPERTIES LABELS "soak"
        TIMEOUT 7200 SKIP_RETURN_CODE 77 ENVIRONMENT "${rr_torch_env};RR_TRANSPORT=${tp}")
    endforeach()
  endforeach()
endforeach()
# torchft's Manager on ringreduce (ringreduce.torchft), a replica killed by SIGKILL. torchft is
# installed into the torch 2.x environment by tools/torch_env.sh (tests/run.sh); elsewhere
# RR_TORCHFT_SITE may name a directory it was installed into (pip install --target DIR torchft
# and its opentelemetry packages, not torch). Without torchft the test is skipped.
set(RR_TORCHFT_SITE "" CACHE PATH "Directory holding torchft for the torch2.torchft_elastic test")
add_test(NAME torch2.torchft_elastic COMMAND ${rr_torch2} ${rr_py}/torchft_elastic.py)
set_tests_properties(torch2.torchft_elastic PROPERTIES LABELS "torch;torch2;elastic" TIMEOUT 240
  SKIP_RETURN_CODE 77 ENVIRONMENT "${rr_torch_env};RR_TORCHFT_SITE=${RR_TORCHFT_SITE}")
# A man in the middle through torch's store, by a second local user the test creates (root
# only; 77 otherwise): rank 0's record rewritten to a relay, its host id too, and a stale
# record answered at its old address by an impostor; each must fail at setup naming rank 0.
# torch1 only: the attacker runs Debian's python and torch, which every user can read (the
# torch 2.x environment lives in the checkout, which may be private).
add_test(NAME torch1.mitm COMMAND ${RR_TORCH_PYTHON} ${rr_py}/torch_mitm.py)
set_tests_properties(torch1.mitm PROPERTIES LABELS "torch;torch1;reliability" TIMEOUT 240
  SKIP_RETURN_CODE 77 ENVIRONMENT "${rr_torch_env}")
# The tutorial (examples/torch_digits.py) under each way users start it, against gloo. World 4
# runs gloo twice more, summing in other orders (tests/python/sumorder.py), which depends on
# the world, not the launcher: torchrun has it; rrun runs at world 2, where the trainings must
# be equal bit for bit (rrun's own tests start 4 and more workers: tests/test_rrun.sh).
rr_torch_test(tutorial_spawn 600 ${rr_py}/torch_tutorial.py spawn 2)
rr_torch_test(tutorial_torchrun_w2 600 ${rr_py}/torch_tutorial.py torchrun 2)
rr_torch_test(tutorial_torchrun_w4 600 ${rr_py}/torch_tutorial.py torchrun 4)
rr_torch_test(tutorial_rrun 600 ${rr_py}/torch_tutorial.py rrun 2 $<TARGET_FILE:rrun>)
# The Python package as it ships (issue 41 item 3): python.wheel runs `python -m build` on a
# copy of the tree, making the sdist and then the wheel from that sdist (scikit-build-core
# driving CMake; the backend from build-venv/wheel-tools, made once with the pip cache), and
# checks the wheel's files and that its library needs only the C library (ldd). 30-90 s on
# 2 cores, CUDA kernels included where nvcc is found. torchN.pip_install then installs that
# wheel into a new environment with no build tool on PATH and, as root, no network, and runs
# a 2-rank all_reduce under mp.spawn and under the wheel's rrun (10-25 s each). Label torch:
# the sanitizer passes leave them out (the wheel is a Release build of its own).
add_test(NAME python.wheel
  COMMAND bash ${rr_py}/test_wheel.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR}/wheel)
set_tests_properties(python.wheel PROPERTIES LABELS "torch;wheel" TIMEOUT 600
  SKIP_RETURN_CODE 77 FIXTURES_SETUP rr_wheel
  ENVIRONMENT "PIP_CACHE_DIR=${CMAKE_SOURCE_DIR}/build-venv/pip-cache")
foreach(v 1 2)
  if(v EQUAL 1)
    set(py ${RR_TORCH_PYTHON})
  else()
    set(py ${rr_torch2})
  endif()
  add_test(NAME torch${v}.pip_install
    COMMAND bash ${rr_py}/test_pip_install.sh ${CMAKE_BINARY_DIR}/wheel ${py})
  set_tests_properties(torch${v}.pip_install PROPERTIES LABELS "torch;torch${v};wheel"
    TIMEOUT 300 SKIP_RETURN_CODE 77 FIXTURES_REQUIRED rr_wheel)
endforeach()
# The README's install lines for each torch, run as written in a copy of the tree: the wheel
# built by pip (scikit-build-core and CMake), a fresh venv with it installed, the tutorial
# under mp.spawn and a launcher (torch2 also installs torch). Their wheel leaves CUDA out
# (SKBUILD_CMAKE_DEFINE, scikit-build-core's way of adding -D options: 17 s of building
# instead of 30-45 here): python.wheel builds and checks the one with CUDA.
foreach(v 1 2)
  add_test(NAME torch${v}.readme_install
    COMMAND bash ${rr_py}/test_readme_torch.sh ${v} ${CMAKE_SOURCE_DIR})
  set_tests_properties(torch${v}.readme_install PROPERTIES LABELS "torch;torch${v}" TIMEOUT 900
    SKIP_RETURN_CODE 77 RESOURCE_LOCK tcp_port_29500  # torchrun's default port, as written
    ENVIRONMENT "OMP_NUM_THREADS=1;PYTHONDONTWRITEBYTECODE=1;PIP_CACHE_DIR=${CMAKE_SOURCE_DIR}/build-venv/pip-cache;SKBUILD_CMAKE_DEFINE=RR_CUDA=OFF")
endforeach()
# Issue 38 item 1 and issue 43: torch groups set up at the same time through one store. swap_*:
# whoever can write the store moves each group's (authentic) records into the other's place
# while split_group or new_group(use_local_synchronization=True) sets both up: every rank must
# fail at setup naming the record, never sum across groups (torch2 only: 1.13 has neither
# form). same_name*: new_subgroups(group=sub) names its groups alike; each reaches only its own
# members, exact sums (two-rank groups) or no rendezvous (one-rank groups).
foreach(case swap_split swap_local same_name same_name_one)
  rr_torch_test(groups_${case} 180 ${rr_py}/torch_groups.py ${case})
endforeach()
# ... and torch's own test of it at world 4 (torch 2.x; 1.13 has no such test and runs none).
rr_torch_test(suite_subgroups_w4 300 ${rr_py}/torch_suite.py --backend ringreduce --world 4
  -k test_new_subgroups_with_group_param)
# Issue 41 item 2: a worker dies mid-training under torchrun --max-restarts 1; attempt 1 resumes
# from the script's checkpoint, exact (torch 2.x hands attempt 1 the first attempt's store:
# the backend's group key carries the attempt).
rr_torch_test(restart_torchrun 300 ${rr_py}/torch_restart.py)
# Issue 38 item 5: DataLoader workers forked from each of 3 ranks (busy loading) while rank 1
# is killed: the others must name it within 3 s (their timeout is 15 s, which a worker holding
# its sockets made them wait out); a child forked from rank 0 that calls all_reduce on the
# inherited group fails at once naming the fork, and the group goes on in the parent.
rr_torch_test(fork_dataloader 120 ${rr_py}/torch_fork.py)
# Issue 44: the process group object's own API, as torch's c10d tests and libraries holding a
# group call it: every call form of torch's bindings (one tensor for a list, op=/root=/timeout=),
# future values and result(), copies into inference tensors, uneven reduce_scatter, argument
# checks; each against a ProcessGroupGloo made in the same job (tests/python/torch_pg_object.py).
# torch's own test_c10d_gloo.py, which found these, is not shipped with torch: run it by hand
# with tests/python/torch_c10d_gloo.py (docs/torch.md).
rr_torch_test(pg_object_w3 120 ${rr_py}/torch_pg_object.py 3)
