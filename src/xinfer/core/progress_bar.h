// A terminal progress bar for model loading and calibration, written to stderr:
//   Loading weights [#########...........]  45% 123/272 tensors  1.2 GB  0.8s
// It redraws at most every 100 ms and only when stderr is a terminal; otherwise it logs a single
// summary line at finish() so log files stay readable.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace xinfer {

class ProgressBar {
 public:
  // A disabled bar prints nothing at all.
  ProgressBar(std::string label, int64_t total, std::string unit, bool enabled = true);
  ~ProgressBar();
  void advance(int64_t n = 1, int64_t bytes = 0);
  void finish();

 private:
  void draw(bool final_draw);

  std::string label_;
  std::string unit_;
  int64_t total_;
  int64_t done_ = 0;
  int64_t bytes_ = 0;
  bool enabled_;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace xinfer
