"""torchft's Manager on ringreduce (ringreduce.torchft.ProcessGroupRingReduce), one replica
killed with SIGKILL (issue 26 item 5).

    build-venv/torch-2.15.0/bin/python tests/python/torchft_elastic.py

tools/torch_env.sh installs torchft into the torch 2.x environment; elsewhere RR_TORCHFT_SITE
may name a directory holding it (pip install --target DIR torchft plus its opentelemetry
dependencies, without torch); without torchft the test exits 77. The parent runs torchft's lighthouse
(min_replicas 2); three replicas of one rank each run steps of start_quorum, an exact
all_reduce (replica i adds i + 1, SUM, float64) through the Manager, should_commit. The
replica picked by RR_TEST_SEED kills itself in a random step, after the quorum that includes
it and before the all_reduce. Every survivor must: reach step 8;
see a step not committed, with errored() set (the failure noticed); every committed step's
sum exact for its quorum (any two or three before the death, exactly the survivors after
it); finish within the job's 150 s. Exit 0, 1 or 77."""

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
if os.environ.get("RR_TORCHFT_SITE"):
    sys.path.insert(0, os.environ["RR_TORCHFT_SITE"])
import common  # noqa: E402

torch, dist, mp = common.torch_or_skip()
try:
    import torchft  # noqa: F401
    from torchft._torchft import LighthouseServer
except ImportError as e:
    print(f"skipped: no torchft for {sys.executable} ({e}); set RR_TORCHFT_SITE")
    sys.exit(77)

STEPS = 8
REPLICAS = 3


def replica(i, lighthouse, victim, when, out):
    from datetime import timedelta

    from torchft.manager import Manager

    from ringreduce.torchft import ProcessGroupRingReduce
    torch.set_num_threads(1)
    state = {"w": torch.zeros(1)}
    # The replica group's store, which torchrun would host: the Manager is its client.
    port = common.free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # noqa: F841
    manager = Manager(pg=ProcessGroupRingReduce(timeout=timedelta(seconds=10)),
                      min_replica_size=2, load_state_dict=lambda sd: state.update(sd),
                      state_dict=lambda: dict(state), replica_id=f"replica{i}",
                      lighthouse_addr=lighthouse, store_addr="127.0.0.1",
                      store_port=port, rank=0, world_size=1,
                      use_async_quorum=False, timeout=timedelta(seconds=10),
                      quorum_timeout=timedelta(seconds=60),
                      connect_timeout=timedelta(seconds=10))
    # Start together: a replica still importing torch when the others ask for a quorum is
    # left out of it, joins later and heals to their step, perhaps past the kill.
    here = os.path.dirname(out)
    open(os.path.join(here, f"ready{i}"), "w").close()
    deadline = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(here, f"ready{r}")) for r in range(REPLICAS)):
        if time.monotonic() > deadline:
            raise RuntimeError("the other replicas did not start within 60 s")
        time.sleep(0.02)
    log, tries = [], 0
    while manager.current_step() < STEPS and tries < 60:
        tries += 1
        manager.start_quorum()
        if i == victim and manager.current_step() == when:  # in the quorum, before the data
            os.kill(os.getpid(), signal.SIGKILL)
        t = torch.tensor([float(i + 1)], dtype=torch.float64)
        manager.allreduce(t, reduce_op=dist.ReduceOp.SUM).wait()
        err = manager.errored()
        ok = manager.should_commit()
        log.append({"sum": t.item(), "commit": ok, "participants": manager.num_participants(),
                    "errored": str(err)[:200] if err else None})
    with open(out + ".tmp", "w") as f:
        json.dump({"committed": manager.current_step(), "log": log}, f)
    os.rename(out + ".tmp", out)
    os._exit(0)


def main():
    seed = int(os.environ.get("RR_TEST_SEED", str(time.time_ns() % 100000)))
    rnd = random.Random(seed)
    victim, when = rnd.randrange(REPLICAS), rnd.randrange(1, STEPS - 2)
    print(f"torchft_elastic: seed {seed} (RR_TEST_SEED): replica {victim} killed in step "
          f"{when}", flush=True)
    # The first quorum waits (up to 20 s) for all three replicas to start; later ones form
    # from the replicas that still send heartbeats (a silent one is dropped after 1 s).
    server = LighthouseServer(bind="[::]:0", min_replicas=2, join_timeout_ms=20000,
                              heartbeat_timeout_ms=1000)
    with tempfile.TemporaryDirectory() as tmp:
        procs = [subprocess.Popen([sys.executable, __file__, "--replica", str(i), server.address(),
                                   str(victim), str(when), os.path.join(tmp, f"{i}.json")],
                                  stderr=subprocess.PIPE, text=True) for i in range(REPLICAS)]
        deadline, hung, errs = time.monotonic() + 150, [], []
        for i, p in enumerate(procs):
            try:
                _, e = p.communicate(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                hung.append(i)
                p.kill()
                _, e = p.communicate()
            errs.append(e or "")
        res = {i: json.load(open(os.path.join(tmp, f"{i}.json"))) for i in range(REPLICAS)
               if os.path.exists(os.path.join(tmp, f"{i}.json"))}
    server.shutdown()
    bad = [f"replica {i}: still running after 150 s (a hang)" for i in hung]
    if victim in res:
        bad.append(f"replica {victim} was not killed")
    after = float(sum(range(1, REPLICAS + 1)) - victim - 1)
    for i in (r for r in range(REPLICAS) if r != victim):
        x = res.get(i)
        print(f"  replica {i}: {json.dumps(x)[:1500]}")
        if x is None:
            bad.append(f"replica {i}: no result")
            continue
        if x["committed"] != STEPS:
            bad.append(f"replica {i}: {x['committed']} steps committed, expected {STEPS}")
        failed = [k for k, s in enumerate(x["log"]) if not s["commit"]]
        if not failed or not all(x["log"][k]["errored"] for k in failed):
            bad.append(f"replica {i}: the death was not noticed (no step failed with "
                       "errored() set)")
            continue
        for k, s in enumerate(x["log"]):
            if not s["commit"]:
                continue
            # Before the death a quorum may be any two or three replicas (one may still be
            # starting); after it, exactly the two survivors.
            n = s["participants"]
            ok = [float(sum(c) + i + 1) for c in itertools.combinations(
                [r + 1 for r in range(REPLICAS) if r != i], n - 1)]
            if (k > failed[0] and (n, s["sum"]) != (REPLICAS - 1, after)) or s["sum"] not in ok:
                bad.append(f"replica {i}: step {k} committed with sum {s['sum']} from {n} "
                           f"replicas (after the death: {after} from {REPLICAS - 1})")
    if bad:
        for i, e in enumerate(errs):
            print(f"--- replica {i} stderr (end):\n{e[-2500:]}")
        print("FAILED:\n  " + "\n  ".join(bad))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--replica":
        replica(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])
    else:
        main()
