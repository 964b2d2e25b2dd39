#!/usr/bin/python3
"""The PyTorch round trip of `ampc inspect`, run by
tests/check_inspect_torch.sh:

    /usr/bin/python3 tests/reference/inspect_roundtrip.py AMPC DIR

DIR holds `test_mm_parity --dump DIR`'s files: ampc's mm-micro weights, a
batch, and ampc's own 32-true losses and parameter gradients of that step.
This script
  1. builds torch_step.py's model (torch.nn modules, float32) with those
     weights, runs the same step on the batch under tools/python/ampc_dump.py's
     StepDump and checks that its losses are ampc's (relative 1e-5: the same
     step);
  2. checks `ampc inspect` of the dump against PyTorch's own casts, exactly:
     for every tensor (activations, activation gradients, parameter
     gradients), format f16 and bf16, scales 2^-24 .. 2^12, the zero,
     non-finite, flushed, subnormal and overflow counts equal those of
     (x * S).half() / .bfloat16();
  3. checks `ampc inspect` of PyTorch's parameter gradients against `ampc
     inspect` of ampc's parameter gradients of the same step, per branch:
     each count may differ only by the values whose two versions (PyTorch's,
     ampc's) lie on both sides of a band edge or of zero (exactly 0 in one,
     not in the other; counted here), and the safe scale range of the file is
     the same.
Exit status 0 when all hold, 1 otherwise.
"""
import json
import math
import os
import struct
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "python"))
import ampc_dump  # noqa: E402
import torch_step  # noqa: E402

FORMATS = {  # smallest subnormal, smallest normal, smallest magnitude that overflows
    "f16": (2.0 ** -24, 2.0 ** -14, 65520.0),
    "bf16": (2.0 ** -133, 2.0 ** -126, (2 - 2 ** -8) * 2.0 ** 127),
}
SCALES = [-24, -16, -8, 0, 6, 12]
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    h = json.loads(raw[8:8 + n].decode("utf-8"))
    meta = h.pop("__metadata__", {})
    dt = {"F32": torch.float32, "F16": torch.float16, "F64": torch.float64}
    out = {}
    for name, e in h.items():
        lo, hi = e["data_offsets"]
        buf = bytearray(raw[8 + n + lo:8 + n + hi])
        t = torch.frombuffer(buf, dtype=dt[e["dtype"]]) if hi > lo else torch.zeros(0)
        out[name] = t.reshape(e["shape"])
    return out, meta


def inspect(ampc, path, fmt, k, *extra):
    r = subprocess.run([ampc, "inspect", path, "--format", fmt, "--scale", f"2^{k}", "--json",
                        *extra], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ampc inspect {path} failed ({r.returncode}): {r.stderr}")
    return json.loads(r.stdout)


def torch_counts(x, fmt, k):
    """zeros, nonfinite, flushed, subnormal, overflow of x * 2^k cast by PyTorch"""
    x = x.float().flatten()
    fin = torch.isfinite(x)
    nz = fin & (x != 0)
    r = (x * 2.0 ** k).half() if fmt == "f16" else (x * 2.0 ** k).bfloat16()
    r = r.float()
    min_normal = FORMATS[fmt][1]
    return {"zeros": int((x == 0).sum()), "nonfinite": int((~fin).sum()),
            "flushed": int((nz & (r == 0)).sum()), "overflow": int((nz & torch.isinf(r)).sum()),
            "subnormal": int((nz & (r != 0) & (r.abs() < min_normal)).sum())}


def main(argv):
    ampc, ddir = argv[1], argv[2]
    weights, _ = read_st(os.path.join(ddir, "weights.safetensors"))
    batch, bmeta = read_st(os.path.join(ddir, "batch.safetensors"))
    agrads, ameta = read_st(os.path.join(ddir, "ampc_grads.safetensors"))
    keys = ["img", "patch", "channels", "dim", "heads", "mlp", "v_depth", "t_depth", "f_depth",
            "embed", "classes"]
    c = {k: int(bmeta[k]) for k in keys}
    c["image_only"] = False
    torch_step.VOCAB, torch_step.SEQ_LEN = int(bmeta["vocab"]), int(bmeta["seq_len"])
    torch.manual_seed(0)
    model = torch_step.Model(c)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(weights[name].reshape(p.shape))
    images = batch["images"].to(torch.uint8)
    tokens = batch["tokens"].to(torch.long)
    labels = batch["labels"].to(torch.long)
    lw = [float(v) for v in batch["loss_weights"]]
    out = os.path.join(ddir, "torch_step.safetensors")
    with ampc_dump.StepDump(model, out):
        loss = model(images, tokens, labels, weights=lw)
        loss.backward()
    want = float(ameta["total"])
    rel = abs(float(loss) - want) / abs(want)
    print(f"loss: PyTorch {float(loss):.9g}, ampc {want:.9g} (relative difference {rel:.2g})")
    if rel > 1e-5:
        fail(f"the losses differ by {rel:.3g}: not the same step")

    # 2. inspect of the dump against PyTorch's own casts, tensor by tensor
    dump, dmeta = read_st(out)
    kinds = {}
    for name in dump:
        kinds[name.split("/")[0]] = kinds.get(name.split("/")[0], 0) + 1
    print(f"dump: {len(dump)} tensors {kinds}, generator {dmeta.get('generator')}")
    for kind in ("act", "act_grad", "grad"):
        if not kinds.get(kind):
            fail(f"the dump has no {kind}/ tensors")
    checked = 0
    for fmt in FORMATS:
        for k in SCALES:
            got = {t["name"]: t for t in inspect(ampc, out, fmt, k)["tensors"]}
            for name, x in dump.items():
                want_c = torch_counts(x, fmt, k)
                g = got[name]
                for key, v in want_c.items():
                    if g[key] != v:
                        fail(f"{name} as {fmt} at 2^{k}: {key} {g[key]} (ampc inspect) vs {v} "
                             f"(PyTorch)")
                if g["count"] != x.numel():
                    fail(f"{name}: count {g['count']} vs {x.numel()}")
                checked += 1
    print(f"inspect vs PyTorch casts: {checked} tensor x format x scale cases")

    # 3. PyTorch's parameter gradients against ampc's, per branch
    tg = {n[len("grad/"):]: t.flatten() for n, t in dump.items() if n.startswith("grad/")}
    agrads = {n: t.flatten() for n, t in agrads.items()}
    if sorted(tg) != sorted(agrads):
        fail("PyTorch's and ampc's gradients name different parameters")
    worst = max(float(((tg[n] - agrads[n]).abs().max() /
                       agrads[n].abs().max().clamp(min=1e-30))) for n in agrads)
    print(f"gradients: largest |PyTorch - ampc| / max|ampc| per tensor {worst:.2g}")
    agreed = 0
    for fmt, (min_sub, min_normal, over) in FORMATS.items():
        for k in SCALES:
            s = 2.0 ** k
            edges = [min_sub / 2 / s, min_normal / s, over / s]
            mine = {b["name"]: b for b in
                    inspect(ampc, out, fmt, k, "--select", "grad/")["branches"]}
            theirs = {b["name"]: b for b in
                      inspect(ampc, os.path.join(ddir, "ampc_grads.safetensors"), fmt, k)
                      ["branches"]}
            for bname, b in theirs.items():
                m = mine.get("grad/" + bname)
                if m is None:
                    fail(f"branch grad/{bname} missing from the dump's inspection")
                    continue
                # values whose two versions straddle an edge may change class
                allow = 0
                for n in agrads:
                    if n.split(".")[0] != bname:
                        continue
                    a, t = agrads[n].abs().double().flatten(), tg[n].abs().double().flatten()
                    lo, hi = torch.minimum(a, t), torch.maximum(a, t)
                    for e in edges:
                        allow += int(((lo <= e) & (e <= hi)).sum())
                    allow += int(((a == 0) != (t == 0)).sum())  # zero is a class too
                for key in ("zeros", "flushed", "subnormal", "overflow", "nonfinite"):
                    if abs(m[key] - b[key]) > allow:
                        fail(f"{bname} as {fmt} at 2^{k}: {key} {m[key]} (PyTorch) vs {b[key]} "
                             f"(ampc), {allow} values straddle an edge")
                agreed += 1
    print(f"PyTorch vs ampc gradients: {agreed} branch x format x scale cases agree")

    # the safe scale range of the file. Its lower end is set by the smallest
    # values, and the smallest gradients here are rounding noise (the key part
    # of each attention bias, zero in exact arithmetic) that two correct
    # implementations do not reproduce. So both files are compared with the
    # elements that do not agree to 1e-3 relative zeroed in both: the ranges
    # of what is reproducible must be the same, exactly.
    keep_t, keep_a, masked = {}, {}, 0
    for n in agrads:
        a, t = agrads[n], tg[n]
        bad = (t - a).abs() > 1e-3 * a.abs()
        masked += int(bad.sum())
        keep_t[n] = torch.where(bad, torch.zeros_like(t), t)
        keep_a[n] = torch.where(bad, torch.zeros_like(a), a)
    pt, pa = os.path.join(ddir, "t_kept.safetensors"), os.path.join(ddir, "a_kept.safetensors")
    ampc_dump.write_safetensors(pt, keep_t)
    ampc_dump.write_safetensors(pa, keep_a)
    total = sum(x.numel() for x in agrads.values())
    print(f"safe scale ranges, without the {masked} of {total} gradient values that do not "
          f"agree to 1e-3:")
    for fmt in FORMATS:
        mr = inspect(ampc, pt, fmt, 0)["total"]["scale_range"]
        ar = inspect(ampc, pa, fmt, 0)["total"]["scale_range"]
        print(f"  {fmt}: 2^{ar.get('min_log2')} .. 2^{ar.get('max_log2')} (ampc), "
              f"2^{mr.get('min_log2')} .. 2^{mr.get('max_log2')} (PyTorch)")
        if (mr.get("min_log2"), mr.get("max_log2")) != (ar.get("min_log2"), ar.get("max_log2")):
            fail(f"{fmt}: safe scales differ")
    if masked > total // 100:
        fail(f"{masked} of {total} gradient values differ by more than 1e-3: not the same step")
    if failures:
        print(f"{len(failures)} failures")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
