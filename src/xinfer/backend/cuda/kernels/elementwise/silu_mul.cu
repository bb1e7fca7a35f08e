#include "xinfer/backend/cuda/kernels/elementwise/silu_mul.h"

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/elementwise/silu.cuh"
#include "xinfer/backend/cuda/kernels/pdl.cuh"
#include "xinfer/backend/cuda/kernels/quant/activation_quant.cuh"

namespace xinfer::cuda {
namespace {

// SwiGLU of 8 bf16 gate / up values (one 16-byte vector each; f32 math, bf16 out, two values per conversion).
__device__ __forceinline__ uint4 swiglu8(const uint4& gv, const uint4& uv) {
  uint4 ov;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t g = (&gv.x)[j], u = (&uv.x)[j];
    (&ov.x)[j] = act_quant::bf16x2_bits(silu_mul_f32(act_quant::bf16_lo(g), act_quant::bf16_lo(u)),
                                        silu_mul_f32(act_quant::bf16_hi(g), act_quant::bf16_hi(u)));
  }
  return ov;
}

// The same, amax taking max |out| of the f32 values before their rounding (the caller rounds the row's max:
// act_quant::bf16_round; the max of the bf16 outputs, one instruction per value less).
__device__ __forceinline__ uint4 swiglu8(const uint4& gv, const uint4& uv, float& amax) {
  uint4 ov;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t g = (&gv.x)[j], u = (&uv.x)[j];
    const float lo = silu_mul_f32(act_quant::bf16_lo(g), act_quant::bf16_lo(u));
    const float hi = silu_mul_f32(act_quant::bf16_hi(g), act_quant::bf16_hi(u));
    amax = fmaxf(amax, fmaxf(fabsf(lo), fabsf(hi)));
    (&ov.x)[j] = act_quant::bf16x2_bits(lo, hi);
  }
  return ov;
}

// A quantized row's scale (static, or the CTA's max / the format's max), stored by thread 0. amax: this
// thread's max |out| before the bf16 rounding (swiglu8).
template <RowQuant kQuant, int kThreads>
__device__ __forceinline__ float row_scale(const SiluMulArgs& a, int64_t r, float amax, float* red) {
  constexpr float kMax = kQuant == RowQuant::kFp8 ? act_quant::kFp8Max : act_quant::kInt8Max;
  const float scale = a.q_input_scale != nullptr
                          ? __ldg(a.q_input_scale)
                          : act_quant::bf16_round(act_quant::cta_max<kThreads>(amax, red)) / kMax;
  if (threadIdx.x == 0) a.q_scales[r] = scale;
  return scale;
}

template <int kVec>
__global__ void silu_mul_kernel(SiluMulArgs a) {
  pdl_release();  // the next kernel may launch now: it waits for this one's results itself
  pdl_wait();     // first access: earlier kernels in the stream may still be running (pdl.cuh)
  const int64_t chunks_per_row = a.inter / kVec;
  const int64_t total = chunks_per_row * a.rows;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < total;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = c / chunks_per_row, i = (c % chunks_per_row) * kVec;
    const __nv_bfloat16* g = a.gate_up + r * 2 * a.inter + i;
    const __nv_bfloat16* u = g + a.inter;
    __nv_bfloat16* o = a.out + r * a.inter + i;
    if constexpr (kVec == 8) {
      *reinterpret_cast<uint4*>(o) =
          swiglu8(*reinterpret_cast<const uint4*>(g), *reinterpret_cast<const uint4*>(u));
    } else {
      o[0] = __float2bfloat16(silu_mul_f32(__bfloat162float(g[0]), __bfloat162float(u[0])));
    }
  }
}

// The same with the row in registers (kVecs 16-byte vectors per thread at most, inter <= kThreads * kVecs *
// 8): every load of a thread is issued before its first SwiGLU (memory-level parallelism), the codes come
// from the registers (no read-back), and out is written only where given (nullptr: the codes alone). The same
// bf16 values and codes as silu_mul_quant_kernel (below).
template <RowQuant kQuant, int kThreads, int kVecs>
__global__ void __launch_bounds__(kThreads) silu_mul_quant_regs_kernel(SiluMulArgs a) {
  __shared__ float red[kThreads / 32];
  pdl_release();
  pdl_wait();
  const int64_t r = blockIdx.x;
  const uint4* g = reinterpret_cast<const uint4*>(a.gate_up + r * 2 * a.inter);
  const uint4* u = reinterpret_cast<const uint4*>(a.gate_up + r * 2 * a.inter + a.inter);
  const int vecs = a.inter / 8;
  uint4 gv[kVecs], uv[kVecs];
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const int i = static_cast<int>(threadIdx.x) + v * kThreads;
    if (i < vecs) {
      gv[v] = g[i];
      uv[v] = u[i];
    }
  }
  float amax = 0.0f;
#pragma unroll
  for (int v = 0; v < kVecs; ++v)
    if (static_cast<int>(threadIdx.x) + v * kThreads < vecs)
      gv[v] = swiglu8(gv[v], uv[v], amax);  // out in gv
  const float qinv = act_quant::inverse_scale(row_scale<kQuant, kThreads>(a, r, amax, red));
  uint2* q = reinterpret_cast<uint2*>(a.q + r * a.inter);
  uint4* o = a.out != nullptr ? reinterpret_cast<uint4*>(a.out + r * a.inter) : nullptr;
#pragma unroll
  for (int v = 0; v < kVecs; ++v) {
    const int i = static_cast<int>(threadIdx.x) + v * kThreads;
    if (i < vecs) {
      if (o != nullptr) o[i] = gv[v];
      q[i] = act_quant::codes8<kQuant == RowQuant::kFp8>(gv[v], qinv);
    }
  }
}

// One CTA per row: the row's bf16 SwiGLU into a row buffer, then, after the CTA's max where the scale is
// dynamic, its codes from that buffer; each thread reads back only what it wrote. kRowInSmem: the buffer is
// shared memory (inter * 2 bytes; out written too where given): gate / up stream through a few registers per
// thread, so a CTA holds 28 KB for an 8B row (against 57 KB of registers in silu_mul_quant_regs_kernel) and
// an SM keeps 6-7 rows in flight, not 3. Else the buffer is out itself (rows too long for either: the writes
// are read back from L1 / L2); kThreads 1024 for fewer rows than the GPU has SMs (a decode row of 14336 in
// one CTA of 256 took longer than silu_mul and the quantization kernel it replaces), 256 else.
template <RowQuant kQuant, int kThreads, bool kRowInSmem>
__global__ void __launch_bounds__(kThreads) silu_mul_quant_kernel(SiluMulArgs a) {
  extern __shared__ uint4 row_smem[];  // kRowInSmem: inter / 8 vectors
  __shared__ float red[kThreads / 32];
  pdl_release();
  pdl_wait();
  const int64_t r = blockIdx.x;
  const uint4* g = reinterpret_cast<const uint4*>(a.gate_up + r * 2 * a.inter);
  const uint4* u = reinterpret_cast<const uint4*>(a.gate_up + r * 2 * a.inter + a.inter);
  uint4* o = a.out != nullptr ? reinterpret_cast<uint4*>(a.out + r * a.inter) : nullptr;
  uint4* row = kRowInSmem ? row_smem : o;
  const int vecs = a.inter / 8;
  float amax = 0.0f;
#pragma unroll 4
  for (int i = static_cast<int>(threadIdx.x); i < vecs; i += kThreads) {
    const uint4 v = swiglu8(__ldg(g + i), __ldg(u + i), amax);
    row[i] = v;
    if (kRowInSmem && o != nullptr) o[i] = v;
  }
  const float qinv = act_quant::inverse_scale(row_scale<kQuant, kThreads>(a, r, amax, red));
  uint2* q = reinterpret_cast<uint2*>(a.q + r * a.inter);
#pragma unroll 4
  for (int i = static_cast<int>(threadIdx.x); i < vecs; i += kThreads)
    q[i] = act_quant::codes8<kQuant == RowQuant::kFp8>(row[i], qinv);
}

// Rows whose SwiGLU fits the default 48 KB of shared memory beside the kernel's static reduction buffer.
constexpr int kSmemMaxInter = (48 * 1024 - 1024) / 2;

// false (nothing launched) where a row does not fit the registers.
template <RowQuant kQuant, int kThreads>
bool launch_silu_mul_quant_regs(const SiluMulArgs& a, cudaStream_t stream) {
  const int per_thread = (a.inter / 8 + kThreads - 1) / kThreads;
  if (per_thread <= 2)
    launch_pdl(silu_mul_quant_regs_kernel<kQuant, kThreads, 2>, a.rows, kThreads, 0, stream, a);
  else if (per_thread <= 4)
    launch_pdl(silu_mul_quant_regs_kernel<kQuant, kThreads, 4>, a.rows, kThreads, 0, stream, a);
  else if (per_thread <= 8)
    launch_pdl(silu_mul_quant_regs_kernel<kQuant, kThreads, 8>, a.rows, kThreads, 0, stream, a);
  else
    return false;
  return true;
}

}  // namespace

bool silu_mul_codes_only_supported(int inter) { return inter % 8 == 0 && inter / 8 <= 256 * 8; }

void launch_silu_mul(const SiluMulArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  if (a.q_kind != RowQuant::kNone) {
    XI_CHECK(a.inter % 8 == 0 && a.q != nullptr && a.q_scales != nullptr && reinterpret_cast<uintptr_t>(a.q) % 8 == 0 &&
             reinterpret_cast<uintptr_t>(a.gate_up) % 16 == 0 && reinterpret_cast<uintptr_t>(a.out) % 16 == 0)
        << "silu_mul: a quantized copy needs inter % 8 == 0 (got " << a.inter << ") and aligned buffers";
    const bool wide = a.rows < 128;
    if (a.in_registers && !wide && a.inter <= kSmemMaxInter) {
      const size_t smem = static_cast<size_t>(a.inter) * 2;
      if (a.q_kind == RowQuant::kFp8)
        launch_pdl(silu_mul_quant_kernel<RowQuant::kFp8, 256, true>, a.rows, 256, smem, stream, a);
      else
        launch_pdl(silu_mul_quant_kernel<RowQuant::kInt8, 256, true>, a.rows, 256, smem, stream, a);
      return;
    }
    if (a.in_registers) {
      const bool launched = a.q_kind == RowQuant::kFp8
                                ? (wide ? launch_silu_mul_quant_regs<RowQuant::kFp8, 1024>(a, stream)
                                        : launch_silu_mul_quant_regs<RowQuant::kFp8, 256>(a, stream))
                                : (wide ? launch_silu_mul_quant_regs<RowQuant::kInt8, 1024>(a, stream)
                                        : launch_silu_mul_quant_regs<RowQuant::kInt8, 256>(a, stream));
      if (launched) return;
    }
    XI_CHECK(a.out != nullptr) << "silu_mul: codes alone (out == nullptr) need the row in registers (inter <= 16384), "
                               << "got inter " << a.inter;
    if (a.q_kind == RowQuant::kFp8)
      wide ? launch_pdl(silu_mul_quant_kernel<RowQuant::kFp8, 1024, false>, a.rows, 1024, 0, stream, a)
           : launch_pdl(silu_mul_quant_kernel<RowQuant::kFp8, 256, false>, a.rows, 256, 0, stream, a);
    else
      wide ? launch_pdl(silu_mul_quant_kernel<RowQuant::kInt8, 1024, false>, a.rows, 1024, 0, stream, a)
           : launch_pdl(silu_mul_quant_kernel<RowQuant::kInt8, 256, false>, a.rows, 256, 0, stream, a);
    return;
  }
  const int vec = a.inter % 8 == 0 ? 8 : 1;
  const int64_t work = static_cast<int64_t>(a.rows) * a.inter / vec;
  const int blocks = static_cast<int>(std::min<int64_t>((work + 255) / 256, 132 * 16));
  if (vec == 8)
    launch_pdl(silu_mul_kernel<8>, blocks, 256, 0, stream, a);
  else
    launch_pdl(silu_mul_kernel<1>, blocks, 256, 0, stream, a);
}

}  // namespace xinfer::cuda
