"""What "matches gloo" means for floats: the one rule every torch test that compares floats
across backends follows (docs/torch.md, "What matching gloo means").

Backends add floats in different orders, and float addition is not associative: the same
all_reduce can differ in the last bits between gloo and ringreduce, and between two
algorithms of either. So:

1. One collective. Each backend's result must lie within the rounding bound of the exact
   result (float64 from the inputs every rank regenerates): n values reduced with n-1
   roundings of unit roundoff u are off by at most (n-1) u sum|x_i| for SUM and (n-1) u
   |prod x_i| for PRODUCT (bound()). Two backends then differ by at most twice that. MIN, MAX
   and every copy (broadcast, gather, ...) involve no rounding: equal bit for bit. So is a
   float32 or float64 SUM or PRODUCT of two ranks: one correctly rounded, commutative
   operation, whatever the order (exact_between()).
2. Training. Many steps amplify last-bit differences (through ReLU and max-pool decisions that
   flip): after five epochs of the digits tutorial at world 4, gloo itself differs from gloo
   with the gradients summed in another order by 1.7e-3 relative (measured 2026-11-27 on a
   2-core AMD EPYC; on the machine the tutorial test was written on it stayed below 1e-6). A
   fixed tolerance is therefore a statement about one machine. The rule: at world 2 (one
   addition per element) ringreduce trains to gloo's parameters bit for bit; from world 3 its
   difference from gloo must not exceed SPREAD_FACTOR times the largest difference between
   gloo and gloo with the gradients summed in other orders (ORDERS, through reordered_hook()),
   measured in the same test, or FLOOR where that spread is smaller. A lost, doubled or
   misplaced gradient moves parameters by tens of percent (a zeroed all_reduce: 100%).
"""

import torch
import torch.distributed as dist

# Unit roundoff 2^-p of each float dtype (p significand bits, the implicit one included).
UNIT = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8, torch.float32: 2.0 ** -24,
        torch.float64: 2.0 ** -53}

# Orders other than gloo's in which the spread runs sum gradients: every rank's contribution
# from the last rank down, and a pairwise tree ((x0 + x1) + (x2 + x3)) as recursive doubling
# adds them.
ORDERS = ("reversed", "pairwise")
# How far beyond gloo's own spread ringreduce may land. Trajectories that part by rounding
# alone grow apart at the same rate whatever the first difference was; the orders above part
# by the same amount within a factor of 2 on the tutorial (1.68e-3 each at world 4).
SPREAD_FACTOR = 10.0
# Relative difference below which two trainings count as equal when gloo's own reorderings
# happen to agree with it: a few units of float32 roundoff (2^-24 = 6e-8) per parameter.
FLOOR = 1e-6


def bound(inputs, op):
    """Elementwise float64 bound on |result - exact| for `op` ("SUM", "AVG", "PRODUCT", "MIN",
    "MAX") over the ranks' `inputs` (tensors of one float dtype), computed in that dtype in
    any order. 1.01 covers the second-order terms of (1 + u)^(n-1)."""
    n, u = len(inputs), UNIT[inputs[0].dtype]
    xs = [x.to(torch.float64) for x in inputs]
    if op in ("MIN", "MAX") or n < 2:
        return torch.zeros_like(xs[0])
    if op == "PRODUCT":
        p = xs[0].clone()
        for x in xs[1:]:
            p = p * x
        return 1.01 * (n - 1) * u * p.abs()
    total = sum(x.abs() for x in xs)
    if op == "AVG":  # the sum's roundings, scaled by 1/n, and one more for the division
        return 1.01 * (n - 1) * u * total / n + u * total / n
    return 1.01 * (n - 1) * u * total


def exact_between(dtype, op, n):
    """Whether two backends must agree bit for bit on this reduction (rule 1)."""
    if op in ("MIN", "MAX") or n < 2:
        return True
    return n == 2 and op in ("SUM", "PRODUCT") and dtype in (torch.float32, torch.float64)


def reordered_hook(order, compress=None):
    """A DDP comm hook (state: the process group) that computes what DDP's default path
    computes -- every rank's gradient scaled by 1/world, summed -- but adds the ranks'
    contributions in `order` (ORDERS) instead of the backend's order. With `compress`
    (torch.float16 or torch.bfloat16) it does what torch's fp16/bf16 compress hooks do
    around the sum: cast, divide, sum in that dtype, cast back.

    The scaling follows each path exactly: DDP without a hook multiplies by 1/world as a
    float32 scalar; the compress hooks divide."""
    def hook(group, bucket):
        buf = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
        w = dist.get_world_size(group)
        t = buf.to(compress).div_(w) if compress is not None else buf.mul_(1.0 / w)
        parts = [torch.empty_like(t) for _ in range(w)]
        dist.all_gather(parts, t, group=group)
        if order == "reversed":
            s = parts[-1].clone()
            for p in reversed(parts[:-1]):
                s += p
        elif order == "pairwise":
            while len(parts) > 1:
                parts = [parts[i] + parts[i + 1] if i + 1 < len(parts) else parts[i]
                         for i in range(0, len(parts), 2)]
            s = parts[0]
        else:
            raise ValueError(f"unknown summation order {order!r}")
        buf.copy_(s)
        fut = torch.futures.Future()
        fut.set_result(buf)
        return fut
    return hook


def tensor_diff(a, b):
    """Largest |a - b| relative to a's largest magnitude (a weight near zero has no relative
    digits of its own)."""
    if not a.numel():
        return 0.0
    a, b = a.detach().cpu().to(torch.float64), b.detach().cpu().to(torch.float64)
    return ((a - b).abs().max() / a.abs().max().clamp(min=1e-12)).item()


def state_diff(a, b):
    """(largest tensor_diff over two state dicts, the key where it is)."""
    worst, where = 0.0, None
    for k in a:
        d = tensor_diff(a[k], b[k])
        if d > worst or where is None:
            worst, where = d, k
    return worst, where


def losses_diff(a, b):
    """Largest relative difference between two lists of per-epoch losses."""
    return max([abs(x - y) / max(abs(x), 1e-12) for x, y in zip(a, b)] + [0.0])


def training_verdict(what, world, diff, spreads):
    """None if `diff` (ringreduce against gloo) obeys rule 2 given the measured `spreads`
    (gloo against gloo summed in each of ORDERS); else a sentence saying why not."""
    if world <= 2:
        return None if diff == 0.0 else (
            f"{what}: {diff:.3e} from gloo at world {world}, where every summation order "
            "gives the same float32 sums: must be 0")
    spread = max(spreads.values()) if spreads else 0.0
    limit = max(SPREAD_FACTOR * spread, FLOOR)
    if diff <= limit:
        return None
    return (f"{what}: {diff:.3e} from gloo, beyond {limit:.3e} ({SPREAD_FACTOR:g} x gloo's "
            f"own spread {spread:.3e} over summation orders "
            + ", ".join(f"{k} {v:.3e}" for k, v in spreads.items()) + f", floor {FLOOR:g})")
