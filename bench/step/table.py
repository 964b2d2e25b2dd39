#!/usr/bin/python3
"""bench/step/table.py RUNS.jsonl [PEAK.json]: the markdown table and goal
checks of bench/step/run.sh from its raw JSON lines (one per process: ampc
bench step --json or tests/reference/torch_step.py output, with "framework"
and "setting" added). Medians are over every timed step of every round.
PEAK.json (`ampc bench gemm --json`) gives the FMA peak for each thread
count: an ampc step's GEMM FLOPs over its median time, as a fraction of the
peak at its thread count (the goal "step at >= 70 % of the FMA peak";
PyTorch's steps do the same GEMM FLOPs on the same models)."""
import json
import os
import statistics
import sys

ORDER = ["32-true", "16-mixed", "bf16-mixed", "torch-fp32", "torch-bf16-autocast"]


def main(path, peak_path=None):
    runs = [json.loads(l) for l in open(path) if l.strip()]
    peak = {}
    if peak_path:
        for p in json.load(open(peak_path)).get("fma_peak", []):
            peak[p["threads"]] = p["f32_gflops"]
    flop = next((o["gemm_flop_per_step"] for o in runs if "gemm_flop_per_step" in o), None)
    by = {}
    for o in runs:
        e = by.setdefault(o["precision"], {"ms": [], "rss": [], "setting": o["setting"],
                                           "fw": o["framework"],
                                           "threads": o.get("threads", 1 if o["setting"] == "1" else os.cpu_count())})
        e["ms"] += o["ms_steps"]
        e["rss"].append(o["peak_rss_bytes"])
    model, batch = runs[0]["model"], runs[0]["batch"]
    med = {k: statistics.median(v["ms"]) for k, v in by.items()}
    rss = {k: max(v["rss"]) for k, v in by.items()}
    base = med.get("torch-fp32")
    print(f"\n### {model}, batch {batch}\n")
    print("| mode | threads | steps | ms/step (median) | min | max | vs PyTorch FP32 | "
          "GEMM GFLOP/s | of FMA peak | peak RSS MiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    frac = {}
    for k in ORDER:
        if k not in by:
            continue
        v = by[k]
        name = ("ampc " + k) if v["fw"] == "ampc" else k.replace("torch-", "PyTorch ")
        ratio = f"{med[k] / base:.2f}x" if base else "-"
        rate = flop / med[k] / 1e6 if flop else None
        pk = peak.get(v["threads"]) or (peak[max(peak)] if peak else None)
        if rate and pk:
            frac[k] = rate / pk
        rate_s = f"{rate:.0f} | {frac[k]:.2f}" if k in frac else "- | -"
        nt = v["threads"]
        label = f"{nt} thread{'s' if nt > 1 else ''}" + (
            ", OMP_WAIT_POLICY=passive" if v["setting"] == "passive" else "")
        print(f"| {name} | {label} | {len(v['ms'])} | "
              f"{med[k]:.1f} | {min(v['ms']):.1f} | {max(v['ms']):.1f} | {ratio} | {rate_s} | "
              f"{rss[k] / 2**20:.0f} |")
    if flop:
        print(f"\nGEMM work per step: {flop / 1e9:.2f} GFLOP (ampc's count; the PyTorch "
              "models are the same shapes). FMA peak (FP32, ampc bench gemm): " +
              ", ".join(f"{g:.0f} GFLOP/s on {t} thread{'s' if t > 1 else ''}"
                        for t, g in sorted(peak.items())))

    def goal(text, value, limit, fmt="{:.2f}x", at_least=False):
        ok = value >= limit if at_least else value <= limit
        how = "met" if ok else f"missed by {(limit / value if at_least else value / limit):.2f}x"
        print(f"| {text} | {fmt.format(value)} | {'>=' if at_least else '<='} "
              f"{fmt.format(limit)} | {how} |")

    print("\n| goal | measured | target | result |\n|---|---:|---:|---|")
    if base and "16-mixed" in med:
        goal("ampc 16-mixed / PyTorch FP32", med["16-mixed"] / base, 0.60)
    if "bf16-mixed" in med and "torch-bf16-autocast" in med:
        goal("ampc bf16-mixed / PyTorch bf16 autocast", med["bf16-mixed"] / med["torch-bf16-autocast"],
             0.90)
    if "16-mixed" in frac:
        goal("ampc 16-mixed step: GEMM FLOP rate / FMA peak", frac["16-mixed"], 0.70, "{:.2f}",
             at_least=True)
    if "16-mixed" in med and "32-true" in med:
        goal("ampc 16-mixed / ampc 32-true (time)", med["16-mixed"] / med["32-true"], 1.0)
        goal("ampc 16-mixed / ampc 32-true (peak RSS)", rss["16-mixed"] / rss["32-true"], 1.0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
