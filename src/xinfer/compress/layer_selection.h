// Which decoder layers `xinfer quantize` quantizes (improvement 1 of SmoothQuant: partial layers); the
// others stay dense (listed in the checkpoint's `ignore`).
//
//   all          every layer
//   first:N      layers 0 .. N-1           last:N   layers L-N .. L-1
//   N            the N least sensitive layers (sensitivity: held-out PPL increase when only that layer is
//                quantized; ties by index)
//   LIST         "0,3,5-9" (indices, ranges inclusive)
//   search       (--max-ppl-increase P) the largest N whose N least sensitive layers, quantized together,
//                raise the held-out PPL by at most P percent (binary search over N)
#pragma once

#include <string>
#include <vector>

#include "xinfer/core/status.h"

namespace xinfer::compress {

struct LayerSelection {
  enum class Mode { kAll, kFirst, kLast, kLeastSensitive, kList, kSearch };
  Mode mode = Mode::kAll;
  int count = 0;                // first / last / least sensitive
  std::vector<int> layers;      // list
  double max_ppl_increase = 0;  // search, percent
  bool needs_sensitivity() const { return mode == Mode::kLeastSensitive || mode == Mode::kSearch; }
};

// `spec` as above ("search" is made by the caller from --max-ppl-increase). INVALID_ARGUMENT naming the flag.
Result<LayerSelection> parse_layer_selection(const std::string& spec, int num_layers);

// Layer indices sorted by increasing sensitivity (ties: lower index first).
std::vector<int> order_by_sensitivity(const std::vector<double>& sensitivity);

// The mask for the modes that need no measurement (all, first, last, list), or for least-sensitive N given
// the order.
std::vector<bool> selection_mask(const LayerSelection& s, int num_layers, const std::vector<int>& order);

}  // namespace xinfer::compress
