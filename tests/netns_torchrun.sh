#!/usr/bin/env bash
# Issue 41, item 2: torchrun across two simulated hosts (tests/netns_cluster.sh: node0 and
# node1, each its own network namespace, address and host name), one torchrun per host with
# --nnodes 2 --rdzv_backend c10d --rdzv_endpoint node0:PORT, driven by
# tests/python/torch_hosts.py:
#
#   netns_torchrun.sh tutorial PYTHON   examples/torch_digits.py, 2 ranks per host, on gloo
#                                       and on ringreduce: the same results by the rule of
#                                       tests/python/sumorder.py; ringreduce's RR_DEBUG=INFO
#                                       logs must show shm inside a host, tcp between
#                                       (cl_check_links)
#   netns_torchrun.sh restart PYTHON    tests/python/torch_restart.py's workers, one per host,
#                                       under --max_restarts 1: a worker dies mid-training,
#                                       both hosts restart and resume from the checkpoint
#
# Needs root and ip netns (exit 77 saying why otherwise; 77 too without torch for PYTHON).
# Cleans up its hosts, processes and files on exit.
set -u
here=$(cd "$(dirname "$0")" && pwd)
what=${1:?usage: netns_torchrun.sh tutorial|restart PYTHON}
py=${2:?usage: netns_torchrun.sh tutorial|restart PYTHON}
case $what in tutorial|restart) ;; *) echo "unknown case $what"; exit 2 ;; esac
# shellcheck source=tests/netns_cluster.sh
source "$here/netns_cluster.sh"
"$py" -c 'import torch, torch.distributed' 2>/dev/null || cl_skip "no torch for $py"

cl_setup torch node0 node1
cl_deadline 560
work=$CL_DIR/work
mkdir -p "$work"
OMP_NUM_THREADS=1 "$py" "$here/python/torch_hosts.py" "$what" "$CL_DIR/on" "$work"
rc=$?
[ "$rc" = 0 ] || { echo "netns_torchrun $what: FAILED"; exit "$rc"; }
if [ "$what" = tutorial ]; then
  cl_check_links "$work" rr 4 || { echo "netns_torchrun $what: FAILED"; exit 1; }
fi
echo "netns_torchrun $what: passed"
