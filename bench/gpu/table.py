#!/usr/bin/env python3
"""bench/gpu/table.py AMPC_GEMM.JSON [TORCH_GEMM.JSON]: the markdown table of
the GPU GEMM check: ampc's TFLOP/s per mode (cuBLASLt), the fraction of the
dense peak, the ratio to ampc's pedantic FP32, and PyTorch's TFLOP/s on the
same shapes where torch_matmul.py ran."""
import json
import sys

MODES = ["f16", "bf16", "f16-acc16", "fp8", "fp8-e5m2", "tf32", "f32"]
RIDGE = 989.4e12 / 4.8e12  # FLOP per byte where the H200's FP16 Tensor Cores and HBM meet


def main():
    with open(sys.argv[1]) as f:
        a = json.load(f)
    t = {}
    tflags = None
    if len(sys.argv) > 2:
        try:
            with open(sys.argv[2]) as f:
                tj = json.load(f)
            tflags = tj.get("flags")
            for r in tj["results"]:
                t[(r["m"], r["n"], r["k"], r["mode"])] = r.get("tflops")
        except (OSError, ValueError, KeyError):
            pass
    d = a["device"]
    print(f"GPU: {d['name']} (cc {d['compute_capability']}, {d['sm_count']} SMs), CUDA driver "
          f"{d['driver_version']}, runtime {d['runtime_version']}, cuBLASLt "
          f"{d['cublaslt_version']}; C = A B^T; TFLOP/s, median of {a['reps']}"
          + (f"; PyTorch {tflags['torch']} (CUDA {tflags['cuda']})" if tflags else ""))
    print()
    rows = {}
    for r in a["results"]:
        rows.setdefault((int(r["m"]), int(r["n"]), int(r["k"]), r["shape"], r["fills_gpu"]),
                        {})[r["mode"]] = r
    print("| M | N | K | shape | tiles | FLOP/B | " + " | ".join(MODES) +
          " | f16/f32 | bf16/f32 | f16 % peak | bf16 % peak | fp8 % peak | torch f16 | torch bf16 "
          "| torch fp8 | torch tf32 | torch f32 |")
    print("|" + "---|" * (6 + len(MODES) + 10))
    for (m, n, k, label, fills), md in rows.items():
        def tf(x):
            return f"{md[x]['tflops']:.1f}" if x in md else "-"

        def pk(x):
            return f"{100 * md[x]['peak_fraction']:.0f} %" if x in md and "peak_fraction" in md[x] else "-"

        def rt(x):
            return f"{md[x]['ratio_vs_f32_pedantic']:.1f}x" if x in md and "ratio_vs_f32_pedantic" in md[x] else "-"

        def tt(x):
            v = t.get((m, n, k, x))
            return f"{v:.1f}" if v else "-"

        ai = 2.0 * m * n * k / (2.0 * (m * k + n * k + m * n))
        bound = "" if ai >= RIDGE else " (memory)"
        print(f"| {m} | {n} | {k} | {label} | {'yes' if fills else 'no'} | {ai:.0f}{bound} | "
              + " | ".join(tf(x) for x in MODES)
              + f" | {rt('f16')} | {rt('bf16')} | {pk('f16')} | {pk('bf16')} | {pk('fp8')} | "
              + " | ".join(tt(x) for x in ("f16", "bf16", "fp8", "tf32", "f32")) + " |")


if __name__ == "__main__":
    main()
