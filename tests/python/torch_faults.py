"""Failures as a torch user meets them on the "ringreduce" backend.

    /usr/bin/python3 tests/python/torch_faults.py CASE

  kill9      4 ranks train torch's DDP; rank 2 kills itself with SIGKILL at step 3. Every
             other rank must raise RuntimeError naming rank 2 within 10 s (the timeout is
             60 s), not hang.
  mismatch   rank 0 calls all_reduce while the others call broadcast: every rank raises a
             RuntimeError that shows both calls (rank 0 from its future's wait(), and from
             a callback chained to that future).
  dtype      an int16 tensor: RuntimeError on that call, naming the dtype; the group still
             works afterwards.
  lifecycle  20 rounds of init_process_group / collectives / destroy_process_group: the
             process ends with the descriptors and threads it started with.
  exit       rank 1's script ends without destroy_process_group while rank 0 waits for it in
             an all_reduce: rank 0's error says rank 1 exited without destroying its group
             (its finalizer freed the group at exit), not that it destroyed it.

Each rank is its own process (not mp.spawn: a rank dies on purpose); each writes what it saw
to a file that the parent checks. Exit 0, 1 or 77."""

import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

torch, dist, mp = common.torch_or_skip()


def rank_main(case, rank, world, out):
    import ringreduce.torch  # noqa: F401
    result = {"rank": rank}
    timeout = datetime.timedelta(seconds=60)
    if case == "lifecycle":
        def counts():
            return len(os.listdir("/proc/self/fd")), len(os.listdir("/proc/self/task"))
        before = None
        for i in range(20):
            # A store per round, in a file (no port to collide with other tests): a rank that
            # starts the next round while another still tears down the last must not reach
            # the old store (true of any backend).
            store = "file://" + os.path.join(os.path.dirname(out), f"store{i}")
            dist.init_process_group("ringreduce", init_method=store, rank=rank,
                                    world_size=world, timeout=timeout)
            t = torch.ones(100)
            dist.all_reduce(t)
            dist.all_reduce(t, async_op=True).get_future().wait()
            assert t[0].item() == world * world
            dist.destroy_process_group()
            import gc
            gc.collect()
            if i == 1:
                before = counts()  # after a warm-up round (torch's own one-time threads)
        result["before"], result["after"] = before, counts()
    else:
        dist.init_process_group("ringreduce", rank=rank, world_size=world, timeout=timeout)
        t0 = time.monotonic()
        try:
            if case == "kill9":
                import torch.nn as nn
                model = nn.parallel.DistributedDataParallel(nn.Linear(64, 64))
                opt = torch.optim.SGD(model.parameters(), lr=0.01)
                for step in range(1000):
                    if rank == 2 and step == 3:
                        os.kill(os.getpid(), signal.SIGKILL)
                    t0 = time.monotonic()
                    opt.zero_grad()
                    model(torch.randn(16, 64)).sum().backward()
                    opt.step()
            elif case == "mismatch":
                t = torch.ones(10)
                if rank == 0:  # the error must also fail a future, and what is chained to it
                    fut = dist.all_reduce(t, async_op=True).get_future()
                    chained = fut.then(lambda f: f.value())
                    try:
                        chained.wait()
                    except RuntimeError as e:
                        result["chained"] = str(e)
                    fut.wait()
                else:
                    dist.broadcast(t, 0)
            elif case == "exit":
                dist.barrier()
                if rank == 1:  # the script simply ends: no destroy, a normal interpreter exit
                    with open(out, "w") as f:
                        json.dump(result, f)
                    sys.exit(0)
                time.sleep(0.5)
                t0 = time.monotonic()
                dist.all_reduce(torch.ones(10))
            elif case == "dtype":
                try:
                    dist.all_reduce(torch.zeros(3, dtype=torch.int16))
                except RuntimeError as e:
                    result["refusal"] = str(e)
                t = torch.ones(3)
                dist.all_reduce(t)
                result["after"] = t.tolist()
        except RuntimeError as e:
            result["error"] = str(e)
            result["seconds"] = time.monotonic() - t0
    with open(out + ".tmp", "w") as f:
        json.dump(result, f)
    os.rename(out + ".tmp", out)
    # Stay until every rank that will write has written: rank 0 hosts torch's store, and a
    # rank still inside init_process_group (1.13's store-based barrier polls it) loses it if
    # rank 0 leaves first -- true of any backend.
    others = [os.path.join(os.path.dirname(out), f"{r}.json") for r in range(world)
              if not (case == "kill9" and r == 2)]
    deadline = time.monotonic() + 60
    while not all(os.path.exists(p) for p in others) and time.monotonic() < deadline:
        time.sleep(0.05)
    os._exit(0)  # no teardown that could wait on a dead peer: the result is written


def main():
    case = sys.argv[1]
    world = {"kill9": 4, "mismatch": 3, "dtype": 2, "lifecycle": 2, "exit": 2}[case]
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(common.free_port()))
        procs = [subprocess.Popen([sys.executable, __file__, "--rank", case, str(r), str(world),
                                   os.path.join(tmp, f"{r}.json")], env=env)
                 for r in range(world)]
        for p in procs:
            p.wait(timeout=120)
        res = {}
        for r in range(world):
            path = os.path.join(tmp, f"{r}.json")
            if os.path.exists(path):
                res[r] = json.load(open(path))
    bad = []
    if case == "kill9":
        for r in (0, 1, 3):
            e = res.get(r, {}).get("error", "")
            if "rank 2" not in e or res[r].get("seconds", 99) > 10:
                bad.append(f"rank {r}: {res.get(r)}")
        if 2 in res:
            bad.append("rank 2 was not killed")
    elif case == "mismatch":
        for r in range(world):
            e = res.get(r, {}).get("error", "")
            if "mismatched calls" not in e or "all_reduce" not in e or "broadcast" not in e:
                bad.append(f"rank {r}: {res.get(r)}")
        if "mismatched calls" not in res.get(0, {}).get("chained", ""):
            bad.append(f"rank 0: a callback chained to the failed future did not fail: {res.get(0)}")
    elif case == "exit":
        e = res.get(0, {}).get("error", "")
        if "rank 1 exited without destroying its process group" not in e or \
                res[0].get("seconds", 99) > 10:
            bad.append(f"rank 0: {res.get(0)}")
    elif case == "dtype":
        for r in range(world):
            x = res.get(r, {})
            if "int16" not in x.get("refusal", "") or x.get("after") != [2.0, 2.0, 2.0]:
                bad.append(f"rank {r}: {x}")
    else:
        for r in range(world):
            x = res.get(r, {})
            if not x.get("before") or x.get("before") != x.get("after"):
                bad.append(f"rank {r}: descriptors and threads {x.get('before')} -> {x.get('after')}")
    print(f"torch_faults {case}: " + ("; ".join(f"rank {r}: {res[r]}" for r in sorted(res)))[:2000])
    if bad:
        print("FAILED:\n  " + "\n  ".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
    else:
        main()
