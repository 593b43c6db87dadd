"""torch 2.x's users of a process group, on "ringreduce" against gloo in the same job: FSDP,
distributed checkpointing, DDP's options and hooks, Join, ZeroRedundancyOptimizer.

    python tests/python/torch_train.py WORLD [CASE ...]     # all cases in one job by default

Cases:
  fsdp          fully_shard (FSDP2) on a small MLP, STEPS SGD steps on each rank's own data
  dcp           torch.distributed.checkpoint: a sharded FSDP model and optimizer saved at
                WORLD, loaded back at WORLD and (in a second job) at another world size;
                every parameter must come back bit for bit
  static_graph, bucket_view, init_sync, powersgd, join, zero
                DDP(static_graph=True), DDP(gradient_as_bucket_view=True),
                DDP(init_sync=False), the PowerSGD comm hook, the Join context manager with
                uneven inputs, and ZeroRedundancyOptimizer under DDP
Every training case trains one model on the default (ringreduce) group and one on a gloo
group of the same ranks, and compares them as sumorder.py says: bit for bit at world 2; from
world 3 within SPREAD_FACTOR times gloo's own spread, measured in the same job with DDP on
gloo summing in other orders (the same model, data and steps). Each case skips, saying why,
where the installed torch lacks the API. Exit 0, 1 or 77."""

import datetime
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import sumorder  # noqa: E402

torch, dist, mp = common.torch_or_skip()
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

STEPS = 5
check = common.check


def model():
    torch.manual_seed(3)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(),
                         nn.Linear(32, 4))


def batches(rank, steps=STEPS, sizes=None):
    g = torch.Generator().manual_seed(200 + rank)
    for s in range(steps):
        n = sizes[s] if sizes else 8
        yield torch.randn(n, 16, generator=g), torch.randn(n, 4, generator=g)


def train(m, rank, opt=None, steps=STEPS):
    opt = opt or torch.optim.SGD(m.parameters(), lr=0.05)
    for x, y in batches(rank, steps):
        opt.zero_grad()
        F.mse_loss(m(x), y).backward()
        opt.step()
    return m


def full_state(m):
    """Parameters as full tensors (FSDP's are sharded DTensors)."""
    out = {}
    for k, v in m.state_dict().items():
        v = v.full_tensor() if hasattr(v, "full_tensor") else v
        out[k] = v.detach().clone()
    return out


_SPREADS = {}


def spreads(rank, world, gloo, make=model, steps=STEPS):
    """gloo against gloo with the gradients summed in other orders (sumorder.ORDERS), DDP on
    the same model, data and steps: {order: largest relative difference}. Measured once per
    number of steps."""
    if world <= 2:
        return {}
    if steps not in _SPREADS:
        _SPREADS[steps] = _measure_spreads(rank, gloo, make, steps)
    return _SPREADS[steps]


def _measure_spreads(rank, gloo, make, steps):
    base = train(DDP(make(), process_group=gloo), rank, steps=steps)
    out = {}
    for order in sumorder.ORDERS:
        d = DDP(make(), process_group=gloo)
        d.register_comm_hook(gloo, sumorder.reordered_hook(order))
        train(d, rank, steps=steps)
        out[order] = sumorder.state_diff(base.module.state_dict(), d.module.state_dict())[0]
    return out


def judge(case, rank, world, ours, theirs, spread):
    diff, where = sumorder.state_diff(theirs, ours)
    bad = sumorder.training_verdict(f"{case}: {where}", world, diff, spread)
    check(bad is None, bad)
    return (f"largest difference from gloo {diff:.2e} ({where})" +
            (f"; gloo's own spread " + ", ".join(f"{k} {v:.2e}" for k, v in spread.items())
             if spread else ""))


def fully_shard_or_none():
    try:
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.device_mesh import init_device_mesh
        return fully_shard, init_device_mesh
    except (ImportError, ValueError):  # 1.13 has none (and its _shard fails on Python 3.11)
        return None


def case_fsdp(rank, world, gloo, tmp):
    fs = fully_shard_or_none()
    if fs is None:
        return "skipped (this torch has no fully_shard)"
    fully_shard, init_device_mesh = fs
    from torch.distributed.device_mesh import DeviceMesh
    out = {}
    for name, group in (("ringreduce", None), ("gloo", gloo)):
        if group is None:
            mesh = init_device_mesh("cpu", (world,))
        else:
            mesh = DeviceMesh.from_group(group, "cpu")
        m = model()
        for layer in m:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(m, mesh=mesh)
        train(m, rank)
        out[name] = full_state(m)
    return judge("fsdp", rank, world, out["ringreduce"], out["gloo"], spreads(rank, world, gloo))


def case_dcp(rank, world, gloo, tmp):
    fs = fully_shard_or_none()
    try:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    except (ImportError, ValueError) as e:
        return f"skipped (this torch's torch.distributed.checkpoint does not import here: {e})"
    if fs is None:
        return "skipped (this torch has no fully_shard)"
    fully_shard, init_device_mesh = fs
    mesh = init_device_mesh("cpu", (world,))
    m = model()
    fully_shard(m, mesh=mesh)
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    train(m, rank, opt)
    want = full_state(m)
    msd, osd = get_state_dict(m, opt)
    path = os.path.join(tmp, "ckpt")
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=path)
    if rank == 0:
        torch.save(want, os.path.join(tmp, "want.pt"))
    # Load into a fresh, differently initialised model at the same world size.
    torch.manual_seed(99)
    m2 = model()
    for p in m2.parameters():
        nn.init.normal_(p)
    fully_shard(m2, mesh=mesh)
    opt2 = torch.optim.Adam(m2.parameters(), lr=0.01)
    msd2, osd2 = get_state_dict(m2, opt2)
    state = {"model": msd2, "optim": osd2}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(m2, opt2, model_state_dict=state["model"], optim_state_dict=state["optim"])
    got = full_state(m2)
    for k in want:
        check(torch.equal(got[k], want[k]), f"dcp: {k} did not come back bit for bit")
    return f"saved and loaded at world {world}: {len(want)} tensors bit for bit"


def dcp_reshard(rank, world, port, tmp):
    """The second job of case dcp: load the checkpoint saved at another world size."""
    fully_shard, init_device_mesh = fully_shard_or_none()
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    import ringreduce.torch  # noqa: F401
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("ringreduce", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    mesh = init_device_mesh("cpu", (world,))
    torch.manual_seed(99)
    m = model()
    fully_shard(m, mesh=mesh)
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    msd, osd = get_state_dict(m, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=os.path.join(tmp, "ckpt"))
    set_state_dict(m, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    got = full_state(m)
    want = torch.load(os.path.join(tmp, "want.pt"))
    for k in want:
        check(torch.equal(got[k], want[k]), f"dcp resharded to world {world}: {k} differs")
    dist.destroy_process_group()


def ddp_case(case, rank, world, gloo):
    kw = {}
    if case == "static_graph":
        kw["static_graph"] = True
    elif case == "bucket_view":
        kw["gradient_as_bucket_view"] = True
    elif case == "init_sync":
        import inspect
        if "init_sync" not in str(inspect.signature(DDP.__init__)):
            return "skipped (this torch's DDP has no init_sync)"
        kw["init_sync"] = False
    out = {}
    for name, group in (("ringreduce", None), ("gloo", gloo)):
        d = DDP(model(), process_group=group, **kw)
        if case == "powersgd":
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
            state = ps.PowerSGDState(process_group=group or dist.group.WORLD,
                                     matrix_approximation_rank=2, start_powerSGD_iter=2,
                                     random_seed=7)
            d.register_comm_hook(state, ps.powerSGD_hook)
        train(d, rank)
        out[name] = d.module.state_dict()
    # PowerSGD sums low-rank factors: its own reductions, in the backend's order, each step.
    return judge(case, rank, world, out["ringreduce"], out["gloo"], spreads(rank, world, gloo))


def case_join(rank, world, gloo, tmp):
    from torch.distributed.algorithms.join import Join
    sizes = [8] * (STEPS + 2 * rank)  # rank r has 2r more batches: uneven inputs
    out = {}
    for name, group in (("ringreduce", None), ("gloo", gloo)):
        d = DDP(model(), process_group=group)
        opt = torch.optim.SGD(d.parameters(), lr=0.05)
        with Join([d]):
            for x, y in batches(rank, len(sizes), sizes):
                opt.zero_grad()
                F.mse_loss(d(x), y).backward()
                opt.step()
        out[name] = d.module.state_dict()
    diff, where = sumorder.state_diff(out["gloo"], out["ringreduce"])
    # Joined ranks contribute zeros to the others' all_reduces: the same sums in any order
    # at world 2; from 3 on, the spread rule with gloo's own spread over the common steps.
    return judge("join", rank, world, out["ringreduce"], out["gloo"],
                 spreads(rank, world, gloo, steps=STEPS + 2 * (world - 1)))


def case_zero(rank, world, gloo, tmp):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    out = {}
    for name, group in (("ringreduce", None), ("gloo", gloo)):
        d = DDP(model(), process_group=group)
        opt = ZeroRedundancyOptimizer(d.parameters(), optimizer_class=torch.optim.SGD, lr=0.05,
                                      process_group=group)
        train(d, rank, opt)
        out[name] = d.module.state_dict()
    return judge("zero", rank, world, out["ringreduce"], out["gloo"], spreads(rank, world, gloo))


CASES = ["fsdp", "dcp", "static_graph", "bucket_view", "init_sync", "powersgd", "join", "zero"]


def run(rank, world, port, cases, tmp):
    import ringreduce.torch  # noqa: F401
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("ringreduce", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    gloo = dist.new_group(list(range(world)), backend="gloo")
    for case in cases:
        fn = globals().get("case_" + case)
        got = fn(rank, world, gloo, tmp) if fn else ddp_case(case, rank, world, gloo)
        if rank == 0:
            print(f"  {case}: {got}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    world = int(sys.argv[1])
    cases = sys.argv[2:] or CASES
    print(f"torch_train, world {world}, torch {torch.__version__}:")
    with tempfile.TemporaryDirectory() as tmp:
        common.spawn(run, world, (world, common.free_port(), cases, tmp))
        if "dcp" in cases and os.path.exists(os.path.join(tmp, "want.pt")):
            other = 2 if world != 2 else 4
            common.spawn(dcp_reshard, other, (other, common.free_port(), tmp))
            print(f"  dcp: the checkpoint saved at world {world} loaded at world {other}, "
                  "every parameter bit for bit")
