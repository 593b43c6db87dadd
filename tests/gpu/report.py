#!/usr/bin/env python3
"""A GPU run's results folder (tests/gpu/run.sh quick-a / quick-b) as the page issue 25 asks
for in docs/gpu-runs/: which commit and device, each piece's verdict and time, and the
figures as ratios against the baselines measured in the same run.

    python3 tests/gpu/report.py RESULTS_A [RESULTS_B] > docs/gpu-runs/<date>-<device>.md

(RESULTS_A holds quick-a.*, RESULTS_B quick-b.*; one folder may hold both.) Plain Python,
no torch: it runs on the machine that writes the page, after the GPU is given back.

Ratios (issue 24's targets):
  kernel / memcpy   reduce_kernel_perf's own ratio column (traffic rate of dst = a + b
                    against a device-to-device cudaMemcpy, same run, same buffers); for
                    float32 sum by size, and for every dtype x op at 256 MiB (issue 39.4:
                    >= 90% each)
  IPC vs HBM bound  n ranks sharing one GPU move at least about 5(n-1)S bytes through its
                    memory per all_reduce of S bytes (issue 24's figure: in the
                    reduce-scatter alone, each of a rank's n-1 steps copies a chunk of S/n
                    into the peer's slot, 2S/n, and reduces it, 3S/n); the bound is that
                    traffic at the memcpy's traffic rate
  TCP device/host   all_reduce_perf busbw on device buffers over TCP / on host buffers over
                    TCP, same run
  torch            torch ringreduce / torch gloo time on the same CUDA tensors
"""

import os
import re
import sys


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def sections(text):
    """figures.txt: '## title' headers, then the output of the command under each."""
    out, cur = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            cur = line[3:].strip()
            out[cur] = []
        elif cur is not None:
            out[cur].append(line)
    return out


def perf_rows(lines):
    """nccl-tests rows: size -> (out-of-place time us, algbw, busbw)."""
    rows = {}
    for line in lines:
        f = line.split()
        if len(f) >= 13 and f[0].isdigit() and f[1].isdigit():
            rows[int(f[0])] = (float(f[5]), float(f[6]), float(f[7]))
    return rows


def kernel_rows(lines):
    """reduce_kernel_perf rows: bytes -> (kernel GB/s, memcpy GB/s, ratio %)."""
    rows = {}
    for line in lines:
        f = line.split()
        if len(f) == 8 and f[0].isdigit():
            rows[int(f[0])] = (float(f[4]), float(f[6]), float(f[7]))
    return rows


def kernel_ops(lines):
    """reduce_kernel_perf -d all -o all rows: [(dtype, op, ratio %)] in the order printed."""
    rows = []
    for line in lines:
        f = line.split()
        if len(f) == 8 and f[0].isdigit():
            rows.append((f[1], f[2], float(f[7])))
    return rows


def print_kernel_ops(rows, target=90.0):
    """One row per dtype, one column per op: the kernel's traffic rate as a percentage of the
    same run's device-to-device copy, then the ones under the target."""
    ops = []
    for _, op, _ in rows:
        if op not in ops:
            ops.append(op)
    dtypes = []
    for dt, _, _ in rows:
        if dt not in dtypes:
            dtypes.append(dt)
    cell = {(dt, op): r for dt, op, r in rows}
    print("Every kernel at 256 MiB, % of the same run's cudaMemcpy D2D traffic rate "
          f"(target >= {target:.0f}% each; AVG divides by 4):\n")
    print("| dtype | " + " | ".join(ops) + " |")
    print("|---|" + "---:|" * len(ops))
    for dt in dtypes:
        cells = [f"{cell[(dt, op)]:.1f}" if (dt, op) in cell else "-" for op in ops]
        print(f"| {dt} | " + " | ".join(cells) + " |")
    low = [f"{dt} {op} {r:.1f}%" for dt, op, r in rows if r < target]
    print(f"\nUnder {target:.0f}%: " + (", ".join(low) if low else "none") +
          f" ({len(rows) - len(low)} of {len(rows)} kernels at or above).\n")


def find(secs, words):
    for title, lines in secs.items():
        if all(w in title for w in words):
            return lines
    return []


def fmt_size(b):
    for unit, k in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << k:
            return f"{b / (1 << k):g} {unit}"
    return f"{b} B"


def main():
    dirs = sys.argv[1:] or ["."]
    text = {}
    for d in dirs:
        for name in ("quick-a.txt", "quick-b.txt", "quick-a.log", "figures.txt"):
            if name not in text and os.path.exists(os.path.join(d, name)):
                text[name] = read(os.path.join(d, name))
    pre = text.get("quick-a.log", "").split("=== build")[0]
    print("# GPU run\n")
    head = text.get("quick-a.txt", "").splitlines()[:2]
    for line in head:
        print(f"- {line}")
    gpu = re.search(r"^name, driver_version.*\n(.*)$", pre, re.M)
    if gpu:
        print(f"- GPU, driver, compute capability, memory: {gpu.group(1)}")
    for pat in (r"^kernel: .*$", r"^Cuda compilation tools.*$", r"^torch .*$", r"^cores: .*$"):
        m = re.search(pat, pre, re.M)
        if m:
            print(f"- {m.group(0)}")
    print("\n## Verdicts\n")
    for name in ("quick-a.txt", "quick-b.txt"):
        body = text.get(name)
        if body is None:
            print(f"{name[:-4]}: no results\n")
            continue
        print("```")
        print("\n".join(body.splitlines()[2:]))
        print("```\n")

    secs = sections(text.get("figures.txt", ""))
    if not secs:
        print("No figures (quick-b's perf piece did not run or had no GPU).")
        return
    print("## Figures (ratios against baselines of the same run)\n")
    k = kernel_rows(find(secs, ["reduce kernel vs"]))
    if k:
        print("| size | kernel GB/s | memcpy GB/s | kernel / memcpy | target |")
        print("|---:|---:|---:|---:|---|")
        for s, (kg, cg, r) in sorted(k.items()):
            target = ">= 90%" if s >= 16 << 20 else (">= 70%" if s >= 1 << 20 else "")
            print(f"| {fmt_size(s)} | {kg:.0f} | {cg:.0f} | {r:.1f}% | {target} |")
        print()
    kops = kernel_ops(find(secs, ["every dtype x op kernel"]))
    if kops:
        print_kernel_ops(kops)
    ipc = perf_rows(find(secs, ["CUDA IPC"]))
    staged = perf_rows(find(secs, ["staged"]))
    piped = perf_rows(find(secs, ["piped through pinned slots over shm"]))
    dtcp = perf_rows(find(secs, ["device buffers over TCP"]))
    hosts = find(secs, ["host buffers"])
    htcp, hshm = {}, {}
    if hosts:  # two runs under one header: TCP first, then shm
        half = [i for i, l in enumerate(hosts) if "nccl-tests style" in l]
        cut = half[1] if len(half) > 1 else len(hosts)
        htcp, hshm = perf_rows(hosts[:cut]), perf_rows(hosts[cut:])
    # GB/s of traffic: the largest copy's, which is out of the L2 (the first run's 16 MiB
    # copy, inside the H200's 60 MB L2, ran 20% faster than its 256 MiB one).
    mem_rate = k[max(k)][1] if k else 0.0
    n = 2
    if ipc or staged or dtcp:
        print("all_reduce, float32 sum, 2 ranks on one GPU, out of place (busbw GB/s):\n")
        print("| size | IPC | IPC / HBM bound | piped (shm) | staged (shm) | device over TCP "
              "| host over TCP | TCP device / host | host over shm |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for s in sorted(set(ipc) | set(piped) | set(staged) | set(dtcp)):
            def bw(rows):
                return f"{rows[s][2]:.2f}" if s in rows else "-"
            bound = "-"
            if s in ipc and mem_rate > 0:
                t_bound_us = 5 * (n - 1) * s / (mem_rate * 1e3)
                pct = 100 * t_bound_us / ipc[s][0]
                bound = f"{pct:.0f}%" if pct >= 10 else f"{pct:.2g}%"
            ratio = (f"{100 * dtcp[s][2] / htcp[s][2]:.0f}%"
                     if s in dtcp and s in htcp and htcp[s][2] > 0 else "-")
            print(f"| {fmt_size(s)} | {bw(ipc)} | {bound} | {bw(piped)} | {bw(staged)} | {bw(dtcp)} | "
                  f"{bw(htcp)} | {ratio} | {bw(hshm)} |")
        print(f"\n(HBM bound from the largest memcpy's traffic rate above, {mem_rate:.0f} GB/s; "
              "targets: IPC >= 70% of the bound at 256 MiB, TCP device >= 80% of host.)\n")
    torch_rows = {}
    for line in find(secs, ["torch dist.all_reduce"]):
        m = re.match(r"(\S+)\s+(\d+) B\s+([\d.]+) us\s+([\d.]+) GB/s busbw\s+wrong (\d+)", line)
        if m:
            torch_rows[(m.group(1), int(m.group(2)))] = (float(m.group(3)), int(m.group(5)))
    if torch_rows:
        print("torch dist.all_reduce on CUDA tensors, 2 ranks (time per call, us):\n")
        print("| size | ringreduce | gloo | gloo / ringreduce | C rr_all_reduce | wrong |")
        print("|---:|---:|---:|---:|---:|---:|")
        for s in sorted({s for _, s in torch_rows}):
            rr, gl, c = (torch_rows.get((b, s), (None, 0)) for b in ("ringreduce", "gloo", "C"))
            wrong = sum(x[1] for x in (rr, gl, c))
            speed = f"{gl[0] / rr[0]:.1f}x" if rr[0] and gl[0] else "-"
            cell = [f"{x[0]:.0f}" if x[0] else "-" for x in (rr, gl, c)]
            print(f"| {fmt_size(s)} | {cell[0]} | {cell[1]} | {speed} | {cell[2]} | {wrong} |")
        print("\n(target: >= 20x gloo at 256 MiB)\n")
    steps = re.findall(r"^timing: .*$", "\n".join(find(secs, ["DDP step"])), re.M)
    if steps:
        print("The example's DDP step, 2 ranks (GPU first, then CPU):\n")
        for line in steps:
            print(f"    {line}")
        print()


if __name__ == "__main__":
    main()
