#!/usr/bin/env python3
"""A GPU run's results folder (tests/gpu/run.sh quick-a / quick-b) as the page issue 25 asks
for in docs/gpu-runs/: which commit and device, each piece's verdict and time, and the
figures as ratios against the baselines measured in the same run.

    python3 tests/gpu/report.py RESULTS_A [RESULTS_B] > docs/gpu-runs/<date>-<device>.md

(RESULTS_A holds quick-a.*, RESULTS_B quick-b.*; one folder may hold both.) Plain Python,
no torch: it runs on the machine that writes the page, after the GPU is given back.

Every collective figure is printed against two bounds (issue 39), both from B, the traffic
rate (bytes read plus bytes written per second) of a device-to-device cudaMemcpy measured in
the same run (reduce_kernel_perf's memcpy column at 256 MiB, out of the L2):
  physical   the least device memory traffic any form can move for n ranks on one GPU: an
             all_reduce of S bytes reads n inputs and writes n outputs, 2nS, so its busbw
             (algbw * 2(n-1)/n) is at most B(n-1)/n^2; a reduce_scatter or all_gather of S
             bytes (nccl-tests' size: the whole of the n blocks) moves (n+1)S, so busbw
             (algbw * (n-1)/n) <= B(n-1)/(n(n+1))
  own        the traffic of the form that ran: the one kernel moves the physical minimum;
             the ring (host hand-off or stream-memop) copies each chunk of S/n into the
             peer's slot (read + write) and reduces it from there (read two, write one):
             5(n-1)S for a reduce_scatter, and an all_gather copies into the slot and out of
             it, 4(n-1)S, so 9(n-1)S for an all_reduce ("slots: no pull"); the stream-memop
             ring's all-gather steps pull each chunk from the sender's output instead (one
             copy, issue 39.3: RR_CUDA_PULL_BYTES), 2(n-1)S for an all_gather and 7(n-1)S for
             an all_reduce
A figure at 100% of its own bound has no overhead left; its distance to the physical bound
is the design's.

Ratios (issue 24's targets):
  kernel / memcpy   reduce_kernel_perf's own ratio column (traffic rate of dst = a + b
                    against a device-to-device cudaMemcpy, same run, same buffers); for
                    float32 sum by size, and for every dtype x op at 256 MiB (issue 39.4:
                    >= 90% each)
  IPC vs bounds     the perf piece's all_reduce through CUDA IPC (the one-kernel form:
                    both ranks on one GPU) against the physical bound above
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


# Bytes of device memory traffic per call of nccl-tests size s with n ranks on one GPU, and
# busbw's factor over algbw, by collective (the module's docstring).
TRAFFIC = {
    "all_reduce": {"physical": lambda n, s: 2 * n * s, "ring": lambda n, s: 9 * (n - 1) * s,
                   "pull": lambda n, s: 7 * (n - 1) * s},
    "reduce_scatter": {"physical": lambda n, s: (n + 1) * s,
                       "ring": lambda n, s: 5 * (n - 1) * s},
    "all_gather": {"physical": lambda n, s: (n + 1) * s, "ring": lambda n, s: 4 * (n - 1) * s,
                   "pull": lambda n, s: 2 * (n - 1) * s},
}
BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: (n - 1) / n,
       "all_gather": lambda n: (n - 1) / n}


def bound_busbw(coll, form, n, size, rate_gbps):
    """The busbw (GB/s) a call of `size` bytes would show if it moved its traffic at rate_gbps:
    form "physical", or the form's own ("one kernel": physical; the stream-memop ring: "pull"
    where the collective has all-gather steps; the other rings: "ring")."""
    kind = "physical" if form in ("physical", "one kernel") else "ring"
    if form in ("pull", "stream-memop ring") and "pull" in TRAFFIC[coll]:
        kind = "pull"
    t_s = TRAFFIC[coll][kind](n, size) / (rate_gbps * 1e9)
    return size / t_s / 1e9 * BUS[coll](n)


def pct(x, of):
    if of <= 0:
        return "-"
    v = 100 * x / of
    return f"{v:.0f}%" if v >= 10 else f"{v:.2g}%"


def copy_rate(secs):
    """B: the largest size's memcpy GB/s of a reduce_kernel_perf section (0 if none)."""
    for words in (["D2D copy"], ["reduce kernel vs"]):
        k = kernel_rows(find(secs, words))
        if k:
            return k[max(k)][1]
    return 0.0


def print_forms(text, fallback_rate, n=2):
    """forms.txt: the copy rate, the hand-off probe's rows, then every collective in each form
    with both bounds; the issue's latency and bandwidth targets for all_reduce."""
    secs = sections(text)
    rate = copy_rate(secs) or fallback_rate
    print("## Two ranks on one GPU: the host hand-off, the stream-memop ring, one kernel\n")
    print(f"B, the D2D copy's traffic rate in the same run: {rate:.0f} GB/s. Physical bound "
          f"on busbw: all_reduce B(n-1)/n^2 = {bound_busbw('all_reduce', 'physical', n, 1, rate):.0f}"
          f" GB/s; reduce_scatter and all_gather B(n-1)/(n(n+1)) = "
          f"{bound_busbw('all_gather', 'physical', n, 1, rate):.0f} GB/s; the rings' own: "
          f"all_reduce 2B/(9n) = {bound_busbw('all_reduce', 'ring', n, 1, rate):.0f} GB/s "
          f"through the slots, 2B/(7n) = {bound_busbw('all_reduce', 'pull', n, 1, rate):.0f}"
          " GB/s with the all-gather's pull (the stream-memop ring).\n")
    probe = find(secs, ["hand-offs"])
    rows = [l for l in probe if re.match(r"^\S+\s+(\d|FAILED|timed out)", l)]
    if rows:
        print("Hand-offs between two processes on the GPU (tests/gpu/handoff_probe.cu):\n")
        print("```")
        print("\n".join(rows))
        print("```\n")
    forms = ("host hand-off", "slots: no pull", "stream-memop ring", "one kernel")
    for coll in ("all_reduce", "reduce_scatter", "all_gather"):
        got = {f: perf_rows(find(secs, [coll + ",", f])) for f in forms}
        got = {f: r for f, r in got.items() if r}
        if not got:
            continue
        op = "" if coll == "all_gather" else " sum"
        print(f"{coll}, float32{op}, {n} ranks on one GPU, out of place: time (us), busbw "
              "(GB/s), % of the physical bound, % of the form's own bound\n")
        names = [f for f in forms if f in got]
        print("| size | " + " | ".join(f"{f}: us / busbw / phys / own" for f in names) + " |")
        print("|---:|" + "---:|" * len(names))
        for size in sorted(set().union(*[set(r) for r in got.values()])):
            cells = []
            for f in names:
                r = got[f].get(size)
                if not r or rate <= 0:
                    cells.append("-" if not r else f"{r[0]:.1f} / {r[2]:.2f} / - / -")
                    continue
                phys = pct(r[2], bound_busbw(coll, "physical", n, size, rate))
                own = pct(r[2], bound_busbw(coll, f, n, size, rate))
                cells.append(f"{r[0]:.1f} / {r[2]:.2f} / {phys} / {own}")
            print(f"| {fmt_size(size)} | " + " | ".join(cells) + " |")
        print()
        if coll == "all_reduce" and "one kernel" in got:
            k = got["one kernel"]
            small = min(k) if k else None
            if small is not None:
                print(f"Target: {fmt_size(small)} all_reduce <= 100 us without MPS: "
                      f"{k[small][0]:.1f} us ({'met' if k[small][0] <= 100 else 'missed'}).")
            big = [s for s in k if s >= 64 << 20]
            if big and rate > 0:
                worst = min(100 * k[s][2] / bound_busbw(coll, "physical", n, s, rate) for s in big)
                print(f"Target: busbw >= 70% of the physical bound at 64 MiB and up: "
                      f"{worst:.0f}% at worst ({'met' if worst >= 70 else 'missed'}).")
            print()


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
        for name in ("quick-a.txt", "quick-b.txt", "quick-a.log", "figures.txt", "forms.txt"):
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
    if "forms.txt" in text:
        print_forms(text["forms.txt"], copy_rate(secs))
    else:
        print("No forms.txt (quick-b's forms piece did not run or had no GPU).\n")
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
        print("| size | IPC (one kernel) | IPC / physical bound | piped (shm) | staged (shm) | device over TCP "
              "| host over TCP | TCP device / host | host over shm |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for s in sorted(set(ipc) | set(piped) | set(staged) | set(dtcp)):
            def bw(rows):
                return f"{rows[s][2]:.2f}" if s in rows else "-"
            bound = "-"
            if s in ipc and mem_rate > 0:
                bound = pct(ipc[s][2], bound_busbw("all_reduce", "physical", n, s, mem_rate))
            ratio = (f"{100 * dtcp[s][2] / htcp[s][2]:.0f}%"
                     if s in dtcp and s in htcp and htcp[s][2] > 0 else "-")
            print(f"| {fmt_size(s)} | {bw(ipc)} | {bound} | {bw(piped)} | {bw(staged)} | {bw(dtcp)} | "
                  f"{bw(htcp)} | {ratio} | {bw(hshm)} |")
        print(f"\n(Physical bound B(n-1)/n^2 from the largest memcpy's traffic rate above, "
              f"{mem_rate:.0f} GB/s; targets: IPC >= 70% of it at 64 MiB and up, TCP device >= "
              "80% of host.)\n")
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
