#!/usr/bin/python3
"""ampc_dump: write one PyTorch training step's activations, activation
gradients and parameter gradients to a safetensors file, for `ampc inspect`
(which counts what binary16, bfloat16 or FP8 would do to each tensor and
which loss scales are safe).

    import ampc_dump                       # tools/python/ on sys.path
    with ampc_dump.StepDump(model, "step.safetensors"):
        loss = model(inputs)
        loss.backward()

    ampc inspect step.safetensors --select grad/ --select act_grad/ --scale auto
    ampc inspect step.safetensors --select act/ --format f16

Tensor names (ampc inspect groups them into branches by the part after the
kind, up to the first dot):
  act/MODULE        the output of every submodule's forward (a tuple output:
                    act/MODULE.0, act/MODULE.1, ...; a module called again:
                    MODULE#2, #3, ...)
  act_grad/MODULE   the gradient of the loss with respect to that output
  grad/PARAM        each parameter's .grad after backward
  param/PARAM       each parameter (params=True only)
Only floating-point tensors are written, each in its own dtype (F32, F64,
F16, BF16: an autocast run's activations stay 16-bit). Under a GradScaler
(scaler.scale(loss).backward()) the gradients carry the scale; pass it as
loss_scale= so that it is recorded in the metadata ("loss_scale"), and
inspect at scale 1.

Dependencies: torch; the `safetensors` package when installed, otherwise the
file is written by this module (the format: an 8-byte little-endian header
length, a JSON header, the raw little-endian bytes).
"""
import json
import struct

import torch

_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16",
           torch.bfloat16: "BF16"}


def _bytes_of(t):
    """The raw little-endian bytes of a CPU tensor (bfloat16 through int16,
    which numpy lacks)."""
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    """Write {name: tensor} (F32, F64, F16 or BF16 CPU tensors) to path. Uses
    safetensors.torch.save_file when the package is installed."""
    try:
        from safetensors.torch import save_file
    except ImportError:
        save_file = None
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    if save_file is not None:
        save_file(tensors, path, metadata=metadata)
        return
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = _bytes_of(t)
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class StepDump:
    """A context manager that records one step of `model` and writes it to
    `path` on exit (not when the block raised). Hooks: a forward hook on every
    submodule (not the root model itself) records its floating-point outputs and
    registers a tensor hook on each that requires grad; parameter gradients are
    read on exit. params=True also writes the parameters; loss_scale goes into
    the metadata."""

    def __init__(self, model, path, params=False, loss_scale=None):
        self.model, self.path, self.params = model, path, params
        self.loss_scale = loss_scale
        self.tensors, self.calls, self.handles = {}, {}, []

    def _name(self, module_name):
        n = self.calls.get(module_name, 0) + 1
        self.calls[module_name] = n
        return module_name if n == 1 else f"{module_name}#{n}"

    def _hook(self, module_name):
        def record(mod, inputs, output):
            del mod, inputs
            name = self._name(module_name)
            outs = output if isinstance(output, (tuple, list)) else (output,)
            single = len(outs) == 1
            for i, o in enumerate(outs):
                if not torch.is_tensor(o) or o.dtype not in _DTYPES:
                    continue
                key = name if single else f"{name}.{i}"
                self.tensors["act/" + key] = o.detach().clone()
                if o.requires_grad:
                    def save_grad(g, key=key):
                        if g is not None:
                            self.tensors["act_grad/" + key] = g.detach().clone()
                    o.register_hook(save_grad)
        return record

    def __enter__(self):
        for name, mod in self.model.named_modules():
            if name:  # not the root: its output is usually the loss, whose gradient is 1
                self.handles.append(mod.register_forward_hook(self._hook(name)))
        return self

    def __exit__(self, exc_type, exc, tb):
        for h in self.handles:
            h.remove()
        self.handles = []
        if exc_type is not None:
            return False
        for name, p in self.model.named_parameters():
            if p.grad is not None and p.grad.dtype in _DTYPES:
                self.tensors["grad/" + name] = p.grad.detach().clone()
            if self.params and p.dtype in _DTYPES:
                self.tensors["param/" + name] = p.detach().clone()
        meta = {"generator": "tools/python/ampc_dump.py", "torch": torch.__version__}
        if self.loss_scale is not None:
            meta["loss_scale"] = repr(float(self.loss_scale))
        write_safetensors(self.path, self.tensors, meta)
        return False
