"""torch.distributed on "ringreduce" against torch's own "gloo" backend, in one job.

    /usr/bin/python3 bench/torch/bench_torch.py coll WORLD OUT.jsonl [--sizes 8,1K,...] [--rounds 3]
        [--device cuda]
    /usr/bin/python3 bench/torch/bench_torch.py ddp WORLD OUT.jsonl --model cnn|mlp [--rounds 3]
    /usr/bin/python3 bench/torch/bench_torch.py report DIR   # DIR/*.jsonl, DIR/c/*.json -> tables

Both start WORLD ranks with torch.multiprocessing; each rank's default group is ringreduce
(RR_TRANSPORT picks its transport) and it makes a gloo group of the same ranks beside it, so
both backends run in the same processes, on the same data, with the machine in the same
state. Work alternates between them, the order swapped every round, and the tables take the
median round. Rank 0 appends one JSON line per measurement to OUT.jsonl; bench/torch/run.sh
runs the set and writes the tables.

coll: dist.all_reduce (float32 sum, in place, as DDP calls it) per size: warm-up, then
  back-to-back calls for about 0.2 s between barriers; the time per call is the slowest
  rank's mean, and busbw = size / time * 2(n-1)/n as nccl-tests counts it. Each size's
  result is checked once per backend: rank r adds r+1 everywhere, every element must be
  exactly n(n+1)/2. A third contender, "C", is the library's own blocking rr_all_reduce
  called through ctypes on the same library group, buffers and processes, interleaved with
  the other two: what the torch layer costs is torch's time minus its time.
  --device cuda: the same on CUDA tensors (rank r on GPU r % count; the ranks may share one),
  the device synchronised before each clock reading; gloo then stages through the host
  itself, ringreduce takes its device path (CUDA IPC or staged, docs/cuda.md).
ddp: torch's DistributedDataParallel training step (zero_grad, forward, backward, SGD step)
  on three copies of one model, identically initialised: wrapped on ringreduce, wrapped on
  gloo, and not wrapped at all (no communication: the floor). Milliseconds per step, the
  slowest rank's mean over STEPS steps."""

import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def slowest(x, group):
    """The largest value of x over the ranks (a gloo call, outside anything timed)."""
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return t.item()


def coll_rank(rank, world, args, gloo):
    groups = {"ringreduce": None, "gloo": gloo, "C": "C"}
    import ctypes
    from ringreduce import _lib
    lib_pg = dist.group.WORLD._pg

    def c_all_reduce(t):
        p = t.data_ptr()
        if _lib.all_reduce(lib_pg, p, p, t.numel(), _lib.FLOAT32, _lib.SUM) < 0:
            raise RuntimeError(_lib.error_text())

    def call(t, g):
        if g == "C":
            c_all_reduce(t)
        else:
            dist.all_reduce(t, group=g)
    dev = torch.device("cpu")
    if args.device == "cuda":
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)

    def clock():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return time.perf_counter()
    for size in args.sizes:
        n = max(size // 4, 1)
        t = torch.rand(n, device=dev)
        per = {name: [] for name in groups}
        iters = None
        for rnd in range(args.rounds):
            order = list(groups) if rnd % 2 == 0 else list(groups)[::-1]
            for name in order:
                g = groups[name]
                for _ in range(2):
                    call(t, g)
                if iters is None:  # about 0.2 s per measurement, from the first warm-up
                    dist.barrier(group=gloo)
                    t0 = clock()
                    call(t, g)
                    once = slowest(clock() - t0, gloo)
                    iters = int(min(max(0.2 / max(once, 1e-7), 3), 2000))
                dist.barrier(group=gloo)
                t0 = clock()
                for _ in range(iters):
                    call(t, g)
                per[name].append(slowest((clock() - t0) / iters, gloo))
                t.mul_(0)  # keep values bounded: repeated sums of rand grow by n each call
                t.add_(torch.rand(n, device=dev))
        for name, g in groups.items():
            c = torch.full((n,), float(rank + 1), device=dev)
            call(c, g)
            clock()
            wrong = int((c != world * (world + 1) / 2).sum().item())
            sec = statistics.median(per[name])
            if rank == 0:
                row = {"kind": "coll", "backend": name, "world": world, "size": n * 4,
                       "device": dev.type,
                       "torch": torch.__version__,
                       "transport": os.environ.get("RR_TRANSPORT", "default"),
                       "iters": iters, "rounds": per[name], "time_us": sec * 1e6,
                       "algbw_GBps": n * 4 / sec / 1e9,
                       "busbw_GBps": n * 4 / sec / 1e9 * 2 * (world - 1) / world,
                       "wrong": wrong}
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")


def make_model(kind):
    if kind == "cnn":  # the tutorial's network (examples/torch_digits.py), 6.1k parameters
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        from torch_digits import Net
        return Net(), lambda: torch.randn(32, 1, 8, 8), 10
    # An MLP of about 9.4M parameters (36 MiB of float32 gradients): several buckets.
    dims = [1024, 2048, 2048, 1024, 1024]
    layers = []
    for a, b in zip(dims, dims[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1]), lambda: torch.randn(64, 1024), 1024


def ddp_rank(rank, world, args, gloo):
    import copy
    torch.manual_seed(0)
    base, batch, _ = make_model(args.model)
    nparams = sum(p.numel() for p in base.parameters())
    variants = {
        "ringreduce": nn.parallel.DistributedDataParallel(copy.deepcopy(base)),
        "gloo": nn.parallel.DistributedDataParallel(copy.deepcopy(base), process_group=gloo),
        "no-comm": copy.deepcopy(base),
    }
    try:  # torch 2.x: FSDP2 on each backend too
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    except (ImportError, ValueError):
        fully_shard = None
    if fully_shard is not None:
        for name, mesh in (("fsdp ringreduce", init_device_mesh("cpu", (world,))),
                           ("fsdp gloo", DeviceMesh.from_group(gloo, "cpu"))):
            m = copy.deepcopy(base)
            for layer in m.modules():
                if isinstance(layer, (nn.Linear, nn.Conv2d)):
                    fully_shard(layer, mesh=mesh)
            variants[name] = fully_shard(m, mesh=mesh)
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in variants.items()}
    torch.manual_seed(1 + rank)
    x = batch()

    def step(name):
        m, o = variants[name], opts[name]
        o.zero_grad()
        m(x).square().mean().backward()
        o.step()

    per = {k: [] for k in variants}
    for rnd in range(args.rounds):
        order = list(variants) if rnd % 2 == 0 else list(variants)[::-1]
        for name in order:
            for _ in range(2):
                step(name)
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step(name)
            per[name].append(slowest((time.perf_counter() - t0) / args.steps, gloo))
    if rank == 0:
        with open(args.out, "a") as f:
            for name, v in per.items():
                f.write(json.dumps({"kind": "ddp", "model": args.model, "params": nparams,
                                    "torch": torch.__version__,
                                    "backend": name, "world": world, "steps": args.steps,
                                    "transport": os.environ.get("RR_TRANSPORT", "default"),
                                    "rounds": v, "ms": statistics.median(v) * 1e3}) + "\n")


def entry(rank, world, args):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import ringreduce.torch  # noqa: F401 (registers the backend)
    torch.set_num_threads(1)  # the ranks share the machine's cores
    timeout = datetime.timedelta(seconds=600)
    dist.init_process_group("ringreduce", rank=rank, world_size=world, timeout=timeout)
    gloo = dist.new_group(backend="gloo", timeout=timeout)
    (coll_rank if args.mode == "coll" else ddp_rank)(rank, world, args, gloo)
    dist.barrier(group=gloo)
    dist.destroy_process_group()


def fmt_size(b):
    for unit, k in (("G", 30), ("M", 20), ("K", 10)):
        if b >= 1 << k and b % (1 << k) == 0:
            return f"{b >> k}{unit}"
    return str(b)


def report(d):
    """DIR/results.jsonl (coll and ddp lines of one torch version) -> DIR/table.md and
    DIR/busbw_w{2,4}.dat for bench/torch/busbw.gp. Every figure comes from the same run:
    gloo, ringreduce and the C library's own call interleaved in the same ranks."""
    rows = [json.loads(line) for line in open(os.path.join(d, "results.jsonl"))]
    out = []
    coll = [r for r in rows if r["kind"] == "coll"]
    wrong = sum(r["wrong"] for r in coll)
    if rows:
        out.append(f"torch {rows[0].get('torch', '?')}\n")
    for world in sorted({r["world"] for r in coll}):
        out.append(f"### all_reduce, world {world}: time per call (us) / busbw (GB/s)\n")
        out.append("| size | gloo | ringreduce shm | ringreduce tcp | rr shm / gloo | rr tcp / gloo "
                   "| C shm | C tcp | torch shm / C | torch tcp / C | layer shm (us) |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        dat = []
        for size in sorted({r["size"] for r in coll if r["world"] == world}):
            def us(backend, transport=None):
                v = [r["time_us"] for r in coll if (r["world"], r["size"], r["backend"]) ==
                     (world, size, backend) and (transport is None or r["transport"] == transport)]
                return statistics.median(v) if v else None
            # gloo ran beside both ringreduce transports: the median of its two launches.
            g = us("gloo")
            r_s, r_t = us("ringreduce", "default"), us("ringreduce", "tcp")
            c_s, c_t = us("C", "default"), us("C", "tcp")

            def cell(t):
                if t is None:
                    return "-"
                return f"{t:.1f} / {size / t / 1e3 * 2 * (world - 1) / world:.3f}"

            def ratio(a, b):
                return f"{a / b:.2f}x" if a and b else "-"
            layer = f"{r_s - c_s:.1f}" if r_s and c_s else "-"
            out.append(f"| {fmt_size(size)} | {cell(g)} | {cell(r_s)} | {cell(r_t)} | "
                       f"{ratio(g, r_s)} | {ratio(g, r_t)} | {cell(c_s)} | {cell(c_t)} | "
                       f"{ratio(r_s, c_s)} | {ratio(r_t, c_t)} | {layer} |")
            bw = [size / t / 1e3 * 2 * (world - 1) / world if t else float("nan")
                  for t in (g, r_s, r_t, c_s, c_t)]
            dat.append(f"{size} " + " ".join(f"{v:.6g}" for v in bw))
        out.append("")
        with open(os.path.join(d, f"busbw_w{world}.dat"), "w") as f:
            f.write("# size gloo rr_shm rr_tcp C_shm C_tcp (busbw GB/s)\n" + "\n".join(dat) + "\n")
    out.append(f"Wrong elements over every checked call: {wrong}.\n")
    ddp = [r for r in rows if r["kind"] == "ddp"]
    if ddp:
        names = ["no-comm", "gloo", "ringreduce", "fsdp gloo", "fsdp ringreduce"]
        have = [n for n in names if any(r["backend"] == n for r in ddp)]
        out.append("### Training step (ms, slowest rank, median round): DDP and FSDP2\n")
        out.append("| model | params | world | transport | " + " | ".join(have) +
                   " | DDP gloo / rr | FSDP gloo / rr |")
        out.append("|---|---:|---:|---|" + "---:|" * (len(have) + 2))
        keys = sorted({(r["model"], r["params"], r["world"], r["transport"]) for r in ddp})
        for k in keys:
            v = {r["backend"]: r["ms"] for r in ddp
                 if (r["model"], r["params"], r["world"], r["transport"]) == k}
            f = (f"{v['fsdp gloo'] / v['fsdp ringreduce']:.2f}x"
                 if "fsdp gloo" in v and "fsdp ringreduce" in v else "-")
            out.append(f"| {k[0]} | {k[1]:,} | {k[2]} | {k[3]} | " +
                       " | ".join(f"{v[n]:.3f}" if n in v else "-" for n in have) +
                       f" | {v['gloo'] / v['ringreduce']:.2f}x | {f} |")
        out.append("")
    with open(os.path.join(d, "table.md"), "w") as f:
        f.write("\n".join(out))
    print("\n".join(out))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "report":
        report(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["coll", "ddp"])
    ap.add_argument("world", type=int)
    ap.add_argument("out")
    ap.add_argument("--sizes", default="8,128,2K,32K,512K,2M,8M,32M,128M,256M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="coll: where the tensors are")
    ap.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    ap.add_argument("--steps", type=int, default=0, help="timed steps per round "
                    "(default: 200 for cnn, 10 for mlp)")
    args = ap.parse_args()
    args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    args.steps = args.steps or (200 if args.model == "cnn" else 10)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    mp.spawn(entry, args=(args.world, args), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
