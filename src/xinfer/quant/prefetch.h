// Software prefetch of the weights a CPU GEMV / GEMM streams.
//
// A decode step reads every weight once, front to back, and the hardware prefetchers of some hosts keep such
// a stream far below the read bandwidth: on the 2-core Intel VM of session 33 the Q4_1 GEMV over SmolLM2's
// linears read 4.7 GB/s on one thread against 10.4 GB/s measured for a plain read, and ~2x more with the
// lines a few KB ahead prefetched (docs/PERF.md, session 33). So the kernels ask for the line
// kPrefetchAheadBytes ahead of what they read, and never past the end of the range their task reads: no
// bandwidth goes to another thread's rows or past the matrix, and no pointer past the allocation is formed (a
// prefetch itself is a hint and cannot fault).
#pragma once

#include <algorithm>
#include <cstdint>

namespace xinfer::quant {

// 2, 4, 8 and 16 KB gave the same decode speed within the run-to-run spread there (169-185 tok/s).
inline constexpr int64_t kPrefetchAheadBytes = 4096;
inline constexpr int64_t kCacheLineBytes = 64;

// The line `ahead` bytes past p, into every cache level, if it lies before end (p <= end: the stream's
// position and its end).
inline void prefetch_ahead(const uint8_t* p, int64_t ahead, const uint8_t* end) {
  if (end - p > ahead) __builtin_prefetch(p + ahead, 0, 3);
}

// The lines holding p + ahead, p + ahead + 64, .. below p + ahead + bytes, as far as they lie before end (an
// unaligned range's last partial line may be left to the hardware). Only addresses before end are formed.
inline void prefetch_lines_ahead(const uint8_t* p, int64_t ahead, int64_t bytes, const uint8_t* end) {
  const int64_t stop = std::min<int64_t>(end - p, ahead + bytes);
  for (int64_t o = ahead; o < stop; o += kCacheLineBytes) __builtin_prefetch(p + o, 0, 3);
}

// The start of a task that streams [begin, end) in order: its first kPrefetchAheadBytes, which its loop's
// prefetches (that far ahead) do not cover.
inline void prefetch_stream_start(const uint8_t* begin, const uint8_t* end) {
  prefetch_lines_ahead(begin, 0, kPrefetchAheadBytes, end);
}

// For a task of groups of weight rows worked a K chunk at a time ((group, chunk) in that order), one work
// item's bytes: rows [first_row, first_row + rows) counted from the task's first row at task_begin, bytes
// [offset, offset + bytes) of each, as far as they lie before end. Asked for one item ahead, a group's rows
// stream in pieces of at most rows x chunk bytes (17 KB for Q8_0 chunks of 64 blocks), not as one burst of
// the whole group, which for a long K would overrun L1 and the line-fill buffers.
inline void prefetch_group_chunk(const uint8_t* task_begin, int64_t first_row, int64_t rows,
                                 int64_t row_bytes, int64_t offset, int64_t bytes, const uint8_t* end) {
  for (int64_t r = 0; r < rows; ++r)
    prefetch_lines_ahead(task_begin, (first_row + r) * row_bytes + offset, bytes, end);
}

// For a task that streams rows of row_bytes in order up to end, at the start of the row at `row`: the row's
// worth of lines kPrefetchAheadBytes ahead (with prefetch_stream_start, every line is asked for once, that
// far ahead).
inline void prefetch_row_ahead(const uint8_t* row, int64_t row_bytes, const uint8_t* end) {
  prefetch_lines_ahead(row, kPrefetchAheadBytes, row_bytes, end);
}

}  // namespace xinfer::quant
