"""Torch groups that set up at the same time through one store (issues 38 item 1, and 43).

Every torch group of the backend is a library group set up through torch's store. Two cases
where groups met there:

  swap_split, swap_local   (issue 38, item 1) whoever can write torch's store (TCPStore asks
        nobody) moves each group's records into the other's place while split_group([[0, 1],
        [2, 3]]) (swap_split) or new_group(..., use_local_synchronization=True) on each half
        (swap_local) sets the two groups up at once. The records are authentic (written by
        ranks that hold RR_JOB_TOKEN), only in the wrong group: the library must refuse them,
        every rank failing at setup, rank 0 and rank 2 naming the rank whose record it was.
        Before the fix every proof passed, rank 0 paired with rank 3 and rank 1 with 2, and
        every rank summed 5.0 where 3.0 and 7.0 were due.
  same_name   (issue 43) torch numbers groups per process, so after [0, 2] and [1, 3],
        new_subgroups(group_size=2, group=sub) called by each half makes [0, 2] and [1, 3]
        again under one name, one store prefix. Each must reach its own members only: exact
        sums on every rank, over several rounds of random integers (before: "rank 0 was
        claimed by 2 processes"). same_name_one: group_size=1, as torch's own
        test_new_subgroups_with_group_param at world 4: one-rank groups, no rendezvous.

The attacker is a wrapper around the store every rank uses (a dist.Store of Python), standing
for the other user who rewrites torch's TCPStore: the swap is then the same on every run,
where a real attacker would race the ranks. While armed it notes every record a rank writes
(an index in the store, as an attacker watching the store would see the keys), and a rank
reading a record gets the other group's record of the same rank number instead.

Usage: torch_groups.py CASE      (CASE: swap_split, swap_local, same_name, same_name_one)
RR_TEST_UNFIXED=1: the swap cases expect the old outcome (every rank sums 5.0), to show on an
older library that the test can fail."""

import datetime
import inspect
import os
import re
import sys
import time

from common import check, port_clash, spawn, torch_or_skip

torch, dist, mp = torch_or_skip()
import ringreduce.torch  # noqa: E402,F401  (registers the backend)

WORLD = 4
RECORD = re.compile(r"^(.*)rr/(w[^/]*)/peer/(\d+)$")
INDEX = "attacker/n"  # how many records the attacker has seen


class SwapStore(dist.Store):
    """A store whose every group record, read while armed, is another group's."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.armed = False

    def set(self, key, value):
        self.inner.set(key, value)
        if self.armed and RECORD.match(key):
            n = self.inner.add(INDEX, 1)
            self.inner.set(f"attacker/key/{n}", key)

    def get(self, key):
        m = RECORD.match(key) if self.armed else None
        if m:
            other = self._other(m)
            if other is not None:
                return self.inner.get(other)
        return self.inner.get(key)

    def _other(self, m):
        """The key of the same rank's record in another group set up now (waited for)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            n = self.inner.add(INDEX, 0)
            for i in range(1, n + 1):
                k = self.inner.get(f"attacker/key/{i}").decode()
                o = RECORD.match(k)
                if o and o.group(3) == m.group(3) and (o.group(1), o.group(2)) != (m.group(1), m.group(2)):
                    return k
            time.sleep(0.01)
        return None

    # The rest as the store underneath.
    def add(self, key, amount):
        return self.inner.add(key, amount)

    def compare_set(self, key, expected, desired):
        return self.inner.compare_set(key, expected, desired)

    def wait(self, keys, timeout=None):
        if timeout is None:
            return self.inner.wait(keys)
        return self.inner.wait(keys, timeout)

    def check(self, keys):
        return self.inner.check(keys)

    def delete_key(self, key):
        return self.inner.delete_key(key)

    def num_keys(self):
        return self.inner.num_keys()

    def set_timeout(self, timeout):
        return self.inner.set_timeout(timeout)


def start(rank, port, wrap):
    store = dist.TCPStore("127.0.0.1", port, WORLD, rank == 0,
                          timeout=datetime.timedelta(seconds=60))
    if wrap:
        store = SwapStore(store)
    dist.init_process_group("ringreduce", store=store, rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=20))
    return store


def swap_rank(rank, port, case, result_dir):
    store = start(rank, port, wrap=True)
    half = [0, 1] if rank < 2 else [2, 3]
    store.armed = True
    outcome = "ok"
    try:
        if case == "swap_split":
            group = dist.split_group(split_ranks=[[0, 1], [2, 3]])
        else:
            group = dist.new_group(half, use_local_synchronization=True)
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t, group=group)
        outcome = f"sum {t.item()}"
    except RuntimeError as e:
        outcome = f"error {e}"
    store.armed = False
    with open(os.path.join(result_dir, f"r{rank}.tmp"), "w") as f:
        f.write(outcome)
    os.rename(os.path.join(result_dir, f"r{rank}.tmp"), os.path.join(result_dir, f"r{rank}"))
    # No collective over the world to end (a rank may still be inside its failing setup):
    # rank 0, which serves the store, waits for every rank's outcome; each rank ends alone.
    deadline = time.monotonic() + 90
    while rank == 0 and time.monotonic() < deadline and \
            not all(os.path.exists(os.path.join(result_dir, f"r{r}")) for r in range(WORLD)):
        time.sleep(0.05)
    os._exit(0)


def same_name_rank(rank, port, size, result_dir):
    start(rank, port, wrap=False)
    # As torch's test_new_subgroups_with_group_param: [0, 2] and [1, 3], then each split by
    # its own members only, so that the groups of one split get the same names on both
    # halves: [0, 2] and [1, 3] again (size 2), or [0] and [1], [2] and [3] (size 1).
    sub, _ = dist.new_subgroups_by_enumeration(ranks_per_subgroup_list=[[0, 2], [1, 3]])
    mine, _ = dist.new_subgroups(group_size=size, group=sub)
    members = [r for r in range(WORLD) if r % 2 == rank % 2] if size == 2 else [rank]
    check(dist.get_process_group_ranks(mine) == members,
          f"subgroup ranks {dist.get_process_group_ranks(mine)}, expected {members}")
    g = torch.Generator().manual_seed(1234)
    for round_ in range(5):
        vals = [torch.randint(-2**30, 2**30, (1000,), generator=g, dtype=torch.int64)
                for _ in range(WORLD)]
        t = vals[rank].clone()
        dist.all_reduce(t, group=mine)
        want = sum(vals[r] for r in members)
        check(torch.equal(t, want), f"round {round_}: all_reduce in {members} differs from the "
              f"sum of its members ({(t != want).sum().item()} of 1000 elements)")
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(result_dir, f"r{rank}"), "w") as f:
        f.write("ok")


def main():
    case = sys.argv[1]
    import tempfile
    unfixed = os.environ.get("RR_TEST_UNFIXED") == "1"
    if case.startswith("swap"):
        if case == "swap_split" and not hasattr(dist, "split_group"):
            print("skipped: this torch has no dist.split_group")
            sys.exit(77)
        if case == "swap_local" and "use_local_synchronization" not in \
                inspect.signature(dist.new_group).parameters:
            print("skipped: this torch's new_group has no use_local_synchronization (1.13 sets "
                  "groups up one at a time: each new_group ends in a barrier over the world)")
            sys.exit(77)
        os.environ["RR_JOB_TOKEN"] = "torch-groups-" + os.urandom(8).hex()
    if case.startswith("same_name") and (
            "group" not in inspect.signature(dist.new_subgroups).parameters or
            torch.__version__ < "2" and not torch.cuda.is_available()):
        print("skipped: this torch's new_subgroups takes no group, or wants CUDA (1.13: "
              "'Subgroups can only be created when CUDA is available')")
        sys.exit(77)
    os.environ.setdefault("RR_TIMEOUT", "20")
    for attempt in range(3):
        with tempfile.TemporaryDirectory() as d:
            port = __import__("common").free_port()
            if case.startswith("swap"):
                fn, args = swap_rank, (port, case, d)
            else:
                fn, args = same_name_rank, (port, 1 if case == "same_name_one" else 2, d)
            t0 = time.monotonic()
            try:
                spawn(fn, WORLD, args)
            except SystemExit:
                out = "".join(open(os.path.join(d, f)).read() for f in os.listdir(d))
                if port_clash(out) and attempt < 2:
                    continue
                raise
            took = time.monotonic() - t0
            res = {r: open(os.path.join(d, f"r{r}")).read() for r in range(WORLD)}
        break
    for r in range(WORLD):
        print(f"rank {r}: {res[r][:300]}")
    if case.startswith("same_name"):
        print(f"{case}: every rank exact ({took:.1f} s)")
        return
    if unfixed:
        check(all(res[r] == "sum 5.0" for r in range(WORLD)), "expected the old cross-wired sums")
        print("unfixed: every rank summed 5.0 (cross-wired), as before the fix")
        return
    for r in range(WORLD):
        check(res[r].startswith("error"), f"rank {r} did not fail at setup: {res[r]}")
        check("5.0" not in res[r], f"rank {r}: {res[r]}")
    for r in (0, 2):
        # The rank whose (moved) record was read: rank 1 of its own group.
        check("record of rank 1" in res[r] and "another group's record" in res[r],
              f"rank {r}'s error does not name the moved record of rank 1: {res[r]}")
    check(took < 60, f"the refused setup took {took:.0f} s")
    print(f"{case}: every rank refused the other group's records ({took:.1f} s)")


if __name__ == "__main__":
    main()
