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
  act/MODULE        the output of every submodule's forward (tuples, lists and
                    dicts, nested: act/MODULE:0, act/MODULE:1:h, ...; a module
                    called again: MODULE#2, #3, ...)
  act_grad/MODULE   the gradient of the loss with respect to that output (not
                    for in-place modules, whose output is their input: listed
                    in the metadata "inplace_modules", with a warning)
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
import warnings

import torch

_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16",
           torch.bfloat16: "BF16"}
# what write_safetensors also writes (ampc inspect skips them with --skip-other)
_ALL_DTYPES = {**_DTYPES, torch.int64: "I64", torch.int32: "I32", torch.int16: "I16",
               torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


def _leaves(x, key=""):
    """(key, tensor) for every tensor in a module's output: tuples and lists
    by position, dicts by key, nested, joined with ':' (module names use '.')"""
    if torch.is_tensor(x):
        yield key, x
    elif isinstance(x, (tuple, list)):
        for i, v in enumerate(x):
            yield from _leaves(v, f"{key}:{i}")
    elif isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, f"{key}:{k}")


def _bytes_of(t):
    """The raw little-endian bytes of a CPU tensor (bfloat16 through int16,
    which numpy lacks)."""
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    """Write {name: tensor} to path: floating-point (F32, F64, F16, BF16),
    integer (I64, I32, I16, I8, U8) and BOOL tensors, as contiguous CPU
    copies. Uses safetensors.torch.save_file when the package is installed."""
    try:
        from safetensors.torch import save_file
    except ImportError:
        save_file = None
    tensors = {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}
    for k, v in tensors.items():
        if v.dtype not in _ALL_DTYPES:
            raise TypeError(f"{path}: tensor {k!r} has dtype {v.dtype}, which the safetensors "
                            f"writer here does not take ({', '.join(_ALL_DTYPES.values())})")
    if save_file is not None:
        save_file(tensors, path, metadata=metadata)
        return
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = _bytes_of(t)
        header[name] = {"dtype": _ALL_DTYPES[t.dtype], "shape": list(t.shape),
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
        self.tensors, self.calls, self.handles, self.inplace = {}, {}, [], []

    def _name(self, module_name):
        n = self.calls.get(module_name, 0) + 1
        self.calls[module_name] = n
        return module_name if n == 1 else f"{module_name}#{n}"

    def _hook(self, module_name):
        def record(mod, inputs, output):
            del mod
            name = self._name(module_name)
            ins = [t for _, t in _leaves(inputs)]
            for sub, o in _leaves(output):
                if o.dtype not in _DTYPES:
                    continue
                key = name + sub
                self.tensors["act/" + key] = o.detach().clone()
                # an in-place module (ReLU(inplace=True)) returns its input: a
                # hook on it would see the gradient before the module, so its
                # act_grad is left out (the previous module's is right)
                if any(o is t for t in ins):
                    if name not in self.inplace:
                        self.inplace.append(name)
                    continue
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
        if self.inplace:
            meta["inplace_modules"] = ",".join(self.inplace)
            warnings.warn("ampc_dump: no act_grad for the in-place module(s) " +
                          ", ".join(self.inplace) + " (their output is their input)")
        if self.loss_scale is not None:
            meta["loss_scale"] = repr(float(self.loss_scale))
        write_safetensors(self.path, self.tensors, meta)
        return False
