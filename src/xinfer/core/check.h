// XI_CHECK: invariants that, when broken, mean a bug in xinfer (never bad user input: use Status for
// that). On failure prints the condition, both operands for the comparison forms, file and line, plus
// any streamed context, then aborts:
//
//   XI_CHECK_EQ(q.shape[1], num_heads * head_dim) << "layer " << l;
//   -> F 12:00:00.000 llama.cpp:88] Check failed: q.shape[1] == num_heads * head_dim (512 vs 256) layer 3
#pragma once

#include <sstream>
#include <string>

#include "xinfer/core/logging.h"

namespace xinfer::detail {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const std::string& what) : msg_(LogLevel::kFatal, file, line) {
    msg_.stream() << "Check failed: " << what << ' ';
  }
  std::ostream& stream() { return msg_.stream(); }

 private:
  LogMessage msg_;
};

template <typename A, typename B>
std::string format_operands(const char* expr, const A& a, const B& b) {
  std::ostringstream os;
  os << expr << " (" << a << " vs " << b << ")";
  return os.str();
}

}  // namespace xinfer::detail

#define XI_CHECK(cond)                                                                     \
  (cond) ? (void)0                                                                         \
         : ::xinfer::detail::LogVoidify() &                                                \
               ::xinfer::detail::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define XI_CHECK_OP_(a, b, op)                                                                       \
  ((a)op(b)) ? (void)0                                                                               \
             : ::xinfer::detail::LogVoidify() &                                                      \
                   ::xinfer::detail::CheckFailure(                                                   \
                       __FILE__, __LINE__, ::xinfer::detail::format_operands(#a " " #op " " #b, a, b)) \
                       .stream()

#define XI_CHECK_EQ(a, b) XI_CHECK_OP_(a, b, ==)
#define XI_CHECK_NE(a, b) XI_CHECK_OP_(a, b, !=)
#define XI_CHECK_LT(a, b) XI_CHECK_OP_(a, b, <)
#define XI_CHECK_LE(a, b) XI_CHECK_OP_(a, b, <=)
#define XI_CHECK_GT(a, b) XI_CHECK_OP_(a, b, >)
#define XI_CHECK_GE(a, b) XI_CHECK_OP_(a, b, >=)

// Aborts with the status message when a Status-returning call that cannot fail here does fail.
#define XI_CHECK_OK(expr)                                       \
  do {                                                          \
    ::xinfer::Status xi_check_status_ = (expr);                 \
    XI_CHECK(xi_check_status_.ok()) << xi_check_status_.to_string(); \
  } while (0)
