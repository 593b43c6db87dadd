# Issue 41, items 1 and 2: jobs across simulated hosts (network namespaces with their own
# addresses and host names, tests/netns_cluster.sh) started the way clusters start them:
# under a real Slurm (Debian's slurmctld, slurmd and munge; RR_DEPS_SLURM=1 bash
# tools/deps.sh installs them) and under torchrun --nnodes 2. Root only: each test exits 77
# saying why where namespaces, Slurm or torch are missing. Label netns, so the sanitizer
# stages leave them out (tests/run.sh), and cluster. Each stops itself, cleaning up, before
# its TIMEOUT. CPU (daemons and tasks included) about 155 s together: docs/cluster.md.
#
#   netns_slurm_c              srun -N 2 --ntasks-per-node 2 of all_reduce_perf (#wrong 0),
#                              mlp_digits (equal to rrun's) and a killed task (named)
#   torch{1,2}.netns_slurm     a torch script with init_process_group("ringreduce") under
#                              srun: exact sums, a killed task named
#   torch{1,2}.netns_tutorial  examples/torch_digits.py under torchrun --nnodes 2
#                              --nproc_per_node 2, gloo against ringreduce by sumorder's rule
#   torch{1,2}.netns_restart   torch_restart.py's workers under torchrun --nnodes 2
#                              --max_restarts 1: a worker dies, both hosts resume exact
add_test(NAME netns_slurm_c COMMAND bash ${RR_TEST_DIR}/netns_slurm.sh c $<TARGET_FILE_DIR:rrun>)
set_tests_properties(netns_slurm_c PROPERTIES LABELS "netns;cluster" TIMEOUT 180
  SKIP_RETURN_CODE 77)
# (It runs all_reduce_perf, mlp_digits, rrun and netns_fault_rank from that folder.)

# The torch tests need python.cmake's interpreters and environment, which is included after
# this file: registered at the end of the folder.
function(rr_cluster_torch_tests)
  foreach(v 1 2)
    foreach(t slurm:netns_slurm.sh:torch:300 tutorial:netns_torchrun.sh:tutorial:600
              restart:netns_torchrun.sh:restart:600)
      string(REPLACE ":" ";" t ${t})
      list(GET t 0 name)
      list(GET t 1 script)
      list(GET t 2 case)
      list(GET t 3 limit)
      if(v EQUAL 1)
        set(cmd bash ${RR_TEST_DIR}/${script} ${case} ${RR_TORCH_PYTHON})
      elseif(RR_TORCH2_PYTHON)
        set(cmd bash ${RR_TEST_DIR}/${script} ${case} ${RR_TORCH2_PYTHON})
      else()
        set(cmd ${rr_torch2})  # says there is no torch 2.x and exits 77
      endif()
      add_test(NAME torch${v}.netns_${name} COMMAND ${cmd})
      set_tests_properties(torch${v}.netns_${name} PROPERTIES
        LABELS "torch;torch${v};netns;cluster" TIMEOUT ${limit} SKIP_RETURN_CODE 77
        ENVIRONMENT "${rr_torch_env}")
    endforeach()
  endforeach()
endfunction()
cmake_language(DEFER CALL rr_cluster_torch_tests)
