#include "xinfer/core/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace xinfer {
namespace {

LogLevel initial_level() {
  LogLevel level = LogLevel::kInfo;
  if (const char* env = std::getenv("XINFER_LOG_LEVEL")) parse_log_level(env, &level);
  return level;
}

std::atomic<LogLevel>& level_ref() {
  static std::atomic<LogLevel> level{initial_level()};
  return level;
}

const char* level_tag(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "D";
    case LogLevel::kInfo: return "I";
    case LogLevel::kWarn: return "W";
    case LogLevel::kError: return "E";
    case LogLevel::kFatal: return "F";
  }
  return "?";
}

}  // namespace

void set_log_level(LogLevel level) { level_ref().store(level); }
LogLevel log_level() { return level_ref().load(std::memory_order_relaxed); }

bool parse_log_level(const std::string& s, LogLevel* out) {
  if (s == "debug") *out = LogLevel::kDebug;
  else if (s == "info") *out = LogLevel::kInfo;
  else if (s == "warn" || s == "warning") *out = LogLevel::kWarn;
  else if (s == "error") *out = LogLevel::kError;
  else return false;
  return true;
}

namespace detail {

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  const char* base = std::strrchr(file, '/');
  os_ << level_tag(level) << ' ' << buf << '.' << (ms < 100 ? (ms < 10 ? "00" : "0") : "") << ms << ' '
      << (base ? base + 1 : file) << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  os_ << '\n';
  const std::string s = os_.str();
  ssize_t r = ::write(STDERR_FILENO, s.data(), s.size());
  (void)r;
  if (level_ == LogLevel::kFatal) std::abort();
}

}  // namespace detail

DebugTimer::DebugTimer(const char* what, double min_ms, const char* file, int line)
    : enabled_(log_level() <= LogLevel::kDebug), what_(what), min_ms_(min_ms), file_(file), line_(line) {
  if (enabled_) start_ = std::chrono::steady_clock::now();
}

DebugTimer::~DebugTimer() {
  if (!enabled_) return;
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  if (ms < min_ms_) return;
  detail::LogMessage(LogLevel::kDebug, file_, line_).stream()
      << what_ << " took " << ms << " ms" << (detail_ && detail_->tellp() > 0 ? ": " + detail_->str() : "");
}

}  // namespace xinfer
