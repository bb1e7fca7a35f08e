#include "xinfer/server/http_server.h"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <sstream>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "xinfer/core/logging.h"

namespace xinfer::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

constexpr size_t kWatchBytes = 4096;
constexpr size_t kMaxPipelinedBytes = 1 << 20;
// Beast reads a body in pieces of max(512, free capacity of the read buffer), up to 64 KiB: a buffer left
// at its header size read a 2.7 MB body 512 bytes to 1 KB at a time (~2,700 reads, 55-100 ms of I/O
// thread). Bodies larger than a header get this much capacity first (64 KiB reads), given back afterwards.
constexpr size_t kBodyReadBytes = 64 * 1024;
// A lingering close reads this much on the io thread, the rest on the low-priority thread.
constexpr size_t kLingerHereBytes = 64 * 1024;

// Reads and drops what a client still sends on a socket we have answered and shut down for sending, in
// 64 KiB pieces, until it closes or 5 s pass (on the low-priority io_context: the caller posts it there).
struct Drain : std::enable_shared_from_this<Drain> {
  explicit Drain(net::io_context& ioc) : socket(ioc), timer(ioc), buf(64 * 1024) {}
  void read() {
    socket.async_read_some(net::buffer(buf), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (!ec) return self->read();
      self->timer.cancel();
      beast::error_code ignored;
      self->socket.close(ignored);
    });
  }
  tcp::socket socket;
  net::steady_timer timer;
  std::vector<char> buf;
};

void drain_and_close(net::io_context& ioc, tcp::endpoint::protocol_type protocol, int fd) {
  auto d = std::make_shared<Drain>(ioc);
  beast::error_code ec;
  d->socket.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);
    return;
  }
  d->timer.expires_after(std::chrono::seconds(5));
  d->timer.async_wait([d](beast::error_code wec) {
    beast::error_code ignored;
    if (!wec) d->socket.close(ignored);
  });
  d->read();
}

}  // namespace

const char* http_status_text(int status) {
  // obsolete_reason returns views of static strings: NUL-terminated.
  return http::obsolete_reason(static_cast<http::status>(status)).data();
}

struct HttpServer::Impl {
  explicit Impl(int threads)
      : ioc(threads), acceptor(net::make_strand(ioc)), guard(net::make_work_guard(ioc)), low_priority_ioc(1),
        low_priority_guard(net::make_work_guard(low_priority_ioc)) {}
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::executor_work_guard<net::io_context::executor_type> guard;
  net::io_context low_priority_ioc;  // handlers of large bodies, one at a time
  net::executor_work_guard<net::io_context::executor_type> low_priority_guard;
  std::atomic<bool> accepting{false};
  std::atomic<bool> draining{false};
  std::mutex mu;
  std::vector<std::weak_ptr<HttpSession>> sessions;  // for closing idle ones when draining
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(tcp::socket socket, HttpServer::Impl* impl, const HttpServerOptions* options, HttpHandler* handler,
              std::atomic<int>* open_count)
      : stream_(std::move(socket)), impl_(impl), options_(options), handler_(handler), open_count_(open_count) {
    open_count_->fetch_add(1);
    // Small writes (an SSE chunk, a response after the previous one on a keep-alive connection) go out at
    // once: with Nagle's algorithm a write waits while earlier data is unacknowledged, and the client's
    // delayed ACK makes that ~40 ms per streamed request on a reused connection.
    beast::error_code ignored;
    stream_.socket().set_option(tcp::no_delay(true), ignored);
  }
  ~HttpSession() { open_count_->fetch_sub(1); }

  net::any_io_executor executor() { return stream_.get_executor(); }

  void start(bool reject) {
    net::dispatch(executor(), [self = shared_from_this(), reject] {
      if (reject) {
        self->keep_alive_ = false;
        self->enqueue(self->serialize(503, "application/json",
                                      R"({"error":{"message":"too many open connections","type":"server_error",)"
                                      R"("param":null,"code":"too_many_connections"}})",
                                      {}),
                      /*last=*/true);
        return;
      }
      self->do_read();
    });
  }

  // Drain: close if idle; otherwise close after the current response.
  void close_if_idle() {
    net::dispatch(executor(), [self = shared_from_this()] {
      self->keep_alive_ = false;
      if (!self->current_) self->close();
    });
  }

  // --- called by HttpExchange, on the strand ---
  void respond(HttpExchange* ex, int status, const std::string& type, std::string body,
               const std::vector<std::pair<std::string, std::string>>& extra) {
    if (!accepts(ex)) return;
    complete(ex);
    enqueue(serialize(status, type, std::move(body), extra), /*last=*/true);
  }
  void start_stream(HttpExchange* ex, const std::string& type) {
    if (!accepts(ex) || streaming_) return;
    streaming_ = true;
    // HTTP/1.0 has no chunked coding: the body ends when the connection closes (keep_alive_ is false).
    std::string head = "HTTP/1.1 200 OK\r\nServer: xinfer\r\nContent-Type: " + type +
                       "\r\nCache-Control: no-cache\r\n" + (http10_ ? "" : "Transfer-Encoding: chunked\r\n") +
                       "Connection: " + (keep_alive_ ? "keep-alive" : "close") + "\r\n\r\n";
    enqueue(std::move(head), false);
  }
  void write_chunk(HttpExchange* ex, const std::string& data) {
    if (!accepts(ex) || !streaming_ || data.empty() || head_) return;
    if (http10_) return enqueue(data, false);
    std::ostringstream os;
    os << std::hex << data.size() << "\r\n";
    enqueue(os.str() + data + "\r\n", false);
  }
  void end_stream(HttpExchange* ex) {
    if (!accepts(ex) || !streaming_) return;
    complete(ex);
    enqueue(http10_ || head_ ? std::string() : std::string("0\r\n\r\n"), true);
  }

 private:
  // The response is fully queued: the disconnect callback (which may own the handler's request state,
  // which owns the exchange) is dropped here, breaking that cycle.
  static void complete(HttpExchange* ex) {
    ex->completed_ = true;
    ex->on_disconnect_ = nullptr;
  }

  bool accepts(HttpExchange* ex) const { return !closed_ && current_.get() == ex && !ex->completed_; }

  std::string serialize(int status, const std::string& type, std::string body,
                        const std::vector<std::pair<std::string, std::string>>& extra) {
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::server, "xinfer");
    if (!type.empty()) res.set(http::field::content_type, type);
    for (const auto& [k, v] : extra) res.set(k, v);
    res.body() = std::move(body);
    res.keep_alive(keep_alive_);
    res.prepare_payload();
    std::ostringstream os;
    os << res;
    std::string out = os.str();
    // RFC 9110 9.3.2: a HEAD response has the GET response's headers (Content-Length included), no body.
    if (head_) out.resize(out.find("\r\n\r\n") + 4);
    return out;
  }

  void do_read() {
    if (closed_) return;
    if (impl_->draining.load()) return close();
    http10_ = head_ = false;
    parser_.emplace();
    parser_->body_limit(options_->max_body_bytes);
    parser_->header_limit(64 * 1024);
    stream_.expires_after(seconds(options_->keep_alive_timeout_s));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  // A malformed or refused request: answer `status` with an OpenAI-shaped error, then close.
  void reject(int status, const std::string& message, const char* code) {
    keep_alive_ = false;
    current_ = std::make_shared<HttpExchange>(shared_from_this());
    respond(current_.get(), status, "application/json",
            R"({"error":{"message":")" + message +
                R"(","type":"invalid_request_error","param":null,"code":)" +
                (code ? std::string("\"") + code + "\"" : std::string("null")) + "}}",
            {});
  }

  // Returns true if the read failed and was answered (or the connection closed).
  bool read_failed(beast::error_code ec) {
    if (!ec) return false;
    if (ec == http::error::body_limit) {
      reject(413, "request body exceeds the limit of " + std::to_string(options_->max_body_bytes) + " bytes",
             "request_too_large");
      return true;
    }
    const bool benign = ec == http::error::end_of_stream || ec == beast::error::timeout ||
                        ec == net::error::connection_reset || ec == net::error::operation_aborted ||
                        ec == http::error::partial_message;
    if (benign || buffer_.size() == 0) {
      close();
      return true;
    }
    reject(400, "malformed HTTP request: " + ec.message(), nullptr);  // tell the client why, then close
    return true;
  }

  // Headers are in: the checks of RFC 9112 that need no body, then `100 Continue` if the client waits for
  // it, then the body.
  void on_header(beast::error_code ec) {
    if (closed_ || read_failed(ec)) return;
    const auto& h = parser_->get();
    http10_ = h.version() == 10;
    head_ = h.method() == http::verb::head;
    if (h.version() != 10 && h.version() != 11) {
      return reject(505, "HTTP version not supported (HTTP/1.0 and HTTP/1.1 only)", nullptr);
    }
    // RFC 9112 3.2: a 1.1 request without Host is a 400.
    if (h.version() == 11 && h.find(http::field::host) == h.end()) {
      return reject(400, "missing Host header (required by HTTP/1.1)", nullptr);
    }
    // RFC 9112 6.3: a request whose Transfer-Encoding does not end in chunked has no knowable length: 400
    // and close (reading it as body-less would parse its body as a second request).
    if (h.find(http::field::transfer_encoding) != h.end() && !parser_->chunked()) {
      return reject(400, "unsupported Transfer-Encoding (only chunked)", nullptr);
    }
    if (parser_->is_done()) return on_read({});
    // RFC 9110 10.1.1: a client that sent `Expect: 100-continue` waits for 100 before sending the body.
    const auto expect = h.find(http::field::expect);
    if (expect != h.end() && h.version() == 11 && beast::iequals(expect->value(), "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_, net::buffer(kContinue),
                       [self = shared_from_this()](beast::error_code wec, size_t) {
                         if (self->closed_) return;
                         if (wec) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    const auto length = parser_->content_length();
    if ((!length || *length > kWatchBytes) && buffer_.capacity() < kBodyReadBytes) buffer_.reserve(kBodyReadBytes);
    const size_t large = options_->low_priority_body_bytes;
    if (large > 0 && (parser_->chunked() || (length && *length >= large))) return read_body_elsewhere();
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  // A large (or chunked: length unknown) body is read on the low-priority thread, not here: the socket
  // leaves this io_context's reactor (release) for the low-priority one's, so every recv of the body, Beast's
  // parse of it and the copy into the string run at nice +low_priority_nice and the io thread spends
  // microseconds on the request (read here, a 2.7 MB body cost it 2.5-3 ms on an idle server and more
  // under load, in smaller pieces). Until on_body_elsewhere, only the low-priority thread touches parser_,
  // buffer_ and the socket; the strand's own state (closed_, keep_alive_) may change meanwhile (a drain:
  // close() then cancels the read there) and is read when the socket comes back.
  void read_body_elsewhere() {
    stream_.expires_never();  // its timer would close the socket once it is ours again
    beast::error_code ec;
    protocol_ = stream_.socket().local_endpoint(ec).protocol();
    const int fd = ec ? -1 : stream_.socket().release(ec);
    if (ec) return close();
    auto bg = std::make_shared<beast::tcp_stream>(tcp::socket(impl_->low_priority_ioc));
    bg->socket().assign(protocol_, fd, ec);
    if (ec) {
      ::close(fd);
      return close();
    }
    elsewhere_ = bg;  // close() (a drain) cancels the read through it
    net::post(impl_->low_priority_ioc, [self = shared_from_this(), bg] {
      bg->expires_after(seconds(self->options_->keep_alive_timeout_s));
      http::async_read(*bg, self->buffer_, *self->parser_, [self, bg](beast::error_code rec, size_t) {
        bg->expires_never();
        beast::error_code ignored;
        const int back = bg->socket().is_open() ? bg->socket().release(ignored) : -1;  // closed on a timeout
        self->come_back(back, rec);
      });
    });
  }

  // Low-priority thread: hands the socket (fd, -1 if it was closed) and the read's result to the strand.
  void come_back(int fd, beast::error_code ec) {
    net::dispatch(executor(), [self = shared_from_this(), fd, ec] { self->on_body_elsewhere(fd, ec); });
  }

  void on_body_elsewhere(int fd, beast::error_code ec) {
    elsewhere_.reset();
    if (fd < 0) return close();
    if (closed_) {  // closed meanwhile (a drain): the socket is ours to close
      ::close(fd);
      return;
    }
    beast::error_code aec;
    stream_.socket().assign(protocol_, fd, aec);
    if (aec) {
      ::close(fd);
      return close();
    }
    if (read_failed(ec)) return;
    dispatch_request(/*read_elsewhere=*/true);
  }

  void on_read(beast::error_code ec) {
    if (closed_ || read_failed(ec)) return;
    dispatch_request(/*read_elsewhere=*/false);
  }

  // The request is read: hand it to the handler, on this io thread or on the low-priority thread (a body
  // read there, or one that turned out large).
  void dispatch_request(bool read_elsewhere) {
    stream_.expires_never();
    if (buffer_.capacity() > kWatchBytes && buffer_.size() <= kWatchBytes) buffer_.shrink_to_fit();
    http::request<http::string_body> msg = parser_->release();
    parser_.reset();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.path = req.target.substr(0, req.target.find('?'));
    req.version = static_cast<int>(msg.version());
    for (const auto& f : msg) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      req.headers[name] = std::string(f.value());
    }
    req.body = std::move(msg.body());
    // HTTP/1.0 clients get one response per connection (close-delimited when streamed).
    keep_alive_ = msg.keep_alive() && !http10_ && !impl_->draining.load();
    streaming_ = false;
    current_ = std::make_shared<HttpExchange>(shared_from_this());
    start_watch();
    std::shared_ptr<HttpExchange> ex = current_;
    const bool low_priority = read_elsewhere || (options_->low_priority_body_bytes > 0 &&
                                                 req.body.size() >= options_->low_priority_body_bytes);
    // The exchange is thread-safe: the handler may run on any thread.
    auto run = [handler = handler_, req = std::move(req), ex]() mutable {
      try {
        (*handler)(std::move(req), ex);
      } catch (const std::exception& e) {
        XI_LOG(ERROR) << "http handler threw: " << e.what();
        ex->respond(500, "application/json",
                    R"({"error":{"message":"internal error","type":"server_error","param":null,"code":null}})");
      }
    };
    if (low_priority) {
      net::post(impl_->low_priority_ioc, std::move(run));
    } else {
      run();
    }
  }

  // Watches the socket while a response is pending: EOF or an error means the client has gone.
  void start_watch() {
    if (watching_ || closed_) return;
    watching_ = true;
    stream_.socket().async_read_some(buffer_.prepare(kWatchBytes),
                                     [self = shared_from_this()](beast::error_code ec, size_t n) {
                                       self->on_watch(ec, n);
                                     });
  }

  void on_watch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (closed_) return;
    if (lingering_) return linger();
    if (!ec || ec == net::error::operation_aborted) {
      if (!ec) buffer_.commit(n);  // pipelined bytes of the next request
      if (want_read_) {
        want_read_ = false;
        do_read();
      } else if (!ec && current_ && buffer_.size() < kMaxPipelinedBytes) {
        start_watch();
      }
      return;
    }
    close();  // EOF / reset: the client is gone
  }

  void enqueue(std::string data, bool last) {
    if (closed_) return;
    queue_.push_back(std::move(data));
    if (last) last_queued_ = true;
    if (!writing_) do_write();
  }

  void do_write() {
    writing_ = true;
    stream_.expires_after(seconds(options_->write_timeout_s));
    net::async_write(stream_, net::buffer(queue_.front()),
                     [self = shared_from_this()](beast::error_code ec, size_t) { self->on_write(ec); });
  }

  void on_write(beast::error_code ec) {
    writing_ = false;
    if (closed_) return;
    if (ec) return close();
    queue_.pop_front();
    if (!queue_.empty()) return do_write();
    stream_.expires_never();
    if (!last_queued_) return;
    last_queued_ = false;
    finish_exchange();
  }

  void finish_exchange() {
    current_.reset();
    streaming_ = false;
    if (!keep_alive_ || impl_->draining.load()) return linger();
    if (watching_) {
      want_read_ = true;
      beast::error_code ignored;
      stream_.socket().cancel(ignored);
    } else {
      do_read();
    }
  }

  // Lingering close: stop sending, then read and drop what the client still sends (say the rest of a body
  // past the limit) until it closes or 5 s pass, so that the kernel does not reset the connection before
  // the client has read our response.
  void linger() {
    if (closed_) return;
    if (!lingering_) {
      lingering_ = true;
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      stream_.expires_after(seconds(5));
      if (watching_) {  // on_watch comes back here once the watch read is cancelled
        stream_.socket().cancel(ignored);
        return;
      }
    }
    if (lingered_bytes_ >= kLingerHereBytes) return linger_elsewhere();
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(kWatchBytes), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (ec) return self->close();
      self->lingered_bytes_ += n;
      self->linger();
    });
  }

  // A client that keeps sending after the answer (the rest of a body past the limit: megabytes, which the
  // io thread read 4 KiB at a time, 37 ms of its CPU for 20 MB) is drained on the low-priority thread
  // instead, until it closes or 5 s pass; this session is done.
  void linger_elsewhere() {
    stream_.expires_never();
    beast::error_code ec;
    const auto protocol = stream_.socket().local_endpoint(ec).protocol();
    const int fd = ec ? -1 : stream_.socket().release(ec);
    close();
    if (fd >= 0) net::post(impl_->low_priority_ioc, [impl = impl_, protocol, fd] { drain_and_close(impl->low_priority_ioc, protocol, fd); });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    if (auto bg_stream = elsewhere_.lock()) {  // the body is read on the low-priority thread: stop that read
      net::post(impl_->low_priority_ioc, [bg = std::move(bg_stream)] {
        beast::error_code ignored;
        bg->socket().cancel(ignored);
      });
    }
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    if (current_) {
      std::shared_ptr<HttpExchange> ex = std::move(current_);
      if (!ex->completed_) ex->notify_disconnect();
    }
    queue_.clear();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpServer::Impl* impl_;
  const HttpServerOptions* options_;
  HttpHandler* handler_;
  std::atomic<int>* open_count_;
  std::shared_ptr<HttpExchange> current_;
  std::deque<std::string> queue_;
  bool writing_ = false, watching_ = false, want_read_ = false, last_queued_ = false;
  bool keep_alive_ = true, streaming_ = false, closed_ = false, lingering_ = false;
  bool http10_ = false, head_ = false;  // of the current request
  size_t lingered_bytes_ = 0;
  tcp::endpoint::protocol_type protocol_ = tcp::v4();  // of the socket, while its body is read elsewhere
  // The socket meanwhile, on the low-priority reactor. Weak: the read's handler owns it, so it never outlives
  // the low-priority io_context (destroyed before the io threads' one).
  std::weak_ptr<beast::tcp_stream> elsewhere_;
};

// ---------------------------------------------------------------------------------------------------------
HttpExchange::HttpExchange(std::shared_ptr<HttpSession> session) : session_(std::move(session)) {}
HttpExchange::~HttpExchange() = default;

void HttpExchange::respond(int status, std::string content_type, std::string body,
                           std::vector<std::pair<std::string, std::string>> extra_headers) {
  net::dispatch(session_->executor(), [self = shared_from_this(), status, type = std::move(content_type),
                                       body = std::move(body), extra = std::move(extra_headers)]() mutable {
    self->session_->respond(self.get(), status, type, std::move(body), extra);
  });
}

void HttpExchange::start_stream(std::string content_type) {
  net::dispatch(session_->executor(), [self = shared_from_this(), type = std::move(content_type)] {
    self->session_->start_stream(self.get(), type);
  });
}

void HttpExchange::write(std::string data) {
  net::dispatch(session_->executor(), [self = shared_from_this(), data = std::move(data)] {
    self->session_->write_chunk(self.get(), data);
  });
}

void HttpExchange::end_stream() {
  net::dispatch(session_->executor(), [self = shared_from_this()] { self->session_->end_stream(self.get()); });
}

void HttpExchange::post(std::function<void()> fn) { net::post(session_->executor(), std::move(fn)); }

void HttpExchange::set_on_disconnect(std::function<void()> fn) {
  net::dispatch(session_->executor(), [self = shared_from_this(), fn = std::move(fn)]() mutable {
    if (self->gone_.load()) {
      fn();
      return;
    }
    if (!self->completed_) self->on_disconnect_ = std::move(fn);
  });
}

void HttpExchange::notify_disconnect() {
  if (gone_.exchange(true)) return;
  if (on_disconnect_) {
    auto fn = std::move(on_disconnect_);
    on_disconnect_ = nullptr;
    fn();
  }
}

// ---------------------------------------------------------------------------------------------------------
HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : options_(std::move(options)), handler_(std::move(handler)),
      impl_(std::make_unique<Impl>(std::max(1, options_.threads))) {}

HttpServer::~HttpServer() { stop(); }

namespace {

void do_accept(HttpServer::Impl* impl, const HttpServerOptions* options, HttpHandler* handler,
               std::atomic<int>* open_count, std::atomic<int64_t>* rejected) {
  impl->acceptor.async_accept(
      net::make_strand(impl->ioc), [=](beast::error_code ec, tcp::socket socket) {
        if (!impl->accepting.load()) return;
        if (!ec) {
          const bool reject = open_count->load() >= options->max_connections;
          if (reject) rejected->fetch_add(1);
          auto session = std::make_shared<HttpSession>(std::move(socket), impl, options, handler, open_count);
          {
            std::lock_guard<std::mutex> lock(impl->mu);
            if (impl->sessions.size() > 64 && impl->sessions.size() > 2 * static_cast<size_t>(open_count->load())) {
              std::erase_if(impl->sessions, [](const std::weak_ptr<HttpSession>& w) { return w.expired(); });
            }
            impl->sessions.push_back(session);
          }
          session->start(reject);
        } else if (ec == net::error::operation_aborted) {
          return;
        } else {
          XI_LOG(WARN) << "accept failed: " << ec.message();
        }
        do_accept(impl, options, handler, open_count, rejected);
      });
}

}  // namespace

Status HttpServer::start() {
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(options_.host, ec);
  if (ec) return invalid_argument("--host '" + options_.host + "' is not an IP address: " + ec.message());
  const tcp::endpoint endpoint{address, static_cast<unsigned short>(options_.port)};
  tcp::acceptor& acc = impl_->acceptor;
  acc.open(endpoint.protocol(), ec);
  if (!ec) acc.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(endpoint, ec);
  if (!ec) acc.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return unavailable("cannot listen on " + options_.host + ":" + std::to_string(options_.port) + ": " +
                       ec.message());
  }
  bound_port_ = acc.local_endpoint().port();
  impl_->accepting = true;
  do_accept(impl_.get(), &options_, &handler_, &open_connections_, &rejected_connections_);
  // Named threads (`ps -L`, /proc/PID/task/*/comm): bench/hostile_load.py splits the server's CPU by them.
  for (int i = 0; i < std::max(1, options_.threads); ++i) {
    threads_.emplace_back([this] {
      pthread_setname_np(pthread_self(), "xi-http-io");
      impl_->ioc.run();
    });
  }
  low_priority_thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "xi-http-bg");
    // Linux: the nice value of this thread alone (NPTL threads are scheduled as tasks). Raising it needs no
    // privilege; if it fails, the thread still keeps large bodies off the io threads.
    if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), options_.low_priority_nice) != 0)
      XI_LOG(WARN) << "could not lower the priority of the large-body thread: " << std::strerror(errno);
    impl_->low_priority_ioc.run();
  });
  return Status::ok_status();
}

void HttpServer::stop_accepting() {
  if (!impl_->accepting.exchange(false)) return;
  impl_->draining = true;
  net::post(impl_->acceptor.get_executor(), [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
  });
  std::vector<std::shared_ptr<HttpSession>> live;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& w : impl_->sessions)
      if (auto s = w.lock()) live.push_back(std::move(s));
  }
  for (auto& s : live) s->close_if_idle();
}

void HttpServer::stop() {
  if (threads_.empty()) return;
  impl_->accepting = false;
  impl_->guard.reset();
  impl_->ioc.stop();
  impl_->low_priority_guard.reset();
  impl_->low_priority_ioc.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
  if (low_priority_thread_.joinable()) low_priority_thread_.join();
}

}  // namespace xinfer::server
