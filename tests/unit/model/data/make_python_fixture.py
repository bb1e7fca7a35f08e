"""Writes python_written.safetensors with the official `safetensors` package (pip), so that the C++ reader
is tested against a file it did not write. Run from this directory: python3 make_python_fixture.py

Contents (values chosen to be exact in every dtype):
  "a.f32"  F32  [2, 3]  = 0.5 * arange(6) - 1          -> -1, -0.5, 0, 0.5, 1, 1.5
  "b.bf16" BF16 [3]     = [1, -2, 0.15625]              (bits 0x3f80, 0xc000, 0x3e20)
  "c.f16"  F16  [2, 2]  = [[65504, -0.25], [6.1035156e-05, 3]]
  "d.i64"  I64  [2]     = [-7, 1 << 40]
  "e.u8"   U8   [5]     = [0, 1, 2, 254, 255]
metadata {"format": "pt", "source": "make_python_fixture.py"}
"""
import numpy as np
from safetensors import serialize_file
from safetensors._safetensors_rust import TensorSpec

arrays = {
    "a.f32": ("float32", np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5 - 1),
    "b.bf16": ("bfloat16", np.array([0x3F80, 0xC000, 0x3E20], dtype=np.uint16)),
    "c.f16": ("float16", np.array([[65504, -0.25], [6.1035156e-05, 3]], dtype=np.float16)),
    "d.i64": ("int64", np.array([-7, 1 << 40], dtype=np.int64)),
    "e.u8": ("uint8", np.array([0, 1, 2, 254, 255], dtype=np.uint8)),
}
specs = {}
for name, (dtype, arr) in arrays.items():
    arr = np.ascontiguousarray(arr)
    specs[name] = TensorSpec(dtype=dtype, shape=arr.shape, data_ptr=arr.ctypes.data, data_len=arr.nbytes)
serialize_file(specs, "python_written.safetensors", metadata={"format": "pt", "source": "make_python_fixture.py"})
