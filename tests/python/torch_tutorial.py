"""The tutorial script (examples/torch_digits.py) run once with gloo and once with ringreduce,
started the way users start it; the per-epoch losses and rank 0's saved state dicts must
match gloo's as sumorder.py defines it.

    /usr/bin/python3 tests/python/torch_tutorial.py spawn 2      # mp.spawn inside the script
    /usr/bin/python3 tests/python/torch_tutorial.py torchrun 4   # python -m torch.distributed.run
    /usr/bin/python3 tests/python/torch_tutorial.py rrun 4 RRUN  # ringreduce's own launcher

At world 2 every summation order gives the same float32 sums, so the two trainings must be
identical bit for bit. From world 3 the backends add in different orders and five epochs
amplify the last bits (1.7e-3 relative at world 4 on some machines, below 1e-6 on others):
the test then also trains on gloo with the gradients summed in other orders (sumorder.ORDERS,
through a DDP comm hook; ranks started directly, as the numbers do not depend on the
launcher) and allows ringreduce SPREAD_FACTOR times gloo's own spread. Exit 0, 1, 77.

    tests/python/torch_tutorial.py --reordered ORDER SCRIPT ARGS...   # one rank of that run
"""

import os
import runpy
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import sumorder  # noqa: E402

torch, dist, mp = common.torch_or_skip()

ROOT = common._ROOT
SCRIPT = os.path.join(ROOT, "examples", "torch_digits.py")


def base_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    env["MASTER_ADDR"] = "127.0.0.1"
    env["MASTER_PORT"] = str(common.free_port())
    return env


def results(out):
    losses = [float(v) for v in open(os.path.join(out, "losses.txt"))]
    return losses, torch.load(os.path.join(out, "model.pt"))


JOB_LIMIT = 200  # seconds for one training job (about 10-40 s here)


def run_job(cmd, env, what):
    """Run one job in its own session; if it outlives JOB_LIMIT, make every process of it
    print where each thread is (faulthandler, on SIGABRT), then fail saying which job hung:
    a hang must be reported, not left to ctest's limit."""
    import signal
    env = dict(env, PYTHONFAULTHANDLER="1")
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=JOB_LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGABRT)
        try:
            out, err = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        print(f"FAILED: {what} still running after {JOB_LIMIT} s; its processes' stacks:\n"
              f"{out[-6000:]}\n{err[-12000:]}")
        sys.exit(1)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def launch_cmd(how, world, backend, out, rrun, env):
    py = sys.executable
    args = ["--backend", backend, "--out", out]
    if how == "spawn":
        return [py, SCRIPT, "--nprocs", str(world)] + args
    if how == "torchrun":
        # --redirects/--tee: Debian's torch 1.13 under Python 3.11 cannot parse their default
        # "0" (IntFlag iteration changed in 3.11) and torchrun fails for every backend.
        return [py, "-m", "torch.distributed.run", "--nproc_per_node", str(world),
                "--master_addr", "127.0.0.1", "--master_port", env["MASTER_PORT"],
                "--redirects", "2", "--tee", "2", SCRIPT] + args
    return [rrun, "--nproc-per-node", str(world), "--master-port", env["MASTER_PORT"], py,
            SCRIPT] + args


def launch(how, world, backend, out, rrun):
    for attempt in range(3):
        env = base_env()  # a fresh port each time
        r = run_job(launch_cmd(how, world, backend, out, rrun, env), env,
                    f"{backend} under {how}")
        if r.returncode == 0:
            break
        said = r.stdout + r.stderr
        # Another test took the free port before rank 0 bound it (common.free_port): the
        # harness's race, whichever backend runs.
        if common.port_clash(said):
            print(f"note: {backend} under {how}: port {env['MASTER_PORT']} was taken before "
                  f"rank 0 bound it (not the backend): run {attempt + 2}")
            continue
        # torch 2.15's own gloo sometimes dies at exit under torchrun ("terminate called
        # without an active exception", SIGABRT, in 3 of 12 runs here) after the job's work
        # is done: the reference, not the backend under test. Run it again.
        if backend == "gloo" and "terminate called without an active exception" in said:
            print(f"note: gloo under {how} crashed at exit (torch's gloo, not ringreduce): "
                  f"run {attempt + 2}")
            continue
        break
    if r.returncode != 0:
        print(f"FAILED: {backend} under {how}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        sys.exit(1)
    return results(out)


def launch_reordered(world, order, out):
    """gloo with the gradients summed in `order`: `world` rank processes of this file."""
    for attempt in range(3):
        env = base_env()
        # One job: this file started once per rank, in one session (see run_job).
        ranks = "".join(
            f"RANK={r} LOCAL_RANK={r} WORLD_SIZE={world} '{sys.executable}' '{__file__}' "
            f"--reordered {order} '{SCRIPT}' --backend gloo --out '{out}' 2>&1 & pids+=($!); "
            for r in range(world))
        r = run_job(["bash", "-c", f"pids=(); {ranks}rc=0; for p in ${{pids[@]}}; do "
                     "wait $p || rc=1; done; exit $rc"], env, f"gloo summed in {order} order")
        logs = [r.stdout + r.stderr]
        procs = [r]
        if not any(p.returncode for p in procs):
            break
        if any(common.port_clash(x) for x in logs):
            print(f"note: gloo ({order} order): port {env['MASTER_PORT']} was taken before "
                  f"rank 0 bound it: run {attempt + 2}")
            continue
        if not any("terminate called without an active exception" in x for x in logs):
            break
        print(f"note: gloo ({order} order) crashed at exit (torch's gloo): run {attempt + 2}")
    if any(p.returncode for p in procs):
        print(f"FAILED: gloo summed in {order} order:\n" + "\n".join(x[-2000:] for x in logs))
        sys.exit(1)
    return results(out)


def reordered_rank(order, script, args):
    """One rank of the tutorial with DDP's gradients summed in `order` (sumorder.reordered_hook)."""
    import torch.nn.parallel as parallel
    base = parallel.DistributedDataParallel

    class Reordered(base):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.register_comm_hook(None, sumorder.reordered_hook(order))
    parallel.DistributedDataParallel = Reordered  # the script imports it after this
    # torch 1.13's gloo with a DDP comm hook sometimes hangs tearing down after training
    # (3 jobs in 32 here, in the reducer's or the group's destructor, with every result
    # written): this reference job leaves as soon as its group is destroyed.
    destroy = dist.destroy_process_group

    def destroy_then_leave(*a, **k):
        destroy(*a, **k)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    dist.destroy_process_group = destroy_then_leave
    sys.argv = [script] + args
    runpy.run_path(script, run_name="__main__")


def main():
    how, world = sys.argv[1], int(sys.argv[2])
    rrun = sys.argv[3] if len(sys.argv) > 3 else None
    spreads = {}
    with tempfile.TemporaryDirectory() as tmp:
        lg, mg = launch(how, world, "gloo", os.path.join(tmp, "gloo"), rrun)
        lr, mr = launch(how, world, "ringreduce", os.path.join(tmp, "rr"), rrun)
        if world > 2:
            for order in sumorder.ORDERS:
                lo, mo = launch_reordered(world, order, os.path.join(tmp, order))
                spreads[order] = (sumorder.losses_diff(lg, lo), sumorder.state_diff(mg, mo)[0])
    pdiff, where = sumorder.state_diff(mg, mr)
    ldiff = sumorder.losses_diff(lg, lr)
    print(f"tutorial under {how}, world {world}: losses gloo {lg}; ringreduce {lr}; "
          f"largest relative difference: losses {ldiff:.2e}, parameters {pdiff:.2e} ({where}); "
          "gloo summed in other orders: "
          + (", ".join(f"{k} losses {v[0]:.2e} parameters {v[1]:.2e}" for k, v in spreads.items())
             or "not run (world 2: every order gives the same sums)"))
    bad = [v for v in (
        sumorder.training_verdict("per-epoch losses", world, ldiff,
                                  {k: v[0] for k, v in spreads.items()}),
        sumorder.training_verdict(f"parameters ({where})", world, pdiff,
                                  {k: v[1] for k, v in spreads.items()})) if v]
    if len(lg) != 5 or len(lr) != 5:
        bad.append(f"expected 5 epochs, got {len(lg)} and {len(lr)}")
    if lg[-1] > 0.5 * lg[0]:
        bad.append(f"the model did not learn: loss {lg[0]} -> {lg[-1]}")
    if bad:
        print("FAILED:\n  " + "\n  ".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) > 3 and sys.argv[1] == "--reordered":
        reordered_rank(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        main()
