#!/usr/bin/env python3
"""bench/gpu/train_table.py AMPC_JSONL TORCH_JSONL [CURVES_JSONL]: the GPU training table from one
GPU run: ampc's whole training step (gpu_train: 32-true, 16-mixed,
bf16-mixed) beside PyTorch's (tests/reference/torch_step.py --device cuda:
eager FP32 without TF32, autocast bf16, autocast fp16 + GradScaler, and
torch.compile where it ran), per model. Prints markdown on stdout.

Columns: ms/step (median), samples/s, model FLOP utilisation (GEMM FLOPs
counted by ampc's CUDA context over the median step time, against the H200's
dense peak: 989 TFLOP/s for 16-bit Tensor Cores, 67 for FP32), device memory
(ampc: cudaMemGetInfo taken by the run; torch: max_memory_allocated), ampc's
cuBLASLt calls and host waits for the stream per step (the waits' total
milliseconds: a step whose waits are a small part of it is bound by the host
issuing kernels), and the
three goal ratios: ampc 16-mixed against its own 32-true (goal >= 3x),
ampc 16-mixed step time over torch autocast fp16's (goal <= 0.7), ampc's
activation bytes at 16-mixed over 32-true (goal <= 0.55; beside it PyTorch's
where torch_step.py ran with --saved-bytes: what autograd saved in one
forward under fp16 autocast over fp32). With CURVES_JSONL
(gpu_train --curve): the largest loss difference between the GPU and the CPU
over the steps beside the CPU's seed-to-seed spread, per preset. Rows of
gpu_train --keep (the attention probabilities and x1 kept for the backward
pass rather than recomputed) appear as "kept", rows of gpu_train --typed
(the layers' typed kernels) as "typed", rows of gpu_train --attention-cast
(16-bit operands in the attention products) as "cast", rows of gpu_train
--tune (GEMM algorithms chosen by timing) as "tuned", each with their own
ratios (against 32-true with the same kernels and tuning, which the cast
does not change).
"""
import json
import sys


def load(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    except OSError:
        pass
    return rows


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    ampc, torch = load(argv[1]), load(argv[2])
    models = []
    for r in ampc + torch:
        if r["model"] not in models:
            models.append(r["model"])
    # gpu_train --keep rows (the probabilities and x1 kept, not recomputed)
    # and gpu_train --typed rows (the typed kernels)
    a = {(r["model"], r["precision"] + ("" if r.get("recompute", True) else " kept") +
          (" typed" if r.get("typed_kernels", False) else "") +
          (" cast" if r.get("attention_cast", False) else "") +
          (" tuned" if r.get("gemm_tuning", False) else "")): r
         for r in ampc}
    t = {(r["model"], r["precision"]): r for r in torch}
    print("| model | run | batch | ms/step | samples/s | MFU | device MiB | cuBLASLt calls "
          "| host waits (ms) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for m in models:
        for p in ("32-true", "16-mixed", "bf16-mixed", "32-true kept", "16-mixed kept",
                  "bf16-mixed kept", "32-true typed", "16-mixed typed", "bf16-mixed typed",
                  "16-mixed cast", "bf16-mixed cast", "16-mixed typed cast",
                  "bf16-mixed typed cast", "32-true typed tuned",
                  "16-mixed typed cast tuned"):
            r = a.get((m, p))
            if r:
                print(f"| {m} | ampc {p} | {r['batch']} | {r['ms_per_step_median']:.2f} | "
                      f"{r['samples_per_s']:.0f} | {r['mfu']:.3f} | "
                      f"{r['device_bytes_used'] / 2**20:.0f} | "
                      f"{r.get('matmuls_per_step', '')} | {r.get('host_waits_per_step', '')} "
                      f"({r.get('host_wait_ms_per_step', 0):.2f}) |")
        for p in sorted(k[1] for k in t if k[0] == m):
            r = t[(m, p)]
            mib = (r.get("peak_device_bytes") or 0) / 2**20
            print(f"| {m} | {p} | {r['batch']} | {r['ms_per_step_median']:.2f} | "
                  f"{r['batch'] / (r['ms_per_step_median'] * 1e-3):.0f} | | {mib:.0f} | | |")
    print()
    print("| model | ampc 16-mixed vs 32-true (goal >= 3x) | ampc 16-mixed / torch fp16 AMP "
          "(goal <= 0.7) | activations 16-mixed / 32-true (goal <= 0.55) |")
    print("|---|---:|---:|---:|")
    for m in models:
        a32, a16 = a.get((m, "32-true")), a.get((m, "16-mixed"))
        t16 = t.get((m, "torch-fp16-autocast-gradscaler"))
        sp = f"{a32['ms_per_step_median'] / a16['ms_per_step_median']:.2f}x" if a32 and a16 else "-"
        vs = (f"{a16['ms_per_step_median'] / t16['ms_per_step_median']:.2f}"
              if a16 and t16 else "-")
        act = (f"{a16['activation_bytes'] / a32['activation_bytes']:.3f}"
               if a32 and a16 else "-")
        t32 = t.get((m, "torch-fp32"))
        if (t16 and t32 and t16.get("saved_activation_bytes") and
                t32.get("saved_activation_bytes")):  # torch_step.py --saved-bytes
            act += (f" (PyTorch's saved tensors, fp16 autocast / fp32: "
                    f"{t16['saved_activation_bytes'] / t32['saved_activation_bytes']:.3f})")
        print(f"| {m} | {sp} | {vs} | {act} |")
        k32, k16 = a.get((m, "32-true kept")), a.get((m, "16-mixed kept"))
        if k32 and k16:  # gpu_train --keep: the same without recomputation
            ks = f"{k32['ms_per_step_median'] / k16['ms_per_step_median']:.2f}x"
            kv = (f"{k16['ms_per_step_median'] / t16['ms_per_step_median']:.2f}"
                  if t16 else "-")
            print(f"| {m}, probabilities and x1 kept | {ks} | {kv} | "
                  f"{k16['activation_bytes'] / k32['activation_bytes']:.3f} |")
        # gpu_train --attention-cast [--typed [--tune]]
        for tag in ("cast", "typed cast", "typed cast tuned"):
            c16 = a.get((m, "16-mixed " + tag))
            base = a.get((m, "32-true" + (" typed" if "typed" in tag else "") +
                          (" tuned" if "tuned" in tag else "")))
            if c16 and base:
                print(f"| {m}, attention products on 16-bit operands ({tag}) | "
                      f"{base['ms_per_step_median'] / c16['ms_per_step_median']:.2f}x | "
                      + (f"{c16['ms_per_step_median'] / t16['ms_per_step_median']:.2f}"
                         if t16 else "-") + f" | {c16['activation_bytes'] / base['activation_bytes']:.3f} |")
        y32, y16 = a.get((m, "32-true typed")), a.get((m, "16-mixed typed"))
        if y32 and y16:  # gpu_train --typed: the typed kernels
            ys = f"{y32['ms_per_step_median'] / y16['ms_per_step_median']:.2f}x"
            yv = (f"{y16['ms_per_step_median'] / t16['ms_per_step_median']:.2f}"
                  if t16 else "-")
            print(f"| {m}, typed kernels | {ys} | {yv} | "
                  f"{y16['activation_bytes'] / y32['activation_bytes']:.3f} |")
    curves = load(argv[3]) if len(argv) == 4 else []
    if curves:
        print()
        print("| loss curve | preset | steps | max abs(GPU - CPU) | CPU seed-to-seed spread | within |")
        print("|---|---|---:|---:|---:|---|")
        for c in curves:
            print(f"| {c['curve']} (batch {c['batch']}) | {c['precision']} | {c['steps']} | "
                  f"{c['max_abs_diff_vs_cpu']:.4g} | {c['seed_spread_cpu']:.4g} | "
                  f"{'yes' if c['within_spread'] else 'NO'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
