"""torchrun across two simulated hosts (issue 41, item 2; tests/netns_torchrun.sh makes the
hosts node0 and node1 and hands this driver their `on` program): one torchrun per host,
--nnodes 2 --rdzv_backend c10d --rdzv_endpoint node0:PORT, as a two-node job starts.

    <python> tests/python/torch_hosts.py tutorial ON WORKDIR
        examples/torch_digits.py with --nproc_per_node 2 (world 4: 2 ranks per host), once
        on gloo and once on ringreduce; the per-epoch losses and rank 0's saved state dict
        must match gloo's by the rule of tests/python/sumorder.py, as torch_tutorial.py
        applies it. From world 3 that rule measures gloo's own spread over other summation
        orders (two more trainings, started on this machine as torch_tutorial.py starts them:
        the numbers do not depend on the launcher or the hosts); a difference within FLOOR
        passes whatever the spread, so the spread is measured only when the difference
        exceeds FLOOR. ringreduce's RR_DEBUG=INFO logs go to WORKDIR/rr.<host>.<pid>.log
        (the shell checks shm inside a host, tcp between).
    <python> tests/python/torch_hosts.py restart ON WORKDIR
        tests/python/torch_restart.py's workers under torchrun --max_restarts 1 with
        --nproc_per_node 1 (world 2, one rank per host): the last rank dies at step 5 of 8
        with no goodbye; both hosts' agents restart and every rank must resume from the
        checkpoint and end with the exact sums (torch_restart.check).

Exit 0, 1, or 77 without torch."""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import sumorder  # noqa: E402

torch, dist, mp = common.torch_or_skip()
import torch_restart  # noqa: E402
import torch_tutorial  # noqa: E402

HOSTS = ("node0", "node1")
JOB_LIMIT = 240  # seconds for one two-host job (30-90 s here on a busy 2-core machine)


def torchrun(on, host, port, nproc, extra, script_args):
    # --redirects/--tee: Debian's torch 1.13 under Python 3.11 cannot parse their default.
    return [on, host, sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
            "--nproc_per_node", str(nproc), "--rdzv_backend", "c10d",
            "--rdzv_endpoint", f"{HOSTS[0]}:{port}", "--redirects", "2", "--tee", "2"] + \
        extra + script_args


def run_hosts(cmds, env, what):
    """Start one command per host at once, each in its own session; wait for all. A job that
    outlives JOB_LIMIT has its processes' stacks printed (faulthandler, SIGABRT) and fails:
    a hang (gloo's restarted workers on torch 2.15 wait for a peer that never comes) must be
    reported, not left to the shell's or ctest's limit."""
    env = dict(env, PYTHONFAULTHANDLER="1")
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True) for c in cmds]
    outs, end = [], time.monotonic() + JOB_LIMIT
    try:
        for p in procs:
            outs.append(p.communicate(timeout=max(end - time.monotonic(), 0.1))[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGABRT)
            except ProcessLookupError:
                pass
        said = []
        for p in procs:
            try:
                said.append(p.communicate(timeout=20)[0])
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                said.append(p.communicate()[0])
        print(f"FAILED: {what} still running after {JOB_LIMIT} s; its processes' stacks:\n"
              + "\n".join(f"--- {h}:\n{s[-8000:]}" for h, s in zip(HOSTS, said)))
        sys.exit(1)
    return [p.returncode for p in procs], outs


def base_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(common._ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def tutorial(on, work):
    world = 4
    runs = {}
    for n, backend in enumerate(("gloo", "ringreduce")):
        out = os.path.join(work, backend)
        env = base_env()
        if backend == "ringreduce":
            env.update(RR_DEBUG="INFO", RR_DEBUG_SUBSYS="INIT",
                       RR_DEBUG_FILE=os.path.join(work, "rr.%h.%p.log"))
        for attempt in range(3):
            port = 29400 + 10 * n + attempt  # each host's ports are its own
            cmds = [torchrun(on, h, port, 2, [], [torch_tutorial.SCRIPT, "--backend", backend,
                                                  "--out", out]) for h in HOSTS]
            rcs, outs = run_hosts(cmds, env, f"{backend} under torchrun on {', '.join(HOSTS)}")
            said = "\n".join(outs)
            # torch 2.15's own gloo sometimes dies at exit under torchrun after the work is
            # done (torch_tutorial.py): the reference, not the backend under test.
            if (backend == "gloo" and any(rcs)
                    and "terminate called without an active exception" in said):
                print(f"note: gloo under torchrun crashed at exit (torch's gloo): run {attempt + 2}")
                continue
            break
        if any(rcs):
            print(f"FAILED: {backend} under torchrun on {', '.join(HOSTS)}: exits {rcs}\n"
                  + "\n".join(f"--- {h}:\n{s[-4000:]}" for h, s in zip(HOSTS, outs)))
            sys.exit(1)
        runs[backend] = torch_tutorial.results(out)
    (lg, mg), (lr, mr) = runs["gloo"], runs["ringreduce"]
    pdiff, where = sumorder.state_diff(mg, mr)
    ldiff = sumorder.losses_diff(lg, lr)
    spreads = {}
    if ldiff > sumorder.FLOOR or pdiff > sumorder.FLOOR:
        for order in sumorder.ORDERS:
            lo, mo = torch_tutorial.launch_reordered(world, order, os.path.join(work, order))
            spreads[order] = (sumorder.losses_diff(lg, lo), sumorder.state_diff(mg, mo)[0])
    print(f"tutorial under torchrun --nnodes 2 --nproc_per_node 2 on {', '.join(HOSTS)}: "
          f"losses gloo {lg}; ringreduce {lr}; largest relative difference: losses "
          f"{ldiff:.2e}, parameters {pdiff:.2e} ({where}); gloo summed in other orders: "
          + (", ".join(f"{k} losses {v[0]:.2e} parameters {v[1]:.2e}" for k, v in spreads.items())
             or f"not run (both differences within the floor {sumorder.FLOOR:g})"))
    bad = [v for v in (
        sumorder.training_verdict("per-epoch losses", world, ldiff,
                                  {k: v[0] for k, v in spreads.items()}),
        sumorder.training_verdict(f"parameters ({where})", world, pdiff,
                                  {k: v[1] for k, v in spreads.items()})) if v]
    if len(lg) != 5 or len(lr) != 5:
        bad.append(f"expected 5 epochs, got {len(lg)} and {len(lr)}")
    if lg[-1] > 0.5 * lg[0]:
        bad.append(f"the model did not learn: loss {lg[0]} -> {lg[-1]}")
    return bad


def restart(on, work):
    ckpt = os.path.join(work, "ckpt")
    env = dict(base_env(), RR_TIMEOUT="30")
    script = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_restart.py"),
              "worker", ckpt, str(torch_restart.STEPS), str(torch_restart.DIE_AT)]
    cmds = [torchrun(on, h, 29400, 1, ["--max_restarts", "1"], script) for h in HOSTS]
    rcs, outs = run_hosts(cmds, env, "torch_restart.py's workers under torchrun")
    lines, bad = torch_restart.check("\n".join(outs), max(rcs, key=abs), ckpt,
                                     what=f"a host's torchrun (exits {rcs})")
    print("\n".join(lines))
    if bad:
        print("\n".join(f"--- {h}:\n{s[-5000:]}" for h, s in zip(HOSTS, outs)))
    else:
        print(f"torch {torch.__version__}: a worker died at step {torch_restart.DIE_AT} on "
              "one of two hosts; both hosts' workers resumed there in attempt 1 and finished "
              "exact")
    return bad


def main():
    what, on, work = sys.argv[1], sys.argv[2], sys.argv[3]
    bad = {"tutorial": tutorial, "restart": restart}[what](on, work)
    if bad:
        print("FAILED:\n  " + "\n  ".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
