"""A rank with processes forked from it (issue 38 item 5), as a torch user has them.

    /usr/bin/python3 tests/python/torch_fork.py [all | dataloader | child]

3 ranks on the "ringreduce" backend (timeout 15 s), each with a DataLoader of 2 workers
forked from it (multiprocessing_context="fork", persistent), whose items take long to load:
the workers are alive and busy all through. Before the loop, rank 0 forks a child that calls
dist.all_reduce on the inherited group: it must raise at once, naming the fork, and the
group must go on working in the parent (exact sums). Then the ranks loop over all_reduce
and rank 1 kills itself (SIGKILL). Ranks 0 and 2 must raise RuntimeError naming rank 1
within 3 s of the kill: a worker holding rank 1's sockets made them wait out the timeout.

"dataloader" and "child" run one half alone (the unfixed library fails the first half
in a way that hides the second).

The ranks are forked from this process (torch imported, nothing run: no group yet), each
writes what it saw to a file that the parent checks; the parent kills every worker at the
end. Exit 0, 1 or 77."""

import datetime
import json
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

torch, dist, mp = common.torch_or_skip()

WORLD, VICTIM = 3, 1


class SlowItems(torch.utils.data.Dataset):
    """Items that take until the test is over to load (at most 20 s): a busy worker."""

    def __init__(self, release):
        self.release = release

    def __len__(self):
        return 64

    def __getitem__(self, i):
        end = time.monotonic() + 20
        while time.monotonic() < end and not os.path.exists(self.release):
            time.sleep(0.05)
        return torch.zeros(4)


def child_calls(tmp):
    """In a process forked from rank 0 after the group was made: a collective must fail."""
    res = {}
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(8))
        res["error"] = ""
    except RuntimeError as e:
        res["error"] = str(e)
    res["seconds"] = time.monotonic() - t0
    with open(os.path.join(tmp, "child.json"), "w") as f:
        json.dump(res, f)


def rank_main(rank, tmp, case):
    common._rank = rank
    import ringreduce.torch  # noqa: F401
    result = {"rank": rank}
    dist.init_process_group("ringreduce", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=15))
    t = torch.ones(1000)
    dist.all_reduce(t)
    result["first"] = t[0].item()
    if rank == 0 and case != "dataloader":
        pid = os.fork()
        if pid == 0:
            try:
                child_calls(tmp)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
    loader = torch.utils.data.DataLoader(
        SlowItems(os.path.join(tmp, "release")), batch_size=1, num_workers=2,
        multiprocessing_context="fork", persistent_workers=True)
    it = iter(loader)  # the workers start, and take the first items
    with open(os.path.join(tmp, f"workers{rank}"), "w") as f:
        f.write(" ".join(str(w.pid) for w in it._workers))
    step = 0
    try:
        while True:
            if rank == VICTIM and step == 5 and case != "child":
                with open(os.path.join(tmp, "killed"), "w") as f:
                    f.write(repr(time.monotonic()))
                os.kill(os.getpid(), signal.SIGKILL)
            t = torch.ones(1000)
            dist.all_reduce(t)
            if step == 0:
                result["sum"] = t[0].item()
            step += 1
            if case == "child" and step == 10:
                break
    except RuntimeError as e:
        result["error"] = str(e)
        result["at"] = time.monotonic()
    with open(os.path.join(tmp, f"{rank}.json"), "w") as f:
        json.dump(result, f)


def main():
    case = sys.argv[1] if len(sys.argv) > 1 else "all"
    if case not in ("all", "dataloader", "child"):
        sys.exit(f"usage: {sys.argv[0]} [all | dataloader | child]")
    import ringreduce.torch  # noqa: F401  (loaded once, here, before the ranks fork)
    bad = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(common.free_port()))
        pids = []
        for r in range(WORLD):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    rank_main(r, tmp, case)
                    code = 0
                except BaseException as e:  # noqa: BLE001 (reported, then a plain exit)
                    print(f"rank {r}: {type(e).__name__}: {e}", file=sys.stderr)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)  # no teardown that could wait on the dead rank
            pids.append(pid)
        status = {}
        deadline = time.monotonic() + 60
        while len(status) < WORLD and time.monotonic() < deadline:
            for r, pid in enumerate(pids):
                if r not in status:
                    done, ws = os.waitpid(pid, os.WNOHANG)
                    if done:
                        status[r] = ws
            time.sleep(0.02)
        for r, pid in enumerate(pids):
            if r not in status:
                bad.append(f"rank {r} still running after 60 s")
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        open(os.path.join(tmp, "release"), "w").close()
        for r in range(WORLD):
            path = os.path.join(tmp, f"workers{r}")
            if os.path.exists(path):
                for w in open(path).read().split():
                    try:
                        os.kill(int(w), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        res = {r: json.load(open(os.path.join(tmp, f"{r}.json")))
               for r in range(WORLD) if os.path.exists(os.path.join(tmp, f"{r}.json"))}
        killed = float(open(os.path.join(tmp, "killed")).read()) \
            if os.path.exists(os.path.join(tmp, "killed")) else None
        child = json.load(open(os.path.join(tmp, "child.json"))) \
            if os.path.exists(os.path.join(tmp, "child.json")) else None
    kills = case != "child"
    if kills and (status.get(VICTIM) is None or not os.WIFSIGNALED(status[VICTIM])
                  or os.WTERMSIG(status[VICTIM]) != signal.SIGKILL or killed is None):
        bad.append(f"rank {VICTIM} was not killed (status {status.get(VICTIM)})")
    if case != "dataloader" and (child is None or "forked" not in child["error"]
                                 or child["seconds"] > 2):
        bad.append(f"the child forked from rank 0: {child}")
    for r in range(WORLD):
        if kills and r == VICTIM:
            continue
        got = res.get(r, {})
        err, at = got.get("error", ""), got.get("at")
        if got.get("first") != WORLD or got.get("sum") != WORLD:
            bad.append(f"rank {r}: wrong sums: {got}")
        if not kills:
            if err or status.get(r) != 0:
                bad.append(f"rank {r}: exit status {status.get(r)}: {err}")
            continue
        if f"rank {VICTIM}" not in err or "timed out" in err:
            bad.append(f"rank {r}: the error does not name rank {VICTIM} as gone: {got}")
        elif killed is not None and at is not None:
            print(f"rank {r}: failed {at - killed:.2f} s after rank {VICTIM} was killed: {err}")
            if at - killed > 3:
                bad.append(f"rank {r}: failed {at - killed:.1f} s after the kill (limit 3 s): "
                           "a DataLoader worker kept rank 1's connections open")
    print("child forked from rank 0:", child)
    for b in bad:
        print("FAILED:", b, file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
