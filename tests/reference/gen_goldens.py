#!/usr/bin/python3
"""Generate the PyTorch parity goldens for ampc's layers.

Run with Debian's PyTorch (python3-torch):  /usr/bin/python3 tests/reference/gen_goldens.py
It writes tests/reference/goldens.json (committed, so CI never needs PyTorch).

Every case is computed in float32 by PyTorch autograd at a fixed seed. Inputs
are rounded to values that binary16 and bfloat16 both hold exactly (sign, 7
significant bits, moderate exponent), so the C test can feed the very same
inputs to ampc in f32, f16 and bf16 storage and compare with these float32
references: any difference is then ampc's own rounding, which the test bounds.
"""
import json
import math
import os

import torch
import torch.nn.functional as F

torch.manual_seed(1234)


def q(t):
    """Round to 7 significant bits (bfloat16's precision, inside binary16's
    range), so the value is exact in f32, f16 and bf16."""
    return t.to(torch.bfloat16).to(torch.float32).clamp(-60000, 60000)


def rnd(*shape, scale=1.0):
    return q(torch.randn(*shape) * scale)


def flat(t):
    # repr of a float32 widened to double: 17 significant digits round-trip
    return [float(v) for v in t.detach().to(torch.float32).reshape(-1).tolist()]


cases = {}


def add(name, **tensors):
    cases[name] = {k: (v if isinstance(v, (int, float, list)) else flat(v))
                   for k, v in tensors.items()}


# linear: y = x W^T + b, with upstream gradient g
m, k, n = 6, 20, 5
x, w, b, g = rnd(m, k), rnd(n, k, scale=0.3), rnd(n), rnd(m, n)
x.requires_grad_(), w.requires_grad_(), b.requires_grad_()
y = F.linear(x, w, b)
y.backward(g)
add("linear", m=m, k=k, n=n, x=x, w=w, b=b, g=g, y=y, dx=x.grad, dw=w.grad, db=b.grad)

# layer norm over the last axis, eps 1e-5
m, d = 4, 16
x, gam, bet, g = rnd(m, d, scale=2.0), q(1 + 0.2 * torch.randn(d)), rnd(d, scale=0.5), rnd(m, d)
x.requires_grad_(), gam.requires_grad_(), bet.requires_grad_()
y = F.layer_norm(x, (d,), gam, bet, 1e-5)
y.backward(g)
add("layer_norm", m=m, d=d, eps=1e-5, x=x, gamma=gam, beta=bet, g=g, y=y, dx=x.grad,
    dgamma=gam.grad, dbeta=bet.grad)

# GELU (erf form, PyTorch's default)
n = 64
x, g = rnd(n, scale=3.0), rnd(n)
x.requires_grad_()
y = F.gelu(x)
y.backward(g)
add("gelu", n=n, x=x, g=g, y=y, dx=x.grad)

# softmax with a key-padding mask (rows of the same group share a mask row)
m, n, per = 4, 7, 2
x, g = rnd(m, n, scale=3.0), rnd(m, n)
mask = torch.tensor([[1, 1, 0, 1, 1, 1, 0], [1, 0, 1, 1, 0, 1, 1]], dtype=torch.bool)
x.requires_grad_()
xm = x.masked_fill(~mask.repeat_interleave(per, 0), float("-inf"))
y = torch.softmax(xm * 0.5, dim=-1)
y.backward(g)
add("softmax", m=m, n=n, rows_per_mask=per, scale=0.5, mask=[int(v) for v in mask.reshape(-1)],
    x=x, g=g, y=y, dx=x.grad)

# cross-entropy (mean)
m, c = 5, 7
x = rnd(m, c, scale=2.0).requires_grad_()
t = torch.tensor([0, 6, 3, 3, 1])
loss = F.cross_entropy(x, t)
loss.backward()
add("cross_entropy", m=m, c=c, x=x, target=[int(v) for v in t], loss=float(loss), dx=x.grad)

# binary cross-entropy with logits (mean)
m = 8
x = rnd(m, scale=4.0).requires_grad_()
t = torch.tensor([1, 0, 1, 1, 0, 0, 1, 0], dtype=torch.float32)
loss = F.binary_cross_entropy_with_logits(x, t)
loss.backward()
add("bce_logits", m=m, x=x, target=t, loss=float(loss), dx=x.grad)

# symmetric InfoNCE (CLIP) on a similarity matrix with a learnable log-temperature
bsz = 6
sim = q(torch.tanh(torch.randn(bsz, bsz))).requires_grad_()
lt = torch.tensor(math.log(1 / 0.07), dtype=torch.float32).requires_grad_()
logits = lt.exp() * sim
lab = torch.arange(bsz)
loss = (F.cross_entropy(logits, lab) + F.cross_entropy(logits.t(), lab)) / 2
loss.backward()
add("infonce", b=bsz, log_temp=float(lt), sim=sim, loss=float(loss), dsim=sim.grad,
    dlog_temp=float(lt.grad))

# token + position embedding
bb, tt, d, vocab = 2, 5, 8, 11
ids = torch.tensor([[3, 1, 3, 10, 0], [3, 3, 2, 7, 1]])
tok, pos, g = rnd(vocab, d), rnd(tt, d), rnd(bb * tt, d)
tok.requires_grad_(), pos.requires_grad_()
y = (F.embedding(ids, tok) + pos.unsqueeze(0)).reshape(bb * tt, d)
y.backward(g)
add("embedding", b=bb, t=tt, d=d, vocab=vocab, ids=[int(v) for v in ids.reshape(-1)], tok=tok,
    pos=pos, g=g, y=y, dtok=tok.grad, dpos=pos.grad)

# patch embedding: Conv2d(c, d, kernel = stride = p) on uint8 images / 255 - 0.5
bb, hh, ww, cc, p, d = 2, 8, 8, 3, 4, 6
img = torch.randint(0, 256, (bb, hh, ww, cc), dtype=torch.uint8)
w, b = rnd(d, cc, p, p, scale=0.2), rnd(d)
w.requires_grad_(), b.requires_grad_()
xin = (img.to(torch.float32) * (1 / 255.0) - 0.5).permute(0, 3, 1, 2)  # NCHW
# (pixels: float32(v) * float32(1/255) - 0.5, the same two roundings as ampc)
y = F.conv2d(xin, w, b, stride=p).permute(0, 2, 3, 1).reshape(-1, d)  # rows (b, py, px)
g = rnd(*y.shape)
y.backward(g)
add("patch_embed", b=bb, h=hh, w=ww, c=cc, p=p, d=d, images=[int(v) for v in img.reshape(-1)],
    weight=w, bias=b, g=g, y=y, dw=w.grad, db=b.grad)

# masked mean pooling then L2 normalisation (a contrastive head)
bb, tt, d = 3, 4, 5
x, g = rnd(bb, tt, d), rnd(bb, d)
mask = torch.tensor([[1, 1, 0, 1], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.float32)
x.requires_grad_()
pooled = (x * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)
y = F.normalize(pooled, dim=-1, eps=1e-12)
y.backward(g)
add("pool_normalize", b=bb, t=tt, d=d, mask=[int(v) for v in mask.reshape(-1)], x=x, g=g,
    pooled=pooled, y=y, dx=x.grad)

# multi-head attention core: q [b, tq, h*dh], k, v [b, tk, h*dh], key mask [b, tk]
bb, tq, tk, h, dh = 2, 3, 5, 2, 4
qq, kk, vv = rnd(bb, tq, h * dh), rnd(bb, tk, h * dh), rnd(bb, tk, h * dh)
g = rnd(bb, tq, h * dh)
km = torch.tensor([[1, 1, 1, 0, 1], [1, 0, 1, 1, 1]], dtype=torch.bool)
qq.requires_grad_(), kk.requires_grad_(), vv.requires_grad_()
qh = qq.reshape(bb, tq, h, dh).transpose(1, 2)
kh = kk.reshape(bb, tk, h, dh).transpose(1, 2)
vh = vv.reshape(bb, tk, h, dh).transpose(1, 2)
s = (qh @ kh.transpose(-1, -2)) / math.sqrt(dh)
s = s.masked_fill(~km[:, None, None, :], float("-inf"))
pr = torch.softmax(s, dim=-1)
out = (pr @ vh).transpose(1, 2).reshape(bb, tq, h * dh)
out.backward(g)
add("attention", b=bb, tq=tq, tk=tk, h=h, dh=dh, key_mask=[int(v) for v in km.reshape(-1)],
    q=qq, k=kk, v=vv, g=g, out=out, dq=qq.grad, dk=kk.grad, dv=vv.grad)

# torch.nn.MultiheadAttention (batch_first), cross-attention with a key padding mask
bb, tq, tk, dm, h = 2, 3, 4, 8, 2
mha = torch.nn.MultiheadAttention(dm, h, batch_first=True)
with torch.no_grad():
    mha.in_proj_weight.copy_(rnd(3 * dm, dm, scale=0.4))
    mha.in_proj_bias.copy_(rnd(3 * dm, scale=0.2))
    mha.out_proj.weight.copy_(rnd(dm, dm, scale=0.4))
    mha.out_proj.bias.copy_(rnd(dm, scale=0.2))
xq, xkv, g = rnd(bb, tq, dm), rnd(bb, tk, dm), rnd(bb, tq, dm)
xq.requires_grad_(), xkv.requires_grad_()
pad = torch.tensor([[False, False, True, False], [False, True, False, False]])  # True = ignore
y, _ = mha(xq, xkv, xkv, key_padding_mask=pad, need_weights=False)
y.backward(g)
wq, wk, wv = mha.in_proj_weight.detach().split(dm)
bq, bk, bv = mha.in_proj_bias.detach().split(dm)
dwq, dwk, dwv = mha.in_proj_weight.grad.split(dm)
dbq, dbk, dbv = mha.in_proj_bias.grad.split(dm)
add("mha", b=bb, tq=tq, tk=tk, dm=dm, h=h, key_mask=[int(not v) for v in pad.reshape(-1)],
    xq=xq, xkv=xkv, wq=wq, wk=wk, wv=wv, wo=mha.out_proj.weight, bq=bq, bk=bk, bv=bv,
    bo=mha.out_proj.bias, g=g, y=y, dxq=xq.grad, dxkv=xkv.grad, dwq=dwq, dwk=dwk, dwv=dwv,
    dwo=mha.out_proj.weight.grad, dbq=dbq, dbk=dbk, dbv=dbv, dbo=mha.out_proj.bias.grad)

here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "goldens.json"), "w") as f:
    json.dump({"generator": "tests/reference/gen_goldens.py", "torch": torch.__version__,
               "cases": cases}, f, indent=None, separators=(",", ":"))
    f.write("\n")
print("wrote", os.path.join(here, "goldens.json"), "with", len(cases), "cases")
