"""tests/reference/quant_readback.py FP32.st INT8.st GRANULARITY KEPT_PREFIXES [calibrated]:
read `ampc quantize`'s file with PyTorch (the safetensors layout parsed
here with the standard library, the bytes viewed by torch.frombuffer) and
check it against the training checkpoint: each I8 weight has an F32
NAME_scale equal, bit for bit, to max|w| / 127 in FP32 per output channel
(or per tensor), values in [-127, 127], and every dequantized weight
q * scale within half a step of the FP32 weight (plus two FP32 ulps of the
division); layers kept and every other model tensor F32 and equal to the
checkpoint's; no optimizer state. With "calibrated": each quantized block
layer (not a head, not the patch embedding) has NAME_input_scale F32, [3]
for an in-projection (q, k, v) and [1] otherwise, positive and finite, and
the metadata names the calibration. Exits non-zero on the first mismatch."""
import json
import struct
import sys

import torch

fp32_path, int8_path, gran, kept = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
calibrated = len(sys.argv) > 5 and sys.argv[5] == "calibrated"
kept = [k for k in kept.split(",") if k]
DT = {"F32": torch.float32, "I8": torch.int8}


def load(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8 : 8 + n])
    meta = h.pop("__metadata__", {})
    out = {}
    for name, t in h.items():
        lo, hi = t["data_offsets"]
        if t["dtype"] not in DT:
            sys.exit("%s: %s has dtype %s" % (path, name, t["dtype"]))
        raw = bytearray(b[8 + n + lo : 8 + n + hi])
        x = torch.frombuffer(raw, dtype=DT[t["dtype"]]) if raw else torch.empty(0, dtype=DT[t["dtype"]])
        out[name] = x.reshape(t["shape"])
    return out, meta


ref, _ = load(fp32_path)
q, meta = load(int8_path)
if meta.get("format") != "ampc-int8" or meta.get("ampc.granularity") != gran:
    sys.exit("metadata: %r" % meta)
n_i8 = 0
for name, w in ref.items():
    if name.startswith("optimizer."):
        if name in q:
            sys.exit("%s: the optimizer state was written" % name)
        continue
    if name not in q:
        sys.exit("%s: missing from the quantized file" % name)
    x = q[name]
    if x.dtype == torch.float32:
        if not torch.equal(x, w):
            sys.exit("%s: an F32 tensor differs from the checkpoint" % name)
        continue
    n_i8 += 1
    if any(name == k or name.startswith(k + ".") for k in kept):
        sys.exit("%s: quantized, but --keep names it" % name)
    s = q[name + "_scale"]
    a = w.abs().amax(dim=1) if gran == "channel" else w.abs().amax().reshape(1)
    want = torch.where(a > 0, a / 127.0, torch.ones_like(a))
    if s.shape != want.shape or not torch.equal(s, want):
        sys.exit("%s: scales are not max|w| / 127 (%s)" % (name, gran))
    if int(x.min()) < -127 or int(x.max()) > 127:
        sys.exit("%s: values outside [-127, 127]" % name)
    step = s.reshape(-1, 1) if gran == "channel" else s
    deq = x.to(torch.float32) * step
    bound = 0.5 * step + 2.0 * 2.0**-23 * w.abs()
    if not bool(((deq - w).abs() <= bound).all()):
        sys.exit("%s: a dequantized weight is more than half a step off" % name)
    xs = q.get(name + "_input_scale")
    block = ".blocks." in name
    if calibrated and block:
        want_n = 3 if name.endswith("in_proj_weight") else 1
        if xs is None or xs.dtype != torch.float32 or list(xs.shape) != [want_n]:
            sys.exit("%s: no F32 [%d] input scale" % (name, want_n))
        if not bool(torch.isfinite(xs).all()) or not bool((xs > 0).all()):
            sys.exit("%s: an input scale is not positive and finite: %s" % (name, xs))
    elif xs is not None:
        sys.exit("%s: an input scale where none belongs" % name)
if calibrated and "ampc.calibration" not in meta:
    sys.exit("metadata: no ampc.calibration: %r" % meta)
if n_i8 == 0:
    sys.exit("no I8 tensor in %s" % int8_path)
print("quant_readback: %d INT8 tensors checked with torch %s" % (n_i8, torch.__version__))
