#!/usr/bin/env python3
"""bench/gpu/ncu_table.py PROFILE.csv: the GPU time per kernel of a profile
that Nsight Compute wrote with `ncu --csv --metrics gpu__time_duration.sum`
(one row per kernel launch and metric), summed by kernel name, as a
Markdown table on stdout, largest first: launches, total and mean time, and
the share of the recorded GPU time. Lines before the CSV header (ncu's
==PROF== lines, the program's own output) are skipped. Exits 1 with a
message when no launch is found.
"""
import csv
import sys

UNIT_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
           "s": 1e6, "second": 1e6}


def short(name):
    """the kernel's name without its argument list and template noise"""
    base = name.replace("(anonymous namespace)::", "").replace("ampc_cu::", "").strip()
    if base.startswith("void "):
        base = base[5:]
    return base.split("(", 1)[0].strip()


def main(path):
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        print(f"ncu_table.py: {path}: no CSV header (\"ID\",...) found", file=sys.stderr)
        return 1
    rows = csv.DictReader(lines[start:])
    per = {}
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        try:
            v = float(r["Metric Value"].replace(",", "")) * UNIT_US[r["Metric Unit"].strip()]
        except (KeyError, ValueError):
            continue
        k = short(r.get("Kernel Name", "?"))
        n, t = per.get(k, (0, 0.0))
        per[k] = (n + 1, t + v)
    if not per:
        print(f"ncu_table.py: {path}: no gpu__time_duration.sum rows", file=sys.stderr)
        return 1
    total = sum(t for _, t in per.values())
    launches = sum(n for n, _ in per.values())
    print(f"{launches} launches, {total / 1e3:.3f} ms of GPU time (each kernel alone, "
          "as Nsight Compute serialises them)\n")
    print("| kernel | launches | total ms | mean us | share |")
    print("|---|---:|---:|---:|---:|")
    for k, (n, t) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"| `{k[:60]}` | {n} | {t / 1e3:.3f} | {t / n:.2f} | {100 * t / total:.1f} % |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: ncu_table.py PROFILE.csv", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
