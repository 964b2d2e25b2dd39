"""tests/scale_tensor.py SRC DST NAME FACTOR: copy the safetensors file SRC to
DST with the F32 tensor NAME multiplied by FACTOR (a weight blown up, as a
diverged run or a bad edit would leave it). Standard library only."""
import array
import json
import struct
import sys

src, dst, name, factor = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
b = bytearray(open(src, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
t = json.loads(b[8 : 8 + n])[name]
if t["dtype"] != "F32":
    sys.exit("%s: %s is %s, not F32" % (src, name, t["dtype"]))
lo, hi = (8 + n + o for o in t["data_offsets"])
a = array.array("f")
a.frombytes(bytes(b[lo:hi]))
for i in range(len(a)):
    a[i] *= factor
b[lo:hi] = a.tobytes()
open(dst, "wb").write(b)
