#!/usr/bin/env python3
"""bench/gpu/torch_matmul.py AMPC_GEMM.JSON [--reps R]: PyTorch on the shapes
of `gpu_bench gemm --device cuda --json` (the same C = A B^T problems), timed
the same way (CUDA events; a timed run repeats the product until it lasts
>= 10 ms; median of R), printed as JSON. Modes: f16 and bf16 (torch.matmul,
PyTorch's default flags, recorded), tf32 (allow_tf32 = True), f32
(allow_tf32 = False), fp8 and fp8-e5m2 (torch._scaled_mm, scales 1, out
bf16) where this PyTorch and GPU offer them."""
import json
import sys

import torch


def timed(fn, reps):
    fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    fn()
    e1.record()
    e1.synchronize()
    one = e0.elapsed_time(e1)
    inner = 1 if one >= 10 else int(10 / max(one, 1e-3)) + 1
    out = []
    for _ in range(reps):
        e0.record()
        for _ in range(inner):
            fn()
        e1.record()
        e1.synchronize()
        out.append(e0.elapsed_time(e1) / inner)
    out.sort()
    return out[len(out) // 2]


def main():
    args = sys.argv[1:]
    reps = 7
    if "--reps" in args:
        i = args.index("--reps")
        reps = int(args[i + 1])
        del args[i : i + 2]
    with open(args[0]) as f:
        ampc = json.load(f)
    shapes = []
    for r in ampc["results"]:
        s = (int(r["m"]), int(r["n"]), int(r["k"]), r["shape"])
        if s not in shapes:
            shapes.append(s)
    dev = torch.device("cuda")
    flags = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "allow_fp16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "allow_bf16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
    }
    results = []
    for m, n, k, label in shapes:
        flop = 2.0 * m * n * k
        for mode in ("f16", "bf16", "fp8", "fp8-e5m2", "tf32", "f32"):
            try:
                if mode in ("f16", "bf16", "tf32", "f32"):
                    dt = {"f16": torch.float16, "bf16": torch.bfloat16}.get(mode, torch.float32)
                    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
                    a = torch.rand(m, k, device=dev, dtype=dt) * 2 - 1
                    b = torch.rand(n, k, device=dev, dtype=dt) * 2 - 1
                    fn = lambda: torch.matmul(a, b.t())
                else:
                    bdt = torch.float8_e4m3fn if mode == "fp8" else torch.float8_e5m2
                    a = (torch.rand(m, k, device=dev) * 2 - 1).to(torch.float8_e4m3fn)
                    b = (torch.rand(n, k, device=dev) * 2 - 1).to(bdt)
                    one = torch.ones((), device=dev)
                    fn = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one,
                                                  out_dtype=torch.bfloat16)
                ms = timed(fn, reps)
                results.append({"m": m, "n": n, "k": k, "shape": label, "mode": mode,
                                "ms_median": ms, "tflops": flop / (ms * 1e-3) * 1e-12})
            except Exception as e:  # a mode this PyTorch or GPU does not offer
                results.append({"m": m, "n": n, "k": k, "shape": label, "mode": mode,
                                "error": str(e).splitlines()[0][:200]})
            finally:
                torch.backends.cuda.matmul.allow_tf32 = False
                torch.cuda.empty_cache()
    print(json.dumps({"flags": flags, "device": torch.cuda.get_device_name(0), "reps": reps,
                      "results": results}))


if __name__ == "__main__":
    main()
