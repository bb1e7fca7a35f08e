// GenerationContext: one /v1/completions or /v1/chat/completions request in flight. It submits one engine
// request per choice (prompts x n; choice i of a prompt uses rng_stream i), turns the engine's token
// deltas into text (StreamingDetokenizer -> OutputFilter) and answers with one JSON body or SSE chunks.
//
// Lifetime and threads: owned by shared_ptr; the engine callbacks hold it until each choice's final output.
// Every method except the engine callback itself runs on the connection's strand (callbacks only post).
// States of a choice: running -> finished (finish_reason set: engine stop/length/abort/error, or a stop
// string / filter rule, which aborts the engine request) ; engine_done once the engine's final output for
// it arrived. The response is complete when every choice is finished; the context is released from the
// server's active count when every submitted choice is engine_done.
// In-flight cap: at most setup.max_choices_in_flight choices are in the engine at once; the next is
// submitted when one is engine_done (as a new arrival). Off by default (kMaxN; see OpenAIServerOptions).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "xinfer/engine/engine_client.h"
#include "xinfer/server/http_server.h"
#include "xinfer/server/openai_protocol.h"
#include "xinfer/server/token_offsets.h"
#include "xinfer/server/openai_server.h"
#include "xinfer/server/output_filter.h"
#include "xinfer/tokenizer/tokenizer.h"

namespace xinfer::server {

struct PromptInput {
  std::vector<int32_t> ids;
  std::string text;  // for echo (completions)
};

struct GenerationSetup {
  bool chat = false;
  bool echo = false;
  bool prompt_only = false;              // completions max_tokens 0 with echo: the prompt alone is answered
  std::optional<int32_t> prompt_top;     // engine prompt logprobs (echo + logprobs, prompt_logprobs): top count
  GenerationOptions options;
  std::vector<PromptInput> prompts;
  std::string id;
  std::string model_name;
  int64_t created = 0;
  std::shared_ptr<const FilterRules> filter_rules;
  int max_choices_in_flight = kMaxN;  // engine requests of this request running or queued at once
};

class GenerationContext : public std::enable_shared_from_this<GenerationContext> {
 public:
  GenerationContext(OpenAIServer* server, const ServedModel* model, std::shared_ptr<HttpExchange> exchange,
                    GenerationSetup setup);
  // Submits every choice (on the strand, from the handler). Answers the error itself if submission fails.
  void start();

 private:
  struct Choice {
    std::string request_id;
    int index = 0;
    size_t prompt = 0;
    std::optional<tok::StreamingDetokenizer> detok;
    std::optional<OutputFilter> filter;
    std::string text;
    int num_tokens = 0;
    int64_t text_offset = 0;  // completions logprobs: offset (code points) of the next token's text
    std::optional<TokenOffsets> offsets;  // completions logprobs: the generated tokens' text_offset
    nlohmann::ordered_json logprobs;  // accumulated (non-stream)
    nlohmann::ordered_json prompt_logprobs;  // vLLM's prompt_logprobs list (options.prompt_logprobs)
    bool prompt_seen = false;                // the first engine output (carrying prompt logprobs) arrived
    std::string finish_reason;        // "" while running
    bool submitted = false;
    bool engine_done = false;
  };

  // Submits choices up to the in-flight cap; false if a submission failed (then answered with the error).
  bool submit_more();
  void on_output(size_t c, engine::RequestOutput out);
  void on_disconnect();
  void finish_choice(Choice& c, const std::string& reason);
  void maybe_complete();
  void maybe_release();
  void fail(const ApiError& error);
  void abort_running();

  nlohmann::ordered_json logprob_delta(Choice& c, const engine::RequestOutput& out, size_t count);
  // Echo with logprobs: the prompt's entries in completions format (first token null), advancing text_offset.
  nlohmann::ordered_json prompt_logprob_delta(Choice& c, const engine::RequestOutput& out);
  // vLLM's prompt_logprobs list: [null, {id: {logprob, rank, decoded_token}}, ...].
  nlohmann::ordered_json prompt_logprob_list(const Choice& c, const engine::RequestOutput& out) const;
  bool echo_logprobs() const {
    return !setup_.chat && setup_.echo && setup_.options.logprobs == LogprobsFormat::kCompletion;
  }
  void append_logprobs(nlohmann::ordered_json& acc, const nlohmann::ordered_json& delta) const;
  nlohmann::ordered_json chunk_base() const;
  void send_event(const nlohmann::ordered_json& j);
  nlohmann::ordered_json usage() const;
  nlohmann::ordered_json full_response() const;

  OpenAIServer* server_;
  const ServedModel* model_;
  std::shared_ptr<HttpExchange> ex_;
  GenerationSetup setup_;
  std::vector<Choice> choices_;
  bool responded_ = false;  // the final body, an error, or [DONE] was sent (or the client left)
  bool released_ = false;
  bool stream_started_ = false;  // SSE headers are out: errors become events
  size_t next_submit_ = 0;       // choices_[0, next_submit_) were submitted
  size_t in_flight_ = 0;         // submitted and not engine_done
  uint64_t group_ = 0;           // engine group of every choice (nonzero, from the request id)
};

}  // namespace xinfer::server
