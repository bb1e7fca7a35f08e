// Machine ceilings measured at run time, for benchmarks to print next to their figures:
//   memory bandwidth: a streaming read + write over a buffer far larger than the caches (bytes read
//   plus bytes written per second); compute: OpenBLAS sgemm on large square matrices (FLOP/s).
#pragma once

#include <cstddef>

namespace xinfer::bench {

struct HostCeilings {
  double bandwidth_bytes_per_s = 0;  // read + write
  double read_bandwidth_bytes_per_s = 0;  // read-only sum
  double sgemm_flops_per_s = 0;
};

// Measures both ceilings using `threads` threads (0 = all). Takes about a second.
HostCeilings measure_host_ceilings(int threads);

}  // namespace xinfer::bench
