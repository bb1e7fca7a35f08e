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

// A task's work items of a grouped GEMV / GEMM, (group, K chunk) in that order: groups [g_begin, g_end) of
// group_rows weight rows of row_bytes each (n_rows in the matrix, so the last group may be short), K in
// chunks of chunk_blocks of its nb blocks. start() asks for the first item's bytes; after(g, b0), at item (g,
// b0), for the next item's. One item ahead, a group's rows stream in pieces of at most group_rows x chunk
// bytes (17 KB for Q8_0 chunks of 64 blocks), not as one burst of a whole group, which for a long K would
// overrun L1 and the line-fill buffers.
class GroupChunkPrefetch {
 public:
  GroupChunkPrefetch(const uint8_t* weight, int64_t row_bytes, int64_t n_rows, int64_t group_rows,
                     int64_t g_begin, int64_t g_end, int64_t nb, int64_t chunk_blocks)
      : begin_(weight + g_begin * group_rows * row_bytes),
        end_(weight + std::min(g_end * group_rows, n_rows) * row_bytes),
        row_bytes_(row_bytes),
        block_bytes_(nb > 0 ? row_bytes / nb : 0),
        group_rows_(group_rows),
        g_begin_(g_begin),
        g_end_(g_end),
        nb_(nb),
        chunk_blocks_(chunk_blocks) {}

  void start() const { item(g_begin_, 0); }
  void after(int64_t g, int64_t b0) const {
    if (b0 + chunk_blocks_ < nb_) {
      item(g, b0 + chunk_blocks_);
    } else if (g + 1 < g_end_) {
      item(g + 1, 0);
    }
  }

 private:
  void item(int64_t g, int64_t b0) const {
    const int64_t bytes = std::min(chunk_blocks_, nb_ - b0) * block_bytes_;
    for (int64_t r = 0; r < group_rows_; ++r)
      prefetch_lines_ahead(begin_, ((g - g_begin_) * group_rows_ + r) * row_bytes_ + b0 * block_bytes_, bytes,
                           end_);
  }

  const uint8_t* begin_;
  const uint8_t* end_;
  int64_t row_bytes_, block_bytes_, group_rows_, g_begin_, g_end_, nb_, chunk_blocks_;
};

// For a task that streams rows of row_bytes in order up to end, at the start of the row at `row`: the row's
// worth of lines kPrefetchAheadBytes ahead (with prefetch_stream_start, every line is asked for once, that
// far ahead).
inline void prefetch_row_ahead(const uint8_t* row, int64_t row_bytes, const uint8_t* end) {
  prefetch_lines_ahead(row, kPrefetchAheadBytes, row_bytes, end);
}

}  // namespace xinfer::quant
