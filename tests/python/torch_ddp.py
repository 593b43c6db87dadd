"""torch's own DistributedDataParallel on the "ringreduce" backend, against the same model
trained on gloo in the same job.

    /usr/bin/python3 tests/python/torch_ddp.py CASE WORLD

Cases: plain (BatchNorm, broadcast_buffers), fp16_hook, bf16_hook, unused
(find_unused_parameters=True), no_sync (gradient accumulation), syncbn (nn.SyncBatchNorm).
Every rank trains copies of one model for STEPS steps on its own data, one wrapped on the
default (ringreduce) group and one on a gloo group of the same ranks; afterwards every
parameter and buffer must match gloo's as sumorder.py defines it: bit for bit at world 2,
and from world 3 within SPREAD_FACTOR times the spread of gloo against itself with the
gradients summed in other orders (more copies, trained on gloo through
sumorder.reordered_hook, compressed as the case's hook compresses). The ringreduce copy must
agree across ranks bit for bit. syncbn (GPU only, as torch's SyncBatchNorm) compares instead
with one process training plain BatchNorm on every rank's batch at once, within REL_SYNCBN.
Exit 0, 1 or 77."""

import copy
import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import sumorder  # noqa: E402

torch, dist, mp = common.torch_or_skip()
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

STEPS = 6
# syncbn runs on a GPU against a one-process CPU reference that adds in yet another order.
REL_SYNCBN = 1e-4
COMPRESS = {"fp16_hook": torch.float16, "bf16_hook": torch.bfloat16}


class Model(nn.Module):
    def __init__(self, unused=False, bn=True):
        super().__init__()
        self.fc1 = nn.Linear(12, 32)
        self.bn = nn.BatchNorm1d(32) if bn else nn.Identity()
        self.fc2 = nn.Linear(32, 4)
        self.spare = nn.Linear(32, 4) if unused else None  # never used in forward

    def forward(self, x):
        return self.fc2(F.relu(self.bn(self.fc1(x))))


def build(case):
    torch.manual_seed(1)
    m = Model(unused=case == "unused")
    if case == "syncbn":
        m = nn.SyncBatchNorm.convert_sync_batchnorm(m)
    return m


def wrap(model, case, group):
    ddp = DDP(model, process_group=group, find_unused_parameters=case == "unused")
    if case in ("fp16_hook", "bf16_hook"):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as hooks
        ddp.register_comm_hook(group, getattr(hooks, case.replace("_hook", "_compress_hook")))
    return ddp


def train(ddp, rank, case, dev=None):
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(STEPS):
        opt.zero_grad()
        batches = 2 if case == "no_sync" else 1
        for b in range(batches):
            x = torch.randn(8, 12, generator=g).to(dev or "cpu")
            y = torch.randn(8, 4, generator=g).to(dev or "cpu")
            if b < batches - 1:
                with ddp.no_sync():  # accumulate locally; the next backward averages the sum
                    F.mse_loss(ddp(x), y).backward()
            else:
                F.mse_loss(ddp(x), y).backward()
        opt.step()


def syncbn_reference(world):
    """What SyncBatchNorm under DDP must compute: one process, plain BatchNorm, every rank's
    batch at once (the mean of the ranks' losses over equal batches is the loss of their
    concatenation, and SyncBatchNorm's statistics are the concatenation's)."""
    torch.manual_seed(1)
    ref = Model()
    opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    gens = [torch.Generator().manual_seed(100 + r) for r in range(world)]
    for step in range(STEPS):
        xs, ys = zip(*[(torch.randn(8, 12, generator=g), torch.randn(8, 4, generator=g))
                       for g in gens])
        opt.zero_grad()
        F.mse_loss(ref(torch.cat(xs)), torch.cat(ys)).backward()
        opt.step()
    return ref


def run(rank, world, case, port):
    import ringreduce.torch  # noqa: F401
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("ringreduce", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    gloo = dist.new_group(list(range(world)), backend="gloo")
    ours = build(case)
    if case == "syncbn":
        # GPU only (torch's SyncBatchNorm): on CUDA, against the one-process reference.
        # Ran on one H200 at world 2 (tests/gpu/run.sh torch_cpu, torch 2.11, 2026-11-27):
        # passed (docs/gpu-runs/2026-11-27-h200.md). Never run on several GPUs.
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        ours.to(dev)
        train(wrap(ours, case, None), rank, case, dev)
        theirs = syncbn_reference(world)
        mine = ours.state_dict()
        for k, v in mine.items():
            err = sumorder.tensor_diff(v, theirs.state_dict()[k])
            common.check(err <= REL_SYNCBN, f"{case}: {k} differs from the one-process "
                         f"reference by {err:.3e} (limit {REL_SYNCBN})")
        verdict = f"<= {REL_SYNCBN} from the one-process reference"
    else:
        theirs = copy.deepcopy(ours)
        others = {o: copy.deepcopy(ours) for o in sumorder.ORDERS} if world > 2 else {}
        train(wrap(ours, case, None), rank, case)
        train(wrap(theirs, case, gloo), rank, case)
        for order, m in others.items():
            ddp = DDP(m, process_group=gloo, find_unused_parameters=case == "unused")
            ddp.register_comm_hook(gloo, sumorder.reordered_hook(order, COMPRESS.get(case)))
            train(ddp, rank, case)
        mine = ours.state_dict()
        diff, where = sumorder.state_diff(theirs.state_dict(), mine)
        spreads = {o: sumorder.state_diff(theirs.state_dict(), m.state_dict())[0]
                   for o, m in others.items()}
        bad = sumorder.training_verdict(f"{case}: {where}", world, diff, spreads)
        common.check(bad is None, bad)
        verdict = (f"largest difference from gloo {diff:.2e} ({where}); gloo summed in other "
                   "orders: " + (", ".join(f"{o} {v:.2e}" for o, v in spreads.items()) or "-"))
    # Every rank holds the same parameters (BatchNorm's running statistics are each rank's
    # own after its last forward): compare with rank 0's bits.
    for k, v in ours.named_parameters():
        ref = v.detach().clone()
        dist.broadcast(ref, 0)
        common.check(torch.equal(ref, v.detach()), f"{case}: {k} differs between rank 0 and rank {rank}")
    if rank == 0:
        print(f"torch_ddp {case} world {world}: {len(mine)} tensors; {verdict}")
    dist.destroy_process_group()


def torch_refuses(case):
    """Why this torch cannot run the case at all (any backend), or None."""
    if case == "bf16_hook":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as hooks
        if not hasattr(hooks, "bf16_compress_hook"):
            return "this torch has no bf16_compress_hook"
        import inspect
        if torch.version.cuda is None and "NCCL 2.10" in inspect.getsource(DDP._check_comm_hook):
            # torch's DDP refuses the hook in a torch built without CUDA and NCCL (Debian's
            # 1.13), whatever the backend; PyPI's 2.x is built with them and allows it on a
            # machine without a GPU.
            return "this torch's bf16_compress_hook needs CUDA and NCCL; tests/gpu runs it"
    if case == "syncbn" and not torch.cuda.is_available():
        return "torch's SyncBatchNorm runs on GPU modules only; tests/gpu runs it"
    return None


if __name__ == "__main__":
    case, world = sys.argv[1], int(sys.argv[2])
    why = torch_refuses(case)
    if why:
        print(f"skipped: {why}")
        sys.exit(77)
    common.spawn(run, world, (world, case, common.free_port()))
