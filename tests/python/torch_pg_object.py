"""The process group object's own API (issue 44): how it takes calls and what its works
return, as torch's c10d tests and libraries that hold a group (not dist.*) call it.

    python tests/python/torch_pg_object.py WORLD [CASE ...]

Every rank makes a ringreduce group directly, ProcessGroupRingreduce(store, rank, size,
timeout), as the issue's reporter put it in place of ProcessGroupGloo(store, rank, size, opts),
and a ProcessGroupGloo beside it on the same store. Each call runs on both with the same
integer inputs. gloo is the reference, measured in this run: every expected value below is
checked on gloo too (where gloo serves the call: torch 1.13's gloo has no reduce_scatter,
all_to_all or _allgather_base, 2.x's reduce_scatter no future), so an expectation that is not
gloo's fails on gloo. Every rank checks every element exactly.

Cases (one per item of the issue):
  forms      every form torch's ProcessGroup bindings take, for every collective: one tensor
             where a list goes (pg.allreduce(t), a one-element t too), op=/root=/timeout=
             keywords, also positionally, the flat gather/scatter/all_gather/reduce_scatter
             forms, and several tensors per call where gloo takes them (all_reduce,
             broadcast with rootTensor, all_gather)
  futures    each collective's future value and result() in its options form: the list of
             outputs; the flat list of world tensors for all_gather and gather of one input
             (gloo's, not the nested list), [] off the gather root; a list of lists for
             several inputs, whose result() refuses as torch's C++ Work::result does
  inference  calls inside torch.inference_mode() whose results are copied into the caller's
             tensors (lists, non-contiguous outputs), their futures asked for while the call
             waits for a late rank, so the copy runs on the futures thread
  uneven     reduce_scatter whose inputs differ in size, each like its rank's output (SUM,
             MAX, int64 and float32, list and flat forms, a non-contiguous output, an empty
             block)
  checks     wrong arguments, gloo's own checks and the issue's: each refused with a
             RuntimeError that names the argument, before anything is sent (one all_reduce
             after them all must match on every rank), where gloo refuses it too
Exit 0, 1 or 77."""

import datetime
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

torch, dist, mp = common.torch_or_skip()

C = torch._C._distributed_c10d  # the options classes (1.13 does not export them all in dist)
CASES = ["forms", "futures", "inference", "uneven", "checks"]
check = common.check
ANY = object()  # a tensor whose elements are not checked (a non-root's reduce input)
TD = datetime.timedelta(seconds=60)


def opts(cls, **fields):
    o = getattr(C, cls)()
    for k, v in fields.items():
        setattr(o, k, v)
    return o


def has_keyword(method, word):
    """Whether this torch's binding of a ProcessGroup method takes a keyword (2.x: timeout)."""
    return f"{word}:" in (getattr(dist.ProcessGroup, method).__doc__ or "")


def same(got, want, what):
    """got is want: the same nesting of lists, each tensor the same dtype, shape, elements."""
    if want is ANY:
        check(isinstance(got, torch.Tensor), f"{what}: {type(got).__name__}, not a tensor")
    elif isinstance(want, torch.Tensor):
        check(isinstance(got, torch.Tensor), f"{what}: {type(got).__name__}, not a tensor")
        check(got.dtype == want.dtype and got.shape == want.shape,
              f"{what}: {got.dtype} {list(got.shape)}, not {want.dtype} {list(want.shape)}")
        g = got.to_dense() if got.is_sparse else got
        w = want.to_dense() if want.is_sparse else want
        check(torch.equal(g, w), f"{what}: {g.tolist()} != {w.tolist()}")
    else:
        check(isinstance(got, (list, tuple)), f"{what}: a {type(got).__name__}, not a list")
        check(len(got) == len(want), f"{what}: {len(got)} items, not {len(want)}")
        for i, (g, w) in enumerate(zip(got, want)):
            same(g, w, f"{what}[{i}]")


def nested(value):
    return bool(value) and isinstance(value[0], (list, tuple))


class Run:
    """One call on one group: the work's outputs, future value and result(), or why not."""

    def __init__(self, pg, call):
        self.refused = None
        try:
            self.work, self.outputs = call(pg)
        except RuntimeError as e:
            self.refused = str(e)
            return
        self.work.wait()
        try:
            self.value = self.work.get_future().wait()
        except RuntimeError as e:
            self.value = e  # gloo 2.x: "Work::getFuture not implemented" (reduce_scatter)
        try:
            self.result = self.work.result()
        except RuntimeError as e:
            self.result = e


def compare(name, call, want, gloo, ours, gloo_call, value_of_gloo=True):
    """Run `call` on ours and `gloo_call` (the same call on its own tensors, or the form
    gloo's binding of this torch takes for it) on gloo, and check each against `want`, the
    outputs as the future's value: ours must give what gloo gives wherever gloo gives
    anything."""
    if os.environ.get("RR_TEST_VERBOSE"):
        print(f"rank {common._rank}: {name}", flush=True)
    g = Run(gloo, gloo_call)
    if g.refused is None:
        same(g.outputs, want, f"{name}: gloo's outputs (the reference)")
        if value_of_gloo and not isinstance(g.value, RuntimeError):
            same(g.value, want, f"{name}: gloo's future value (the reference)")
        if nested(want):
            check(isinstance(g.result, RuntimeError), f"{name}: gloo's result() of a list of lists")
        elif not isinstance(g.result, RuntimeError):
            same(g.result, want, f"{name}: gloo's result()")
    r = Run(ours, call)
    check(r.refused is None, f"{name}: refused: {r.refused}")
    same(r.outputs, want, f"{name}: outputs")
    same(r.value, want, f"{name}: future value")
    if nested(want):
        check(isinstance(r.result, RuntimeError) and "list of lists" in str(r.result),
              f"{name}: result() of a list of lists gave {r.result!r}, not gloo's refusal")
    else:
        check(not isinstance(r.result, RuntimeError), f"{name}: result() raised {r.result}")
        same(r.result, want, f"{name}: result()")
    return 0 if g.refused is not None else 1


# ---- the calls -------------------------------------------------------------------------------

def v(*xs):
    return torch.tensor(xs, dtype=torch.int64)


def calls(rank, world):
    """(name, call, want, gloo_call): call(pg) -> (work, outputs), on fresh tensors."""
    n = world
    s = sum(range(n))
    last = n - 1
    sum3 = v(10 * s, 10 * s + n, 10 * s + 2 * n)  # the sum of every rank's mine3()

    def mine3():
        return v(10 * rank, 10 * rank + 1, 10 * rank + 2)

    def one():
        return v(rank + 1)

    fl = []  # the forms: torch's keywords and single tensors
    fl.append(("allreduce(tensor)", lambda pg, t=mine3(): (pg.allreduce(t), [t]), [sum3]))
    fl.append(("allreduce(one-element tensor)", lambda pg, t=one(): (pg.allreduce(t), [t]),
               [v(n * (n + 1) // 2)]))
    mx = v(10 * last, 10 * last + 1, 10 * last + 2)
    fl.append(("allreduce(tensor, op=MAX)",
               lambda pg, t=mine3(): (pg.allreduce(t, op=dist.ReduceOp.MAX), [t]), [mx]))
    fl.append(("allreduce(tensor, MAX)",
               lambda pg, t=mine3(): (pg.allreduce(t, dist.ReduceOp.MAX), [t]), [mx]))
    fl.append(("allreduce([tensor], op=MIN)",
               lambda pg, t=mine3(): (pg.allreduce([t], op=dist.ReduceOp.MIN), [t]), [v(0, 1, 2)]))
    both = v(sum(2 * r + 2 * r + 1 for r in range(n)))
    fl.append(("allreduce([t0, t1]) (several tensors, gloo's multi-input form)",
               lambda pg, a=v(2 * rank), b=v(2 * rank + 1): (pg.allreduce([a, b]), [a, b]),
               [both, both]))
    fl.append(("allreduce([t0, t1], MAX opts)",
               lambda pg, a=v(2 * rank), b=v(2 * rank + 1):
               (pg.allreduce([a, b], opts("AllreduceOptions", reduceOp=dist.ReduceOp.MAX)),
                [a, b]), [v(2 * last + 1)] * 2))
    fl.append(("broadcast(tensor, root=last)",
               lambda pg, t=mine3(): (pg.broadcast(t, root=last), [t]), [mx]))
    fl.append(("broadcast(tensor, last)", lambda pg, t=one(): (pg.broadcast(t, last), [t]),
               [v(n)]))
    fl.append(("broadcast([t0, t1], rootTensor 1) (gloo's multi-input form)",
               lambda pg, a=v(2 * rank), b=v(2 * rank + 1):
               (pg.broadcast([a, b], opts("BroadcastOptions", rootRank=last, rootTensor=1)),
                [a, b]), [v(2 * last + 1)] * 2))
    if rank == last:
        rw, rmx = [sum3], [mx]
    else:
        rw = rmx = [ANY]  # a non-root's tensor is its own (gloo leaves a partial sum there)
    fl.append(("reduce(tensor, root=last)", lambda pg, t=mine3(): (pg.reduce(t, root=last), [t]),
               rw))
    fl.append(("reduce(tensor, last, MAX)",
               lambda pg, t=mine3(): (pg.reduce(t, last, dist.ReduceOp.MAX), [t]), rmx))
    fl.append(("reduce(tensor, root=last, op=MAX)",
               lambda pg, t=mine3(): (pg.reduce(t, root=last, op=dist.ReduceOp.MAX), [t]), rmx))
    gathered = [v(10 * r, 10 * r + 1, 10 * r + 2) for r in range(n)]

    def fresh(k=n):
        return [v(-1, -1, -1) for _ in range(k)]
    fl.append(("allgather(outputs, tensor)",
               lambda pg, o=fresh(), t=mine3(): (pg.allgather(o, t), o), gathered))
    multi = [v(2 * r + i) for r in range(n) for i in range(2)]
    fl.append(("allgather([outs, outs], [t0, t1]) (gloo's multi-input form)",
               lambda pg, o=[[v(-1) for _ in range(2 * n)] for _ in range(2)]:
               (pg.allgather(o, [v(2 * rank), v(2 * rank + 1)]), o), [multi, multi]))
    # gather(outputs, tensor, root): torch 1.13's gloo binding wraps a non-root's empty list
    # as [[]] and refuses it, so gloo runs the options form, whose value is the same.
    if rank == 0:
        fl.append(("gather(outputs, tensor, 0)",
                   lambda pg, o=fresh(), t=mine3(): (pg.gather(o, t, 0), o), gathered,
                   lambda pg, o=fresh(), t=mine3():
                   (pg.gather([o], [t], opts("GatherOptions", rootRank=0)), o)))
    else:
        fl.append(("gather([], tensor, 0)",
                   lambda pg, t=mine3(): (pg.gather([], t, 0), []), [],
                   lambda pg, t=mine3(): (pg.gather([], [t], opts("GatherOptions", rootRank=0)),
                                          [])))
    src = [v(100 + r) for r in range(n)] if rank == 0 else []
    fl.append(("scatter(output, inputs, 0)",
               lambda pg, o=v(-1): (pg.scatter(o, src, 0), [o]), [v(100 + rank)],
               lambda pg, o=v(-1): (pg.scatter([o], [src] if src else [],
                                               opts("ScatterOptions", rootRank=0)), [o])))
    rs_in = [v(rank + 10 * r, rank + 10 * r + 1) for r in range(n)]
    rs_sum = v(s + 10 * n * rank, s + 10 * n * rank + n)
    rs_max = v(last + 10 * rank, last + 10 * rank + 1)
    fl.append(("reduce_scatter(output, inputs)",
               lambda pg, o=v(-1, -1): (pg.reduce_scatter(o, [x.clone() for x in rs_in]), [o]),
               [rs_sum]))
    fl.append(("reduce_scatter(output, inputs, MAX)",
               lambda pg, o=v(-1, -1): (pg.reduce_scatter(o, [x.clone() for x in rs_in],
                                                          dist.ReduceOp.MAX), [o]), [rs_max]))
    fl.append(("reduce_scatter(output, inputs, op=MAX)",
               lambda pg, o=v(-1, -1): (pg.reduce_scatter(o, [x.clone() for x in rs_in],
                                                          op=dist.ReduceOp.MAX), [o]), [rs_max]))
    a2a_in = [v(100 * rank + j) for j in range(n)]
    a2a_want = [v(100 * j + rank) for j in range(n)]
    fl.append(("alltoall(outputs, inputs)",
               lambda pg, o=[v(-1) for _ in range(n)]: (pg.alltoall(o, a2a_in), o), a2a_want))
    flat_in = torch.cat(a2a_in)
    fl.append(("alltoall_base(output, input, [], [])",
               lambda pg, o=v(*[-1] * n): (pg.alltoall_base(o, flat_in, [], []), [o]),
               [torch.cat(a2a_want)]))
    fl.append(("barrier()", lambda pg: (pg.barrier(), []), []))
    if has_keyword("allreduce", "timeout"):  # torch 2.x's bindings take a per-call timeout
        fl.append(("allreduce(tensor, timeout=)",
                   lambda pg, t=mine3(): (pg.allreduce(t, timeout=TD), [t]), [sum3]))
        fl.append(("broadcast(tensor, last, timeout=)",
                   lambda pg, t=mine3(): (pg.broadcast(t, last, timeout=TD), [t]), [mx]))
        fl.append(("allgather(outputs, tensor, timeout=)",
                   lambda pg, o=fresh(), t=mine3(): (pg.allgather(o, t, timeout=TD), o), gathered))
        fl.append(("alltoall_base(output, input, [], [], timeout=)",
                   lambda pg, o=v(*[-1] * n): (pg.alltoall_base(o, flat_in, [], [], timeout=TD),
                                               [o]), [torch.cat(a2a_want)]))
    if has_keyword("barrier", "timeout"):  # gloo's object (a Backend) has the options form only
        fl.append(("barrier(timeout=)", lambda pg: (pg.barrier(timeout=TD), []), [],
                   lambda pg: (pg.barrier(opts("BarrierOptions", timeout=TD)), [])))

    fu = []  # the options forms: what each collective's future and result() give
    fu.append(("allreduce([t], opts)",
               lambda pg, t=mine3(): (pg.allreduce([t], opts("AllreduceOptions")), [t]), [sum3]))
    fu.append(("allreduce_coalesced([t0, t1], opts)",
               lambda pg, a=mine3(), b=one():
               (pg.allreduce_coalesced([a, b], opts("AllreduceCoalescedOptions")), [a, b]),
               [sum3, v(n * (n + 1) // 2)]))
    fu.append(("broadcast([t], opts)",
               lambda pg, t=mine3(): (pg.broadcast([t], opts("BroadcastOptions", rootRank=last)),
                                      [t]), [mx]))
    fu.append(("reduce([t], opts)",
               lambda pg, t=mine3(): (pg.reduce([t], opts("ReduceOptions", rootRank=last)), [t]),
               rw))
    fu.append(("allgather([outputs], [t], opts)",
               lambda pg, o=fresh(), t=mine3():
               (pg.allgather([o], [t], opts("AllgatherOptions")), o), gathered))
    if rank == last:
        fu.append(("gather([outputs], [t], opts) at the root",
                   lambda pg, o=fresh(), t=mine3():
                   (pg.gather([o], [t], opts("GatherOptions", rootRank=last)), o), gathered))
    else:
        fu.append(("gather([], [t], opts) off the root",
                   lambda pg, t=mine3():
                   (pg.gather([], [t], opts("GatherOptions", rootRank=last)), []), []))
    fu.append(("scatter([o], [inputs], opts)",
               lambda pg, o=v(-1): (pg.scatter([o], [[v(100 + r) for r in range(n)]]
                                               if rank == last else [],
                                               opts("ScatterOptions", rootRank=last)), [o]),
               [v(100 + rank)]))
    fu.append(("reduce_scatter([o], [inputs], opts)",
               lambda pg, o=v(-1, -1): (pg.reduce_scatter([o], [[x.clone() for x in rs_in]],
                                                          opts("ReduceScatterOptions")), [o]),
               [rs_sum]))
    fu.append(("alltoall(outputs, inputs, opts)",
               lambda pg, o=[v(-1) for _ in range(n)]:
               (pg.alltoall(o, a2a_in, opts("AllToAllOptions")), o), a2a_want))
    fu.append(("allgather_coalesced(lists, [t0, t1], opts)",
               lambda pg, o=[[v(-1), v(-1)] for _ in range(n)]:
               (pg.allgather_coalesced(o, [v(rank), v(rank + 100)], opts("AllgatherOptions")), o),
               [[v(r), v(r + 100)] for r in range(n)]))
    fu.append(("allgather([o0, o1], [t0, t1], opts) (a list of lists)",
               lambda pg, o=[[v(-1) for _ in range(2 * n)] for _ in range(2)]:
               (pg.allgather(o, [v(2 * rank), v(2 * rank + 1)], opts("AllgatherOptions")), o),
               [multi, multi]))
    fu.append(("barrier(opts)", lambda pg: (pg.barrier(opts("BarrierOptions")), []), []))
    return fl, fu


def case_forms(rank, world, gloo, ours):
    fl, _ = calls(rank, world)
    fg, _ = calls(rank, world)  # gloo's own tensors (the calls write into them)
    ref = sum(compare(e[0], e[1], e[2], gloo, ours, g[3] if len(g) > 3 else g[1])
              for e, g in zip(fl, fg))
    return f"{len(fl)} call forms, {ref} of them measured on gloo too"


def case_futures(rank, world, gloo, ours):
    _, fu = calls(rank, world)
    _, fg = calls(rank, world)
    ref = sum(compare(e[0], e[1], e[2], gloo, ours, g[1]) for e, g in zip(fu, fg))
    # _allgather_base: NCCL's future holds the output tensor (ours too); 2.x's gloo gives
    # the output's world chunks, 1.13's has none: the output itself is checked on both.
    o = torch.full((3 * world,), -1, dtype=torch.int64)
    w = ours._allgather_base(o, v(3 * rank, 3 * rank + 1, 3 * rank + 2))
    same(w.get_future().wait(), [torch.arange(3 * world)], "_allgather_base: future value")
    return f"{len(fu) + 1} collectives, {ref} measured on gloo too"


def case_inference(rank, world, gloo, ours):
    """Each call twice, once with rank 0 late and once with rank 1 late: every rank asks for
    its future while the call still waits for a peer at least once (the copy into its
    tensors then runs on the group's futures thread)."""
    n = world

    def late(i):
        return i % n if n > 1 else -1

    def go(pg, name, issue, want, i):
        """Whether the call gave `want`; a failure of ours fails the test."""
        with torch.inference_mode():
            if rank == late(i):
                time.sleep(0.1)
            try:
                work, outs = issue(pg)
                got = work.get_future().wait()
            except RuntimeError as e:
                if pg is gloo:  # 1.13's gloo: no alltoall, and it fails like ours did
                    return False
                common.fail(f"{name} in inference mode ({'late' if rank == late(i) else 'early'} "
                            f"rank): {str(e).splitlines()[0]}")
            same(got, want, f"{name} in inference mode: future value")
            same(outs, want, f"{name} in inference mode: outputs")
            return True

    with torch.inference_mode():
        mine = v(10 * rank, 10 * rank + 1)
        gathered = [v(10 * r, 10 * r + 1) for r in range(n)]
        multi = [v(2 * r + i) for r in range(n) for i in range(2)]
        total = v(10 * sum(range(n)), 10 * sum(range(n)) + n)

    def allgather(pg):
        o = [v(-1, -1) for _ in range(n)]
        return pg.allgather([o], [mine]), o

    def allgather2(pg):
        o = [[v(-1) for _ in range(2 * n)] for _ in range(2)]
        return pg.allgather(o, [v(2 * rank), v(2 * rank + 1)]), o

    def allreduce_view(pg):
        t = torch.stack([mine, v(0, 0)], 1)[:, 0]  # a non-contiguous view: copied back
        return pg.allreduce([t]), [t]

    def coalesced(pg):
        a, b = mine.clone(), v(1)
        return pg.allreduce_coalesced([a, b]), [a, b]

    def gather(pg):
        if rank == 0:
            o = [v(-1, -1) for _ in range(n)]
            return pg.gather([o], [mine], opts("GatherOptions", rootRank=0)), o
        return pg.gather([], [mine], opts("GatherOptions", rootRank=0)), []

    def alltoall(pg):
        o = [v(-1) for _ in range(n)]
        return pg.alltoall(o, [v(100 * rank + j) for j in range(n)]), o

    # (name, call, want, measured on gloo: gloo reduces a non-contiguous tensor's first
    # column only, [30, 1] for [30, 33] at world 3, so it is no reference there)
    cases = [("allgather", allgather, gathered, True),
             ("allgather of two inputs", allgather2, [multi, multi], True),
             ("allreduce of a non-contiguous tensor", allreduce_view, [total], False),
             ("allreduce_coalesced", coalesced, [total, v(n)], True),
             ("gather", gather, gathered if rank == 0 else [], True),
             ("alltoall", alltoall, [v(100 * j + rank) for j in range(n)], True)]
    measured = 0
    for name, issue, want, on_gloo in cases:
        for i in range(2):
            if on_gloo and go(gloo, f"gloo {name}", issue, want, i):  # the reference
                measured += i
            go(ours, name, issue, want, i)
    return f"{len(cases)} calls copied into inference tensors, {measured} measured on gloo too"


def case_uneven(rank, world, gloo, ours):
    n = world
    sizes = [r % 3 + 1 for r in range(n)]  # 1, 2, 3, 1, ...

    def inputs(dtype, sz=sizes):
        # rank q's input r: sz[r] elements, 100 * q + 10 * r + i
        return [torch.tensor([100 * rank + 10 * r + i for i in range(sz[r])], dtype=dtype)
                for r in range(n)]

    def want(dtype, op, sz=sizes):
        cols = [torch.tensor([100 * q + 10 * rank + i for i in range(sz[rank])], dtype=dtype)
                for q in range(n)]
        return torch.stack(cols).sum(0) if op == "SUM" else torch.stack(cols).max(0).values

    measured = 0
    for dtype in (torch.int64, torch.float32):
        for op in ("SUM", "MAX"):
            o = opts("ReduceScatterOptions", reduceOp=getattr(dist.ReduceOp, op))
            name = f"reduce_scatter uneven {dtype} {op}"
            def call(pg, dtype=dtype, o=o):
                out = torch.full((sizes[rank],), -1, dtype=dtype)
                return pg.reduce_scatter([out], [inputs(dtype)], o), [out]
            measured += compare(name, call, [want(dtype, op)], gloo, ours, call,
                                value_of_gloo=False)

    # The flat form, and a non-contiguous output (a column of a matrix: copied back).
    def flat(pg):
        out = torch.full((sizes[rank],), -1, dtype=torch.int64)
        return pg.reduce_scatter(out, inputs(torch.int64)), [out]
    compare("reduce_scatter(output, inputs) uneven", flat, [want(torch.int64, "SUM")], gloo,
            ours, flat, value_of_gloo=False)
    col = torch.full((sizes[rank], 2), -1, dtype=torch.int64)[:, 1]
    w = ours.reduce_scatter([col], [inputs(torch.int64)])
    w.wait()
    same(col, want(torch.int64, "SUM"), "reduce_scatter uneven into a non-contiguous output")
    # An empty block (rank 0's): ours only (an empty tensor is not a case gloo is measured on).
    if n > 1:
        sz = [0] + sizes[1:]
        out = torch.full((sz[rank],), -1, dtype=torch.int64)
        ours.reduce_scatter([out], [inputs(torch.int64, sz)]).wait()
        same(out, want(torch.int64, "SUM", sz), "reduce_scatter uneven with an empty block")
    # Even sizes still take one reduce_scatter call (and give the same sums).
    even = [1] * n
    out = torch.full((1,), -1, dtype=torch.int64)
    ours.reduce_scatter([out], [inputs(torch.int64, even)]).wait()
    same(out, want(torch.int64, "SUM", even), "reduce_scatter even")
    return f"sizes {sizes}, 2 dtypes x SUM/MAX, flat form, non-contiguous, empty block; " \
           f"{measured} of 4 measured on gloo too"


def bad_calls(rank, world):
    from ringreduce._tensors import _SPARSE_CHECKED  # torch 2.x warns without the choice
    """(name, call(pg), the argument its error must name, whether gloo is measured on it:
    the checks of torch's test_c10d_gloo.py, which gloo passes)."""
    n, me = world, rank
    other = (rank + 1) % world
    f1 = torch.zeros(1)
    f2 = torch.zeros(2)
    d1 = torch.zeros(1, dtype=torch.float64)
    sp = torch.sparse_coo_tensor([[0]], [1.0], size=(2,), **_SPARSE_CHECKED)
    sp4 = torch.sparse_coo_tensor([[0]], [1.0], size=(4,), **_SPARSE_CHECKED)
    B, R = "BroadcastOptions", "ReduceOptions"
    out = [
        ("broadcast root -1", lambda pg: pg.broadcast([f1], opts(B, rootRank=-1)), "rootRank", 1),
        ("broadcast root n", lambda pg: pg.broadcast([f1], opts(B, rootRank=n)), "rootRank", 1),
        ("broadcast root= n", lambda pg: pg.broadcast(f1, root=n), "root", 0),
        ("broadcast rootTensor -1",
         lambda pg: pg.broadcast([f1], opts(B, rootRank=me, rootTensor=-1)), "rootTensor", 1),
        ("broadcast rootTensor 1",
         lambda pg: pg.broadcast([f1], opts(B, rootRank=me, rootTensor=1)), "rootTensor", 1),
        ("broadcast []", lambda pg: pg.broadcast([], opts(B, rootRank=me)), "rootTensor", 1),
        ("broadcast two dtypes", lambda pg: pg.broadcast([f1, d1], opts(B, rootRank=me)),
         "tensors[1]", 1),
        ("broadcast two sizes", lambda pg: pg.broadcast([f1, f2], opts(B, rootRank=me)),
         "tensors[1]", 1),
        ("reduce root -1", lambda pg: pg.reduce([f1], opts(R, rootRank=-1)), "rootRank", 1),
        ("reduce root n", lambda pg: pg.reduce([f1], opts(R, rootRank=n)), "rootRank", 1),
        ("reduce rootTensor 1", lambda pg: pg.reduce([f1], opts(R, rootRank=me, rootTensor=1)),
         "rootTensor", 1),
        ("reduce two tensors", lambda pg: pg.reduce([f1, f1], opts(R, rootRank=me)), "tensors", 1),
        ("allreduce []", lambda pg: pg.allreduce([], opts("AllreduceOptions")), "tensors", 1),
        ("allreduce two dtypes", lambda pg: pg.allreduce([f1, d1]), "tensors[1]", 1),
        ("allreduce two sizes", lambda pg: pg.allreduce([f1, f2]), "tensors[1]", 1),
        ("allreduce dense and sparse", lambda pg: pg.allreduce([f1, sp]), "tensors[1]", 1),
        ("allreduce sparse sizes", lambda pg: pg.allreduce([sp, sp4]), "tensors[1]", 1),
        ("allreduce sparse PRODUCT",
         lambda pg: pg.allreduce([sp], opts("AllreduceOptions", reduceOp=dist.ReduceOp.PRODUCT)),
         "op", 1),
        ("allreduce_coalesced []", lambda pg: pg.allreduce_coalesced([]), "tensors", 1),
        ("allreduce_coalesced two dtypes", lambda pg: pg.allreduce_coalesced([f1, d1]),
         "tensors[1]", 1),
        ("allreduce_coalesced dense and sparse", lambda pg: pg.allreduce_coalesced([f1, sp]),
         "index 1", 1),
        ("allreduce_coalesced sparse", lambda pg: pg.allreduce_coalesced([sp, sp.clone()]),
         "layout", 1),
        ("allreduce_coalesced dense and int sparse",
         lambda pg: pg.allreduce_coalesced([f1, torch.sparse_coo_tensor(
             [[0]], [1], size=(1,), **_SPARSE_CHECKED)]), "index 1", 1),
        ("allgather_coalesced n+1 output lists",
         lambda pg: pg.allgather_coalesced([[f1] for _ in range(n + 1)], [f1]), "output_lists", 1),
        ("allgather_coalesced an output of another size",
         lambda pg: pg.allgather_coalesced([[torch.zeros(0)]] + [[f1] for _ in range(n - 1)],
                                           [f1]), "output_lists[0][0]", 1),
        ("allgather_coalesced an output of another dtype",
         lambda pg: pg.allgather_coalesced([[d1]] + [[f1] for _ in range(n - 1)], [f1]),
         "output_lists[0][0]", 1),
        ("scatter root -1", lambda pg: pg.scatter([f1], [], opts("ScatterOptions", rootRank=-1)),
         "rootRank", 1),
        ("scatter root n", lambda pg: pg.scatter([f1], [], opts("ScatterOptions", rootRank=n)),
         "rootRank", 1),
        ("scatter no output", lambda pg: pg.scatter([], [], opts("ScatterOptions", rootRank=0)),
         "output_tensors", 1),
        ("scatter two outputs",
         lambda pg: pg.scatter([f1, f1], [], opts("ScatterOptions", rootRank=0)),
         "output_tensors", 1),
        ("scatter root without inputs",
         lambda pg: pg.scatter([f1], [], opts("ScatterOptions", rootRank=me)), "input_tensors", 1),
        ("scatter root with two input lists",
         lambda pg: pg.scatter([f1], [[f1] * n, [f1] * n], opts("ScatterOptions", rootRank=me)),
         "input_tensors", 1),
        ("scatter root with n-1 inputs",
         lambda pg: pg.scatter([f1], [[f1] * (n - 1)], opts("ScatterOptions", rootRank=me)),
         "input_tensors[0]", 1),
        ("scatter root with n+1 inputs",
         lambda pg: pg.scatter([f1], [[f1] * (n + 1)], opts("ScatterOptions", rootRank=me)),
         "input_tensors[0]", 1),
        ("scatter root inputs of another dtype",
         lambda pg: pg.scatter([f1], [[d1] * n], opts("ScatterOptions", rootRank=me)),
         "input_tensors[0][0]", 1),
        ("scatter root inputs of another size",
         lambda pg: pg.scatter([f1], [[f2] * n], opts("ScatterOptions", rootRank=me)),
         "input_tensors[0][0]", 1),
        ("gather root -1", lambda pg: pg.gather([], [f1], opts("GatherOptions", rootRank=-1)),
         "rootRank", 1),
        ("gather root n", lambda pg: pg.gather([], [f1], opts("GatherOptions", rootRank=n)),
         "rootRank", 1),
        ("gather no input", lambda pg: pg.gather([], [], opts("GatherOptions", rootRank=0)),
         "input_tensors", 1),
        ("gather two inputs", lambda pg: pg.gather([], [f1, f1], opts("GatherOptions", rootRank=0)),
         "input_tensors", 1),
        ("gather([], [t]) at the root",
         lambda pg: pg.gather([], [f1], opts("GatherOptions", rootRank=me)), "output_tensors", 1),
        ("gather root with two output lists",
         lambda pg: pg.gather([[f1] * n, [f1] * n], [f1], opts("GatherOptions", rootRank=me)),
         "output_tensors", 1),
        ("gather root with n-1 outputs",
         lambda pg: pg.gather([[f1] * (n - 1)], [f1], opts("GatherOptions", rootRank=me)),
         "output_tensors[0]", 1),
        ("gather root with n+1 outputs",
         lambda pg: pg.gather([[f1] * (n + 1)], [f1], opts("GatherOptions", rootRank=me)),
         "output_tensors[0]", 1),
        ("gather root outputs of another dtype",
         lambda pg: pg.gather([[d1] * n], [f1], opts("GatherOptions", rootRank=me)),
         "output_tensors[0][0]", 1),
        ("gather root outputs of another size",
         lambda pg: pg.gather([[f2] * n], [f1], opts("GatherOptions", rootRank=me)),
         "output_tensors[0][0]", 1),
        ("allgather([], [])", lambda pg: pg.allgather([], []), "input_tensors", 1),
        ("allgather([], [t])", lambda pg: pg.allgather([], [f1]), "output lists", 1),
        ("allgather two output lists for one input",
         lambda pg: pg.allgather([[f1] * n, [f1] * n], [f1]), "output lists", 1),
        ("allgather n-1 outputs", lambda pg: pg.allgather([[f1] * (n - 1)], [f1]),
         "output_tensors[0]", 1),
        ("allgather n+1 outputs", lambda pg: pg.allgather([[f1] * (n + 1)], [f1]),
         "output_tensors[0]", 1),
        ("allgather inputs of two dtypes",
         lambda pg: pg.allgather([[f1, f1] * n, [f1, f1] * n], [f1, d1]), "input_tensors[1]", 1),
        ("allgather inputs of two sizes",
         lambda pg: pg.allgather([[f1, f1] * n, [f1, f1] * n], [f1, f2]), "input_tensors[1]", 1),
        ("allgather outputs of another dtype",
         lambda pg: pg.allgather([([f1, d1] * n)[:n]], [f1]), "output_tensors[0][1]", 1),
        ("allgather outputs of another size",
         lambda pg: pg.allgather([([f1, f2] * n)[:n]], [f1]), "output_tensors[0][1]", 1),
        ("reduce_scatter n-1 inputs", lambda pg: pg.reduce_scatter([f1], [[f1] * (n - 1)]),
         "input", 0),
        ("reduce_scatter inputs of another dtype",
         lambda pg: pg.reduce_scatter([f1], [[d1] * n]), "input 0", 0),
        ("reduce_scatter this rank's input unlike the output",
         lambda pg: pg.reduce_scatter([f1], [[f2] * n]), "output", 0),
        ("send two tensors", lambda pg: pg.send([f1, f1], other, 0), "tensors", 0),
    ]
    if n == 1:  # one output is one of the input's own kind
        out = [b for b in out if not b[0].startswith("allgather outputs of another")]
    # A non-root given inputs (scatter) or outputs (gather): only the non-roots call (the
    # root would wait for them); each refuses at once.
    root = 0
    if rank != root:
        out += [
            ("scatter inputs on a non-root",
             lambda pg: pg.scatter([f1], [[f1] * n], opts("ScatterOptions", rootRank=root)),
             "input_tensors", 1),
            ("scatter(output, inputs, root) inputs on a non-root",
             lambda pg: pg.scatter(f1, [f1] * n, root), "input_tensors", 0),
            ("gather outputs on a non-root",
             lambda pg: pg.gather([[f1] * n], [f1], opts("GatherOptions", rootRank=root)),
             "output_tensors", 1),
        ]
    return out


def case_checks(rank, world, gloo, ours):
    bad = bad_calls(rank, world)
    measured, wrong = 0, []
    for name, call, arg, on_gloo in bad:
        if on_gloo:
            try:
                call(gloo)
                common.fail(f"{name}: gloo took it (the reference says it is valid)")
            except (RuntimeError, TypeError):
                measured += 1
        try:
            call(ours)
            wrong.append(f"{name}: taken, not refused")
        except RuntimeError as e:
            msg = str(e)
            if not msg.startswith("ringreduce: ") or arg not in msg:
                wrong.append(f"{name}: the error does not name {arg!r}: {msg!r}")
        except Exception as e:  # noqa: BLE001 (IndexError, TypeError, ...: not a clear refusal)
            wrong.append(f"{name}: {type(e).__name__}: {e}, not a RuntimeError naming {arg!r}")
    if wrong:
        common.fail(f"{len(wrong)} of {len(bad)} wrong calls:\n  " + "\n  ".join(wrong))
    # Nothing was sent: the next call matches on every rank.
    t = v(rank)
    ours.allreduce([t]).wait()
    same(t, v(sum(range(world))), "all_reduce after the refusals")
    return f"{len(bad)} wrong calls refused before anything was sent ({measured} by gloo too)"


def run(rank, world, port, cases):
    from ringreduce.torch import ProcessGroupRingreduce
    store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=TD)
    gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo", store), rank, world, TD)
    ours = ProcessGroupRingreduce(dist.PrefixStore("ringreduce", store), rank, world, TD)
    for case in cases:
        t0 = time.monotonic()
        try:
            got = globals()["case_" + case](rank, world, gloo, ours)
        except Exception:
            # Every rank's own failure (torch's spawn re-raises one, often a peer's
            # "connection closed" that this one caused).
            import traceback
            print(f"rank {rank}: {case} failed:\n{traceback.format_exc()}", flush=True)
            raise
        ours.barrier().wait()
        if rank == 0:
            print(f"  {case}: {got} ({time.monotonic() - t0:.1f} s)", flush=True)
    ours.shutdown()


if __name__ == "__main__":
    world = int(sys.argv[1])
    cases = sys.argv[2:] or CASES
    print(f"torch_pg_object, world {world}, torch {torch.__version__}:", flush=True)
    common.spawn(run, world, (world, common.free_port(), cases))
