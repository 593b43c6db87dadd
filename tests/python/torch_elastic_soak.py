"""Issue 26's kill trials through the "ringreduce" backend: tests/python/torch_elastic.py's
`collective` case (a random rank killed by SIGKILL at a random iteration; the survivors
revoke, shrink, check the new group and run collectives on it) run TRIALS times, each as its
own job, and the outcomes counted (label "soak": minutes to hours; docs/torch.md, "Elastic").

    RR_TRANSPORT=tcp|shm|auto python3 tests/python/torch_elastic_soak.py WORLD TRIALS

Trial i runs with RR_TEST_SEED = base + i, base printed (RR_TEST_SEED sets it), so any trial
runs again alone with `RR_TEST_SEED=<seed> python3 tests/python/torch_elastic.py collective
WORLD`. RR_TRANSPORT passes through to every rank (the library's default, auto, if unset).

Each trial ends as one of:
  shrunk  every survivor reached the same new group (members, new ranks, then an exact
          all_reduce, a broadcast and a barrier on it): the case exits 0;
  error   every survivor the case failed on raised an error from the library (a
          RuntimeError naming ringreduce), in bounded time: issue 26 allows it;
  hang    a survivor still running at the case's own limit (120 s), or the case itself
          running past this script's limit for it;
  wrong   anything else: a survivor with a wrong group or result, one that died without a
          word, an error not from the library, or one not naming the dead rank.
Exit 1 if any trial hung or went wrong, 77 if the case skipped (no torch), 0 otherwise."""

import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CASE = os.path.join(HERE, "torch_elastic.py")
LIMIT_S = 300  # per trial: the case gives its ranks 120 s, and each rank imports torch first

# A survivor's fatal error as the case reports it ("rank R: Type: message"), from the library.
CLEAR = re.compile(r"^rank \d+: \w*Error: .*ringreduce")
HUNG = re.compile(r"^rank \d+: still running after \d+ s")


def outcome(rc, out):
    """(shrunk|error|hang|wrong|skip, the case's FAILED lines)."""
    if rc == 0:
        return "shrunk", []
    if rc == 77:
        return "skip", []
    lines = out.split("FAILED:\n", 1)[1].splitlines() if "FAILED:\n" in out else []
    bad = [ln.strip() for ln in lines if ln.startswith("  ")]
    if any(HUNG.match(b) for b in bad):
        return "hang", bad
    if bad and all(CLEAR.match(b) for b in bad):
        return "error", bad
    return "wrong", bad or [f"exit {rc} without a verdict"]


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    world, trials = int(sys.argv[1]), int(sys.argv[2])
    base = int(os.environ.get("RR_TEST_SEED", str(time.time_ns() % 1000000)))
    transport = os.environ.get("RR_TRANSPORT", "auto")
    print(f"torch_elastic_soak: world {world}, RR_TRANSPORT={transport}, {trials} trials, "
          f"base seed {base} (RR_TEST_SEED; trial i runs with base + i)", flush=True)
    counts = {"shrunk": 0, "error": 0, "hang": 0, "wrong": 0}
    load0, t0 = os.getloadavg()[0], time.monotonic()
    run = 0
    for i in range(trials):
        seed = base + i
        env = dict(os.environ, RR_TEST_SEED=str(seed))
        start = time.monotonic()
        try:
            p = subprocess.run([sys.executable, CASE, "collective", str(world)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=LIMIT_S)
            kind, bad = outcome(p.returncode, p.stdout)
            out = p.stdout
        except subprocess.TimeoutExpired as e:
            out = e.stdout or ""
            if isinstance(out, bytes):
                out = out.decode(errors="replace")
            kind, bad = "hang", [f"the case still running after {LIMIT_S} s"]
        if kind == "skip":
            print(out.strip().splitlines()[-1] if out.strip() else "skipped")
            return 77
        run += 1
        counts[kind] += 1
        head = out.splitlines()[0] if out else ""
        victim = re.search(r"rank \d+ killed at iteration \d+", head)
        print(f"trial {i} seed {seed}: {kind} ({victim.group(0) if victim else '?'}, "
              f"{time.monotonic() - start:.1f} s)", flush=True)
        if kind != "shrunk":
            print("  " + "\n  ".join(bad))
        if kind in ("hang", "wrong"):
            print(f"--- the case's output (RR_TEST_SEED={seed}):\n{out[-6000:]}", flush=True)
    elapsed = time.monotonic() - t0
    failed = counts["hang"] + counts["wrong"]
    print(f"torch_elastic_soak: world {world}, RR_TRANSPORT={transport}, {run} trials, "
          f"{failed} failed; {counts['shrunk']} shrunk (every survivor in the same new group), "
          f"{counts['error']} a clear error from the library, {counts['hang']} hung, "
          f"{counts['wrong']} wrong; {elapsed / max(run, 1):.1f} s per trial, load "
          f"{load0:.1f} -> {os.getloadavg()[0]:.1f}; base seed {base}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
