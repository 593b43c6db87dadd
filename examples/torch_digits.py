"""A torch.distributed training script as people write it, that runs on gloo or on
ringreduce by changing the backend's name: a small CNN on the 8x8 digits, DistributedSampler,
DistributedDataParallel, 5 epochs, rank 0 prints the loss and saves the model.

    /usr/bin/python3 examples/torch_digits.py --backend ringreduce --nprocs 2    # mp.spawn
    /usr/bin/python3 -m torch.distributed.run --nproc-per-node 4 examples/torch_digits.py --backend ringreduce
    build/bin/rrun --nproc-per-node 4 /usr/bin/python3 examples/torch_digits.py --backend ringreduce

--out DIR writes losses.txt (one line per epoch: the mean training loss over all ranks) and
model.pt (rank 0's state_dict) there; tests/python compare them between the two backends."""

import argparse
import gzip
import os
import sys

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
    dist.init_process_group(args.backend, rank=rank, world_size=world)
    torch.manual_seed(0)
    data = load_digits()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=32, sampler=sampler)
    model = DDP(Net())
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    losses = []
    for epoch in range(args.epochs):
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
    if rank == 0 and args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "losses.txt"), "w") as f:
            f.writelines(f"{v!r}\n" for v in losses)
        torch.save(model.module.state_dict(), os.path.join(args.out, "model.pt"))
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="gloo")
    p.add_argument("--nprocs", type=int, default=2, help="ranks for mp.spawn (not under a launcher)")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--out", default="")
    args = p.parse_args()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun, rrun
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    else:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29400 + os.getpid() % 1000))
        mp.spawn(train, args=(args.nprocs, args), nprocs=args.nprocs)


if __name__ == "__main__":
    sys.exit(main())
