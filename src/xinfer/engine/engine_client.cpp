#include "xinfer/engine/engine_client.h"

namespace xinfer::engine {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "";
}

}  // namespace xinfer::engine
