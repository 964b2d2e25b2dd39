#!/usr/bin/python3
"""A PyTorch re-implementation of ampc's multimodal image-text model
(src/model/mm.c), in float64, that loads ampc's safetensors checkpoint and a
batch and computes the composite loss and its gradient with respect to every
parameter: the goldens of tests/test_mm_parity.c.

Regenerating tests/reference/mm_goldens.json (Debian's python3-torch; CI only
reads the committed file):

    cmake --build build --target test_mm_parity
    mkdir -p /tmp/mmdump && ./build/tests/test_mm_parity --dump /tmp/mmdump
    /usr/bin/python3 tests/reference/mm_reference.py /tmp/mmdump

The dump directory holds weights.safetensors (ampc_trainer_save: FP32 weights
under the parameter names, plus optimizer moments, ignored here),
batch.safetensors (images, tokens, labels, loss weights as F32; the model's
shapes in the metadata) and ampc_grads.safetensors (ampc's own 32-true losses
and gradients). When the last is present the script prints how far ampc is
from the reference (max |diff| per tensor); it never enters the goldens.
Options: --out FILE (default: mm_goldens.json next to this script).

The model, as src/model/mm.c computes it (everything below in float64):
  vision   pixels v / 127.5 - 1 (images are [b, H, W, C] bytes), a Conv2d of
           kernel = stride = patch whose weight is stored [dim, C*p*p] in
           (channel, dy, dx) order, patches in (row, column) order after a CLS
           token; + pos_embed [1 + patches, dim]; pre-norm blocks
             x1 = x + MHA(LN1(x)),  out = x1 + fc2(GELU_erf(fc1(LN2(x1))))
           (MHA as torch.nn.MultiheadAttention: in_proj_weight [3d, d] split
           q, k, v; scores / sqrt(head_dim); out_proj); final LayerNorm
           ("vision.norm"; every LN has eps 1e-5). Its CLS row feeds
           image_proj (no bias) -> L2 normalise (max(||x||, 1e-12)) and the
           group head cls (with bias).
  text     token_embed[id] + pos_embed[t]; blocks as above with the key
           padding mask token == 0 (padded positions still run as queries);
           final LayerNorm ("text.norm"); mean over the unpadded positions ->
           text_proj (no bias) -> L2 normalise.
  ITC      sim = img_n @ txt_n^T; logits = exp(min(logit_scale, ln 100)) sim;
           (CE(logits, diag) + CE(logits^T, diag)) / 2 (the clamp: no gradient
           to logit_scale above ln 100).
  negatives  neg[i] = argmax_{j != i} sim[i, j]: best starts at
           j = (i == 0 ? 1 : 0), then j = 0 .. b-1 (j != i) replaces it only
           when strictly larger (ties: the lowest j). A choice, not a
           differentiable function; computed on the float64 similarities.
  fusion   2b pairs: p < b is (image p, text p), p >= b is (image p - b,
           text neg[p - b]). The stream starts as the text's final-norm output
           rows (all positions); keys and values are the image's final-norm
           output (all tokens, no mask, not normalised again); blocks
             x1 = x + MHA(LN1(x), kv),  out = x1 + MLP(LN2(x1));
           final LayerNorm ("fusion.norm"), mean over the text's unpadded
           positions, itm linear -> one logit; BCE with logits, targets 1 for
           the b positives then 0 for the b negatives (mean over 2b).
  CLS      mean cross-entropy of the group logits against the labels.
  total    w_itc * itc + w_itm * itm + w_cls * cls.
"""
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

DT = torch.float64
LN_EPS = 1e-5
L2_EPS = 1e-12
MAX_LOG_SCALE = math.log(100.0)


def read_safetensors(path):
    """(tensors as float64 numpy arrays, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        raw = f.read()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    base = 8 + hlen
    kinds = {"F32": "<f4", "F64": "<f8"}
    out = {}
    for name, info in header.items():
        if info["dtype"] not in kinds:
            raise SystemExit(f"{path}: tensor {name} has dtype {info['dtype']}, expected F32")
        lo, hi = info["data_offsets"]
        a = np.frombuffer(raw[base + lo:base + hi], dtype=kinds[info["dtype"]])
        out[name] = a.reshape(info["shape"]).astype(np.float64)
    return out, meta


def layer_norm(x, P, name):
    return F.layer_norm(x, (x.shape[-1],), P[name + ".weight"], P[name + ".bias"], LN_EPS)


def mha(xq, xkv, P, name, heads, key_valid=None):
    """torch.nn.MultiheadAttention(d, heads, batch_first=True) with its weights
    under `name`; key_valid [b, tk] (True = attend) or None."""
    b, tq, d = xq.shape
    tk, dh = xkv.shape[1], d // heads
    wq, wk, wv = P[name + ".in_proj_weight"].split(d)
    bq, bk, bv = P[name + ".in_proj_bias"].split(d)

    def heads_of(t, n):
        return t.reshape(b, n, heads, dh).transpose(1, 2)

    q = heads_of(F.linear(xq, wq, bq), tq)
    k = heads_of(F.linear(xkv, wk, bk), tk)
    v = heads_of(F.linear(xkv, wv, bv), tk)
    s = q @ k.transpose(-1, -2) / math.sqrt(dh)
    if key_valid is not None:
        s = s.masked_fill(~key_valid[:, None, None, :], float("-inf"))
    o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(b, tq, d)
    return F.linear(o, P[name + ".out_proj.weight"], P[name + ".out_proj.bias"])


def block(x, P, name, heads, kv=None, key_valid=None):
    """One pre-norm block: self-attention (kv None) or cross-attention to kv."""
    h = layer_norm(x, P, name + ".norm1")
    if kv is None:
        x1 = x + mha(h, h, P, name + ".attn", heads, key_valid)
    else:
        x1 = x + mha(h, kv, P, name + ".cross_attn", heads, key_valid)
    h = layer_norm(x1, P, name + ".norm2")
    h = F.gelu(F.linear(h, P[name + ".mlp.fc1.weight"], P[name + ".mlp.fc1.bias"]))
    return x1 + F.linear(h, P[name + ".mlp.fc2.weight"], P[name + ".mlp.fc2.bias"])


def masked_mean(x, valid):
    m = valid.to(DT)[..., None]
    return (x * m).sum(1) / m.sum(1)


def hard_negatives(sim):
    """mm.c's loop, verbatim in meaning."""
    b = sim.shape[0]
    neg = []
    for i in range(b):
        best = 1 if i == 0 else 0
        for j in range(b):
            if j != i and sim[i, j] > sim[i, best]:
                best = j
        neg.append(best)
    return neg


def forward(P, cfg, images, tokens, labels, lw):
    b, p, d, heads = images.shape[0], cfg["patch"], cfg["dim"], cfg["heads"]
    # vision encoder
    pix = images.to(DT).permute(0, 3, 1, 2) / 127.5 - 1.0  # NCHW
    wconv = P["vision.patch_embed.weight"].reshape(d, cfg["channels"], p, p)
    patches = F.conv2d(pix, wconv, P["vision.patch_embed.bias"], stride=p)
    patches = patches.flatten(2).transpose(1, 2)  # [b, rows*cols, d], rows then columns
    cls = P["vision.cls_token"].reshape(1, 1, d).expand(b, 1, d)
    x = torch.cat([cls, patches], dim=1) + P["vision.pos_embed"][None]
    for i in range(cfg["v_depth"]):
        x = block(x, P, f"vision.blocks.{i}", heads)
    vfin = layer_norm(x, P, "vision.norm")
    vcls = vfin[:, 0]
    img_n = F.normalize(F.linear(vcls, P["heads.image_proj.weight"]), dim=-1, eps=L2_EPS)
    cls_logits = F.linear(vcls, P["heads.cls.weight"], P["heads.cls.bias"])
    # text encoder
    valid = tokens != 0
    t = P["text.token_embed.weight"][tokens] + P["text.pos_embed.weight"][None, :tokens.shape[1]]
    for i in range(cfg["t_depth"]):
        t = block(t, P, f"text.blocks.{i}", heads, key_valid=valid)
    tfin = layer_norm(t, P, "text.norm")
    txt_n = F.normalize(F.linear(masked_mean(tfin, valid), P["heads.text_proj.weight"]), dim=-1,
                        eps=L2_EPS)
    # contrastive loss
    sim = img_n @ txt_n.t()
    scale = torch.clamp(P["heads.logit_scale"][0], max=MAX_LOG_SCALE).exp()
    logits = scale * sim
    diag = torch.arange(b)
    itc = (F.cross_entropy(logits, diag) + F.cross_entropy(logits.t(), diag)) / 2
    # hard negatives and fusion on 2b pairs
    neg = hard_negatives(sim.detach())
    img_idx = torch.tensor(list(range(b)) * 2)
    txt_idx = torch.tensor(list(range(b)) + neg)
    f = tfin[txt_idx]
    kv = vfin[img_idx]
    for i in range(cfg["f_depth"]):
        f = block(f, P, f"fusion.blocks.{i}", heads, kv=kv)
    ffin = layer_norm(f, P, "fusion.norm")
    itm_logit = F.linear(masked_mean(ffin, valid[txt_idx]), P["heads.itm.weight"],
                         P["heads.itm.bias"])[:, 0]
    target = torch.cat([torch.ones(b, dtype=DT), torch.zeros(b, dtype=DT)])
    itm = F.binary_cross_entropy_with_logits(itm_logit, target)
    cls_loss = F.cross_entropy(cls_logits, labels)
    total = lw[0] * itc + lw[1] * itm + lw[2] * cls_loss
    return {"itc": itc, "itm": itm, "cls": cls_loss, "total": total, "negatives": neg,
            "sim": sim.detach()}


def self_check(P, cfg, tokens):
    """Our attention against torch.nn.MultiheadAttention itself (key padding
    mask), and torch's GELU default being the erf form."""
    d, heads = cfg["dim"], cfg["heads"]
    ref = torch.nn.MultiheadAttention(d, heads, batch_first=True, dtype=DT)
    name = "text.blocks.0.attn"
    with torch.no_grad():
        ref.in_proj_weight.copy_(P[name + ".in_proj_weight"])
        ref.in_proj_bias.copy_(P[name + ".in_proj_bias"])
        ref.out_proj.weight.copy_(P[name + ".out_proj.weight"])
        ref.out_proj.bias.copy_(P[name + ".out_proj.bias"])
        gen = torch.Generator().manual_seed(0)
        xq = torch.randn(tokens.shape[0], tokens.shape[1], d, generator=gen, dtype=DT)
        xkv = torch.randn(tokens.shape[0], 7, d, generator=gen, dtype=DT)
        want, _ = ref(xq, xq, xq, key_padding_mask=tokens == 0, need_weights=False)
        got = mha(xq, xq, P, name, heads, tokens != 0)
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-12), "self-attention differs"
        want, _ = ref(xq, xkv, xkv, need_weights=False)
        got = mha(xq, xkv, P, name, heads)
        assert torch.allclose(got, want, rtol=1e-12, atol=1e-12), "cross-attention differs"
        z = torch.linspace(-4, 4, 33, dtype=DT)
        assert torch.allclose(F.gelu(z), 0.5 * z * (1 + torch.erf(z / math.sqrt(2))))


def main(argv):
    args = list(argv[1:])
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mm_goldens.json")
    if "--out" in args:
        k = args.index("--out")
        out = args[k + 1]
        del args[k:k + 2]
    if len(args) != 1:
        raise SystemExit("usage: mm_reference.py DUMP_DIR [--out FILE]  (DUMP_DIR from "
                         "tests/test_mm_parity --dump DUMP_DIR; see the top of this file)")
    ddir = args[0]
    weights, wmeta = read_safetensors(os.path.join(ddir, "weights.safetensors"))
    batch, bmeta = read_safetensors(os.path.join(ddir, "batch.safetensors"))
    cfg = {k: int(bmeta[k]) for k in ("img", "patch", "channels", "dim", "heads", "mlp", "v_depth",
                                        "t_depth", "f_depth", "vocab", "seq_len", "embed",
                                        "classes")}
    names = [n for n in weights if not n.startswith("optimizer.")]  # file (= parameter) order
    P = {n: torch.tensor(weights[n], dtype=DT, requires_grad=True) for n in names}
    images = torch.tensor(batch["images"].astype(np.uint8))
    tokens = torch.tensor(batch["tokens"].astype(np.int64))
    labels = torch.tensor(batch["labels"].astype(np.int64))
    lw = [float(v) for v in batch["loss_weights"]]  # the FP32 values, exactly
    assert images.shape == (tokens.shape[0], cfg["img"], cfg["img"], cfg["channels"])
    assert bool((tokens != 0).any(dim=1).all()), "a text with no token: its mean is undefined"

    self_check({n: t.detach() for n, t in P.items()}, cfg, tokens)
    r = forward(P, cfg, images, tokens, labels, lw)
    r["total"].backward()

    # margin of the negative choice: best minus runner-up among j != i
    sim, neg = r["sim"], r["negatives"]
    margin = math.inf
    for i in range(sim.shape[0]):
        others = sorted((float(sim[i, j]) for j in range(sim.shape[0]) if j != i), reverse=True)
        margin = min(margin, others[0] - others[1])

    def fsum2(a):
        return [math.fsum(a.reshape(-1).tolist()), math.fsum((a.reshape(-1) ** 2).tolist())]

    gold = {
        "generator": "tests/reference/mm_reference.py (inputs: tests/test_mm_parity --dump)",
        "torch": torch.__version__,
        "dtype": "float64",
        "model": bmeta.get("model", "?"),
        "config": cfg,
        "loss_weights": lw,
        "batch": {"images": [int(v) for v in images.reshape(-1)],
                  "tokens": [int(v) for v in tokens.reshape(-1)],
                  "labels": [int(v) for v in labels.reshape(-1)]},
        "losses": {k: float(r[k]) for k in ("itc", "itm", "cls", "total")},
        "negatives": neg,
        "negative_margin": margin,
        # per tensor: sum and sum of squares of the FP32 weights, exactly rounded
        "weights": {n: fsum2(weights[n]) for n in names},
        "grads": {n: [float(v) for v in P[n].grad.reshape(-1)] for n in names},
    }
    with open(out, "w") as f:
        json.dump(gold, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out} ({os.path.getsize(out)} bytes): {len(names)} tensors, "
          f"{sum(weights[n].size for n in names)} gradient values")
    print("losses: " + ", ".join(f"{k} {float(r[k]):.10g}" for k in ("itc", "itm", "cls", "total")))
    print(f"negatives {neg} (margin {margin:.4g})")

    gpath = os.path.join(ddir, "ampc_grads.safetensors")
    if os.path.exists(gpath):
        ag, ameta = read_safetensors(gpath)
        print("ampc 32-true against this reference:")
        for k in ("itc", "itm", "cls", "total"):
            a, w = float(ameta[k]), float(r[k])
            print(f"  loss {k:5s} ampc {a:.9g} ref {w:.9g} rel diff {abs(a - w) / abs(w):.3g}")
        print(f"  negatives ampc [{ameta['negatives']}] ref {neg}")
        worst, worst_name = 0.0, ""
        for n in names:
            ref = P[n].grad.numpy()
            diff = np.abs(ag[n] - ref)
            tmax = float(np.abs(ref).max())
            rel = float(diff.max()) / tmax if tmax > 0 else float(diff.max())
            print(f"  {n:46s} max|g_ref| {tmax:.3e} max|diff| {float(diff.max()):.3e} "
                  f"({rel:.3g} of max)")
            if rel > worst:
                worst, worst_name = rel, n
        print(f"  worst: {worst:.3g} of the tensor max ({worst_name})")


if __name__ == "__main__":
    main(sys.argv)
