#!/usr/bin/env python3
"""Check a safetensors file written by `test_safetensors --write-check FILE`.

Usage: check_safetensors.py FILE

First, with the standard library only (struct + json), check the layout: an
8-byte little-endian header length N that fits in the file and is a multiple
of 8, a UTF-8 JSON object padded with spaces, entries with a known dtype, a
shape of non-negative integers and data_offsets matching it, tensors tiling
the data region without holes or overlaps, an optional "__metadata__" object
of strings, no duplicate keys. Then check the expected content: tensor
"check.f32" (F32, shape [2, 3], values 0.5 * i for i in 0..5, bit for bit)
and metadata "step" == "7".

Then, when the `safetensors` package can be imported, load the file with it
(safetensors.numpy, or safetensors.torch when numpy is missing) and compare
every tensor with the bytes read above. When the package is missing, say so
and exit 0: the stdlib check alone has passed.

Exit status: 0 when all checks pass, 1 otherwise (the reason on stderr).
"""

import json
import struct
import sys

DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
MAX_HEADER = 100_000_000


class CheckError(Exception):
    pass


def no_duplicates(pairs):
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise CheckError(f"duplicate JSON key {key!r}")
        obj[key] = value
    return obj


def is_uint(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def parse(raw):
    """Validate the layout; return (tensors, metadata), tensors a dict of
    name -> (dtype, shape, bytes)."""
    if len(raw) < 8:
        raise CheckError(f"file is {len(raw)} bytes, shorter than the 8-byte length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > len(raw) - 8 or n > MAX_HEADER:
        raise CheckError(f"header length {n} does not fit in the file ({len(raw)} bytes)")
    if n % 8 != 0:
        raise CheckError(f"header length {n} is not a multiple of 8")
    text = raw[8 : 8 + n].decode("utf-8")
    stripped = text.rstrip(" ")
    if not stripped.endswith("}"):
        raise CheckError("header is not a JSON object padded with spaces")
    header = json.loads(stripped, object_pairs_hook=no_duplicates)
    if not isinstance(header, dict):
        raise CheckError("header is not a JSON object")
    data = raw[8 + n :]

    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise CheckError("__metadata__ is not an object of strings")

    spans = []
    tensors = {}
    for name, entry in header.items():
        if not isinstance(entry, dict):
            raise CheckError(f"tensor {name!r}: entry is not an object")
        dtype = entry.get("dtype")
        if dtype not in DTYPE_SIZE:
            raise CheckError(f"tensor {name!r}: unknown dtype {dtype!r}")
        shape = entry.get("shape")
        if not isinstance(shape, list) or len(shape) > 8 or not all(is_uint(d) for d in shape):
            raise CheckError(f"tensor {name!r}: bad shape {shape!r}")
        offsets = entry.get("data_offsets")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(map(is_uint, offsets)):
            raise CheckError(f"tensor {name!r}: bad data_offsets {offsets!r}")
        numel = 1
        for d in shape:
            numel *= d
        nbytes = numel * DTYPE_SIZE[dtype]
        begin, end = offsets
        if end < begin or end - begin != nbytes or end > len(data):
            raise CheckError(
                f"tensor {name!r}: data_offsets {offsets} do not match shape {shape} "
                f"of {dtype} ({nbytes} bytes) in a {len(data)}-byte data region"
            )
        spans.append((begin, end, name))
        tensors[name] = (dtype, shape, data[begin:end])

    cursor = 0
    for begin, end, name in sorted(spans):
        if begin != cursor:
            raise CheckError(f"tensor {name!r}: starts at {begin}, expected {cursor} (hole/overlap)")
        cursor = end
    if cursor != len(data):
        raise CheckError(f"data bytes [{cursor}, {len(data)}) belong to no tensor")
    return tensors, meta


def check_content(tensors, meta):
    if "check.f32" not in tensors:
        raise CheckError("tensor 'check.f32' is missing")
    dtype, shape, blob = tensors["check.f32"]
    if dtype != "F32" or shape != [2, 3]:
        raise CheckError(f"check.f32 is {dtype} {shape}, expected F32 [2, 3]")
    want = struct.pack("<6f", *[0.5 * i for i in range(6)])
    if blob != want:
        raise CheckError(f"check.f32 bytes {blob.hex()} != expected {want.hex()}")
    if meta.get("step") != "7":
        raise CheckError(f"metadata step is {meta.get('step')!r}, expected '7'")


def check_with_library(path, tensors, meta):
    """Load with the safetensors package; return a note, or None if missing."""
    try:
        import safetensors  # noqa: F401
    except ImportError:
        return None
    try:
        from safetensors.numpy import load_file

        def as_bytes(a):
            return a.tobytes()

        how = "safetensors.numpy"
    except ImportError:
        from safetensors.torch import load_file

        def as_bytes(a):
            return a.contiguous().view(-1).view(__import__("torch").uint8).numpy().tobytes()

        how = "safetensors.torch"
    loaded = load_file(path)
    if set(loaded) != set(tensors):
        raise CheckError(f"{how} sees tensors {sorted(loaded)}, expected {sorted(tensors)}")
    for name, (dtype, shape, blob) in tensors.items():
        arr = loaded[name]
        if list(arr.shape) != shape:
            raise CheckError(f"{how}: {name} has shape {list(arr.shape)}, expected {shape}")
        if as_bytes(arr) != blob:
            raise CheckError(f"{how}: {name} bytes differ")
    values = [float(x) for x in loaded["check.f32"].reshape(-1).tolist()]
    if values != [0.5 * i for i in range(6)]:
        raise CheckError(f"{how}: check.f32 values {values}")
    from safetensors import safe_open

    with safe_open(path, framework="numpy" if how.endswith("numpy") else "pt") as f:
        if (f.metadata() or {}).get("step") != "7":
            raise CheckError(f"{how}: metadata {f.metadata()!r} lacks step = '7'")
    return how


def main(argv):
    if len(argv) != 2:
        print(f"usage: {argv[0]} FILE", file=sys.stderr)
        return 2
    path = argv[1]
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        tensors, meta = parse(raw)
        check_content(tensors, meta)
        how = check_with_library(path, tensors, meta)
    except (CheckError, ValueError, OSError) as e:
        print(f"{path}: FAIL: {e}", file=sys.stderr)
        return 1
    if how is None:
        print("safetensors package not installed: skipped the library load (stdlib check passed)")
    else:
        print(f"{path}: OK (stdlib check and {how} load, {len(tensors)} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
