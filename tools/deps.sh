#!/usr/bin/env bash
# Install what building and testing ringreduce needs, only if it is missing (Debian/Ubuntu,
# via apt-get; run as root or with sudo available). Sourced or run by tools/quickstart.sh,
# tests/run.sh and .ci/run, so a fresh machine needs nothing installed by hand.
set -euo pipefail

need=()
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v make >/dev/null 2>&1 || need+=(make)
command -v ninja >/dev/null 2>&1 || need+=(ninja-build)
command -v ip >/dev/null 2>&1 || need+=(iproute2)       # tests: several hosts in netns
command -v python3 >/dev/null 2>&1 || need+=(python3)   # tests: JSON output check
command -v iptables >/dev/null 2>&1 || need+=(iptables) # tests: lossy link in netns
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config) # tests: the installed ringreduce.pc
dpkg -s libopenblas-dev >/dev/null 2>&1 || need+=(libopenblas-dev)  # the training example
# tests/run.sh: headless Chromium for the pages of tools/ringreduce-view (tests/view.cmake);
# the quick start skips it (about 100 MB), as it skips torch.
if [ "${RR_DEPS_VIEW:-0}" = 1 ]; then
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
fi
# transport/ib compiles against <infiniband/verbs.h> (it loads libibverbs.so.1 at run time,
# never links it); libibverbs1 comes with it, for the no-device fallback test.
[ -f /usr/include/infiniband/verbs.h ] || need+=(libibverbs-dev)
dpkg -s ibverbs-providers >/dev/null 2>&1 || need+=(ibverbs-providers) # as a real host has it
# tests/run.sh: torch for the PyTorch backend's tests (tests/python.cmake). Debian's package
# installs into /usr/bin/python3, the interpreter the tests use; the quick start skips it.
if [ "${RR_DEPS_TORCH:-0}" = 1 ]; then
  /usr/bin/python3 -c "import torch" >/dev/null 2>&1 || need+=(python3-torch)
  /usr/bin/python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)  # the package's install test
  /usr/bin/python3 -c "import setuptools" >/dev/null 2>&1 || need+=(python3-setuptools)
  # tools/torch_env.sh (torch 2.x from PyPI) and the README's install lines make venvs
  /usr/bin/python3 -c "import ensurepip" >/dev/null 2>&1 || need+=(python3-venv)
fi
# tests/run.sh: a real Slurm for the cluster tests (tests/cluster.cmake: slurmctld and one
# slurmd per simulated host, authenticated by munge): 3 MB to download, 13 MB installed.
# Without it those tests skip.
if [ "${RR_DEPS_SLURM:-0}" = 1 ]; then
  command -v slurmctld >/dev/null 2>&1 || need+=(slurmctld)
  command -v slurmd >/dev/null 2>&1 || need+=(slurmd)
  command -v srun >/dev/null 2>&1 || need+=(slurm-client)
  command -v munged >/dev/null 2>&1 || need+=(munge)
fi
if [ "${RR_DEPS_PLOT:-0}" = 1 ]; then                   # bench/*/run.sh: the plots
  command -v gnuplot >/dev/null 2>&1 || need+=(gnuplot-nox)
fi
# tests/run.sh: clang-format 14 for the format check (tools/check_format.sh; `format` skips
# without it).
if [ "${RR_DEPS_FORMAT:-0}" = 1 ]; then
  command -v clang-format-14 >/dev/null 2>&1 || need+=(clang-format-14)
fi
if [ "${RR_DEPS_FUZZ:-0}" = 1 ]; then                   # CI: libFuzzer harnesses
  command -v clang >/dev/null 2>&1 || need+=(clang)
  dpkg -s libclang-rt-14-dev >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
