// Runtime CPU feature detection for the quant kernels (internal to quant/). The AVX2 paths are compiled
// with __attribute__((target("avx2,fma,f16c"))) and only called when this returns true.
#pragma once

namespace xinfer::quant::detail {

inline bool cpu_has_avx2_fma() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has;
#else
  return false;
#endif
}

}  // namespace xinfer::quant::detail
