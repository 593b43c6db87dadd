"""CUDA tensors on the "ringreduce" backend (a GPU machine: tests/gpu/run.sh runs it).

    RINGREDUCE_LIBRARY=build-gpu/libringreduce.so python3 tests/python/torch_cuda.py WORLD

The ranks share the machine's GPU(s) (rank r on device r % count). Every collective runs on
CUDA tensors made on torch's current stream, with the same inputs as on the CPU, and must
equal the reference tests/python/torch_collectives.py computes (integers exactly, floats to
its tolerance); then the work is repeated on a side stream to check the ordering, and an
all_reduce into a transposed view on a side stream is read there with no host synchronisation
(the copy back from the contiguous temporary is on the caller's stream); then three
DDP steps of a small model on CUDA must give the parameters that gloo gives on the CPU (to
1e-4 relative: cuBLAS and the CPU's BLAS add in different orders).

Exit 77 without a GPU, without CUDA in this torch, or with a library built without CUDA.

    python3 tests/python/torch_cuda.py WORLD --cpu

runs the same script on CPU tensors (streams become no-ops, DDP is ringreduce on the CPU
against gloo): it proves nothing about CUDA, only that the script's own calls and checks are
sound, so that a GPU window is not spent on a broken test. CI runs it (torch*.cuda_script_w2);
it exists because the first GPU run (docs/gpu-runs/2026-11-27-h200.md) found this script
passing its inputs where tc.same takes a tolerance."""

import contextlib
import copy
import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import torch_collectives as tc  # noqa: E402 (data, reduce_ref, same)

torch, dist, mp = common.torch_or_skip()
ON_CPU = "--cpu" in sys.argv[1:]
WHERE = "the CPU (--cpu)" if ON_CPU else "CUDA"


def on_stream(stream):
    """torch.cuda.stream(stream), or nothing on the CPU (--cpu)."""
    return contextlib.nullcontext() if ON_CPU else torch.cuda.stream(stream)


def new_stream(dev=None):
    return None if ON_CPU else torch.cuda.Stream(device=dev)


def synchronize():
    if not ON_CPU:
        torch.cuda.synchronize()


def noncontiguous_on_side_stream(rank, world, dev):
    """A non-contiguous CUDA output (a transposed view) gets its result through a contiguous
    temporary and a copy back, which must be ordered on the stream the call was issued on: a
    side stream here, read on that stream with no host synchronisation in between; the copy
    back runs on the caller's thread (wait) or on the futures thread (get_future). The side
    stream is kept busy before the call (torch.cuda._sleep), so a copy back on any other
    stream would copy the temporary before the result reached it: the inputs, not the sum."""
    side = new_stream(dev)
    scale = world * (world + 1) // 2  # sum over ranks of (r + 1)
    for how in ("wait", "future"):
        for dtype in (torch.int32, torch.float32):
            with on_stream(side):
                if not ON_CPU:
                    torch.cuda._sleep(50_000_000)  # tens of ms of work queued before the call
                base = torch.arange(64 * 48, device=dev).reshape(64, 48)
                t = (base * (rank + 1)).to(dtype).t()  # 48 x 64, not contiguous
                common.check(not t.is_contiguous(), "the output view is contiguous")
                w = dist.all_reduce(t, async_op=True)
                if how == "wait":
                    w.wait()
                else:
                    w.get_future().wait()
                got = t.clone().cpu()  # on the side stream, after the copy back
            want = (torch.arange(64 * 48).reshape(64, 48) * scale).to(dtype).t()
            common.check(torch.equal(got, want),
                         f"all_reduce into a transposed {dtype} view on a side stream ({how}): "
                         f"{(got != want).sum().item()} elements wrong")
    synchronize()


def run(rank, world, port):
    import ringreduce.torch as rt
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if ON_CPU:
        dev = torch.device("cpu")
    else:
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    dist.init_process_group("ringreduce", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    common.check(dev.type in rt._DEVICES, f"registered devices {rt._DEVICES}")
    dtypes = [torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64]
    for side in (False,) if ON_CPU else (False, True):  # no side stream on the CPU
        stream = None if ON_CPU else torch.cuda.Stream() if side else torch.cuda.current_stream()
        with on_stream(stream):
            for count in (0, 1, 1001, 1 << 20):
                for k, dtype in enumerate(dtypes):
                    seed = 100 * count + k
                    ins = [tc.data(seed, r, count, dtype) for r in range(world)]
                    what = f"{dtype} x{count}{' (side stream)' if side else ''}"
                    for opn in ("SUM", "MAX", "AVG"):
                        t = ins[rank].to(dev, copy=True)
                        dist.all_reduce(t, op=getattr(dist.ReduceOp, opn))
                        tc.same(t.cpu(), tc.reduce_ref(ins, opn), f"all_reduce {opn} {what}",
                                tc.tol(ins, opn))
                    t = ins[rank].to(dev, copy=True)
                    dist.broadcast(t, world - 1)
                    tc.same(t.cpu(), ins[world - 1], f"broadcast {what}")
                    t = ins[rank].to(dev, copy=True)
                    dist.reduce(t, 0)
                    tc.same(t.cpu(), tc.reduce_ref(ins, "SUM") if rank == 0 else ins[rank],
                            f"reduce {what}", tc.tol(ins, "SUM") if rank == 0 else None)
                    flat = torch.empty(world * count, dtype=dtype, device=dev)
                    dist.all_gather_into_tensor(flat, ins[rank].to(dev, copy=True))
                    tc.same(flat.cpu(), torch.cat(ins), f"all_gather_into_tensor {what}")
                    outs = [torch.empty(count, dtype=dtype, device=dev) for _ in range(world)]
                    dist.all_gather(outs, ins[rank].to(dev, copy=True))
                    for r in range(world):
                        tc.same(outs[r].cpu(), ins[r], f"all_gather block {r} {what}")
                    big = [tc.data(seed + 1, r, world * count, dtype) for r in range(world)]
                    out = torch.empty(count, dtype=dtype, device=dev)
                    dist.reduce_scatter_tensor(out, big[rank].to(dev, copy=True))
                    bound = tc.tol(big, "SUM")
                    tc.same(out.cpu(), tc.reduce_ref(big, "SUM")[rank * count:(rank + 1) * count],
                            f"reduce_scatter_tensor {what}",
                            None if bound is None else bound[rank * count:(rank + 1) * count])
                    out = torch.empty(world * count, dtype=dtype, device=dev)
                    dist.all_to_all_single(out, big[rank].to(dev, copy=True))
                    tc.same(out.cpu(), torch.cat([b[rank * count:(rank + 1) * count] for b in big]),
                            f"all_to_all_single {what}")
                    got = [torch.empty(count, dtype=dtype, device=dev) for _ in range(world)] \
                        if rank == 0 else None
                    dist.gather(ins[rank].to(dev, copy=True), got, dst=0)
                    if rank == 0:
                        for r in range(world):
                            tc.same(got[r].cpu(), ins[r], f"gather block {r} {what}")
                    out = torch.empty(count, dtype=dtype, device=dev)
                    dist.scatter(out, [x.to(dev, copy=True) for x in ins] if rank == 0 else None,
                                 src=0)
                    tc.same(out.cpu(), ins[rank], f"scatter {what}")
                    # async: the result is there after wait(), on the stream that made it
                    t = ins[rank].to(dev, copy=True)
                    dist.all_reduce(t, async_op=True).wait()
                    tc.same(t.cpu(), tc.reduce_ref(ins, "SUM"), f"async all_reduce {what}",
                            tc.tol(ins, "SUM"))
        synchronize()
    noncontiguous_on_side_stream(rank, world, dev)
    # DDP on CUDA (ringreduce) against DDP on the CPU (gloo), same data and initial weights.
    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    gpu = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base).to(dev),
                                                    device_ids=None if ON_CPU else [dev])
    cpu = torch.nn.parallel.DistributedDataParallel(copy.deepcopy(base), process_group=gloo)
    og = torch.optim.SGD(gpu.parameters(), lr=0.1)
    oc = torch.optim.SGD(cpu.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(3):
        x = torch.randn(16, 32, generator=g)
        for m, o, xx in ((gpu, og, x.to(dev, copy=True)), (cpu, oc, x)):
            o.zero_grad()
            m(xx).square().mean().backward()
            o.step()
    for (name, a), b in zip(gpu.module.state_dict().items(), cpu.module.state_dict().values()):
        a, b = a.cpu().double(), b.double()
        err = ((a - b).abs().max() / b.abs().max().clamp(min=1e-12)).item()
        common.check(err <= 1e-4, f"DDP on {WHERE}: {name} differs from gloo on the CPU by {err}")
    if rank == 0:
        streams = "" if ON_CPU else ", current and side stream"
        print(f"torch_cuda world {world}: every collective on tensors on {WHERE}{streams}; "
              f"DDP on {WHERE} equals gloo on the CPU")
    dist.destroy_process_group()


if __name__ == "__main__":
    if ON_CPU:
        world = int([a for a in sys.argv[1:] if a != "--cpu"][0])
        common.spawn(run, world, (world, common.free_port()))
        sys.exit(0)
    if not torch.cuda.is_available():
        print("skipped: torch sees no GPU")
        sys.exit(77)
    sys.path.insert(0, os.path.join(common._ROOT, "python"))
    import ringreduce._lib as lib
    try:
        built = lib.cuda_built()
    except RuntimeError:
        built = 0
    if not built:
        print(f"skipped: {lib.path} was built without CUDA (configure with -DRR_CUDA=ON)")
        sys.exit(77)
    world = int(sys.argv[1])
    # torch.cuda.is_available() above started CUDA in this process: fresh interpreters.
    common.spawn(run, world, (world, common.free_port()), start_method="spawn")
