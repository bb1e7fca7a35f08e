#include "xinfer/compress/layer_selection.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace xinfer::compress {
namespace {

Result<int> parse_int(const std::string& s, const std::string& spec) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    return invalid_argument("--quantized-layers '" + spec + "': '" + s + "' is not a layer count or index");
  return std::stoi(s);
}

}  // namespace

Result<LayerSelection> parse_layer_selection(const std::string& spec, int num_layers) {
  LayerSelection s;
  const std::string what = "--quantized-layers '" + spec + "'";
  if (spec == "all" || spec.empty()) return s;
  auto count = [&](const std::string& n) -> Result<int> {
    XI_ASSIGN_OR_RETURN(int v, parse_int(n, spec));
    if (v < 0 || v > num_layers)
      return invalid_argument(what + ": " + std::to_string(v) + " is outside 0.." + std::to_string(num_layers));
    return v;
  };
  if (spec.rfind("first:", 0) == 0 || spec.rfind("last:", 0) == 0) {
    const bool first = spec[0] == 'f';
    s.mode = first ? LayerSelection::Mode::kFirst : LayerSelection::Mode::kLast;
    XI_ASSIGN_OR_RETURN(s.count, count(spec.substr(first ? 6 : 5)));
    return s;
  }
  if (spec.find_first_of(",-") == std::string::npos) {
    s.mode = LayerSelection::Mode::kLeastSensitive;
    XI_ASSIGN_OR_RETURN(s.count, count(spec));
    return s;
  }
  s.mode = LayerSelection::Mode::kList;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t dash = item.find('-');
    XI_ASSIGN_OR_RETURN(int a, parse_int(item.substr(0, dash), spec));
    int b = a;
    if (dash != std::string::npos) {
      XI_ASSIGN_OR_RETURN(b, parse_int(item.substr(dash + 1), spec));
    }
    if (a > b || b >= num_layers)
      return invalid_argument(what + ": '" + item + "' is not a range of layers 0.." + std::to_string(num_layers - 1));
    for (int l = a; l <= b; ++l) s.layers.push_back(l);
  }
  std::sort(s.layers.begin(), s.layers.end());
  s.layers.erase(std::unique(s.layers.begin(), s.layers.end()), s.layers.end());
  return s;
}

std::vector<int> order_by_sensitivity(const std::vector<double>& sensitivity) {
  std::vector<int> order(sensitivity.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return sensitivity[static_cast<size_t>(a)] < sensitivity[static_cast<size_t>(b)]; });
  return order;
}

std::vector<bool> selection_mask(const LayerSelection& s, int num_layers, const std::vector<int>& order) {
  std::vector<bool> mask(static_cast<size_t>(num_layers), false);
  switch (s.mode) {
    case LayerSelection::Mode::kAll: mask.assign(static_cast<size_t>(num_layers), true); break;
    case LayerSelection::Mode::kFirst:
      for (int l = 0; l < s.count; ++l) mask[static_cast<size_t>(l)] = true;
      break;
    case LayerSelection::Mode::kLast:
      for (int l = num_layers - s.count; l < num_layers; ++l) mask[static_cast<size_t>(l)] = true;
      break;
    case LayerSelection::Mode::kList:
      for (int l : s.layers) mask[static_cast<size_t>(l)] = true;
      break;
    case LayerSelection::Mode::kLeastSensitive:
    case LayerSelection::Mode::kSearch:
      for (int i = 0; i < s.count && i < static_cast<int>(order.size()); ++i) mask[static_cast<size_t>(order[static_cast<size_t>(i)])] = true;
      break;
  }
  return mask;
}

}  // namespace xinfer::compress
