// Status and Result<T>: the error channel for anything that can fail for reasons outside the program
// (files, user input, resources). Broken invariants use XI_CHECK (check.h) instead.
//
//   Result<Config> r = load_config(dir);
//   if (!r.ok()) return r.status();       // propagate
//   Config c = std::move(r).value();
//
// A Status is cheap when ok (no allocation). Codes mirror the HTTP-facing categories we need later.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace xinfer {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // bad user input (400)
  kNotFound,           // missing file / model / tensor (404 where user-facing)
  kOutOfRange,         // prompt longer than context, index past end
  kResourceExhausted,  // out of KV blocks, queue full (429)
  kUnimplemented,      // unsupported architecture / dtype / feature
  kDataLoss,           // truncated or corrupt file
  kFailedPrecondition,
  kInternal,
  kUnavailable,        // loading, draining (503)
  kCancelled,
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NOT_FOUND: model.safetensors: no such file"
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status out_of_range(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }

// Holds either a T or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status(StatusCode::kInternal, "Result built from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace xinfer

// Propagates a non-ok Status out of the enclosing function.
#define XI_RETURN_IF_ERROR(expr)                 \
  do {                                           \
    ::xinfer::Status xi_status_ = (expr);        \
    if (!xi_status_.ok()) return xi_status_;     \
  } while (0)

#define XI_CONCAT_INNER_(a, b) a##b
#define XI_CONCAT_(a, b) XI_CONCAT_INNER_(a, b)
// XI_ASSIGN_OR_RETURN(auto x, make_x()); declares x or returns the error.
#define XI_ASSIGN_OR_RETURN(lhs, expr) XI_ASSIGN_OR_RETURN_IMPL_(XI_CONCAT_(xi_result_, __LINE__), lhs, expr)
#define XI_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
