// Minimal leveled logging to stderr: `XI_LOG(INFO) << "loaded " << n << " tensors";`
// One line per statement, prefixed with time, level and source location; thread-safe (a line is written
// with one write call). The level threshold comes from XINFER_LOG_LEVEL (debug|info|warn|error) or
// set_log_level().
#pragma once

#include <chrono>
#include <optional>
#include <sstream>
#include <string>

namespace xinfer {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kFatal = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
bool parse_log_level(const std::string& s, LogLevel* out);

namespace detail {

class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();  // writes the line; aborts for kFatal
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return os_; }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

// Lets `cond ? (void)0 : LogVoidify() & stream` type-check.
struct LogVoidify {
  void operator&(std::ostream&) {}
};

}  // namespace detail

// Host-time diagnosis at debug level (XINFER_LOG_LEVEL=debug): logs "<what> took X ms" when the scope took at
// least min_ms. Costs one level check when debug logging is off. The timer's own line names the scope's caller:
//   DebugTimer t("quant workspace grows", 0.1);  t.detail() << old_bytes << " -> " << new_bytes;
class DebugTimer {
 public:
  explicit DebugTimer(const char* what, double min_ms = 0.0, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE());
  ~DebugTimer();
  DebugTimer(const DebugTimer&) = delete;
  DebugTimer& operator=(const DebugTimer&) = delete;
  bool enabled() const { return enabled_; }
  // Appended to the line; made on first use (guard with enabled(): a disabled timer writes nothing).
  std::ostream& detail() {
    if (!detail_) detail_.emplace();
    return *detail_;
  }

 private:
  bool enabled_;
  const char* what_;
  double min_ms_;
  const char* file_;
  int line_;
  std::chrono::steady_clock::time_point start_;
  std::optional<std::ostringstream> detail_;  // none unless detail() was called: a disabled timer costs no stream
};

}  // namespace xinfer

#define XI_LOG_LEVEL_DEBUG ::xinfer::LogLevel::kDebug
#define XI_LOG_LEVEL_INFO ::xinfer::LogLevel::kInfo
#define XI_LOG_LEVEL_WARN ::xinfer::LogLevel::kWarn
#define XI_LOG_LEVEL_ERROR ::xinfer::LogLevel::kError

#define XI_LOG(level)                                                        \
  (XI_LOG_LEVEL_##level < ::xinfer::log_level())                             \
      ? (void)0                                                              \
      : ::xinfer::detail::LogVoidify() &                                     \
            ::xinfer::detail::LogMessage(XI_LOG_LEVEL_##level, __FILE__, __LINE__).stream()
