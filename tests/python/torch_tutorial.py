"""The tutorial script (examples/torch_digits.py) run once with gloo and once with ringreduce,
started the way users start it; the per-epoch losses and rank 0's saved state dicts must
match to 1e-6 relative.

    /usr/bin/python3 tests/python/torch_tutorial.py spawn 2      # mp.spawn inside the script
    /usr/bin/python3 tests/python/torch_tutorial.py torchrun 4   # python -m torch.distributed.run
    /usr/bin/python3 tests/python/torch_tutorial.py rrun 4 RRUN  # ringreduce's own launcher

The two backends add floats in different orders (and pick different algorithms), so results
may differ in the last bits; 1e-6 relative is far below what a changed computation would
give (one wrong element of one gradient moves the loss by more than 1e-3). Exit 0, 1, 77."""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

torch, dist, mp = common.torch_or_skip()

ROOT = common._ROOT
SCRIPT = os.path.join(ROOT, "examples", "torch_digits.py")
REL = 1e-6


def launch(how, world, backend, out, rrun):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    env["MASTER_ADDR"] = "127.0.0.1"
    env["MASTER_PORT"] = str(common.free_port())
    py = sys.executable
    args = ["--backend", backend, "--out", out]
    if how == "spawn":
        cmd = [py, SCRIPT, "--nprocs", str(world)] + args
    elif how == "torchrun":
        # --redirects/--tee: Debian's torch 1.13 under Python 3.11 cannot parse their default
        # "0" (IntFlag iteration changed in 3.11) and torchrun fails for every backend.
        cmd = [py, "-m", "torch.distributed.run", "--nproc_per_node", str(world),
               "--master_addr", "127.0.0.1", "--master_port", env["MASTER_PORT"],
               "--redirects", "2", "--tee", "2", SCRIPT] + args
    else:
        cmd = [rrun, "--nproc-per-node", str(world), "--master-port", env["MASTER_PORT"], py,
               SCRIPT] + args
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(f"FAILED: {backend} under {how}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
        sys.exit(1)
    losses = [float(v) for v in open(os.path.join(out, "losses.txt"))]
    return losses, torch.load(os.path.join(out, "model.pt"))


def main():
    how, world = sys.argv[1], int(sys.argv[2])
    rrun = sys.argv[3] if len(sys.argv) > 3 else None
    with tempfile.TemporaryDirectory() as tmp:
        lg, mg = launch(how, world, "gloo", os.path.join(tmp, "gloo"), rrun)
        lr, mr = launch(how, world, "ringreduce", os.path.join(tmp, "rr"), rrun)
    bad = []
    for e, (a, b) in enumerate(zip(lg, lr)):
        if abs(a - b) > REL * abs(a):
            bad.append(f"epoch {e}: loss {b!r} (ringreduce) vs {a!r} (gloo)")
    worst = 0.0
    for k in mg:
        a, b = mg[k].double(), mr[k].double()
        # Relative to the tensor's largest value: a weight near zero has no relative digits.
        err = ((a - b).abs().max() / a.abs().max().clamp(min=1e-12)).item() if a.numel() else 0.0
        worst = max(worst, err)
        if err > REL:
            bad.append(f"{k}: relative difference {err}")
    print(f"tutorial under {how}, world {world}: losses gloo {lg}; ringreduce {lr}; "
          f"largest relative parameter difference {worst:.2e}")
    if len(lg) != 5 or len(lr) != 5:
        bad.append(f"expected 5 epochs, got {len(lg)} and {len(lr)}")
    if lg[-1] > 0.5 * lg[0]:
        bad.append(f"the model did not learn: loss {lg[0]} -> {lg[-1]}")
    if bad:
        print("FAILED:\n  " + "\n  ".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
