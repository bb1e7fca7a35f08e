// HttpServer: HTTP/1.1 on Boost.Beast/Asio. One strand per connection; a connection carries one request at
// a time (keep-alive: the next request is read once the response is written).
//
//   read request ─▶ handler(request, exchange) ─▶ exchange->respond(...)          (one body)
//                                               └▶ exchange->start_stream(); write(...)*; end_stream()
//
// While a response is pending the connection watches its socket: if the client closes it, the exchange's
// disconnect callback runs (once, on the strand) so the handler can abort engine work right away.
// HttpExchange methods may be called from any thread (they dispatch to the connection's strand); writes are
// queued, never waited for, so an engine callback that posts output never blocks on a slow client.
// Limits: body size (413), open connections (503 to the ones past the limit), idle keep-alive and
// header-read timeout, write timeout (a client that stops reading is dropped). A connection that closes
// lingers (reads and drops what the client still sends, up to 5 s, so that it reads the answer): 64 KiB
// on its io thread, the rest on the low-priority thread.
// HTTP/1.1 (RFC 9110/9112): HEAD responses carry headers only; `Expect: 100-continue` is answered with
// `100 Continue` before the body is read; a Transfer-Encoding other than chunked, or a 1.1 request without
// Host, is a 400 and the connection closes; HTTP/1.0 clients get one response per connection, a streamed
// one close-delimited (no chunked coding). TCP_NODELAY on every connection (no Nagle delay on small writes).
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "xinfer/core/status.h"

namespace xinfer::server {

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // as sent, e.g. "/v1/models?x=1"
  std::string path;     // target without the query
  int version = 11;     // 10: HTTP/1.0, 11: HTTP/1.1
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class HttpSession;

// One request's response channel. Thread-safe; every call is carried out on the connection's strand.
class HttpExchange : public std::enable_shared_from_this<HttpExchange> {
 public:
  explicit HttpExchange(std::shared_ptr<HttpSession> session);
  ~HttpExchange();

  // A complete response. extra_headers: name -> value.
  void respond(int status, std::string content_type, std::string body,
               std::vector<std::pair<std::string, std::string>> extra_headers = {});
  // A chunked response (default text/event-stream): headers now, then write() chunks, then end_stream().
  void start_stream(std::string content_type = "text/event-stream");
  void write(std::string data);
  void end_stream();
  // Runs `fn` on the connection's strand (for work that touches state owned by this exchange).
  void post(std::function<void()> fn);
  // Called once, on the strand, if the client goes away before the response is complete; dropped (never
  // called) once the response is complete.
  void set_on_disconnect(std::function<void()> fn);
  bool client_gone() const { return gone_.load(); }

 private:
  friend class HttpSession;
  void notify_disconnect();  // on the strand
  std::shared_ptr<HttpSession> session_;
  std::function<void()> on_disconnect_;
  std::atomic<bool> gone_{false};
  bool completed_ = false;  // strand only
};

using HttpHandler = std::function<void(HttpRequest, std::shared_ptr<HttpExchange>)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::port())
  size_t max_body_bytes = 8 << 20;
  int max_connections = 1024;
  double keep_alive_timeout_s = 30;  // idle connection / slow request headers
  double write_timeout_s = 60;       // one write may take this long before the client is dropped
  int threads = 4;                   // io threads (a slow request occupies one; the others serve)
  // Requests whose Content-Length is at least this many bytes (and chunked ones: length unknown) are read
  // and handled (parsed, validated, tokenized) on one background thread at nice +low_priority_nice instead
  // of their io thread: once the headers are in, the socket moves to that thread's reactor and comes back
  // for the answer. On a machine whose cores the engine keeps busy (the CPU backend), a multi-megabyte body
  // then takes CPU time the engine leaves, not the engine's (2.7 MB of 100,000 keys: ~11 ms of CPU before
  // its 400; the io threads spend ~0.3 ms on it). Their handlers run one at a time, after each other; their
  // reads overlap; smaller requests never wait for them. 0: every request on its io thread.
  size_t low_priority_body_bytes = 64 * 1024;
  int low_priority_nice = 10;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens, then runs the io threads. UNAVAILABLE if the address cannot be bound.
  Status start();
  int port() const { return bound_port_; }
  // Stops accepting; connections close after their current response (idle ones now).
  void stop_accepting();
  // Stops the io threads and closes every connection.
  void stop();
  int open_connections() const { return open_connections_.load(); }
  int64_t rejected_connections() const { return rejected_connections_.load(); }

  struct Impl;

 private:
  HttpServerOptions options_;
  HttpHandler handler_;
  std::unique_ptr<Impl> impl_;
  std::vector<std::thread> threads_;
  std::thread low_priority_thread_;  // runs the handler for large bodies (options_.low_priority_body_bytes)
  int bound_port_ = 0;
  std::atomic<int> open_connections_{0};
  std::atomic<int64_t> rejected_connections_{0};
};

// HTTP status line text ("Not Found") for the codes the server uses.
const char* http_status_text(int status);

}  // namespace xinfer::server
