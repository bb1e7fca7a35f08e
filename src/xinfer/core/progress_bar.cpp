#include "xinfer/core/progress_bar.h"

#include <unistd.h>

#include <cstdio>

#include "xinfer/core/logging.h"

namespace xinfer {

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit, bool enabled)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::advance(int64_t n, int64_t bytes) {
  done_ += n;
  bytes_ += bytes;
  auto now = std::chrono::steady_clock::now();
  if (enabled_ && tty_ && now - last_draw_ > std::chrono::milliseconds(100)) {
    last_draw_ = now;
    draw(false);
  }
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  if (tty_) {
    draw(true);
    std::fputc('\n', stderr);
  } else {
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    XI_LOG(INFO) << label_ << ": " << done_ << '/' << total_ << ' ' << unit_ << ", "
                 << static_cast<double>(bytes_) / 1e6 << " MB in " << secs << " s";
  }
}

void ProgressBar::draw(bool final_draw) {
  constexpr int kWidth = 30;
  const double frac = total_ > 0 ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = 0;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "\r%s [%s] %3d%% %lld/%lld %s  %.1f MB  %.1fs%s", label_.c_str(), bar,
               static_cast<int>(frac * 100), static_cast<long long>(done_), static_cast<long long>(total_),
               unit_.c_str(), static_cast<double>(bytes_) / 1e6, secs, final_draw ? "" : " ");
  std::fflush(stderr);
}

}  // namespace xinfer
