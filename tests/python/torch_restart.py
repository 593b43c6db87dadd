"""A worker dies mid-training under torchrun --max-restarts 1; the restarted attempt resumes
from the script's checkpoint on the ringreduce backend (issue 41, item 2).

torch 2.x hands a restarted attempt the first attempt's store, keys and all, without the
per-attempt prefix 1.13 used; the backend keys every group by torchrun's restart attempt
(TORCHELASTIC_RESTART_COUNT, python/ringreduce/torch.py _group_key), so the new attempt's
ranks never meet the old attempt's records or rank claims. Before that every restarted rank
failed "rank 0 was claimed by 2 processes" on torch 2.15.

    <python> tests/python/torch_restart.py            (the driver: runs torchrun)
    torchrun ... torch_restart.py worker CKPT STEPS DIE_AT   (each worker)

The driver checks (check()): torchrun exits 0; attempt 0 ran on every rank until the death;
attempt 1 resumed at the step of the last checkpoint, on every rank; every rank's final
weights equal the exact sum of every rank's gradients over every step (integers in float64,
exact). The last rank dies. tests/python/torch_hosts.py runs the same workers under one
torchrun per simulated host (--nnodes 2) and makes the same checks."""

import os
import re
import subprocess
import sys
import tempfile

STEPS, DIE_AT, WORLD = 8, 5, 2


def grad(torch, rank, step):
    """A rank's gradient at a step: random integers, the same on every run."""
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randint(-1000, 1000, (257,), generator=g).to(torch.float64)


def worker(ckpt, steps, die_at):
    import torch
    import torch.distributed as dist
    import ringreduce.torch  # noqa: F401
    dist.init_process_group("ringreduce")
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    step, w = 0, torch.zeros(257, dtype=torch.float64)
    if os.path.exists(ckpt):
        saved = torch.load(ckpt)
        step, w = saved["step"], saved["w"]
    print(f"@@ rank {rank} attempt {attempt} starts at step {step}", flush=True)
    while step < steps:
        g = grad(torch, rank, step)
        dist.all_reduce(g)
        w += g
        step += 1
        if rank == 0:
            torch.save({"step": step, "w": w}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        dist.barrier()  # the checkpoint is written before anyone goes on
        if attempt == 0 and step == die_at and rank == dist.get_world_size() - 1:
            os._exit(3)  # dies as a crash would: no goodbye, no destroy
    torch.save(w, f"{ckpt}.final{rank}")
    print(f"@@ rank {rank} attempt {attempt} done at step {step}", flush=True)
    dist.destroy_process_group()


def check(out, returncode, ckpt, world=WORLD, what="torchrun"):
    """(the workers' lines, what is wrong) from torchrun's output (every node's, joined),
    exit status and the workers' files next to CKPT."""
    import torch
    # The ranks' lines may interleave (torchrun tees both into one stream).
    lines = re.findall(r"@@ (rank \d+ attempt \d+ (?:starts|done) at step \d+)", out)
    bad = []
    if returncode != 0:
        bad.append(f"{what} exited {returncode}")
    for r in range(world):
        if f"rank {r} attempt 0 starts at step 0" not in lines:
            bad.append(f"rank {r} never started attempt 0")
        if f"rank {r} attempt 1 starts at step {DIE_AT}" not in lines:
            bad.append(f"rank {r} did not resume attempt 1 at step {DIE_AT}")
        if f"rank {r} attempt 1 done at step {STEPS}" not in lines:
            bad.append(f"rank {r} did not finish attempt 1")
            continue
        w = torch.load(f"{ckpt}.final{r}")
        want = sum(grad(torch, q, s) for s in range(STEPS) for q in range(world))
        if not torch.equal(w, want):
            bad.append(f"rank {r}: final weights differ from the exact sum in "
                       f"{(w != want).sum().item()} of 257 elements")
    return lines, bad


def main():
    try:
        import torch
    except ImportError:
        print(f"skipped: no torch for {sys.executable}")
        sys.exit(77)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from common import free_port
    with tempfile.TemporaryDirectory() as d:
        ckpt = os.path.join(d, "ckpt")
        # --redirects/--tee: Debian's torch 1.13 under Python 3.11 cannot parse their default.
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(WORLD),
               "--max_restarts", "1", "--rdzv_backend", "c10d",
               "--rdzv_endpoint", f"127.0.0.1:{free_port()}", "--redirects", "2", "--tee", "2",
               os.path.abspath(__file__), "worker", ckpt, str(STEPS), str(DIE_AT)]
        env = dict(os.environ, RR_TIMEOUT="30")
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=200)
        lines, bad = check(p.stdout, p.returncode, ckpt)
        print("\n".join(lines))
        if bad:
            print(p.stdout[-6000:])
            print("FAILED: " + "; ".join(bad))
            sys.exit(1)
    print(f"torch {torch.__version__}: a worker died at step {DIE_AT}, every rank resumed "
          "there in attempt 1 and finished exact")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
