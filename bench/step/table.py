#!/usr/bin/python3
"""bench/step/table.py RUNS.jsonl: the markdown table and goal checks of
bench/step/run.sh from its raw JSON lines (one per process: ampc bench step
--json or tests/reference/torch_step.py output, with "framework" and
"setting" added). Medians are over every timed step of every round."""
import json
import statistics
import sys

ORDER = ["32-true", "16-mixed", "bf16-mixed", "torch-fp32", "torch-bf16-autocast"]
SETTING = {"omp": "2 threads", "passive": "2 threads, OMP_WAIT_POLICY=passive", "1": "1 thread"}


def main(path):
    runs = [json.loads(l) for l in open(path) if l.strip()]
    by = {}
    for o in runs:
        e = by.setdefault(o["precision"], {"ms": [], "rss": [], "setting": o["setting"],
                                           "fw": o["framework"]})
        e["ms"] += o["ms_steps"]
        e["rss"].append(o["peak_rss_bytes"])
    model, batch = runs[0]["model"], runs[0]["batch"]
    med = {k: statistics.median(v["ms"]) for k, v in by.items()}
    rss = {k: max(v["rss"]) for k, v in by.items()}
    base = med.get("torch-fp32")
    print(f"\n### {model}, batch {batch}\n")
    print("| mode | threads | steps | ms/step (median) | min | max | vs PyTorch FP32 | peak RSS MiB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for k in ORDER:
        if k not in by:
            continue
        v = by[k]
        name = ("ampc " + k) if v["fw"] == "ampc" else k.replace("torch-", "PyTorch ")
        ratio = f"{med[k] / base:.2f}x" if base else "-"
        print(f"| {name} | {SETTING.get(v['setting'], v['setting'])} | {len(v['ms'])} | "
              f"{med[k]:.1f} | {min(v['ms']):.1f} | {max(v['ms']):.1f} | {ratio} | "
              f"{rss[k] / 2**20:.0f} |")

    def goal(text, value, limit, fmt="{:.2f}x"):
        ok = value <= limit
        how = "met" if ok else f"missed by {value / limit:.2f}x"
        print(f"| {text} | {fmt.format(value)} | <= {fmt.format(limit)} | {how} |")

    print("\n| goal | measured | target | result |\n|---|---:|---:|---|")
    if base and "16-mixed" in med:
        goal("ampc 16-mixed / PyTorch FP32", med["16-mixed"] / base, 0.67)
    if base and "32-true" in med:
        goal("ampc 32-true / PyTorch FP32", med["32-true"] / base, 0.80)
    if "bf16-mixed" in med and "torch-bf16-autocast" in med:
        goal("ampc bf16-mixed / PyTorch bf16 autocast", med["bf16-mixed"] / med["torch-bf16-autocast"],
             1 / 15, "{:.3f}x")
    if "16-mixed" in med and "32-true" in med:
        goal("ampc 16-mixed / ampc 32-true (time)", med["16-mixed"] / med["32-true"], 1.0)
        goal("ampc 16-mixed / ampc 32-true (peak RSS)", rss["16-mixed"] / rss["32-true"], 1.0)


if __name__ == "__main__":
    main(sys.argv[1])
