"""torch.distributed on the "ringreduce" backend against gloo in the same job.

    /usr/bin/python3 tests/python/torch_collectives.py WORLD

Every rank joins a job whose default group is ringreduce and makes a gloo group of the same
ranks beside it. Each collective, dtype, op, root and layout then runs on both with the same
inputs; every rank checks its result against gloo's (where gloo does that combination) and
always against a reference it computes itself, from the inputs every rank can regenerate
from the seed: integers and every copy exactly, reduced floats against a float64 reference
within the rounding bound of their dtype (sumorder.bound), and against gloo within twice that
-- or bit for bit where one correctly rounded operation makes every order agree
(sumorder.exact_between). Outputs that must not change are checked too. Exit 0 pass, 1 fail,
77 skip."""

import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import sumorder  # noqa: E402

torch, dist, mp = common.torch_or_skip()

_INTS = (torch.int8, torch.uint8, torch.int32, torch.int64)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def data(seed, rank, n, dtype):
    """Rank `rank`'s input: random, non-zero, small enough that products and sums of a few
    ranks stay in range; the same on every rank that asks."""
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype in _INTS:
        lo, hi = (1, 4) if dtype == torch.uint8 else (-3, 4)
        v = torch.randint(lo, hi, (n,), generator=g)
        v[v == 0] = 1
        return v.to(dtype)
    v = (torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1) * 4
    v[v.abs() < 0.25] = 0.5
    return v.to(dtype)


def reduce_ref(inputs, op):
    """The reduction of the ranks' inputs, in float64 for floats (exact for integers)."""
    ints = inputs[0].dtype in _INTS or inputs[0].dtype == torch.bool
    xs = [x.to(torch.int64) if ints else x.to(torch.float64) for x in inputs]
    out = xs[0].clone()
    for x in xs[1:]:
        if op == "SUM" or op == "AVG":
            out = out + x
        elif op == "PRODUCT":
            out = out * x
        elif op == "MIN":
            out = torch.minimum(out, x)
        elif op == "MAX":
            out = torch.maximum(out, x)
        elif op == "BAND":
            out = out & x
        elif op == "BOR":
            out = out | x
        elif op == "BXOR":
            out = out ^ x
    if op == "AVG":
        out = torch.div(out, len(xs), rounding_mode="trunc") if ints else out / len(xs)
    return out


def tol(inputs, op):
    """How far a reduction of the ranks' float `inputs` may be from reduce_ref's: the rounding
    bound of their dtype, plus the float64 reference's own (sumorder.bound). None (exact) for
    integers and bool."""
    if inputs[0].dtype not in _FLOATS:
        return None
    return sumorder.bound(inputs, op) + sumorder.bound([x.double() for x in inputs], op)


def same(got, want, what, bound=None):
    """got equals want: bit for bit (integers, bool, copies of floats) unless `bound` gives
    each element's allowed distance (a float64 tensor, from tol())."""
    if want.dtype != got.dtype and bound is None:
        # Integer results wrap as the dtype does (uint8 products of a few ranks stay in range).
        want = want.to(got.dtype)
    if bound is None:
        common.check(torch.equal(got, want), f"{what}: {got.tolist()[:8]} != {want.tolist()[:8]}")
        return
    err = (got.to(torch.float64) - want.to(torch.float64)).abs()
    over = err > bound
    if over.any():
        i = over.nonzero()[0].item()
        common.fail(f"{what}: element {i} is {got[i].item()!r}, {err[i].item():.3e} from "
                    f"{want[i].item()!r} (allowed {bound[i].item():.3e}: the rounding bound)")


def against_gloo(gloo, fn, ours, what, inputs=None, op=None):
    """Run fn(gloo group) and compare with our result: copies and integers bit for bit, a float
    reduction of `inputs` by `op` within twice its rounding bound (each backend is within
    one), or bit for bit where sumorder.exact_between says every order agrees. gloo lacks
    some dtypes and ops, and empty tensors (gloo 1.13's all_gather divides by zero on them:
    SIGFPE)."""
    if (ours[0] if isinstance(ours, (list, tuple)) else ours).numel() == 0:
        return 0
    try:
        theirs = fn(gloo)
    except RuntimeError:
        return 0  # gloo cannot do this one: the local reference is the judge
    bound = None
    if inputs is not None and inputs[0].dtype in _FLOATS and \
            not sumorder.exact_between(inputs[0].dtype, op, len(inputs)):
        bound = 2 * sumorder.bound(inputs, op)
    if isinstance(ours, (list, tuple)):
        for i, (a, b) in enumerate(zip(ours, theirs)):
            same(a, b, f"{what} [{i}] vs gloo", bound)
    else:
        same(ours, theirs, f"{what} vs gloo", bound)
    return 1


OPS_INT = ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG"]
OPS_FLOAT = ["SUM", "PRODUCT", "MIN", "MAX", "AVG"]


def ops_for(dtype):
    if dtype == torch.bool:
        return ["PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
    return OPS_INT if dtype in _INTS else OPS_FLOAT


def run(rank, world, port):
    import ringreduce.torch  # noqa: F401 (registers the backend)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("ringreduce", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    gloo = dist.new_group(list(range(world)), backend="gloo")
    common.check(dist.get_backend() == "ringreduce", f"backend is {dist.get_backend()}")
    compared = 0
    dtypes = list(_INTS) + list(_FLOATS) + [torch.bool]
    seed = 7
    for count in (0, 1, 7, world + 1, 1001):
        for dtype in dtypes:
            seed += 1
            ins = [data(seed, r, count, dtype) for r in range(world)]
            mine = ins[rank]
            # all_reduce, every op, in place (torch's only form)
            for opn in ops_for(dtype):
                if opn == "PRODUCT" and dtype in _FLOATS and count > 7:
                    continue  # products of many floats test nothing the small counts miss
                op = getattr(dist.ReduceOp, opn)
                t = mine.clone()
                dist.all_reduce(t, op=op)
                same(t, reduce_ref(ins, opn), f"all_reduce {opn} {dtype} x{count}", tol(ins, opn))
                if opn != "AVG":
                    compared += against_gloo(gloo, lambda g: (lambda u: (dist.all_reduce(u, op=op, group=g), u)[1])(mine.clone()),
                                             t, f"all_reduce {opn} {dtype} x{count}", ins, opn)
            # broadcast and reduce from every root; non-roots of reduce keep their input
            for root in range(world):
                t = mine.clone()
                dist.broadcast(t, root)
                same(t, ins[root], f"broadcast from {root} {dtype} x{count}")
                opn = "MAX" if dtype == torch.bool else "SUM"
                t = mine.clone()
                dist.reduce(t, root, op=getattr(dist.ReduceOp, opn))
                same(t, reduce_ref(ins, opn) if rank == root else mine,
                     f"reduce to {root} {dtype} x{count}", tol(ins, opn) if rank == root else None)
            # all_gather (list and flat), gather to every root, scatter from every root
            outs = [torch.full_like(mine, 1) for _ in range(world)]
            dist.all_gather(outs, mine)
            for r in range(world):
                same(outs[r], ins[r], f"all_gather block {r} {dtype} x{count}")
            compared += against_gloo(gloo, lambda g: (lambda o: (dist.all_gather(o, mine, group=g), o)[1])(
                [torch.empty_like(mine) for _ in range(world)]), outs, f"all_gather {dtype} x{count}")
            flat = torch.empty(world * count, dtype=dtype)
            dist.all_gather_into_tensor(flat, mine) if hasattr(dist, "all_gather_into_tensor") \
                else dist._all_gather_base(flat, mine)
            same(flat, torch.cat(ins), f"all_gather_into_tensor {dtype} x{count}")
            for root in range(world):
                got = [torch.full_like(mine, 1) for _ in range(world)] if rank == root else None
                dist.gather(mine, got, dst=root)
                if rank == root:
                    for r in range(world):
                        same(got[r], ins[r], f"gather to {root} block {r} {dtype} x{count}")
                out = torch.full_like(mine, 1)
                dist.scatter(out, [data(seed + 500, r, count, dtype) for r in range(world)]
                             if rank == root else None, src=root)
                same(out, data(seed + 500, rank, count, dtype), f"scatter from {root} {dtype} x{count}")
            if dtype == torch.bool:
                continue
            # reduce_scatter (list and flat): block r of every rank's input, reduced, to rank r
            big = [data(seed + 900, r, world * count, dtype) for r in range(world)]
            want = reduce_ref(big, "SUM")[rank * count:(rank + 1) * count]
            bound = tol(big, "SUM")
            bound = bound[rank * count:(rank + 1) * count] if bound is not None else None
            out = torch.full_like(mine, 1)
            dist.reduce_scatter(out, list(big[rank].split(count)) if count else [mine.clone() for _ in range(world)])
            same(out, want, f"reduce_scatter {dtype} x{count}", bound)
            out = torch.full_like(mine, 1)
            (dist.reduce_scatter_tensor if hasattr(dist, "reduce_scatter_tensor")
             else dist._reduce_scatter_base)(out, big[rank].clone())
            same(out, want, f"reduce_scatter_tensor {dtype} x{count}", bound)
            # all_to_all: block j of rank i's input ends as block i of rank j's output
            out = torch.full_like(big[rank], 1)
            dist.all_to_all_single(out, big[rank])
            same(out, torch.cat([big[r][rank * count:(rank + 1) * count] for r in range(world)]),
                 f"all_to_all_single {dtype} x{count}")
            # uneven splits: rank i sends (i + j) % 3 rows to rank j
            sizes = lambda i, j: (i + j) % 3  # noqa: E731
            src = data(seed + 1200, rank, sum(sizes(rank, j) for j in range(world)), dtype)
            dst = torch.full((sum(sizes(i, rank) for i in range(world)),), 1, dtype=dtype)
            dist.all_to_all_single(dst, src, [sizes(i, rank) for i in range(world)],
                                   [sizes(rank, j) for j in range(world)])
            want = []
            for i in range(world):
                s_i = data(seed + 1200, i, sum(sizes(i, j) for j in range(world)), dtype)
                off = sum(sizes(i, j) for j in range(rank))
                want.append(s_i[off:off + sizes(i, rank)])
            same(dst, torch.cat(want), f"all_to_all_single uneven {dtype}")
            outs = [torch.full((sizes(i, rank),), 1, dtype=dtype) for i in range(world)]
            dist.all_to_all(outs, list(src.split([sizes(rank, j) for j in range(world)])))
            for i in range(world):
                same(outs[i], want[i], f"all_to_all list block {i} {dtype}")
    # Non-contiguous tensors are copied in and out; async ops, futures, point to point.
    m = data(3, rank, 24, torch.float32).view(4, 6).t()  # a transposed view
    dist.all_reduce(m)
    ins = [data(3, r, 24, torch.float32).view(4, 6).t() for r in range(world)]
    same(m.reshape(-1), reduce_ref(ins, "SUM").reshape(-1), "all_reduce of a non-contiguous tensor",
         tol([x.reshape(-1) for x in ins], "SUM"))
    works = [dist.all_reduce(torch.full((5,), float(rank + i)), async_op=True) for i in range(6)]
    futs = [w.get_future() for w in works[:3]]
    for w in works[3:]:
        common.check(w.wait(), "an async all_reduce did not wait")
        common.check(w.is_completed(), "is_completed false after wait")
    for i, f in enumerate(futs):
        v = f.wait()[0]
        common.check(torch.equal(v, torch.full((5,), float(sum(r + i for r in range(world))))),
                     f"future {i} holds {v.tolist()}")
    if world > 1:
        right, left = (rank + 1) % world, (rank - 1) % world
        buf = torch.zeros(3, dtype=torch.int64)
        if rank % 2 == 0:
            dist.send(torch.tensor([rank, 1, 2]), right)
            dist.recv(buf, left)
        else:
            dist.recv(buf, left)
            dist.send(torch.tensor([rank, 1, 2]), right)
        common.check(buf.tolist() == [left, 1, 2], f"recv from {left}: {buf.tolist()}")
        reqs = [dist.isend(torch.tensor([rank * 10]), right), dist.irecv(buf[:1], left)]
        for q in reqs:
            q.wait()
        common.check(buf[0].item() == left * 10, f"irecv from {left}: {buf[0].item()}")
    # Object collectives, built on broadcast and all_gather.
    objs = [{"rank": rank, "list": list(range(rank))}]
    got = [None] * world
    dist.all_gather_object(got, objs[0])
    common.check(got == [{"rank": r, "list": list(range(r))} for r in range(world)], f"all_gather_object {got}")
    lst = [None, None] if rank else ["hello", {"k": 3}]
    dist.broadcast_object_list(lst, 0)
    common.check(lst == ["hello", {"k": 3}], f"broadcast_object_list {lst}")
    # A subgroup of the odd ranks, and barriers.
    odd = [r for r in range(world) if r % 2 == 1]
    sub = dist.new_group(odd) if odd else None
    if rank in odd:
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=sub)
        common.check(t.item() == float(sum(odd)), f"subgroup all_reduce {t.item()}")
        dist.broadcast(t, odd[-1], group=sub)  # a global rank, as torch takes it
        common.check(t.item() == float(sum(odd)), "subgroup broadcast")
    dist.barrier()
    # Refusals: a clear RuntimeError, and the group still works afterwards.
    for bad, text in ((lambda: dist.all_reduce(torch.zeros(2, dtype=torch.int16)), "int16"),
                      (lambda: dist.all_reduce(torch.zeros(2, dtype=torch.bool)), "SUM of bool")):
        try:
            bad()
        except RuntimeError as e:
            common.check(text in str(e) and "ringreduce" in str(e), f"refusal says: {e}")
        else:
            common.fail(f"no refusal for {text}")
    t = torch.ones(1)
    dist.all_reduce(t)
    common.check(t.item() == world, "the group after refusals")
    if rank == 0:
        print(f"torch_collectives world {world}: every collective x dtype x op checked; "
              f"{compared} results also agree with gloo's (sumorder.py)")
    dist.destroy_process_group()


if __name__ == "__main__":
    world = int(sys.argv[1])
    common.spawn(run, world, (world, common.free_port()))
