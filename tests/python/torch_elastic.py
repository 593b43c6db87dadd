"""A rank killed with SIGKILL, and the survivors go on through the "ringreduce" backend
(issue 26 item 5; docs/torch.md, "Elastic").

    /usr/bin/python3 tests/python/torch_elastic.py CASE WORLD

  collective  Every rank loops on an exact integer all_reduce; a random rank (0 included:
              rank 0 hosts torch's store) kills itself at a random iteration. Every survivor
              must see a RuntimeError naming the dead rank, revoke, shrink (ringreduce.torch
              .shrink): the new default group holds exactly the survivors, old order,
              ranks contiguous, the same on every survivor (each all_gathers the old ranks);
              then an exact all_reduce, a broadcast from the new rank 0 and a barrier on it,
              through dist's own functions with the default group.
  shrink_group  (torch 2.x) the same, the survivors calling torch's own
              dist.shrink_group([dead rank]) instead (the backend serves it); the rank killed
              is never rank 0 here (see main()).
  ddp         torch's DDP trains an MLP on the 8x8 digits in float64; a random rank kills
              itself inside a random step's backward (in the hook of the last gradient).
              Survivors: that step fails, no optimizer step; revoke, shrink, a new DDP on
              the new default group, the step done again, and on to the end. Each step's global batch is the same 24 samples
              whatever the world (split evenly), so one process training on them in float64
              is the reference: every survivor's parameters within 1e-9 (1 + |p|) of it after
              every step, bit-identical across survivors at the end, the loss lower.
  grow        first a growth nobody comes to (0.5 s): RR_ETIMEDOUT on every rank, errored()
              still None, and the group goes on (the loop's exact all_reduce is on it).
              Then a random rank (0 included) kills itself in a loop of an exact all_reduce and a
              grow_pending poll (ringreduce.torch); the survivors shrink to 3 and go on
              polling; the parent, once the rank is dead, starts a newcomer (RR_GROW_JOIN=1,
              ringreduce.torch.join instead of init_process_group); the survivors' poll
              sees it at the same iteration and they grow by one. On the grown default
              group of 4 (the newcomer rank 3), every rank: the members by an all_gather of
              process ids (survivors in order, then the newcomer), an exact all_reduce of
              them, a broadcast of rank 0's, a barrier; then a new DDP on an MLP whose
              initial parameters differ on the newcomer, and one step of the 24-sample
              global batch: parameters identical on all 4 and within 1e-9 (1 + |p|) of the
              float64 one-process reference, i.e. the newcomer got rank 0's parameters.
  digits      the tutorial, examples/torch_digits.py --elastic (the digits CNN under DDP, 5
              epochs), 4 ranks started as torchrun would; a random rank (0 included) killed
              by SIGKILL from outside 0-600 ms after epoch 0's line, mid-epoch: every survivor
              exits 0, the new rank 0 says it resumed with 3 ranks and that the parameters
              are bit-identical on all 3, and its accuracy is at most 2 points below an
              undisturbed --elastic run's (5 epochs do not converge: 3 ranks take more,
              smaller steps per epoch than 4 and often end higher, 96.7% against 93.1%).
  digits_grow the same kill (8 epochs, steps slowed to 50 ms) with RR_GROW_ADDR set, and a
              newcomer (the same command with RR_GROW_JOIN=1 and no RANK) started by the
              parent once the rank is dead: the ranks poll after every step and grow by
              one when it waits (it needs seconds to import torch); every process exits 0, the new
              rank 0 says it shrank to 3 and grew back to 4, the newcomer that it joined as
              rank 3 of 4, and the run ends with parameters bit-identical on all 4 ranks and
              accuracy at most 2 points below an undisturbed run's.

RR_TEST_SEED picks the rank and the moment (printed). Each rank is its own process; the
parent gives the job 120 s and calls anything longer a hang. Exit 0, 1 or 77."""

import datetime
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

torch, dist, mp = common.torch_or_skip()

BATCH = 24  # a step's global batch: divides evenly over 4, 3 and 2 ranks
STEPS = 12
LR = 0.5


def digits():
    import gzip
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "digits.csv.gz")
    rows = [list(map(int, line.split(","))) for line in gzip.open(path, "rt")]
    t = torch.tensor(rows, dtype=torch.float64)
    return t[:, :64] / 16.0, t[:, 64].long()


def mlp():
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 10)).double()


def batch(x, y, perm, step, rank, world):
    """Rank `rank`'s share of step `step`'s global batch at world size `world`."""
    b = BATCH // world
    idx = perm[step * BATCH + rank * b: step * BATCH + (rank + 1) * b]
    return x[idx], y[idx]


def reference():
    """One process, the whole global batch each step: parameters after each step."""
    x, y, perm = data()
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    out = []
    for step in range(STEPS):
        xb, yb = batch(x, y, perm, step, 0, 1)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(xb), yb).backward()
        opt.step()
        out.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    return out


def data():
    x, y = digits()
    g = torch.Generator().manual_seed(7)
    return x, y, torch.randperm(len(y), generator=g)


def survive(res, err, victim=None):
    """What every survivor does after a failure: revoke, shrink (ringreduce's, or torch's
    shrink_group given the dead rank), note the new group."""
    import ringreduce.torch as rrt
    res["error"] = str(err)[:600]
    t0 = time.monotonic()
    rrt.revoke()
    pg = rrt.shrink() if victim is None else dist.shrink_group([victim])
    res["shrink_s"] = round(time.monotonic() - t0, 3)
    res["new_rank"], res["new_world"] = dist.get_rank(), dist.get_world_size()
    if pg is not dist.distributed_c10d._get_default_group():
        raise AssertionError("the shrunk group is not the default group")
    return pg


def rank_collective(rank, world, victim, when, res, torch_shrink=False):
    i = 0
    try:
        for i in range(100000):
            if rank == victim and i == when:
                os.kill(os.getpid(), signal.SIGKILL)
            t = torch.full((5,), (rank + 1) * 1000 + i, dtype=torch.int64)
            dist.all_reduce(t)
            want = sum((r + 1) * 1000 + i for r in range(world))
            if t.tolist() != [want] * 5:
                raise AssertionError(f"iteration {i}: {t.tolist()}, expected {want}")
        raise AssertionError("the loop ended without a failure")
    except RuntimeError as e:
        res["failed_at"] = i
        survive(res, e, victim if torch_shrink else None)
    n = dist.get_world_size()
    members = torch.zeros(n, dtype=torch.int64)
    dist.all_gather(list(members.chunk(n)), torch.tensor([rank], dtype=torch.int64))
    res["members"] = members.tolist()
    t = torch.full((3,), rank + 1, dtype=torch.int64) * (1 << 40)
    dist.all_reduce(t)
    res["sum"] = t.tolist()
    b = torch.tensor([rank * 7 + 1], dtype=torch.int64)
    dist.broadcast(b, 0)
    res["bcast"] = b.item()
    dist.barrier()


def rank_grow(rank, world, victim, when, res):
    """The members' side of case grow: loop until a growth, shrinking on the way."""
    import ringreduce.torch as rrt
    try:  # first a growth nobody comes to: it fails on every rank, the group stays usable
        rrt.grow(1, wait=0.5)
        res["nobody"] = "grew with nobody"
    except RuntimeError as e:
        res["nobody"] = str(e)[:300]
    res["errored_after_nobody"] = str(rrt.errored())
    i, j, members, deadline = 0, 0, list(range(world)), time.monotonic() + 90
    while True:
        if rank == victim and i == when:
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            # j restarts at the shrink: survivors may have seen the death one call apart
            t = torch.full((5,), (rank + 1) * 1000 + j, dtype=torch.int64)
            dist.all_reduce(t)
            want = sum((r + 1) * 1000 + j for r in members)
            if t.tolist() != [want] * 5:
                raise AssertionError(f"iteration {i}: {t.tolist()}, expected {want}")
            if rrt.grow_pending():
                res["grown_at"] = j
                pg = rrt.grow(1, wait=30)
                break
        except RuntimeError as e:
            if "failed_at" in res:
                raise
            res["failed_at"] = i
            survive(res, e)
            members, j = [r for r in range(world) if r != victim], -1
        i, j = i + 1, j + 1
        if time.monotonic() > deadline:
            raise AssertionError(f"no growth after {i} iterations (90 s)")
        time.sleep(0.002)
    if pg is not dist.distributed_c10d._get_default_group():
        raise AssertionError("the grown group is not the default group")
    grown(res, mlp())


def grown(res, net):
    """On the grown default group, members and newcomer alike."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    res["grown_rank"], res["grown_world"] = dist.get_rank(), dist.get_world_size()
    n, pid = dist.get_world_size(), os.getpid()
    got = torch.zeros(n, dtype=torch.int64)
    dist.all_gather(list(got.chunk(n)), torch.tensor([pid], dtype=torch.int64))
    res["pids"] = got.tolist()
    t = torch.full((3,), pid, dtype=torch.int64) << 30
    dist.all_reduce(t)
    res["sum"] = t.tolist()
    b = torch.tensor([pid], dtype=torch.int64)
    dist.broadcast(b, 0)
    res["bcast"] = b.item()
    dist.barrier()
    x, y, perm = data()
    ddp = DDP(net)  # the parameters of rank 0 (a member), the newcomer's replaced
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    xb, yb = batch(x, y, perm, 0, dist.get_rank(), n)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(ddp(xb), yb).backward()
    opt.step()
    p = torch.cat([q.detach().reshape(-1) for q in net.parameters()])
    ref = reference()[0]
    res["max_rel_diff"] = ((p - ref).abs() / (1 + ref.abs())).max().item()
    every = [torch.zeros_like(p) for _ in range(n)]
    dist.all_gather(every, p)
    res["identical"] = all(torch.equal(every[0], q) for q in every)


def newcomer_main(out):
    """Case grow's newcomer: join instead of init_process_group, then what the members do."""
    import ringreduce.torch as rrt
    torch.set_num_threads(1)
    res = {"rank": "newcomer"}
    try:
        if os.environ.get("RR_GROW_JOIN") != "1":
            raise AssertionError("the newcomer was started without RR_GROW_JOIN=1")
        rrt.join(timeout=60)
        torch.manual_seed(2)  # not mlp()'s parameters: DDP must hand over rank 0's
        net = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(),
                                  torch.nn.Linear(32, 10)).double()
        grown(res, net)
    except Exception as e:  # noqa: BLE001 (reported to the parent, which fails the test)
        res["fatal"] = f"{type(e).__name__}: {e}"[:1500]
    with open(out + ".tmp", "w") as f:
        json.dump(res, f)
    os.rename(out + ".tmp", out)
    os._exit(0)


def rank_ddp(rank, world, victim, when, res):
    from torch.nn.parallel import DistributedDataParallel as DDP
    x, y, perm = data()
    net = mlp()
    ddp = DDP(net)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    state = {"step": -1}

    def die(g):  # the first layer's gradient comes last in the backward
        if rank == victim and state["step"] == when:
            os.kill(os.getpid(), signal.SIGKILL)
        return g
    net[0].weight.register_hook(die)
    ref = reference()
    step, diffs, losses = 0, [], []
    me, n = rank, world
    while step < STEPS:
        state["step"] = step
        xb, yb = batch(x, y, perm, step, me, n)
        opt.zero_grad()
        try:
            loss = torch.nn.functional.cross_entropy(ddp(xb), yb)
            loss.backward()
        except RuntimeError as e:
            if "failed_at" in res:
                raise
            res["failed_at"] = step
            survive(res, e)
            del ddp
            ddp = DDP(net)  # on the new default group: parameters from its rank 0
            me, n = dist.get_rank(), dist.get_world_size()
            continue  # the failed step again, split over the survivors
        opt.step()
        losses.append(loss.item())
        p = torch.cat([q.detach().reshape(-1) for q in net.parameters()])
        diffs.append(((p - ref[step]).abs() / (1 + ref[step].abs())).max().item())
        step += 1
    res["max_rel_diff"] = max(diffs)
    res["loss_first_last"] = [losses[0], losses[-1]]
    p = torch.cat([q.detach().reshape(-1) for q in net.parameters()])
    every = [torch.zeros_like(p) for _ in range(n)]
    dist.all_gather(every, p)
    res["identical"] = all(torch.equal(every[0], q) for q in every)
    res["members_n"] = n


def rank_main(case, rank, world, victim, when, out):
    import ringreduce.torch  # noqa: F401
    torch.set_num_threads(1)
    dist.init_process_group("ringreduce", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=20))
    res = {"rank": rank}
    try:
        if case == "ddp":
            rank_ddp(rank, world, victim, when, res)
        elif case == "grow":
            rank_grow(rank, world, victim, when, res)
        else:
            rank_collective(rank, world, victim, when, res, case == "shrink_group")
    except Exception as e:  # noqa: BLE001 (reported to the parent, which fails the test)
        res["fatal"] = f"{type(e).__name__}: {e}"[:1500]
    with open(out + ".tmp", "w") as f:
        json.dump(res, f)
    os.rename(out + ".tmp", out)
    os._exit(0)  # nothing left to tear down that could wait on the dead rank


def check(case, world, victim, res):
    bad = []
    survivors = [r for r in range(world) if r != victim]
    if victim in res:
        bad.append(f"rank {victim} was not killed: {res[victim]}")
    for r in survivors:
        x = res.get(r)
        if x is None:
            bad.append(f"rank {r}: no result (hung or died)")
            continue
        if "fatal" in x:
            bad.append(f"rank {r}: {x['fatal']}")
            continue
        if f"rank {victim}" not in x.get("error", ""):
            bad.append(f"rank {r}: the failure does not name rank {victim}: {x.get('error')}")
        if x.get("new_world") != world - 1 or x.get("new_rank") != survivors.index(r):
            bad.append(f"rank {r}: new rank {x.get('new_rank')} of {x.get('new_world')}, "
                       f"expected {survivors.index(r)} of {world - 1}")
        if case != "ddp":
            want = sum((s + 1) << 40 for s in survivors)
            if x.get("members") != survivors:
                bad.append(f"rank {r}: members {x.get('members')}, expected {survivors}")
            if x.get("sum") != [want] * 3 or x.get("bcast") != survivors[0] * 7 + 1:
                bad.append(f"rank {r}: all_reduce {x.get('sum')} (expected {want}), broadcast "
                           f"{x.get('bcast')} (expected {survivors[0] * 7 + 1})")
        else:
            if not x.get("identical"):
                bad.append(f"rank {r}: parameters differ across survivors")
            if x.get("max_rel_diff", 1) > 1e-9:
                bad.append(f"rank {r}: {x.get('max_rel_diff')} from the float64 reference "
                           "(allowed 1e-9)")
            first, last = x.get("loss_first_last", [0, 1])
            if not last < first:
                bad.append(f"rank {r}: the loss did not fall ({first} -> {last})")
    return bad


def check_grow(world, victim, res, pids):
    bad = [f"rank {victim} was not killed: {res[victim]}"] if victim in res else []
    survivors = [r for r in range(world) if r != victim]
    for r in survivors:
        x = res.get(r)
        if x is None:
            bad.append(f"rank {r}: no result (hung or died)")
        elif "fatal" in x:
            bad.append(f"rank {r}: {x['fatal']}")
        elif f"rank {victim}" not in x.get("error", ""):
            bad.append(f"rank {r}: the failure does not name rank {victim}: {x.get('error')}")
        elif "RR_ETIMEDOUT" not in x.get("nobody") or x.get("errored_after_nobody") != "None":
            bad.append(f"rank {r}: a growth nobody came to: {x.get('nobody')!r} (expected "
                       f"RR_ETIMEDOUT), then errored() {x.get('errored_after_nobody')}")
        elif (x.get("new_rank"), x.get("new_world")) != (survivors.index(r), world - 1):
            bad.append(f"rank {r}: rank {x.get('new_rank')} of {x.get('new_world')} after the "
                       f"shrink, expected {survivors.index(r)} of {world - 1}")
    if len(pids) <= world:
        return bad + ["the newcomer was never started (the victim did not die)"]
    want = [pids[r] for r in survivors] + [pids[world]]
    for r in survivors + [world]:
        x, who = res.get(r), f"rank {r}" if r < world else "the newcomer"
        if x is None or "fatal" in x:
            if r == world:
                bad.append(f"the newcomer: {x['fatal'] if x else 'no result (hung or died)'}")
            continue
        rank = survivors.index(r) if r < world else world - 1
        if (x.get("grown_rank"), x.get("grown_world")) != (rank, world):
            bad.append(f"{who}: rank {x.get('grown_rank')} of {x.get('grown_world')} after "
                       f"the growth, expected {rank} of {world}")
        if x.get("pids") != want:
            bad.append(f"{who}: members (pids) {x.get('pids')}, expected {want}")
        if x.get("sum") != [sum(want) << 30] * 3 or x.get("bcast") != want[0]:
            bad.append(f"{who}: all_reduce {x.get('sum')} (expected {sum(want) << 30}), "
                       f"broadcast {x.get('bcast')} (expected {want[0]})")
        if not x.get("identical"):
            bad.append(f"{who}: DDP's parameters differ across the grown group")
        if x.get("max_rel_diff", 1) > 1e-9:
            bad.append(f"{who}: {x.get('max_rel_diff')} from the float64 reference after "
                       "DDP's step (allowed 1e-9)")
    grown_at = {res[r].get("grown_at") for r in survivors if r in res}
    if len(grown_at) != 1:
        bad.append(f"the survivors grew at different iterations: {grown_at}")
    return bad


def digits_job(world, victim, delay, tmp, newcomer=False, extra=()):
    """examples/torch_digits.py --elastic on `world` ranks; kill `victim` `delay` s after
    epoch 0's line (victim None: undisturbed); with `newcomer`, start one more process
    (RR_GROW_JOIN=1) once it is dead, as index `world`; `extra`: more arguments. Returns
    (exit codes, outputs, hung ranks)."""
    import threading
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                          "torch_digits.py")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(common.free_port()),
               WORLD_SIZE=str(world))
    if newcomer:
        env["RR_GROW_ADDR"] = f"127.0.0.1:{common.free_port()}"
    cmd = [sys.executable, script, "--backend", "ringreduce", "--elastic", "--step-sleep-ms",
           "20", *extra]
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outs, started = [[] for _ in range(world + 1)], threading.Event()

    def read(r):
        for line in procs[r].stdout:
            outs[r].append(line)
            if line.startswith("epoch 0:"):
                started.set()
    readers = [threading.Thread(target=read, args=(r,), daemon=True) for r in range(world)]
    for t in readers:
        t.start()
    if victim is not None:
        if started.wait(120):
            time.sleep(delay)
            procs[victim].kill()  # SIGKILL
            if newcomer:  # the restarted worker: no RANK, as a replacement started by hand
                procs[victim].wait()
                # RR_TIMEOUT: a newcomer nobody takes in fails in 60 s, not the harness's 120
                procs.append(subprocess.Popen(cmd, env=dict(env, RR_GROW_JOIN="1",
                                                            RR_TIMEOUT="60"),
                                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                              text=True))
                readers.append(threading.Thread(target=read, args=(world,), daemon=True))
                readers[-1].start()
    hung, deadline = [], time.monotonic() + 120
    for r, p in enumerate(procs):
        try:
            p.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            hung.append(r)
            p.kill()
            p.wait()
    for t in readers:
        t.join(5)
    return [p.returncode for p in procs], ["".join(o) for o in outs[:len(procs)]], hung


def digits_grow_case(seed):
    """The tutorial with a death and a rejoin: see the module's docstring."""
    import re
    rnd = random.Random(seed)
    world, victim, delay = 4, rnd.randrange(4), rnd.uniform(0, 0.6)
    print(f"torch_elastic digits_grow world {world}: seed {seed} (RR_TEST_SEED): rank {victim} "
          f"killed {delay * 1000:.0f} ms after epoch 0's line, then a newcomer", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(3):
            # 8 epochs, and slower steps while the newcomer starts (a torch import: seconds
            # under load); the sleep changes nothing else, so the undisturbed run skips it.
            codes0, outs0, hung0 = digits_job(world, None, 0, tmp,
                                              extra=("--epochs", "8", "--step-sleep-ms", "0"))
            codes, outs, hung = digits_job(world, victim, delay, tmp, newcomer=True,
                                           extra=("--epochs", "8", "--step-sleep-ms", "50"))
            if attempt < 2 and any(common.port_clash(o) for o in outs0 + outs):
                continue
            break
    summary = r"accuracy ([0-9.]+)%; parameters bit-identical on all (\d+) ranks: (\w+)"
    acc0 = re.findall(summary, outs0[0])
    bad = [f"{'the newcomer' if r == world else f'rank {r}'}: still running after 120 s (a hang)"
           for r in hung0 + hung]
    if codes0 != [0] * world or not acc0:
        bad.append(f"the undisturbed run failed: exit codes {codes0}")
    survivors = [r for r in range(world) if r != victim]
    if codes[victim] != -signal.SIGKILL:
        bad.append(f"rank {victim} was not killed (exit {codes[victim]}): the run ended first")
    for r in survivors + [world]:
        if len(codes) > r and codes[r] != 0:
            bad.append(f"{'the newcomer' if r == world else f'rank {r}'}: exit {codes[r]}")
    if len(codes) <= world:
        bad.append("the newcomer was never started")
    lead, new = outs[survivors[0]], outs[world]
    got = re.findall(summary, lead)
    joined = re.findall(r"joined as rank (\d+) of (\d+) at epoch (\d+)", new)
    if "resumed with 3 ranks" not in lead or "world 3 -> 4" not in lead:
        bad.append(f"rank {survivors[0]} (the new rank 0) did not say it shrank to 3 and grew "
                   "back to 4")
    if not joined or joined[0][:2] != ("3", "4") or int(joined[0][2]) >= 8:
        bad.append(f"the newcomer did not join as rank 3 of 4: {joined}")
    if not got or got[0][1:] != ("4", "yes"):
        bad.append(f"the run did not end with 4 ranks, parameters bit-identical: {got}")
    elif acc0 and float(got[0][0]) < float(acc0[0][0]) - 2:
        bad.append(f"accuracy {got[0][0]}% after the death and the rejoin, {acc0[0][0]}% "
                   "undisturbed: more than 2 points lower")
    print(f"undisturbed: {acc0}; after the death and the rejoin: {got}; "
          f"{re.findall(r'(?:resumed with|elastic: world) .*', lead)}; newcomer: {joined}")
    if bad:
        for r, o in enumerate(outs):
            print(f"--- {'newcomer' if r == world else f'rank {r}'} (exit "
                  f"{codes[r] if r < len(codes) else None}):\n{o[-2500:]}")
        print("FAILED:\n  " + "\n  ".join(bad))
        sys.exit(1)
    print("ok")


def digits_case(seed):
    import re
    rnd = random.Random(seed)
    world, victim, delay = 4, rnd.randrange(4), rnd.uniform(0, 0.6)
    print(f"torch_elastic digits world {world}: seed {seed} (RR_TEST_SEED): rank {victim} killed "
          f"{delay * 1000:.0f} ms after epoch 0's line", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for attempt in range(3):
            codes0, outs0, hung0 = digits_job(world, None, 0, tmp)
            codes, outs, hung = digits_job(world, victim, delay, tmp)
            if attempt < 2 and any(common.port_clash(o) for o in outs0 + outs):
                continue
            break
    summary = r"accuracy ([0-9.]+)%; parameters bit-identical on all (\d+) ranks: (\w+)"
    acc = [re.findall(summary, o) for o in outs0 + outs]
    bad = [f"rank {r}: still running after 120 s (a hang)" for r in hung0 + hung]
    if codes0 != [0] * world or not acc[0]:
        bad.append(f"the undisturbed run failed: exit codes {codes0}")
    survivors = [r for r in range(world) if r != victim]
    if codes[victim] != -signal.SIGKILL:
        bad.append(f"rank {victim} was not killed (exit {codes[victim]}): the run ended first")
    for r in survivors:
        if codes[r] != 0:
            bad.append(f"rank {r}: exit {codes[r]}")
    lead = outs[survivors[0]]
    got = re.findall(summary, lead)
    if "resumed with 3 ranks" not in lead or not got or got[0][1:] != ("3", "yes"):
        bad.append(f"rank {survivors[0]} (the new rank 0) did not resume and finish with 3 "
                   f"identical ranks: {got}")
    elif acc[0] and float(got[0][0]) < float(acc[0][0][0]) - 2:
        bad.append(f"accuracy {got[0][0]}% after the death, {acc[0][0][0]}% undisturbed: more "
                   "than 2 points lower")
    print(f"undisturbed: {acc[0]}; after the death: {got}; "
          f"{re.findall(r'resumed with .*', lead)}")
    if bad:
        for r, o in enumerate(outs):
            print(f"--- rank {r} (exit {codes[r]}):\n{o[-2500:]}")
        print("FAILED:\n  " + "\n  ".join(bad))
        sys.exit(1)
    print("ok")


def main():
    case, world = sys.argv[1], int(sys.argv[2])
    if case == "digits_grow":
        return digits_grow_case(int(os.environ.get("RR_TEST_SEED", str(time.time_ns() % 100000))))
    if case == "digits":
        return digits_case(int(os.environ.get("RR_TEST_SEED", str(time.time_ns() % 100000))))
    seed = int(os.environ.get("RR_TEST_SEED", str(time.time_ns() % 100000)))
    rnd = random.Random(seed)
    victim = rnd.randrange(world)
    if case == "shrink_group":
        if not hasattr(dist, "shrink_group"):
            print(f"skipped: torch {torch.__version__} has no dist.shrink_group")
            sys.exit(77)
        # torch's shrink_group clones the old group's store for the new one: with rank 0,
        # the TCPStore's host, dead that waits for the store's timeout (docs/torch.md).
        victim = rnd.randrange(1, world)
    when = rnd.randrange(3, 40) if case != "ddp" else rnd.randrange(1, STEPS - 1)
    print(f"torch_elastic {case} world {world}: seed {seed} (RR_TEST_SEED): rank {victim} "
          f"killed at {'step' if case == 'ddp' else 'iteration'} {when}", flush=True)
    for attempt in range(3):
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(common.free_port()),
                       RR_GROW_ADDR=f"127.0.0.1:{common.free_port()}")
            procs = [subprocess.Popen([sys.executable, __file__, "--rank", case, str(r), str(world),
                                       str(victim), str(when), os.path.join(tmp, f"{r}.json")],
                                      env=env, stderr=subprocess.PIPE, text=True)
                     for r in range(world)]
            deadline, hung = time.monotonic() + 120, []
            if case == "grow":  # the restarted worker, once the victim is dead
                while procs[victim].poll() is None and time.monotonic() < deadline:
                    time.sleep(0.01)
                procs.append(subprocess.Popen(
                    [sys.executable, __file__, "--newcomer", os.path.join(tmp, f"{world}.json")],
                    env=dict(env, RR_GROW_JOIN="1"), stderr=subprocess.PIPE, text=True))
            errs = []
            for r, p in enumerate(procs):
                try:
                    _, e = p.communicate(timeout=max(deadline - time.monotonic(), 1))
                except subprocess.TimeoutExpired:
                    hung.append(r)
                    p.kill()
                    _, e = p.communicate()
                errs.append(e or "")
            res = {}
            for r in range(len(procs)):
                path = os.path.join(tmp, f"{r}.json")
                if os.path.exists(path):
                    res[r] = json.load(open(path))
        if any(common.port_clash(e) for e in errs) and attempt < 2:
            print("rendezvous port taken by another job: again on another port")
            continue
        break
    who = {world: "the newcomer"}  # case grow's extra process
    for r in sorted(res):
        x = dict(res[r], error=res[r].get("error", "")[:160])
        print(f"  {who.get(r, f'rank {r}')}: {json.dumps(x)[:900]}")
    bad = [f"{who.get(r, f'rank {r}')}: still running after 120 s (a hang)" for r in hung]
    bad += check(case, world, victim, res) if case != "grow" else \
        check_grow(world, victim, res, [p.pid for p in procs])
    if bad:
        for r, e in enumerate(errs):
            if e.strip():
                print(f"--- {who.get(r, f'rank {r}')} stderr:\n{e[-3000:]}")
        print("FAILED:\n  " + "\n  ".join(bad))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--newcomer":
        newcomer_main(sys.argv[2])
    elif len(sys.argv) > 1 and sys.argv[1] == "--rank":
        rank_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                  int(sys.argv[6]), sys.argv[7])
    else:
        main()
