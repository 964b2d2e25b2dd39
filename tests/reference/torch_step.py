#!/usr/bin/python3
"""PyTorch training steps of ampc's vit-ref, mm-tiny, mm-base and mm-large (the step
benchmark's speed baseline; mm-base and mm-large are the GPU-sized models): the same shapes and parameter counts as src/model/mm.c (the
definitions of mm_reference.py as torch.nn modules, float32), AdamW (lr 1e-3,
weight decay 0.01 on the matrices only, as ampc), one fixed batch.

    /usr/bin/python3 tests/reference/torch_step.py --model vit-ref \
        --mode fp32|bf16 --batch 128 --steps 20 --warmup 3 --threads 2

prints one JSON object per model and mode (--model and --mode take
comma-separated lists, run in one process) like `ampc bench step --json`: model, precision
("torch-fp32" or "torch-bf16-autocast"), batch, threads, ms_per_step_median,
peak_rss_bytes (getrusage: the process's peak so far, so with lists the
largest of the runs up to this one), ms_steps (every timed step), parameters.
A step is zero_grad (set_to_none), forward (under
torch.autocast(device, dtype=torch.bfloat16) in bf16 mode, float16 in fp16
mode), backward (through torch.cuda.amp.GradScaler in fp16 mode),
optimizer.step() (the scaler's step and update in fp16 mode). --device cuda
(the comparison on the GPU): TF32 off, a synchronize ends each step,
peak_device_bytes is torch.cuda.max_memory_allocated; --compile wraps the
model in torch.compile. The batch is random (seed 0) with the data's shapes (the
bundled emoji data: 32x32x3 images, captions of 24 tokens, vocab 3840, 9
groups; vit-ref gets 10 classes as ampc's bench): speed does not depend on the
values. --dump FILE writes the first step's activations, activation
gradients and parameter gradients (tools/python/ampc_dump.py) for `ampc
inspect`. --saved-bytes adds saved_activation_bytes (what autograd keeps
for the backward pass of one forward, counted once per storage, parameters
not counted) and saved_weight_cast_bytes (autocast's 16-bit weight copies
that linear saves), from one untimed forward before the steps: the
activation memory of the GPU comparison's goal, PyTorch's side. --check only prints the parameter counts (vit-ref 821,642; mm-tiny
2,113,931; mm-base 59,050,507; mm-large 187,746,059) and exits non-zero when they differ from
ampc's; with --ampc PATH it also asks that binary (`ampc memory --model M
--json`) instead of trusting the numbers written here.

Debian's python3-torch (1.13): run with /usr/bin/python3. Thread settings are
the caller's (bench/step/run.sh measures torch.set_num_threads 1 and 2 and
OMP_WAIT_POLICY, and uses the fastest).
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-5
MAX_LOG_SCALE = math.log(100.0)

CONFIGS = {
    # image side, patch, channels, dim, heads, mlp, depths (vision, text, fusion), embed
    "vit-ref": dict(img=32, patch=8, channels=3, dim=128, heads=4, mlp=512, v_depth=4, t_depth=0,
                    f_depth=0, embed=64, classes=10, image_only=True),
    "mm-tiny": dict(img=32, patch=4, channels=3, dim=128, heads=4, mlp=512, v_depth=4, t_depth=3,
                    f_depth=1, embed=64, classes=9, image_only=False),
    # the GPU-sized model
    "mm-base": dict(img=32, patch=4, channels=3, dim=512, heads=8, mlp=2048, v_depth=8, t_depth=8,
                    f_depth=2, embed=256, classes=9, image_only=False),
    # the top of the GPU-sized range (width 768, depth 12 per tower)
    "mm-large": dict(img=32, patch=4, channels=3, dim=768, heads=12, mlp=3072, v_depth=12,
                     t_depth=12, f_depth=2, embed=256, classes=9, image_only=False),
}
VOCAB, SEQ_LEN = 3840, 24
EXPECTED = {"vit-ref": 821642, "mm-tiny": 2113931, "mm-base": 59050507, "mm-large": 187746059}


class Block(nn.Module):
    """Pre-norm block: x1 = x + MHA(LN1(x)[, kv]); out = x1 + fc2(GELU(fc1(LN2(x1))))."""

    def __init__(self, d, heads, mlp, cross=False):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, eps=LN_EPS)
        attn = nn.MultiheadAttention(d, heads, batch_first=True)
        if cross:
            self.cross_attn = attn
        else:
            self.attn = attn
        self.cross = cross
        self.norm2 = nn.LayerNorm(d, eps=LN_EPS)
        self.mlp = nn.Sequential()
        self.mlp.add_module("fc1", nn.Linear(d, mlp))
        self.mlp.add_module("act", nn.GELU())
        self.mlp.add_module("fc2", nn.Linear(mlp, d))

    def forward(self, x, kv=None, key_padding_mask=None):
        h = self.norm1(x)
        if self.cross:
            a, _ = self.cross_attn(h, kv, kv, need_weights=False)
        else:
            a, _ = self.attn(h, h, h, key_padding_mask=key_padding_mask, need_weights=False)
        x = x + a
        return x + self.mlp(self.norm2(x))


class Vision(nn.Module):
    def __init__(self, c):
        super().__init__()
        d, np_ = c["dim"], (c["img"] // c["patch"]) ** 2
        self.patch_embed = nn.Conv2d(c["channels"], d, c["patch"], stride=c["patch"])
        self.cls_token = nn.Parameter(torch.randn(d) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(np_ + 1, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, c["heads"], c["mlp"]) for _ in range(c["v_depth"]))
        self.norm = nn.LayerNorm(d, eps=LN_EPS)

    def forward(self, images):
        pix = images.permute(0, 3, 1, 2).float() / 127.5 - 1.0
        x = self.patch_embed(pix).flatten(2).transpose(1, 2)
        cls = self.cls_token.reshape(1, 1, -1).expand(x.shape[0], 1, -1)
        x = torch.cat([cls, x], dim=1) + self.pos_embed[None]
        for b in self.blocks:
            x = b(x)
        return self.norm(x)


class Text(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["dim"]
        self.token_embed = nn.Embedding(VOCAB, d)
        self.pos_embed = nn.Embedding(SEQ_LEN, d)
        self.blocks = nn.ModuleList(Block(d, c["heads"], c["mlp"]) for _ in range(c["t_depth"]))
        self.norm = nn.LayerNorm(d, eps=LN_EPS)

    def forward(self, tokens):
        t = self.token_embed(tokens) + self.pos_embed.weight[None, :tokens.shape[1]]
        pad = tokens == 0
        for b in self.blocks:
            t = b(t, key_padding_mask=pad)
        return self.norm(t)


class Fusion(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["dim"]
        self.blocks = nn.ModuleList(
            Block(d, c["heads"], c["mlp"], cross=True) for _ in range(c["f_depth"]))
        self.norm = nn.LayerNorm(d, eps=LN_EPS)

    def forward(self, f, kv):
        for b in self.blocks:
            f = b(f, kv=kv)
        return self.norm(f)


class Heads(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["dim"]
        if not c["image_only"]:
            self.image_proj = nn.Linear(d, c["embed"], bias=False)
            self.text_proj = nn.Linear(d, c["embed"], bias=False)
            self.logit_scale = nn.Parameter(torch.tensor([math.log(1 / 0.07)]))
            self.itm = nn.Linear(d, 1)
        self.cls = nn.Linear(d, c["classes"])


def masked_mean(x, valid):
    m = valid.to(x.dtype)[..., None]
    return (x * m).sum(1) / m.sum(1)


class Model(nn.Module):
    """mm.c's composite loss (mm_reference.py's forward, vectorised)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.vision = Vision(c)
        if not c["image_only"]:
            self.text = Text(c)
            self.fusion = Fusion(c)
        self.heads = Heads(c)

    def forward(self, images, tokens, labels, weights=(1.0, 1.0, 1.0)):
        """The composite loss w_itc itc + w_itm itm + w_cls cls (weights)."""
        H = self.heads
        vfin = self.vision(images)
        vcls = vfin[:, 0]
        cls_loss = F.cross_entropy(H.cls(vcls).float(), labels)
        if self.c["image_only"]:
            return cls_loss
        b = images.shape[0]
        img_n = F.normalize(H.image_proj(vcls).float(), dim=-1, eps=1e-12)
        valid = tokens != 0
        tfin = self.text(tokens)
        txt_n = F.normalize(H.text_proj(masked_mean(tfin, valid)).float(), dim=-1, eps=1e-12)
        sim = img_n @ txt_n.t()
        logits = torch.clamp(H.logit_scale[0], max=MAX_LOG_SCALE).exp() * sim
        diag = torch.arange(b, device=images.device)
        itc = (F.cross_entropy(logits, diag) + F.cross_entropy(logits.t(), diag)) / 2
        with torch.no_grad():  # hard negatives: argmax over j != i (lowest j on ties)
            s = sim.detach().clone()
            s.fill_diagonal_(-float("inf"))
            neg = s.argmax(dim=1)
        img_idx = torch.cat([diag, diag])
        txt_idx = torch.cat([diag, neg])
        ffin = self.fusion(tfin[txt_idx], vfin[img_idx])
        itm_logit = H.itm(masked_mean(ffin, valid[txt_idx]))[:, 0].float()
        target = torch.cat([torch.ones(b, device=images.device),
                            torch.zeros(b, device=images.device)])
        itm = F.binary_cross_entropy_with_logits(itm_logit, target)
        return weights[0] * itc + weights[1] * itm + weights[2] * cls_loss


def no_decay(name, p):
    return p.ndim <= 1 or any(k in name for k in ("pos_embed", "token_embed", "cls_token"))


VIEW_OR_CAST = {"ToCopyBackward0", "SplitBackward0", "SplitWithSizesBackward0",
                "UnbindBackward0", "SliceBackward0", "SelectBackward0", "ViewBackward0",
                "UnsafeViewBackward0", "ReshapeAliasBackward0", "TBackward0",
                "TransposeBackward0", "PermuteBackward0", "ExpandBackward0",
                "UnsqueezeBackward0", "SqueezeBackward0", "SqueezeBackward1",
                "AsStridedBackward0", "CloneBackward0"}


def from_parameter(t):
    """t is a copy or view of a parameter (autocast's cast of a weight, a
    chunk of it): its autograd history is only casts and views back to a
    leaf's AccumulateGrad"""
    fn = t.grad_fn
    for _ in range(8):
        if fn is None:
            return False
        if type(fn).__name__ == "AccumulateGrad":
            return True
        if type(fn).__name__ not in VIEW_OR_CAST:
            return False
        nxt = [f for f, _ in fn.next_functions if f is not None]
        if len(nxt) != 1:
            return False
        fn = nxt[0]
    return False


def saved_bytes(model, images, tokens, labels, mode, device):
    """What autograd keeps for the backward pass of one forward (the
    activation memory): every tensor the forward saves, through
    torch.autograd.graph.saved_tensors_hooks, counted once per storage (views
    share one). Parameters themselves are not counted; a saved copy or view
    of a parameter (autocast's 16-bit cast of a weight, which linear saves;
    nn.MultiheadAttention's chunks of its cast in_proj_weight: from_parameter)
    is counted apart as a weight cast. Returns (activation bytes, weight cast
    bytes)."""
    params = {p.data_ptr() for p in model.parameters()}
    seen, act, cast = set(), 0, 0

    def pack(t):
        nonlocal act, cast
        st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        key = st.data_ptr()
        if key not in seen and key not in params:
            seen.add(key)
            if from_parameter(t):
                cast += st.nbytes()
            else:
                act += st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if mode in ("bf16", "fp16"):
            dt = torch.bfloat16 if mode == "bf16" else torch.float16
            with torch.autocast(device, dtype=dt):
                loss = model(images, tokens, labels)
        else:
            loss = model(images, tokens, labels)
    del loss
    return act, cast


def run(a, name, mode):
    """one model in one mode: warmup + steps training steps; the JSON object"""
    torch.manual_seed(0)
    c = dict(CONFIGS[name])
    if a.dim > 0:
        c["dim"], c["mlp"] = a.dim, 4 * a.dim
    dev = torch.device(a.device)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = Model(c).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    named = list(model.named_parameters())
    opt = torch.optim.AdamW(
        [{"params": [p for n, p in named if not no_decay(n, p)], "weight_decay": 0.01},
         {"params": [p for n, p in named if no_decay(n, p)], "weight_decay": 0.0}],
        lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    g = torch.Generator().manual_seed(0)
    B = a.batch
    images = torch.randint(0, 256, (B, c["img"], c["img"], c["channels"]), generator=g,
                           dtype=torch.uint8)
    lengths = torch.randint(1, SEQ_LEN + 1, (B, 1), generator=g)
    tokens = torch.randint(1, VOCAB, (B, SEQ_LEN), generator=g)
    tokens = tokens * (torch.arange(SEQ_LEN)[None] < lengths)
    labels = torch.randint(0, c["classes"], (B,), generator=g)
    images, tokens, labels = images.to(dev), tokens.to(dev), labels.to(dev)
    scaler = None
    if mode == "fp16":  # torch.amp.GradScaler("cuda") where it exists (torch >= 2.3)
        scaler = (torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler")
                  else torch.cuda.amp.GradScaler())
    saved = saved_bytes(model, images, tokens, labels, mode, a.device) if a.saved_bytes else None
    model.zero_grad(set_to_none=True)
    step_model = torch.compile(model) if a.compile else model
    if a.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    ms = []
    loss = None
    dumper = None
    if a.dump:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "tools", "python"))
        import ampc_dump
        dumper = ampc_dump.StepDump(model, a.dump)
    for s in range(-a.warmup, a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if dumper:
            dumper.__enter__()
        if mode in ("bf16", "fp16"):
            dt = torch.bfloat16 if mode == "bf16" else torch.float16
            with torch.autocast(a.device, dtype=dt):
                loss = step_model(images, tokens, labels)
        else:
            loss = step_model(images, tokens, labels)
        if scaler:
            scaler.scale(loss).backward()
        else:
            loss.backward()
        if dumper:
            dumper.__exit__(None, None, None)
            dumper = None
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        if a.device == "cuda":
            torch.cuda.synchronize()
        if s >= 0:
            ms.append((time.perf_counter() - t0) * 1e3)
    names = {"fp32": "torch-fp32", "bf16": "torch-bf16-autocast",
             "fp16": "torch-fp16-autocast-gradscaler"}
    out = {"model": name,
           "precision": names[mode] + ("-compile" if a.compile else ""),
           "device": a.device,
           "peak_device_bytes": torch.cuda.max_memory_allocated() if a.device == "cuda" else None,
           "batch": B, "threads": torch.get_num_threads(),
           "ms_per_step_median": statistics.median(ms),
           "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
           "ms_steps": ms, "steps": a.steps, "warmup": a.warmup, "dim": c["dim"],
           "parameters": nparams, "final_loss": float(loss), "torch": torch.__version__}
    if saved:
        out["saved_activation_bytes"], out["saved_weight_cast_bytes"] = saved
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="vit-ref",
                    help="one of %s, or a comma-separated list (one JSON line each, one "
                         "process)" % ", ".join(sorted(CONFIGS)))
    ap.add_argument("--mode", default="fp32",
                    help="fp32; bf16: autocast bfloat16; fp16: autocast float16 + GradScaler; "
                         "or a comma-separated list")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="cuda: GPU 0, TF32 off (the 32-true baseline), a synchronize per step, "
                         "peak memory from torch.cuda.max_memory_allocated")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: as is)")
    ap.add_argument("--dim", type=int, default=0, help="override the width (MLP = 4 dim)")
    ap.add_argument("--check", action="store_true", help="parameter counts only")
    ap.add_argument("--ampc", metavar="PATH", help="with --check: the ampc binary to ask")
    ap.add_argument("--saved-bytes", action="store_true",
                    help="first, one untimed forward counting what autograd saves for the "
                         "backward pass: saved_activation_bytes, saved_weight_cast_bytes")
    ap.add_argument("--dump", metavar="FILE",
                    help="write the first step's activations and gradients to FILE with "
                         "tools/python/ampc_dump.py (for ampc inspect)")
    a = ap.parse_args(argv[1:])
    for m in a.model.split(","):
        if m not in CONFIGS:
            ap.error("--model: unknown model '%s' (%s)" % (m, ", ".join(sorted(CONFIGS))))
    for m in a.mode.split(","):
        if m not in ("fp32", "bf16", "fp16"):
            ap.error("--mode: unknown mode '%s' (fp32, bf16, fp16)" % m)
    if a.dump and ("," in a.model or "," in a.mode):
        ap.error("--dump takes one model and one mode (it writes one file)")
    if "fp16" in a.mode.split(",") and a.device != "cuda":
        ap.error("--mode fp16 (autocast float16 + GradScaler) needs --device cuda")
    if a.check:
        ok = True
        for name in sorted(CONFIGS):
            n = sum(p.numel() for p in Model(CONFIGS[name]).parameters())
            want = EXPECTED[name]
            if a.ampc:
                import subprocess
                out = subprocess.run([a.ampc, "memory", "--model", name, "--classes",
                                      str(CONFIGS[name]["classes"]), "--json"],
                                     check=True, capture_output=True, text=True).stdout
                want = json.loads(out)["params"]
                ok = ok and want == EXPECTED[name]
            print(f"{name}: {n} parameters (ampc: {want})")
            ok = ok and n == want
        return 0 if ok else 1
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    for name in a.model.split(","):
        for mode in a.mode.split(","):
            print(json.dumps(run(a, name, mode)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
