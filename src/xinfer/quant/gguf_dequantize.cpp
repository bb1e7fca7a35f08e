// Float dequantization of every GGUF block type, written from the block layouts of ggml's ggml-common.h
// (the format's definition); tests/python/test_quant_reference.py checks it against the `gguf` package.
#include <cstring>
#include <string>

#include "xinfer/core/dtype.h"
#include "xinfer/quant/gguf_types.h"

namespace xinfer::quant {

void gguf_k_scale_min(int j, const uint8_t* packed, int* sc, int* m) {
  if (j < 4) {
    *sc = packed[j] & 63;
    *m = packed[j + 4] & 63;
  } else {
    *sc = (packed[j + 4] & 15) | ((packed[j - 4] >> 6) << 4);
    *m = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

namespace {

// dst[32] from one block of each 32-element type.
void dq_q4_0(const uint8_t* b, float* y) {
  const float d = gguf_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 15) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}
void dq_q4_1(const uint8_t* b, float* y) {
  const float d = gguf_f16(b), m = gguf_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 15) + m;
    y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}
void dq_q5_0(const uint8_t* b, float* y) {
  const float d = gguf_f16(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
    y[j] = d * static_cast<float>(((qs[j] & 15) | h0) - 16);
    y[j + 16] = d * static_cast<float>(((qs[j] >> 4) | h1) - 16);
  }
}
void dq_q5_1(const uint8_t* b, float* y) {
  const float d = gguf_f16(b), m = gguf_f16(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
    y[j] = d * static_cast<float>((qs[j] & 15) | h0) + m;
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) | h1) + m;
  }
}
void dq_q8_0(const uint8_t* b, float* y) {
  const float d = gguf_f16(b);
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(qs[j]);
}
void dq_q8_1(const uint8_t* b, float* y) {
  const float d = gguf_f16(b);
  const auto* qs = reinterpret_cast<const int8_t*>(b + 4);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(qs[j]);
}

// dst[256] from one super-block of each K type.
void dq_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = gguf_f16(b + 80), dmin = gguf_f16(b + 82);
  int is = 0;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half_idx = 0; half_idx < 2; ++half_idx) {
        const uint8_t sc = scales[is++];
        const float dl = d * static_cast<float>(sc & 15), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * half_idx] >> shift) & 3) - ml;
      }
    }
    q += 32;
  }
}
void dq_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* packed = b + 96;
  const float d = gguf_f16(b + 108);
  // 16 6-bit scales: low 4 bits in packed[0..7] (two per byte), high 2 bits in packed[8..11].
  int8_t scales[16];
  for (int j = 0; j < 16; ++j) {
    const int low = (j < 8) ? (packed[j] & 15) : (packed[j - 8] >> 4);
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    scales[j] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half_idx = 0; half_idx < 2; ++half_idx) {
        const float dl = d * static_cast<float>(scales[is++]);
        for (int l = 0; l < 16; ++l) {
          const int i = l + 16 * half_idx;
          const int v = ((q[i] >> shift) & 3) - ((hm[i] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
      m = static_cast<uint8_t>(m << 1);
    }
    q += 32;
  }
}
void dq_q4_k(const uint8_t* b, float* y) {
  const float d = gguf_f16(b), dmin = gguf_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    int sc, m;
    gguf_k_scale_min(is, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    gguf_k_scale_min(is + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 15) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}
void dq_q5_k(const uint8_t* b, float* y) {
  const float d = gguf_f16(b), dmin = gguf_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32) {
    int sc, m;
    gguf_k_scale_min(is, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    gguf_k_scale_min(is + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 15) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}
void dq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = gguf_f16(b + 208);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}
void dq_q8_k(const uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, 4);
  const auto* qs = reinterpret_cast<const int8_t*>(b + 4);
  for (int j = 0; j < 256; ++j) y[j] = d * static_cast<float>(qs[j]);
}

}  // namespace

Status dequantize_gguf(GgufType t, const void* src, int64_t n, float* dst) {
  XI_ASSIGN_OR_RETURN(const size_t row_bytes, gguf_row_bytes(t, n));
  (void)row_bytes;
  const auto* p = static_cast<const uint8_t*>(src);
  switch (t) {
    case GgufType::kF32:
      std::memcpy(dst, p, static_cast<size_t>(n) * 4);
      return Status::ok_status();
    case GgufType::kF16:
      convert_to_f32(DType::kF16, p, dst, static_cast<size_t>(n));
      return Status::ok_status();
    case GgufType::kBF16:
      convert_to_f32(DType::kBF16, p, dst, static_cast<size_t>(n));
      return Status::ok_status();
    default:
      break;
  }
  void (*block_fn)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case GgufType::kQ4_0:
      block_fn = dq_q4_0;
      break;
    case GgufType::kQ4_1:
      block_fn = dq_q4_1;
      break;
    case GgufType::kQ5_0:
      block_fn = dq_q5_0;
      break;
    case GgufType::kQ5_1:
      block_fn = dq_q5_1;
      break;
    case GgufType::kQ8_0:
      block_fn = dq_q8_0;
      break;
    case GgufType::kQ8_1:
      block_fn = dq_q8_1;
      break;
    case GgufType::kQ2_K:
      block_fn = dq_q2_k;
      break;
    case GgufType::kQ3_K:
      block_fn = dq_q3_k;
      break;
    case GgufType::kQ4_K:
      block_fn = dq_q4_k;
      break;
    case GgufType::kQ5_K:
      block_fn = dq_q5_k;
      break;
    case GgufType::kQ6_K:
      block_fn = dq_q6_k;
      break;
    case GgufType::kQ8_K:
      block_fn = dq_q8_k;
      break;
    default:
      return unimplemented(std::string("dequantize_gguf: type ") + gguf_type_name(t));
  }
  const int64_t be = gguf_block_elems(t), bb = gguf_block_bytes(t);
  for (int64_t i = 0; i < n / be; ++i) block_fn(p + i * bb, dst + i * be);
  return Status::ok_status();
}

}  // namespace xinfer::quant
