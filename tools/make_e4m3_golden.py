#!/usr/bin/env python3
"""Writes tests/golden/e4m3/e4m3_ml_dtypes.json: the OCP FP8 E4M3FN reference of ml_dtypes (float8_e4m3fn,
`pip install ml-dtypes`), for tests/unit/core/e4m3_reference_test.cpp (core/dtype.h's to_float / to_fp8_e4m3,
which the FP8 KV cache stores and reads with).

  decode: the f32 value of each of the 256 codes (null for the two NaN codes)
  encode: [x, code] pairs, code = ml_dtypes' round-to-nearest-even cast of clip(x, -448, 448) (the saturating
          cast the KV cache uses; ml_dtypes itself turns |x| > 464 into NaN): every finite code value, every
          midpoint between neighbouring values (ties go to the even code), one f32 ulp either side of each
          midpoint, signed zeros, values below half the smallest subnormal, and values past 448.
"""
import json
import pathlib

import ml_dtypes
import numpy as np

F8 = ml_dtypes.float8_e4m3fn


def main() -> None:
    codes = np.arange(256, dtype=np.uint8)
    values = codes.view(F8).astype(np.float32)
    decode = [None if np.isnan(v) else float(v) for v in values]
    finite = np.unique(values[~np.isnan(values)])  # sorted, -0 and +0 merge
    xs = [0.0, -0.0, 1e-30, -1e-30, 2.0**-10, -(2.0**-10), 448.0, 449.0, 463.9, 464.0, 1000.0, -1000.0, 1e30, -1e30]
    for a, b in zip(finite[:-1], finite[1:]):
        mid = np.float32((np.float64(a) + np.float64(b)) / 2)  # exact in f32
        xs += [float(a), float(mid), float(np.nextafter(mid, np.float32(-np.inf))),
               float(np.nextafter(mid, np.float32(np.inf)))]
    xs.append(float(finite[-1]))
    x32 = np.array(xs, dtype=np.float32)
    enc = np.clip(x32, -448.0, 448.0).astype(F8).view(np.uint8)
    encode = [[float(x), int(c)] for x, c in zip(x32, enc)]
    out = pathlib.Path(__file__).resolve().parent.parent / "tests/golden/e4m3/e4m3_ml_dtypes.json"
    out.write_text(json.dumps({"source": f"ml_dtypes {ml_dtypes.__version__} float8_e4m3fn", "decode": decode,
                               "encode": encode}) + "\n")
    print(f"wrote {out}: {len(decode)} codes, {len(encode)} encodings")


if __name__ == "__main__":
    main()
