"""A torch.distributed training script as people write it, that runs on gloo or on
ringreduce by changing the backend's name: a small CNN on the 8x8 digits, DistributedSampler,
DistributedDataParallel, 5 epochs, rank 0 prints the loss and saves the model.

    /usr/bin/python3 examples/torch_digits.py --backend ringreduce --nprocs 2    # mp.spawn
    /usr/bin/python3 -m torch.distributed.run --nproc-per-node 4 examples/torch_digits.py --backend ringreduce
    build/bin/rrun --nproc-per-node 4 /usr/bin/python3 examples/torch_digits.py --backend ringreduce

--out DIR writes losses.txt (one line per epoch: the mean training loss over all ranks) and
model.pt (rank 0's state_dict) there; tests/python compare them between the two backends.

--elastic (ringreduce only; under a launcher that keeps the others running when a worker
dies: rrun --keep-going, or torchrun with a launcher that does): when a rank dies, the
survivors drop the step, shrink the group (ringreduce.torch.shrink), make DDP again on it
and go on from where the new rank 0 stood, at the new world size; --step-sleep-ms slows each
step so that a test can kill a rank mid-epoch. With RR_GROW_ADDR set (rrun --replace sets
it) the ranks also ask after every step whether a restarted worker waits (grow_pending) and
grow by one when it does: a process started with --elastic and RR_GROW_JOIN=1 joins the
running group (ringreduce.torch.join instead of init_process_group; RANK is not needed) and
takes rank 0's parameters (DDP), optimizer state and position by broadcast."""

import argparse
import gzip
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

HERE = os.path.dirname(os.path.abspath(__file__))


def load_digits():
    path = os.path.join(HERE, "..", "tests", "data", "digits.csv.gz")
    rows = [list(map(int, line.split(","))) for line in gzip.open(path, "rt")]
    t = torch.tensor(rows, dtype=torch.float32)
    return TensorDataset(t[:, :64].view(-1, 1, 8, 8) / 16.0, t[:, 64].long())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def train(rank, world, args):
    if args.backend == "ringreduce":
        try:
            import ringreduce.torch  # noqa: F401 (registers the backend)
        except ImportError:  # not installed: the package of this source tree
            sys.path.insert(0, os.path.join(HERE, "..", "python"))
            import ringreduce.torch  # noqa: F401
    joining = args.elastic and os.environ.get("RR_GROW_JOIN") == "1"
    if joining:  # a restarted worker: into the running group, whose ranks grow for it
        ringreduce.torch.join()
    else:
        dist.init_process_group(args.backend, rank=rank, world_size=world)
    torch.manual_seed(0)
    data = load_digits()
    sampler = DistributedSampler(data, num_replicas=dist.get_world_size(),
                                 rank=dist.get_rank(), shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=32, sampler=sampler)
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    losses = []
    if args.elastic:
        model, losses = train_elastic(model, opt, data, args, joining)
    for epoch in range(0 if args.elastic else args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(2, dtype=torch.float64)
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            total += torch.tensor([loss.item() * len(y), len(y)], dtype=torch.float64)
        dist.all_reduce(total)
        losses.append(total[0].item() / total[1].item())
        if rank == 0:
            print(f"epoch {epoch}: loss {losses[-1]:.6f}", flush=True)
    rank = dist.get_rank()  # after a shrink: the rank among the survivors
    if rank == 0 and args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "losses.txt"), "w") as f:
            f.writelines(f"{v!r}\n" for v in losses)
        torch.save(model.module.state_dict(), os.path.join(args.out, "model.pt"))
    dist.destroy_process_group()


def take_rank0_state(model, opt, epoch, done, losses):
    """After a shrink or a growth, every rank (a newcomer too) takes the new rank 0's place,
    its momentum buffers and its count of epoch losses (rank 0 prints and saves them). The
    parameters came with DDP's construction. Returns (epoch, done, losses)."""
    # (SGD keeps None there without momentum)
    has = int(any(opt.state[p].get("momentum_buffer") is not None for p in model.parameters()))
    pos = torch.tensor([epoch, done, len(losses), has], dtype=torch.int64)
    dist.broadcast(pos, 0)
    epoch, done, n, has = pos.tolist()
    if has:  # a newcomer (or a rank a step behind) has none yet: zeros, then rank 0's
        for p in model.parameters():
            if opt.state[p].get("momentum_buffer") is None:
                opt.state[p]["momentum_buffer"] = torch.zeros_like(p)
            dist.broadcast(opt.state[p]["momentum_buffer"], 0)
    return epoch, done, (losses + [float("nan")] * n)[:n]


def train_elastic(model, opt, data, args, joined):
    """The loop above, surviving the death of ranks. Where training stands is (epoch, samples
    of the epoch's shuffled list the group consumed), which does not depend on the world
    size: DistributedSampler gives rank r the list's positions r, r + W, ... (the same
    shuffle for every W: seed and epoch), so after k local samples the group consumed k * W."""
    import ringreduce.torch as rrt
    epoch, done, losses = 0, 0, []
    total = torch.zeros(2, dtype=torch.float64)
    poll = bool(os.environ.get("RR_GROW_ADDR"))  # a restarted worker can come back
    if joined:
        epoch, done, losses = take_rank0_state(model, opt, epoch, done, losses)
        print(f"joined as rank {dist.get_rank()} of {dist.get_world_size()} at epoch {epoch}, "
              f"sample {done}", flush=True)
    while epoch < args.epochs:
        rank, world = dist.get_rank(), dist.get_world_size()
        sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
        sampler.set_epoch(epoch)
        mine = list(sampler)[-(-done // world):]  # resume at the first position >= done
        grow = False
        try:
            for i in range(0, len(mine), 32):
                x, y = data[mine[i:i + 32]]
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                total += torch.tensor([loss.item() * len(y), len(y)], dtype=torch.float64)
                done += len(y) * world
                time.sleep(args.step_sleep_ms / 1000)
                if poll and rrt.grow_pending():  # the same answer on every rank
                    grow = True
                    break
            if grow:
                t0 = time.monotonic()
                model = grow_by_one(model)
                if dist.get_world_size() > world:
                    epoch, done, losses = take_rank0_state(model, opt, epoch, done, losses)
                    if dist.get_rank() == 0:
                        print(f"elastic: world {world} -> {dist.get_world_size()} (a newcomer "
                              f"joined); resuming epoch {epoch} at sample {done} after "
                              f"{(time.monotonic() - t0) * 1000:.0f} ms", flush=True)
                continue  # the sampler again, for the new world
            dist.all_reduce(total)
            losses.append(total[0].item() / total[1].item())
            if rank == 0:
                print(f"epoch {epoch}: loss {losses[-1]:.6f} ({world} ranks)", flush=True)
            epoch, done, total = epoch + 1, 0, torch.zeros(2, dtype=torch.float64)
        except RuntimeError as e:
            # A peer died (or the revoke of one that saw it first): drop this step, go on
            # with the survivors. A failure of the shrink itself ends this rank.
            print(f"rank {rank}: {str(e).splitlines()[0][:300]}; shrinking the group",
                  file=sys.stderr, flush=True)
            rrt.revoke()
            rrt.shrink()
            model = DDP(model.module)  # checks and broadcasts parameters from the new rank 0
            # Survivors may stand a step (or an epoch's end) apart: one may have completed a
            # collective another saw fail. Take the new rank 0's place and optimizer state.
            epoch, done, losses = take_rank0_state(model, opt, epoch, done, losses)
            if dist.get_rank() == 0:
                print(f"resumed with {dist.get_world_size()} ranks at epoch {epoch}, sample "
                      f"{done}", flush=True)
    x, y = data.tensors
    model.module.eval()
    with torch.no_grad():
        acc = (model.module(x).argmax(1) == y).double().mean().item()
    model.module.train()
    # Parameters only: BatchNorm's running statistics are each rank's own since the last
    # forward (DDP broadcasts them from rank 0 at the start of each).
    h = torch.cat([p.detach().double().reshape(-1) for p in model.module.parameters()])
    every = [torch.zeros_like(h) for _ in range(dist.get_world_size())]
    dist.all_gather(every, h)
    same = all(torch.equal(every[0], v) for v in every)
    if dist.get_rank() == 0:
        print(f"accuracy {100 * acc:.2f}%; parameters bit-identical on all "
              f"{dist.get_world_size()} ranks: {'yes' if same else 'NO'}", flush=True)
    return model, losses


def grow_by_one(model):
    """A newcomer waits: grow the default group by one and make DDP again on the grown
    group (the newcomer makes its own: parameters from rank 0). A growth nobody came to
    in time leaves the old group as it was: go on with it."""
    import ringreduce.torch as rrt
    before = dist.get_world_size()
    try:
        rrt.grow(1, wait=10)
    except RuntimeError as e:
        print(f"rank {dist.get_rank()}: {str(e).splitlines()[0][:300]}; going on with "
              f"{before} ranks", file=sys.stderr, flush=True)
        return model
    return DDP(model.module)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="gloo")
    p.add_argument("--nprocs", type=int, default=2, help="ranks for mp.spawn (not under a launcher)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--out", default="")
    p.add_argument("--elastic", action="store_true", help="survive the death of ranks (ringreduce)")
    p.add_argument("--step-sleep-ms", type=float, default=0.0)
    args = p.parse_args()
    if args.elastic and os.environ.get("RR_GROW_JOIN") == "1":  # a newcomer: no RANK needed
        train(-1, -1, args)
    elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun, rrun
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    else:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29400 + os.getpid() % 1000))
        mp.spawn(train, args=(args.nprocs, args), nprocs=args.nprocs)


if __name__ == "__main__":
    sys.exit(main())
