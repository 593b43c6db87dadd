"""The torch.distributed API beyond the classic collectives, on the "ringreduce" backend,
against gloo in the same job where gloo does it: what torch 2.x added or renamed, and the
corners torch's own suite found. Each case runs where the installed torch has the API and
says "skipped (why)" where it does not, so one file serves 1.13 and 2.x.

    python tests/python/torch_api.py WORLD [CASE ...]

Cases (every rank checks every element, integers exactly, floats by sumorder.py's rule):
  names        every spelling of the renamed collectives (all_gather_into_tensor,
               reduce_scatter_tensor, all_to_all_single, gather_into_tensor and the
               deprecated _all_gather_base/_reduce_scatter_base), and no warning from torch
               for the current names
  coalesced    all_reduce_coalesced, all_gather_coalesced, _coalescing_manager over
               all_reduce, all_gather_into_tensor and reduce_scatter_tensor
  p2p_batch    batch_isend_irecv to and from every peer, 4 MiB each way (beyond what a
               transport buffers: issued in issue order this deadlocks), a mixed batch, and
               recv from any source (dist.recv(t) names each sender once)
  work         Work.wait(timeout), is_completed, is_success, exception, result,
               get_future, then() chains; a failed call surfaces once and the group goes on
  overlap      an output that overlaps itself (expand()) is refused before the call; a
               failure inside one call's copy-out fails that call only
  dtypes       broadcast, all_gather, send/recv of dtypes the library has no type for
               (int16, complex64, float8 where torch has it); complex all_reduce SUM/AVG
  sparse       sparse COO all_reduce SUM, against gloo's
  groups       new_group(use_local_synchronization=True), new_subgroups, split_group,
               init_device_mesh("cpu", ...), functional collectives
  lifecycle    abort() fails an in-flight call at once; shutdown() waits, then frees;
               init_process_group(device_id=cpu)
Exit 0, 1 or 77."""

import datetime
import inspect
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import sumorder  # noqa: E402

torch, dist, mp = common.torch_or_skip()

CASES = ["names", "coalesced", "p2p_batch", "work", "overlap", "dtypes", "sparse", "groups",
         "lifecycle"]
check = common.check


def rnd(seed, rank, n, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype.is_floating_point:
        return (torch.rand(n, generator=g, dtype=torch.float64) * 8 - 4).to(dtype)
    return torch.randint(-100, 100, (n,), generator=g).to(dtype)


def skip(rank, case, why):
    if rank == 0:
        print(f"  {case}: skipped ({why})")


def close(got, inputs, what, op="SUM"):
    if got.numel() == 0:
        return
    want = sum(x.double() for x in inputs)
    bound = sumorder.bound(inputs, op) + 1e-300
    err = (got.double() - want).abs()
    check(bool((err <= bound).all()), f"{what}: off by {err.max().item():.3e} (bound "
          f"{bound.max().item():.3e})")


def case_names(rank, world, gloo):
    n = 5
    ins = [rnd(1, r, n) for r in range(world)]
    names = []

    def gathered(fn, name):
        out = torch.full((world * n,), -1.0)
        fn(out, ins[rank])
        check(torch.equal(out, torch.cat(ins)), name)

    def scattered(fn, name, seed):
        big = [rnd(seed, r, world * n) for r in range(world)]
        out = torch.full((n,), -1.0)
        fn(out, big[rank])
        close(out, [b[rank * n:(rank + 1) * n] for b in big], name)

    # The current names must not warn; the deprecated ones still work (torch warns of them).
    for deprecated, gather, scatter in ((False, "all_gather_into_tensor", "reduce_scatter_tensor"),
                                        (True, "_all_gather_base", "_reduce_scatter_base")):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore" if deprecated else "error")
            if hasattr(dist, gather):
                gathered(getattr(dist, gather), gather)
                names.append(gather)
            if hasattr(dist, scatter):
                scattered(getattr(dist, scatter), scatter, 2 + deprecated)
                names.append(scatter)
            if deprecated:
                continue
            if hasattr(dist, "all_gather_into_tensor"):
                out2 = torch.full((world, n), -1.0)  # the stacked form
                dist.all_gather_into_tensor(out2, ins[rank])
                check(torch.equal(out2, torch.stack(ins)), "all_gather_into_tensor (stacked)")
            gathered(lambda o, i: dist.all_to_all_single(o, torch.cat([i] * world)),
                     "all_to_all_single")
            names.append("all_to_all_single")
            if hasattr(dist, "gather_into_tensor"):
                for root in range(world):
                    out = torch.full((world * n,), -1.0)
                    dist.gather_into_tensor(ins[rank], out if rank == root else None, dst=root)
                    if rank == root:
                        check(torch.equal(out, torch.cat(ins)), f"gather_into_tensor to {root}")
                names.append("gather_into_tensor")
    return ", ".join(names)


def case_coalesced(rank, world, gloo):
    done = []
    ts = [rnd(4, rank, k) for k in (3, 0, 7)]
    ins = [[rnd(4, r, k) for k in (3, 0, 7)] for r in range(world)]
    if hasattr(dist, "all_reduce_coalesced"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch marks it deprecated
            dist.all_reduce_coalesced(ts)
        for i, t in enumerate(ts):
            close(t, [x[i] for x in ins], f"all_reduce_coalesced tensor {i}")
        done.append("all_reduce_coalesced")
    if hasattr(dist, "all_gather_coalesced"):
        mine = [rnd(5, rank, 4), rnd(9, rank, 2)]  # torch wants one dtype
        outs = [[torch.full((4,), -1.0), torch.full((2,), -1.0)] for _ in range(world)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch marks it deprecated
            dist.all_gather_coalesced(outs, mine)
        for r in range(world):
            check(torch.equal(outs[r][0], rnd(5, r, 4)) and torch.equal(outs[r][1], rnd(9, r, 2)),
                  f"all_gather_coalesced block from rank {r}")
        done.append("all_gather_coalesced")
    cm = getattr(dist.distributed_c10d, "_coalescing_manager", None)
    if cm is not None and "device" in str(inspect.signature(cm)) and hasattr(dist, "all_gather_into_tensor"):
        ar = [rnd(6, rank, k) for k in (4, 9)]
        with cm(device=torch.device("cpu"), async_ops=True) as m:
            for t in ar:
                dist.all_reduce(t)
        m.wait()
        for i, t in enumerate(ar):
            close(t, [rnd(6, r, (4, 9)[i]) for r in range(world)], f"coalesced all_reduce {i}")
        outs = [torch.full((world * k,), -1.0) for k in (3, 5)]
        with cm(device=torch.device("cpu")):
            for o, k in zip(outs, (3, 5)):
                dist.all_gather_into_tensor(o, rnd(7, rank, k))
        for o, k in zip(outs, (3, 5)):
            check(torch.equal(o, torch.cat([rnd(7, r, k) for r in range(world)])),
                  f"coalesced all_gather_into_tensor ({k})")
        outs = [torch.full((k,), -1.0) for k in (2, 6)]
        with cm(device=torch.device("cpu")):
            for o, k in zip(outs, (2, 6)):
                dist.reduce_scatter_tensor(o, rnd(8, rank, world * k))
        for o, k in zip(outs, (2, 6)):
            close(o, [rnd(8, r, world * k)[rank * k:(rank + 1) * k] for r in range(world)],
                  f"coalesced reduce_scatter_tensor ({k})")
        done.append("_coalescing_manager (all_reduce, all_gather_into_tensor, "
                    "reduce_scatter_tensor)")
    return ", ".join(done)


def case_p2p_batch(rank, world, gloo):
    if world < 2:
        return None
    n = 1 << 20  # 4 MiB of float32 each way to every peer
    sends = {p: rnd(10 + p, rank, n) for p in range(world) if p != rank}
    recvs = {p: torch.full((n,), -1.0) for p in range(world) if p != rank}
    ops = []
    for p in range(world):
        if p != rank:
            ops.append(dist.P2POp(dist.isend, sends[p], p))
            ops.append(dist.P2POp(dist.irecv, recvs[p], p))
    t0 = time.monotonic()
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    for p, t in recvs.items():
        check(torch.equal(t, rnd(10 + rank, p, n)), f"batch_isend_irecv from rank {p}")
    # A mixed batch: receives first, int64 and float16, two messages to one peer (in order).
    right, left = (rank + 1) % world, (rank - 1) % world
    a = torch.full((7,), -1, dtype=torch.int64)
    b = torch.full((3,), -1.0, dtype=torch.float16)
    c = torch.full((300000,), -1.0)
    ops = [dist.P2POp(dist.irecv, a, left), dist.P2POp(dist.irecv, b, left),
           dist.P2POp(dist.irecv, c, left),
           dist.P2POp(dist.isend, rnd(20, rank, 7, torch.int64), right),
           dist.P2POp(dist.isend, rnd(21, rank, 3, torch.float16), right),
           dist.P2POp(dist.isend, rnd(22, rank, 300000), right)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check(torch.equal(a, rnd(20, left, 7, torch.int64)) and
          torch.equal(b, rnd(21, left, 3, torch.float16)) and torch.equal(c, rnd(22, left, 300000)),
          f"mixed batch from rank {left}")
    # recv from any source: rank 0 takes every other rank's message in whatever order they
    # come; dist.recv returns the sender.
    if rank == 0:
        seen = []
        for _ in range(world - 1):
            got = torch.full((5,), -1, dtype=torch.int64)
            src = dist.recv(got)
            check(torch.equal(got, rnd(30, src, 5, torch.int64)), f"recv from any: data of {src}")
            seen.append(src)
        check(sorted(seen) == list(range(1, world)), f"recv from any: senders {seen}")
    else:
        time.sleep(0.05 * (world - rank))  # the last rank first
        dist.send(rnd(30, rank, 5, torch.int64), 0)
    return (f"every peer, 4 MiB each way, in {time.monotonic() - t0:.2f} s; a mixed batch; "
            "recv from any source")


def case_work(rank, world, gloo):
    t = torch.full((1000,), float(rank))
    w = dist.all_reduce(t, async_op=True)
    check(w.wait(timeout=datetime.timedelta(seconds=30)) is True, "wait(timeout) is not True")
    check(w.is_completed() and w.is_success() and w.exception() is None, "a finished work's state")
    want = float(sum(range(world)))
    check(torch.equal(w.result()[0], torch.full((1000,), want)), "result()")
    f = dist.all_reduce(torch.ones(3), async_op=True).get_future()
    chained = f.then(lambda fut: fut.value()[0] * 2)
    check(torch.equal(chained.wait(), torch.full((3,), 2.0 * world)), "then() on get_future()")
    # A refused call raises once, on that call; the group and its futures thread go on.
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int16))
        common.fail("int16 all_reduce was not refused")
    except RuntimeError as e:
        check("int16" in str(e), f"refusal says {e}")
    for i in range(3):
        v = dist.all_reduce(torch.ones(2), async_op=True).get_future().wait()[0]
        check(torch.equal(v, torch.full((2,), float(world))), f"future {i} after a refusal")
    done = "wait(timeout), state, result, get_future + then, refusal then 3 futures"
    results = getattr(torch._C._distributed_c10d, "WorkResult", None)
    if results is not None and hasattr(dist.all_reduce(torch.ones(1), async_op=True),
                                       "get_future_result"):
        r = dist.all_reduce(torch.ones(1), async_op=True).get_future_result().wait()
        check(r == results.SUCCESS, f"get_future_result: {r}")
        done += ", get_future_result"
    return done


def case_overlap(rank, world, gloo):
    bad = torch.ones(1).expand(4)
    for name, fn in (("all_reduce", lambda: dist.all_reduce(bad)),
                     ("broadcast", lambda: dist.broadcast(bad, 0)),
                     ("all_gather", lambda: dist.all_gather([bad] * world, torch.ones(4)))):
        try:
            fn()
            common.fail(f"{name} into an expand()ed tensor was not refused")
        except RuntimeError as e:
            check("overlaps itself" in str(e), f"{name}: refusal says {e}")
    fut = None
    for i in range(3):  # the group goes on, futures too
        t = torch.ones(4)
        fut = dist.all_reduce(t, async_op=True).get_future()
        check(torch.equal(fut.wait()[0], torch.full((4,), float(world))), f"after refusal {i}")
    # A tensor given new memory while its call is in flight: named at completion, once, and
    # the group goes on. (The old memory stays alive here, in `base`, so that the library's
    # writes land somewhere harmless; with freed memory it is the user's crash.)
    base = torch.ones(1 << 16)
    t = base[: 1 << 14]
    if rank == 0:
        time.sleep(0.5)  # so that rank 1's call is still in flight when it moves the tensor
    work = dist.all_reduce(t, async_op=True)
    t.set_(torch.zeros(8))
    try:
        work.wait()
        moved_refused = False
    except RuntimeError as e:
        moved_refused = "got new memory" in str(e)
    if world > 1 and rank != 0:
        check(moved_refused, "a tensor moved during its call was not named")
    t = torch.ones(4)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((4,), float(world))), "after a moved tensor")
    # A transposed view does not overlap: it is copied in and out.
    m = rnd(30, rank, 12).view(3, 4).t()
    dist.all_reduce(m)
    close(m.reshape(-1), [rnd(30, r, 12).view(3, 4).t().reshape(-1) for r in range(world)],
          "transposed view")
    return ("expand()ed outputs refused by all_reduce, broadcast, all_gather; a tensor moved "
            "in flight named; group goes on")


def case_dtypes(rank, world, gloo):
    kinds = [torch.int16, torch.complex64, torch.complex128]
    for name in ("float8_e4m3fn", "uint16", "uint32"):
        if hasattr(torch, name):
            kinds.append(getattr(torch, name))
    done = []
    for dt in kinds:
        base = rnd(40, rank, 6, torch.float64)
        if dt.is_complex:
            mine = torch.complex(base, -base).to(dt)
        elif dt.is_floating_point:
            mine = base.to(dt)
        else:
            try:
                mine = (base.abs() * 10).to(dt)
            except (RuntimeError, TypeError):
                continue
        def of(r):
            b = rnd(40, r, 6, torch.float64)
            return torch.complex(b, -b).to(dt) if dt.is_complex else (
                b.to(dt) if dt.is_floating_point else (b.abs() * 10).to(dt))
        t = mine.clone()
        dist.broadcast(t, 0)
        check(t.view(torch.uint8).equal(of(0).view(torch.uint8)), f"broadcast {dt}")
        outs = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(outs, mine)
        for r in range(world):
            check(outs[r].view(torch.uint8).equal(of(r).view(torch.uint8)), f"all_gather {dt} from {r}")
        if world > 1:
            right, left = (rank + 1) % world, (rank - 1) % world
            got = torch.zeros_like(mine)
            reqs = [dist.isend(mine, right), dist.irecv(got, left)]
            for q in reqs:
                q.wait()
            check(got.view(torch.uint8).equal(of(left).view(torch.uint8)), f"send/recv {dt}")
        if dt.is_complex:
            t = mine.clone()
            dist.all_reduce(t)
            parts = [torch.view_as_real(of(r)).reshape(-1) for r in range(world)]
            close(torch.view_as_real(t).reshape(-1), parts, f"complex all_reduce {dt}")
            g = mine.clone()
            dist.all_reduce(g, group=gloo)
            check(bool((torch.view_as_real(t).double() - torch.view_as_real(g).double()).abs().max()
                       <= 2 * sumorder.bound(parts, "SUM").max() + 1e-300), f"complex {dt} vs gloo")
            try:
                dist.all_reduce(mine.clone(), op=dist.ReduceOp.MAX)
                common.fail(f"MAX of {dt} was not refused")
            except (RuntimeError, ValueError) as e:  # torch 2.x refuses it before we see it
                check("complex" in str(e), f"complex MAX refusal says {e}")
        done.append(str(dt).replace("torch.", ""))
    return "moved: " + ", ".join(done) + "; complex SUM against gloo"


def sparse_input(r):
    """Rank r's sparse COO input: 2 + r entries, some landing where other ranks' do."""
    g = torch.Generator().manual_seed(50 + r)
    k = 2 + r
    idx = torch.stack([torch.randint(0, 6, (k,), generator=g), torch.randint(0, 3, (k,), generator=g)])
    import ringreduce.torch as rt
    return torch.sparse_coo_tensor(idx, torch.randn(k, generator=g), (6, 3), **rt._SPARSE_CHECKED)


def case_sparse(rank, world, gloo):
    ours, theirs = sparse_input(rank), sparse_input(rank)
    dist.all_reduce(ours)
    dist.all_reduce(theirs, group=gloo)
    check(ours.is_sparse, "the result is no longer sparse")
    dense = [sparse_input(r).to_dense().reshape(-1) for r in range(world)]
    close(ours.to_dense().reshape(-1), dense, "sparse all_reduce")
    check(bool(((ours.to_dense() - theirs.to_dense()).abs().reshape(-1)
                <= 2 * sumorder.bound(dense, "SUM") + 1e-300).all()), "sparse all_reduce vs gloo")
    return f"{world} ranks with 2..{world + 1} entries each, against a float64 sum and gloo's"


def case_groups(rank, world, gloo):
    done = []
    if "use_local_synchronization" in str(inspect.signature(dist.new_group)) and world > 1:
        mine = [r for r in range(world) if r % 2 == rank % 2]
        sub = dist.new_group(mine, use_local_synchronization=True)
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=sub)
        check(t.item() == float(sum(mine)), f"local-sync subgroup {mine}: {t.item()}")
        done.append("new_group(use_local_synchronization)")
    if hasattr(dist, "new_subgroups") and world % 2 == 0:
        try:
            cur, subs = dist.new_subgroups(group_size=2)
        except ValueError as e:  # torch 1.13 refuses without CUDA, whatever the backend
            cur = None
            done.append(f"new_subgroups refused by this torch ({e})")
        if cur is not None:
            t = torch.tensor([float(rank)])
            dist.all_reduce(t, group=cur)
            base = rank - rank % 2
            check(t.item() == float(base + base + 1), f"new_subgroups: {t.item()}")
            done.append("new_subgroups")
    if hasattr(dist, "split_group"):
        try:
            sub = dist.split_group(split_ranks=[[r for r in range(world)]])
            t = torch.ones(1)
            dist.all_reduce(t, group=sub)
            check(t.item() == world, "split_group all_reduce")
            done.append("split_group")
        except RuntimeError as e:
            done.append(f"split_group refused by torch ({str(e).splitlines()[0][:80]})")
    try:
        from torch.distributed.device_mesh import init_device_mesh
    except ImportError:
        init_device_mesh = None
    if init_device_mesh is not None and world % 2 == 0:
        mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=mesh.get_group("tp"))
        base = rank - rank % 2
        check(t.item() == float(2 * base + 1), f"mesh tp all_reduce: {t.item()}")
        done.append("init_device_mesh")
        try:
            import torch.distributed._functional_collectives as fc
        except ImportError:
            fc = None
        if fc is not None:
            x = rnd(60, rank, 8)
            y = fc.all_reduce(x, "sum", mesh.get_group("tp"))
            y = fc.wait_tensor(y) if hasattr(fc, "wait_tensor") else y
            pair = [rnd(60, base, 8), rnd(60, base + 1, 8)]
            close(y, pair, "functional all_reduce")
            gather = getattr(fc, "all_gather_single", None) or fc.all_gather_tensor  # 2.15 renamed
            z = gather(x, 0, mesh.get_group("tp"))
            z = fc.wait_tensor(z) if hasattr(fc, "wait_tensor") else z
            check(torch.equal(z, torch.cat(pair)), "functional all_gather_tensor")
            scatter = getattr(fc, "reduce_scatter_single", None) or fc.reduce_scatter_tensor
            r = scatter(torch.cat([x, x]), "sum", 0, mesh.get_group("tp"))
            r = fc.wait_tensor(r) if hasattr(fc, "wait_tensor") else r
            close(r, pair, "functional reduce_scatter_tensor")
            done.append("functional all_reduce, all_gather_tensor, reduce_scatter_tensor")
            if hasattr(torch, "compile"):
                g = torch.compile(lambda v: fc.all_reduce(v * 2, "sum", mesh.get_group("tp")),
                                  backend="eager")
                y = g(x)
                y = fc.wait_tensor(y) if hasattr(fc, "wait_tensor") else y
                close(y, [2 * p for p in pair], "torch.compile'd functional all_reduce")
                done.append("torch.compile of it")
    try:
        import torch.distributed.nn.functional as dnf
    except ImportError:
        dnf = None
    if dnf is not None and hasattr(dnf, "all_reduce"):
        x = rnd(61, rank, 3).requires_grad_()
        y = dnf.all_reduce(x * 2)
        y.sum().backward()
        close(y.detach(), [2 * rnd(61, r, 3) for r in range(world)], "autograd all_reduce")
        check(torch.equal(x.grad, torch.full((3,), 2.0 * world)), f"autograd all_reduce's gradient {x.grad}")
        done.append("torch.distributed.nn all_reduce with its backward")
    return ", ".join(done)


def lifecycle(rank, world, port, tmp):
    """Its own job: abort() and shutdown() end groups as torch 2.x's callers expect."""
    import threading
    import ringreduce.torch  # noqa: F401
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    kw = {}
    if "device_id" in str(inspect.signature(dist.init_process_group)):
        kw["device_id"] = torch.device("cpu", 0)
    dist.init_process_group("ringreduce", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60), **kw)
    pg = dist.group.WORLD
    t = torch.ones(3)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((3,), float(world))), "all_reduce after init")
    # shutdown() on a group with a call in flight waits for it, then frees the group.
    t = torch.ones(1 << 16)
    w = dist.all_reduce(t, async_op=True)
    sub = dist.new_group(list(range(world)))
    dist.all_reduce(torch.ones(1), group=sub)
    if hasattr(sub, "shutdown"):
        sub.shutdown()
        try:
            dist.all_reduce(torch.ones(1), group=sub)
            common.fail("a call on a shut-down group did not raise")
        except RuntimeError as e:
            check("shut down" in str(e), f"after shutdown: {e}")
    w.wait()
    check(torch.equal(t, torch.full((1 << 16,), float(world))), "the call in flight at shutdown")
    # abort(): rank 0 starts a call that rank 1 never joins; an abort from another thread
    # fails it at once, and the peers' next calls fail too, naming it.
    if rank == 0:
        w = dist.all_reduce(torch.ones(4), async_op=True)
        threading.Timer(0.5, pg.abort).start()
        t0 = time.monotonic()
        try:
            w.wait()
            common.fail("the aborted call succeeded")
        except RuntimeError as e:
            took = time.monotonic() - t0
            check(took < 10 and "abort" in str(e), f"aborted call: {took:.1f} s: {e}")
    else:
        time.sleep(2)
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(4))
            common.fail("a call after rank 0's abort succeeded")
        except RuntimeError as e:
            check(time.monotonic() - t0 < 10 and "rank 0" in str(e), f"after rank 0 aborted: {e}")
    t0 = time.monotonic()
    dist.destroy_process_group()
    check(time.monotonic() - t0 < 10, "destroy_process_group after an abort took too long")
    with open(os.path.join(tmp, f"ok{rank}"), "w") as f:
        f.write("ok")


def run(rank, world, port, cases):
    import ringreduce.torch  # noqa: F401
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # registering and starting the backend warns of nothing
        dist.init_process_group("ringreduce", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=60))
    gloo = dist.new_group(list(range(world)), backend="gloo")
    for case in cases:
        got = globals()["case_" + case](rank, world, gloo)
        if rank == 0:
            print(f"  {case}: " + (got if got else "skipped (needs 2 or more ranks, or this "
                                                  "torch lacks it)"))
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    world = int(sys.argv[1])
    cases = sys.argv[2:] or CASES
    print(f"torch_api, world {world}, torch {torch.__version__}:")
    if "lifecycle" in cases:
        cases.remove("lifecycle")
        if world > 1:
            import tempfile
            with tempfile.TemporaryDirectory() as tmp:
                common.spawn(lifecycle, world, (world, common.free_port(), tmp))
                if len(os.listdir(tmp)) != world:
                    print("FAILED: lifecycle: not every rank finished")
                    sys.exit(1)
            print("  lifecycle: shutdown waits for the call in flight and refuses later ones; "
                  "abort fails an in-flight call at once and the peers' next calls")
    if cases:
        common.spawn(run, world, (world, common.free_port(), cases))
