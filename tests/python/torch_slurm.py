"""One task of a torch job under Slurm (issue 41, item 1; tests/netns_slurm.sh, case torch):

    srun -N 2 --ntasks-per-node 2 <python> tests/python/torch_slurm.py OUTDIR

init_process_group("ringreduce") with torch's env:// as a script written for gloo calls it,
then:

1. exact sums: all_reduce (SUM) of integers in float32 at sizes that take recursive doubling
   (small) and the ring (large), each rank's input its own, every element checked against the
   exact sum; "@@ rank R exact" on success.
2. a killed task: after a barrier the last rank writes the time to OUTDIR/killed_at and
   SIGKILLs itself; every other rank calls all_reduce until one fails and prints
   "@@ rank R error after S s: MESSAGE" (S from the kill) and exits 0, or
   "@@ rank R no error" after 60 s of calls that kept succeeding (exit 1).

The shell checks the lines, and from the library's RR_DEBUG=INFO logs which transport each
pair took."""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import ringreduce.torch  # noqa: F401  (registers "ringreduce")

SIZES = (1, 7, 1000, 300_000)  # 300,000 floats = 1.2 MB: the ring (RR_SMALL_BYTES 64K)


def data(rank, n):
    g = torch.Generator().manual_seed(7919 * rank + n)
    return torch.randint(-1000, 1000, (n,), generator=g).to(torch.float32)


def main(out):
    dist.init_process_group("ringreduce")
    rank, world = dist.get_rank(), dist.get_world_size()
    for n in SIZES:
        t = data(rank, n)
        dist.all_reduce(t)
        want = sum(data(r, n).to(torch.float64) for r in range(world))
        bad = (t.to(torch.float64) != want).sum().item()
        if bad:
            print(f"@@ rank {rank} WRONG: {bad} of {n} elements differ from the exact sum",
                  flush=True)
            sys.exit(1)
    print(f"@@ rank {rank} exact (world {world}, sizes {SIZES})", flush=True)

    dist.barrier()
    victim = world - 1
    if rank == victim:
        with open(os.path.join(out, "killed_at.tmp"), "w") as f:
            f.write(repr(time.time()))
        os.replace(os.path.join(out, "killed_at.tmp"), os.path.join(out, "killed_at"))
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.time()
    t = torch.ones(100_000)
    try:
        while time.time() - start < 60:
            dist.all_reduce(t)
        print(f"@@ rank {rank} no error", flush=True)
        os._exit(1)
    except RuntimeError as e:
        now = time.time()
        try:
            with open(os.path.join(out, "killed_at")) as f:
                since = now - float(f.read())
        except OSError:
            since = float("nan")
        msg = " ".join(str(e).split())
        print(f"@@ rank {rank} error after {since:.3f} s: {msg}", flush=True)
    try:
        dist.destroy_process_group()
    except RuntimeError:
        pass
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
