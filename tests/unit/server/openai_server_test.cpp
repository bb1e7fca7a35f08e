// OpenAIServer over HttpServer against a scripted FakeEngine: the server's side of the EngineClient
// contract (callbacks posted off the engine thread, aborts on stop strings and disconnects, error mapping,
// loading/draining states), with a real socket and Boost.Beast's synchronous client.
#include "xinfer/server/openai_server.h"

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "../tokenizer/tiny_tokenizer.h"

namespace xinfer::server {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using json = nlohmann::ordered_json;

// Emits script_[k % size] as token k of every live request, one token per 2 ms step, from its own thread;
// finishes with kLength at max_tokens; abort() gives a final kAbort output on the next step.
class FakeEngine : public engine::EngineClient {
 public:
  explicit FakeEngine(std::vector<int32_t> script, int capacity = 64) : script_(std::move(script)), capacity_(capacity) {
    info_.model_name = "fake";
    info_.max_model_len = 64;
    info_.vocab_size = 277;
    info_.eos_token_ids = {2};
    thread_ = std::thread([this] { loop(); });
  }
  ~FakeEngine() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    thread_.join();
  }
  Status submit(engine::GenerationRequest r, engine::OutputCallback cb) override {
    std::lock_guard<std::mutex> l(mu_);
    if (!fail_next_.ok()) return std::exchange(fail_next_, Status());
    if (static_cast<int>(live_.size()) >= capacity_) return resource_exhausted("queue full");
    submitted_.push_back(r);
    const std::string id = r.request_id;
    live_[id] = Live{std::move(r), std::move(cb), 0, false};
    return Status();
  }
  void abort(const std::string& id) override {
    std::lock_guard<std::mutex> l(mu_);
    aborted_.insert(id);
    if (auto it = live_.find(id); it != live_.end()) it->second.aborted = true;
  }
  engine::EngineStats stats() const override {
    std::lock_guard<std::mutex> l(mu_);
    engine::EngineStats s;
    s.num_running = static_cast<int>(live_.size());
    s.num_total_blocks = 100;
    s.num_free_blocks = 100 - static_cast<int>(live_.size());
    return s;
  }
  const engine::EngineInfo& info() const override { return info_; }
  void render_metrics(std::string* out) const override { *out += "fake_engine_metric 1\n"; }

  std::vector<engine::GenerationRequest> submitted() {
    std::lock_guard<std::mutex> l(mu_);
    return submitted_;
  }
  std::set<std::string> aborted() {
    std::lock_guard<std::mutex> l(mu_);
    return aborted_;
  }
  size_t live() {
    std::lock_guard<std::mutex> l(mu_);
    return live_.size();
  }
  void fail_next(Status s) {
    std::lock_guard<std::mutex> l(mu_);
    fail_next_ = std::move(s);
  }
  void error_next_step() { error_ = true; }

 private:
  struct Live {
    engine::GenerationRequest req;
    engine::OutputCallback cb;
    int produced;
    bool aborted;
  };
  void loop() {
    for (;;) {
      std::vector<std::pair<engine::OutputCallback, engine::RequestOutput>> outs;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stop_) return;
        for (auto it = live_.begin(); it != live_.end();) {
          Live& x = it->second;
          engine::RequestOutput o;
          o.request_id = x.req.request_id;
          o.num_prompt_tokens = static_cast<int>(x.req.prompt_ids.size());
          if (error_.exchange(false)) {
            o.finished = true;
            o.finish_reason = engine::FinishReason::kError;
            o.error = "boom";
          } else if (x.aborted) {
            o.finished = true;
            o.finish_reason = engine::FinishReason::kAbort;
          } else {
            const int32_t t = script_[static_cast<size_t>(x.produced) % script_.size()];
            o.new_token_ids = {t};
            if (x.req.sampling.logprobs) o.new_logprobs = {engine::TokenLogprob{t, -0.5f, {{t, -0.5f}, {5, -2.0f}}}};
            ++x.produced;
            o.num_output_tokens = x.produced;
            if (x.produced >= *x.req.sampling.max_tokens) {
              o.finished = true;
              o.finish_reason = engine::FinishReason::kLength;
            }
          }
          if (o.finished) {
            outs.emplace_back(std::move(x.cb), std::move(o));
            it = live_.erase(it);
          } else {
            outs.emplace_back(x.cb, std::move(o));
            ++it;
          }
        }
      }
      for (auto& [cb, o] : outs) cb(std::move(o));  // outside the lock, as the real engine
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  std::vector<int32_t> script_;
  int capacity_;
  engine::EngineInfo info_;
  mutable std::mutex mu_;
  std::map<std::string, Live> live_;
  std::vector<engine::GenerationRequest> submitted_;
  std::set<std::string> aborted_;
  Status fail_next_;
  std::atomic<bool> error_{false};
  bool stop_ = false;
  std::thread thread_;
};

// Tiny-tokenizer ids: 259 "▁", 260 "a", 261 "b", 262 "c", 263 "h", 264 "e", 265 "l", 266 "o".
// Script "hello abc" repeated: ▁he(271) llo(270) ▁(259) abc(274) ▁(259) ...
const std::vector<int32_t> kScript = {271, 270, 259, 274, 259};

struct Reply {
  int status = 0;
  std::string body;
};

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = tok::testing::tiny_tokenizer();
    ASSERT_TRUE(tokenizer_);
    engine_ = std::make_unique<FakeEngine>(kScript, 4);
    api_ = std::make_unique<OpenAIServer>(OpenAIServerOptions{});
    HttpServerOptions o;
    o.port = 0;
    o.max_body_bytes = 4096;
    http_ = std::make_unique<HttpServer>(o, [this](HttpRequest r, std::shared_ptr<HttpExchange> ex) {
      api_->handle(std::move(r), std::move(ex));
    });
    ASSERT_TRUE(http_->start().ok());
  }
  void TearDown() override {
    http_->stop();
    engine_.reset();
  }
  void ready() {
    ServedModel m;
    m.engine = engine_.get();
    m.tokenizer = tokenizer_.get();
    api_->set_model(std::move(m));
  }
  Reply call(const std::string& method, const std::string& target, const std::string& body = "") {
    net::io_context ioc;
    beast::tcp_stream s(ioc);
    s.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(http_->port())));
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, "x");
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    http::write(s, req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    return Reply{static_cast<int>(res.result_int()), res.body()};
  }
  template <typename Pred>
  bool eventually(Pred p) {
    for (int i = 0; i < 500; ++i) {
      if (p()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return p();
  }

  std::unique_ptr<tok::Tokenizer> tokenizer_;
  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<OpenAIServer> api_;
  std::unique_ptr<HttpServer> http_;
};

std::string sse_text(const std::string& body, std::string* finish = nullptr) {
  std::string text;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string payload = body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (payload == "[DONE]") break;
    json j = json::parse(payload);
    for (const json& c : j["choices"]) {
      text += c.value("text", "");
      if (finish && c["finish_reason"].is_string()) *finish = c["finish_reason"];
    }
  }
  return text;
}

TEST_F(ServerTest, LoadingThenReady) {
  EXPECT_EQ(call("GET", "/health").status, 503);
  Reply r = call("POST", "/v1/completions", R"({"prompt": "hello"})");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "model_loading");
  ready();
  EXPECT_EQ(call("GET", "/health").status, 200);
  EXPECT_NE(call("GET", "/metrics").body.find("fake_engine_metric 1"), std::string::npos);
}

TEST_F(ServerTest, CompletionTextUsageAndParams) {
  ready();
  Reply r = call("POST", "/v1/completions",
                 R"({"prompt": "hello", "max_tokens": 5, "temperature": 0.3, "seed": 9, "n": 2, "priority": 4})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  // Reference: one decode of prompt + output, minus the prompt's decode (the continuation keeps its space).
  std::vector<int32_t> all = tokenizer_->encode("hello");
  const std::string prompt_text = tokenizer_->decode(all);
  all.insert(all.end(), kScript.begin(), kScript.end());
  const std::string expected = tokenizer_->decode(all).substr(prompt_text.size());
  EXPECT_EQ(expected, " hello abc ");
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["text"], expected);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["completion_tokens"], 10);
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int>(tokenizer_->encode("hello").size()));
  auto sub = engine_->submitted();
  ASSERT_EQ(sub.size(), 2u);
  EXPECT_EQ(sub[0].rng_stream, 0u);
  EXPECT_EQ(sub[1].rng_stream, 1u);
  EXPECT_EQ(sub[1].priority, 4);
  EXPECT_EQ(sub[1].sampling.seed, 9);
  EXPECT_FLOAT_EQ(sub[0].sampling.temperature, 0.3f);
  EXPECT_EQ(sub[0].prompt_ids, tokenizer_->encode("hello"));
}

TEST_F(ServerTest, StreamedStopStringAbortsAndNeverLeaks) {
  ready();
  // Script text: "hello abc hello abc ..."; stop "lo a" spans tokens "llo", "▁", "abc".
  Reply r = call("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 20, "stream": true, "stop": "lo a"})");
  ASSERT_EQ(r.status, 200);
  std::string finish;
  EXPECT_EQ(sse_text(r.body, &finish), " hel");
  EXPECT_EQ(finish, "stop");
  EXPECT_EQ(r.body.find("llo"), std::string::npos);
  EXPECT_NE(r.body.find("data: [DONE]\n\n"), std::string::npos);
  EXPECT_TRUE(eventually([&] { return engine_->aborted().size() == 1 && engine_->live() == 0; }));
  EXPECT_TRUE(eventually([&] { return api_->active_requests() == 0; }));
}

TEST_F(ServerTest, DisconnectAbortsEngineRequests) {
  ready();
  net::io_context ioc;
  net::ip::tcp::socket sock(ioc);
  sock.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<uint16_t>(http_->port())));
  const std::string body = R"({"prompt": "x", "max_tokens": 60, "stream": true, "n": 3})";
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\n\r\n" + body;
  net::write(sock, net::buffer(req));
  char buf[256];
  ASSERT_GT(sock.read_some(net::buffer(buf)), 0u);
  ASSERT_TRUE(eventually([&] { return engine_->live() == 3; }));
  sock.close();
  EXPECT_TRUE(eventually([&] { return engine_->live() == 0; }));
  EXPECT_EQ(engine_->aborted().size(), 3u);
  EXPECT_TRUE(eventually([&] { return api_->active_requests() == 0; }));
  EXPECT_NE(call("GET", "/metrics").body.find("xinfer:server_client_disconnects_total 1"), std::string::npos);
}

TEST_F(ServerTest, EngineErrorsMapToStatus) {
  ready();
  engine_->fail_next(resource_exhausted("full"));
  Reply r = call("POST", "/v1/completions", R"({"prompt": "x"})");
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "rate_limit_error");
  engine_->fail_next(unavailable("stopping"));
  EXPECT_EQ(call("POST", "/v1/completions", R"({"prompt": "x"})").status, 503);
  // n past the fake's capacity (4): the first ones are submitted, then aborted, and the reply is 429.
  r = call("POST", "/v1/completions", R"({"prompt": "x", "n": 6, "max_tokens": 50})");
  EXPECT_EQ(r.status, 429);
  EXPECT_TRUE(eventually([&] { return engine_->live() == 0 && api_->active_requests() == 0; }));
  engine_->error_next_step();
  r = call("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 50})");
  EXPECT_EQ(r.status, 500);
  EXPECT_NE(json::parse(r.body)["error"]["message"].get<std::string>().find("boom"), std::string::npos);
}

TEST_F(ServerTest, LogprobsAndContextLength) {
  ready();
  Reply r = call("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 3, "logprobs": 1})");
  ASSERT_EQ(r.status, 200) << r.body;
  json lp = json::parse(r.body)["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"].size(), 3u);
  EXPECT_EQ(lp["token_logprobs"][0], -0.5);
  EXPECT_EQ(lp["text_offset"][0], 0);
  r = call("POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 64})");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("maximum context length is 64 tokens"), std::string::npos);
  EXPECT_EQ(call("POST", "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}]})").status, 400);
}

TEST_F(ServerTest, DrainingRefusesNewWork) {
  ready();
  api_->begin_drain();
  EXPECT_EQ(call("GET", "/health").status, 503);
  EXPECT_EQ(call("POST", "/v1/completions", R"({"prompt": "x"})").status, 503);
  EXPECT_EQ(call("GET", "/v1/models").status, 200);
}

TEST_F(ServerTest, BodyLimitAndRoutes) {
  ready();
  EXPECT_EQ(call("POST", "/v1/completions", std::string(5000, ' ')).status, 413);
  EXPECT_EQ(call("GET", "/nope").status, 404);
  EXPECT_EQ(call("DELETE", "/v1/models").status, 405);
}

}  // namespace
}  // namespace xinfer::server

namespace xinfer::server {
namespace {

// Fairness: a request's choices past --max-choices-in-flight wait for earlier ones to finish instead of
// taking every batch slot at once. The fake engine refuses more than 4 live requests (429), so submitting
// all 10 choices at once, as before the cap, fails.
TEST_F(ServerTest, ChoicesRunInTurnsPastTheInFlightCap) {
  OpenAIServerOptions o;
  o.max_choices_in_flight = 3;
  api_ = std::make_unique<OpenAIServer>(o);
  ready();
  Reply r = call("POST", "/v1/completions", R"({"prompt": "hello", "max_tokens": 3, "n": 10})");
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["finish_reason"], "length");
    EXPECT_EQ(j["choices"][i]["text"], j["choices"][0]["text"]);  // the fake engine's script for each
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], 30);
  EXPECT_EQ(engine_->submitted().size(), 10u);
  EXPECT_TRUE(eventually([&] { return api_->active_requests() == 0; }));
  // Streamed too.
  Reply s =
      call("POST", "/v1/completions", R"({"prompt": "hello", "max_tokens": 2, "n": 7, "stream": true})");
  ASSERT_EQ(s.status, 200);
  EXPECT_EQ(engine_->submitted().size(), 17u);
}

}  // namespace
}  // namespace xinfer::server
