// The pipelined schedule of the quantized GEMV (quant_linear.h QuantGemvConfig::stages > 0): each warp streams
// its steps through a private ring of `stages` shared-memory slots filled by cp.async, so stages - 1 steps of
// weights (16 bytes per lane and weight row, plus the step's scales and zero points) are in flight while the
// warp computes one. Nothing is held in registers for the loads in flight (the batch schedule in
// quant_gemv.cu keeps 4 steps in registers and has nothing in flight while it computes them: 40-48% of the
// int4 roofline on the H200, docs/PERF.md).
//
// A lane copies and later reads back only its own slot entries, so no barrier guards the ring (cp.async's
// wait_group makes a thread's own copies visible to it). Layout of one slot (1536 bytes):
//   w[2][32] uint4   the lane's 16 weight bytes of rows g, g + 8  (row-major by r: conflict-free 16-byte reads)
//   s[2][32] f32     their group's scale (kFp8: unused; scales apply per output in the epilogue)
//   z[2][32] u32     the aligned 4-byte word holding their zero point (zero-point weights only)
// Dynamic shared memory: red[2][kWarps][16][8] f32 (the per-tile reduction, double-buffered so one barrier
// per tile suffices) then kWarps rings of `stages` slots.
// kTok = 2 (QuantGemvConfig::tokens16, the W8A8 kinds): rows 8..15 of x as a second mma N tile on the same
// weight fragments, so 9..16 rows read the weights once; red[tt] then holds token tile tt's reduction (a
// thread writes a buffer again only after the barrier of the other one, which every thread reaches after its
// reads of the first: no double buffering across tiles needed).
//
// persistent: grid = min(tiles, SMs x ctas_per_sm) and a CTA loops over tiles blockIdx.x, + gridDim.x, ...;
// a warp's ring then runs on across its tiles (the next tile's weights are in flight during the reduction).

#include "xinfer/backend/cuda/cuda_check.h"
#include "xinfer/backend/cuda/kernels/cp_async.cuh"
#include "xinfer/backend/cuda/kernels/gemm/quant_gemv_math.cuh"
#include "xinfer/backend/cuda/kernels/pdl.cuh"
#include "xinfer/backend/cuda/kernels/device_launch.h"

namespace xinfer::cuda::quant_gemv {
namespace {

struct Slot {
  uint4 w[2][32];
  float s[2][32];
  uint32_t z[2][32];
};
// red[2][kWarps][16][8] f32, then ss_red[2][kWarps][8] f32 (kNormed: each warp's sums of squares of x rows).
constexpr size_t kRedFloats = 2 * kWarps * kTileRows * kTileTokens;
constexpr size_t kRedBytes = (kRedFloats + 2 * kWarps * kTileTokens) * sizeof(float);

size_t smem_bytes(int stages) { return kRedBytes + static_cast<size_t>(kWarps) * stages * sizeof(Slot); }

// A warp's position in its flattened sequence of (tile, step): tile index ti among the CTA's tiles, step u
// of the warp's per_tile steps of that tile.
struct Cursor {
  int ti = 0, u = 0;
  __device__ void next(int per_tile) {
    if (++u == per_tile) {
      u = 0;
      ++ti;
    }
  }
};

// Queues the copies of step (tile, warp + u * kWarps) into `slot`.
template <Kind kKind>
__device__ __forceinline__ void issue(const Params& p, Slot& slot, int tile, int step, int lane) {
  using G = Geometry<kKind>;
  const int g = lane / 4, t = lane % 4;
  const int col = lane_col<kKind>(step, t);
  const bool in_k = col < p.k;
  const int gi = lane_group<kKind>(p, step, col);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = tile_row(p, tile, g, r);
    const uint8_t* wrow = p.w + static_cast<size_t>(row) * G::row_bytes(p.k);
    cp_async_16_stream(smem_u32(&slot.w[r][lane]), in_k ? wrow + (kKind == Kind::kInt4 ? col / 2 : col) : wrow, in_k);
    if constexpr (!is_w8a8(kKind)) {
      const size_t si = static_cast<size_t>(row) * p.G + gi;
      cp_async_4(smem_u32(&slot.s[r][lane]), p.scales + si, 4);
      if (p.zeros) {
        const size_t word = si & ~size_t{3}, total = static_cast<size_t>(p.n) * p.G;
        cp_async_4(smem_u32(&slot.z[r][lane]), p.zeros + word, static_cast<int>(min(size_t{4}, total - word)));
      }
    }
  }
}

// grid: tiles (or fewer, persistent) CTAs of 8 warps; dynamic shared memory smem_bytes(kStages).
template <Kind kKind, bool kFold, int kStages, int kMinBlocks, bool kNormed, int kTok = 1>
__global__ void __launch_bounds__(kThreads, kMinBlocks) quant_gemv_pipelined_kernel(Params p) {
  using G = Geometry<kKind>;
  static_assert(!kNormed || !is_w8a8(kKind), "the norm folds into bf16 x only");
  static_assert(kTok == 1 || !kNormed, "two token tiles: no norm");
  extern __shared__ __align__(16) unsigned char smem[];
  auto* red = reinterpret_cast<float(*)[kWarps][kTileRows][kTileTokens]>(smem);  // [2][kWarps][16][8]
  auto* ss_red = reinterpret_cast<float(*)[kWarps][kTileTokens]>(smem + kRedFloats * sizeof(float));  // [2][kWarps][8]
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;
  Slot* ring = reinterpret_cast<Slot*>(smem + kRedBytes) + warp * kStages;

  const int steps = (p.k + G::kStep - 1) / G::kStep;
  const int per_tile = warp < steps ? (steps - warp + kWarps - 1) / kWarps : 0;  // this warp's steps per tile
  const int tiles = tile_count(p.n, p.swiglu_out != nullptr);
  const int cta = static_cast<int>(blockIdx.x), ctas = static_cast<int>(gridDim.x);
  const int my_tiles = cta < tiles ? (tiles - 1 - cta) / ctas + 1 : 0;
  const int total = per_tile * my_tiles;  // this warp's steps over all its tiles

  // Weights, scales and zero points never depend on earlier kernels: the first stages - 1 steps are queued
  // before pdl_wait(); x only after it.
  Cursor in;
  int issued = 0;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (issued < total) {
      issue<kKind>(p, ring[issued % kStages], cta + in.ti * ctas, warp + in.u * kWarps, lane);
      in.next(per_tile);
      ++issued;
    }
    cp_async_commit();
  }
  pdl_release();
  pdl_wait();

  int j = 0;  // this warp's next step to compute (flattened)
  for (int ti = 0; ti < my_tiles; ++ti) {
    const int tile = cta + ti * ctas;
    float acc[kTok][4] = {};
    float ss = 0.f;  // kNormed: sum of squares of x row g over this lane's columns
    for (int u = 0; u < per_tile; ++u, ++j) {
      if (issued < total) {
        issue<kKind>(p, ring[issued % kStages], cta + in.ti * ctas, warp + in.u * kWarps, lane);
        in.next(per_tile);
        ++issued;
      }
      cp_async_commit();
      const int step = warp + u * kWarps;
      uint4 xv[kTok][4];
#pragma unroll
      for (int tt = 0; tt < kTok; ++tt)
        load_x_step<kKind>(p, step, g + 8 * tt, t, xv[tt]);  // L1 / L2: requested before the wait below
      if constexpr (kNormed) normalize_x_step<kKind>(p, step, t, xv[0], ss);
      cp_async_wait<kStages - 1>();            // step j's copies (this lane's) have landed
      const Slot& sl = ring[j % kStages];
      StepLoad l;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        l.w[r] = sl.w[r][lane];
        if constexpr (!is_w8a8(kKind)) {
          l.s[r] = sl.s[r][lane];
          if (p.zeros) {
            const int gi = lane_group<kKind>(p, step, lane_col<kKind>(step, t));
            const size_t si = static_cast<size_t>(tile_row(p, tile, g, r)) * p.G + gi;
            l.z[r] = static_cast<int>((sl.z[r][lane] >> (8 * (si & 3))) & 0xffu);
          } else {
            l.z[r] = p.sym_zero;
          }
        }
      }
      compute_step<kKind, kFold, kTok>(p, l, xv, acc);
    }
    // C fragment: acc[tt][0], acc[tt][1] = (row g, tokens 8 tt + 2t, + 1); acc[tt][2], acc[tt][3] = (row g +
    // 8, same tokens).
#pragma unroll
    for (int tt = 0; tt < kTok; ++tt) {
      float(&rb)[kWarps][kTileRows][kTileTokens] = red[kTok == 1 ? ti & 1 : tt];
      finish_tile<kKind, kNormed>(p, rb, ss_red[ti & 1], tile, warp, lane, acc[tt], ss, 8 * tt);
    }
  }
  cp_async_wait<0>();
}

template <Kind kKind, bool kFold, int kStages, int kMinBlocks, bool kNormed, int kTok = 1>
void launch_typed(const Params& p, const QuantGemvConfig& c, cudaStream_t stream) {
  auto* kernel = quant_gemv_pipelined_kernel<kKind, kFold, kStages, kMinBlocks, kNormed, kTok>;
  const size_t smem = smem_bytes(kStages);
  raise_smem_limit(reinterpret_cast<const void*>(kernel), static_cast<int>(smem));  // per device
  const int tiles = tile_count(p.n, p.swiglu_out != nullptr);
  const int grid = c.persistent ? std::min(tiles, sm_count() * kMinBlocks) : tiles;
  if (c.pdl)
    launch_pdl(kernel, dim3(static_cast<unsigned>(grid)), dim3(kThreads), smem, stream, p);
  else
    kernel<<<grid, kThreads, smem, stream>>>(p);
  XI_CUDA_CHECK_LAUNCH();
}

// The normed variants (the fused chain's consumer) exist for the default configurations only, 4 x 3 and
// 8 x 2 (quant_gemv_default_config), to bound the instantiations.
template <Kind kKind, bool kFold>
void dispatch_stages(const Params& p, const QuantGemvConfig& c, cudaStream_t stream) {
  const bool normed = p.norm_weight != nullptr;
  if constexpr (!is_w8a8(kKind)) {
    if (normed && c.stages == 4 && c.ctas_per_sm == 3) return launch_typed<kKind, kFold, 4, 3, true>(p, c, stream);
    if (normed && c.stages == 8 && c.ctas_per_sm == 2) return launch_typed<kKind, kFold, 8, 2, true>(p, c, stream);
  }
  XI_CHECK(!normed) << "quant GEMV: the folded RMSNorm runs at stages x CTAs 4 x 3 or 8 x 2 only, not "
                    << to_string(c);
  if constexpr (is_w8a8(kKind)) {  // 16 rows of x per launch: the W8A8 kinds at 2 CTAs per SM
    if (c.tokens16 && p.m > kTileTokens) {
      if (c.stages == 4 && c.ctas_per_sm == 2)
        return launch_typed<kKind, kFold, 4, 2, false, 2>(p, c, stream);
      if (c.stages == 8 && c.ctas_per_sm == 2)
        return launch_typed<kKind, kFold, 8, 2, false, 2>(p, c, stream);
      XI_CHECK(false) << "quant GEMV: tokens16 runs at stages x CTAs 4 x 2 or 8 x 2, not " << to_string(c);
    }
  }
  if (c.stages == 4 && c.ctas_per_sm == 3) return launch_typed<kKind, kFold, 4, 3, false>(p, c, stream);
  if (c.stages == 4 && c.ctas_per_sm == 2) return launch_typed<kKind, kFold, 4, 2, false>(p, c, stream);
  if (c.stages == 8 && c.ctas_per_sm == 2) return launch_typed<kKind, kFold, 8, 2, false>(p, c, stream);
  XI_CHECK(false) << "quant GEMV: unsupported pipelined config: stages " << c.stages << ", ctas_per_sm "
                  << c.ctas_per_sm << " (4 x 3, 4 x 2, 8 x 2)";
}

}  // namespace

void launch_pipelined(Kind kind, bool fold, const Params& p, const QuantGemvConfig& c, cudaStream_t stream) {
  switch (kind) {
    case Kind::kInt4:
      return fold ? dispatch_stages<Kind::kInt4, true>(p, c, stream) : dispatch_stages<Kind::kInt4, false>(p, c, stream);
    case Kind::kInt8:
      return fold ? dispatch_stages<Kind::kInt8, true>(p, c, stream) : dispatch_stages<Kind::kInt8, false>(p, c, stream);
    case Kind::kFp8:
      return dispatch_stages<Kind::kFp8, false>(p, c, stream);
    case Kind::kW8A8Int8:
      return dispatch_stages<Kind::kW8A8Int8, false>(p, c, stream);
  }
}

}  // namespace xinfer::cuda::quant_gemv
