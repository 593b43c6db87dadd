import sys, statistics, collections
d = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 4: continue
    r, np_, cfg = f[0], f[1], f[2]
    kv = f[3:]
    for i in range(0, len(kv) - 1, 2):
        d[(np_, int(kv[i]), cfg)].append(float(kv[i + 1]))
cfgs = sorted({k[2] for k in d}, key=lambda c: c != "base")
for np_ in sorted({k[0] for k in d}):
    for size in sorted({k[1] for k in d if k[0] == np_}):
        base = statistics.median(d[(np_, size, "base")])
        row = []
        for c in cfgs:
            v = d[(np_, size, c)]
            m = statistics.median(v)
            row.append(f"{c}:{m:.2f}({m / base:.2f}) [{min(v):.2f}-{max(v):.2f}]")
        print(np_, size >> 10, "KiB", " ".join(row))
