// hostile_load_client: the load generator and the attacker of bench/hostile_load.py (issue 13's check), in C++
// so that the instrument takes little of the CPU it measures (the Python client of session 8 shared the 2
// cores with the server and moved TTFT tails by hundreds of ms between runs).
//
//   streams: --streams N keep-alive connections, each a closed loop of one streamed POST (--body-file: a
//            /v1/completions body with "stream": true, or several, comma-separated, one drawn per request:
//            bodies of different max_tokens keep the streams from running in step) from --start-ns until
//            --end-ns; a request still in flight at --end-ns is waited for (up to --drain-s). One thread,
//            epoll, level-triggered. Connection i sends its first request at start + i / N x --ramp-s, and
//            each next one after a pause drawn uniformly from [0, --think-ms] (seeded). Equal requests
//            started together stay in step (admitted in one step, finished in one step, sent again
//            together): TTFT then measures waves, and whether a hostile body meets one is luck.
//            A line per request: conn start_ns first_token_ns end_ns http_status tokens ok
//            (first_token_ns: when the first SSE event with a non-empty "text" was read; 0 if none).
//   attack:  in the "with" windows ([start + edges[w], start + edges[w + 1]) for odd w) a pair of hostile
//            bodies every --interval-s: a --levels-deep body and a --keys-key body, sent at the same time
//            on a new connection each (Connection: close). A line per body: kind start_ns end_ns status.
//            --nice N lowers the process's priority first (the attacker is not what is measured).
//
// Times are CLOCK_MONOTONIC nanoseconds, the clock of Python's time.monotonic_ns(), so the orchestrator can
// line up both processes' records and its own /proc samples. No dependencies beyond POSIX.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <queue>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "hostile_load_client: %s\n", msg.c_str());
  std::exit(2);
}

struct Args {
  std::string mode, host = "127.0.0.1", body_file, out, edges;
  int port = 0, streams = 300, levels = 100000, keys = 100000, nice = 0;
  int64_t start_ns = 0, end_ns = 0;
  double interval_s = 0.5, drain_s = 60, ramp_s = 1.0, think_ms = 10;
  unsigned seed = 0;
};

Args parse_args(int argc, char** argv) {
  Args a;
  if (argc < 2) die("usage: hostile_load_client streams|attack --port P --start-ns T ... (see the header)");
  a.mode = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc) die("missing value after " + k);
    std::string v = argv[++i];
    if (k == "--host") a.host = v;
    else if (k == "--port") a.port = std::stoi(v);
    else if (k == "--streams") a.streams = std::stoi(v);
    else if (k == "--body-file") a.body_file = v;
    else if (k == "--out") a.out = v;
    else if (k == "--start-ns") a.start_ns = std::stoll(v);
    else if (k == "--end-ns") a.end_ns = std::stoll(v);
    else if (k == "--drain-s") a.drain_s = std::stod(v);
    else if (k == "--edges") a.edges = v;
    else if (k == "--interval-s") a.interval_s = std::stod(v);
    else if (k == "--levels") a.levels = std::stoi(v);
    else if (k == "--keys") a.keys = std::stoi(v);
    else if (k == "--nice") a.nice = std::stoi(v);
    else if (k == "--ramp-s") a.ramp_s = std::stod(v);
    else if (k == "--think-ms") a.think_ms = std::stod(v);
    else if (k == "--seed") a.seed = static_cast<unsigned>(std::stoul(v));
    else die("unknown argument " + k);
  }
  if (a.mode != "streams" && a.mode != "attack") die("mode must be streams or attack, not " + a.mode);
  if (a.port <= 0 || a.start_ns <= 0 || a.out.empty()) die("--port, --start-ns and --out are required");
  return a;
}

int connect_nonblocking(const Args& a) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) die(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(a.port));
  if (inet_pton(AF_INET, a.host.c_str(), &addr.sin_addr) != 1) die("--host must be an IPv4 address: " + a.host);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS)
    die(std::string("connect: ") + std::strerror(errno));
  return fd;
}

// Incremental HTTP/1.1 response reader: status line + headers, then a chunked or Content-Length body (or one
// that ends at EOF). body_sink gets the decoded body bytes.
struct ResponseReader {
  std::string buf;
  bool headers_done = false, chunked = false, done = false;
  int status = 0;
  int64_t content_length = -1, chunk_left = -1;  // chunk_left -1: at a chunk-size line
  bool trailer = false;

  void reset() { *this = ResponseReader{}; }

  // Consumes what it can of buf; returns false on a malformed response.
  template <typename Sink>
  bool feed(Sink&& body_sink) {
    if (!headers_done) {
      size_t end = buf.find("\r\n\r\n");
      if (end == std::string::npos) return buf.size() < 65536;
      if (buf.compare(0, 5, "HTTP/") != 0) return false;
      status = std::atoi(buf.c_str() + buf.find(' ') + 1);
      std::string head = buf.substr(0, end);
      for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      chunked = head.find("transfer-encoding: chunked") != std::string::npos;
      size_t cl = head.find("content-length:");
      if (cl != std::string::npos) content_length = std::atoll(head.c_str() + cl + 15);
      buf.erase(0, end + 4);
      headers_done = true;
      if (status == 100) {  // interim response: the real one follows
        reset_keep_buf();
        return feed(body_sink);
      }
    }
    if (!chunked) {
      if (content_length >= 0) {
        size_t take = std::min<size_t>(buf.size(), static_cast<size_t>(content_length));
        body_sink(buf.data(), take);
        buf.erase(0, take);
        content_length -= static_cast<int64_t>(take);
        if (content_length == 0) done = true;
      } else {
        body_sink(buf.data(), buf.size());  // ends at EOF
        buf.clear();
      }
      return true;
    }
    while (!done) {
      if (trailer) {  // after the last chunk: CRLF (no trailers from our server)
        if (buf.size() < 2) return true;
        if (buf.compare(0, 2, "\r\n") != 0) return false;
        buf.erase(0, 2);
        done = true;
      } else if (chunk_left < 0) {
        size_t eol = buf.find("\r\n");
        if (eol == std::string::npos) return buf.size() < 1024;
        chunk_left = std::strtoll(buf.c_str(), nullptr, 16);
        buf.erase(0, eol + 2);
        if (chunk_left == 0) trailer = true;
      } else {
        size_t take = std::min<size_t>(buf.size(), static_cast<size_t>(chunk_left));
        body_sink(buf.data(), take);
        buf.erase(0, take);
        chunk_left -= static_cast<int64_t>(take);
        if (chunk_left > 0) return true;
        if (buf.size() < 2) return true;
        if (buf.compare(0, 2, "\r\n") != 0) return false;
        buf.erase(0, 2);
        chunk_left = -1;
      }
    }
    return true;
  }

 private:
  void reset_keep_buf() {
    std::string keep = std::move(buf);
    reset();
    buf = std::move(keep);
  }
};

// ------------------------------------------------------------------------------------------------ streams
struct Stream {
  int fd = -1;
  bool connected = false, in_flight = false;
  std::string out;  // request bytes not yet written
  size_t out_off = 0;
  ResponseReader rr;
  std::string sse;  // decoded body not yet split into events
  int64_t start = 0, first = 0;
  int tokens = 0;
  bool saw_done = false;
};

// True if an SSE event carries generated text: `"text":"` followed by anything but the closing quote.
bool event_has_text(const std::string& ev) {
  size_t p = ev.find("\"text\":\"");
  return p != std::string::npos && p + 8 < ev.size() && ev[p + 8] != '"';
}

int run_streams(const Args& a) {
  std::vector<std::string> requests;  // one per --body-file (comma-separated); each request picks one
  std::stringstream names(a.body_file);
  for (std::string name; std::getline(names, name, ',');) {
    std::ifstream f(name, std::ios::binary);
    if (!f) die("cannot read --body-file " + name);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string body = ss.str();
    requests.push_back("POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                       "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  }
  if (requests.empty()) die("--body-file is required");
  std::mt19937_64 rng(a.seed);
  std::uniform_real_distribution<double> think(0.0, a.think_ms * 1e6);
  std::uniform_int_distribution<size_t> pick(0, requests.size() - 1);
  FILE* out = std::fopen(a.out.c_str(), "w");
  if (!out) die("cannot write --out " + a.out);
  std::fprintf(out, "conn\tstart_ns\tfirst_ns\tend_ns\tstatus\ttokens\tok\n");

  int ep = epoll_create1(EPOLL_CLOEXEC);
  std::vector<Stream> streams(static_cast<size_t>(a.streams));
  auto arm = [&](size_t i, uint32_t events, int op) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = i;
    if (epoll_ctl(ep, op, streams[i].fd, &ev) != 0) die(std::string("epoll_ctl: ") + std::strerror(errno));
  };
  auto open_conn = [&](size_t i) {
    Stream& s = streams[i];
    s.fd = connect_nonblocking(a);
    s.connected = false;
    arm(i, EPOLLOUT, EPOLL_CTL_ADD);
  };
  auto finish = [&](size_t i, bool ok) {
    Stream& s = streams[i];
    std::fprintf(out, "%zu\t%lld\t%lld\t%lld\t%d\t%d\t%d\n", i, static_cast<long long>(s.start),
                 static_cast<long long>(s.first), static_cast<long long>(now_ns()), s.rr.status, s.tokens,
                 ok ? 1 : 0);
    s.in_flight = false;
  };
  int64_t failures = 0;
  auto send_next = [&](size_t i) {
    Stream& s = streams[i];
    if (now_ns() >= a.end_ns) return false;
    s.out = requests[pick(rng)];
    s.out_off = 0;
    s.rr.reset();
    s.sse.clear();
    s.first = 0;
    s.tokens = 0;
    s.saw_done = false;
    s.in_flight = true;
    s.start = now_ns();
    ssize_t n = send(s.fd, s.out.data(), s.out.size(), MSG_NOSIGNAL);
    if (n > 0) s.out_off = static_cast<size_t>(n);
    arm(i, s.out_off < s.out.size() ? (EPOLLIN | EPOLLOUT) : EPOLLIN, EPOLL_CTL_MOD);
    return true;
  };
  // Timers: (due ns, connection) of the next request of each idle connection.
  std::priority_queue<std::pair<int64_t, size_t>, std::vector<std::pair<int64_t, size_t>>, std::greater<>> due;
  size_t live = streams.size();
  auto retire = [&](size_t i) {  // past the end: this connection is done
    epoll_ctl(ep, EPOLL_CTL_DEL, streams[i].fd, nullptr);
    close(streams[i].fd);
    streams[i].fd = -1;
    --live;
  };
  auto drop = [&](size_t i) {  // error: record it, reconnect unless past the end
    Stream& s = streams[i];
    if (s.in_flight) finish(i, false);
    ++failures;
    epoll_ctl(ep, EPOLL_CTL_DEL, s.fd, nullptr);
    close(s.fd);
    s.fd = -1;
    if (now_ns() < a.end_ns) {
      open_conn(i);
    } else {
      --live;
    }
  };

  while (now_ns() < a.start_ns) {
    timespec ts{0, 1000000};
    nanosleep(&ts, nullptr);
  }
  for (size_t i = 0; i < streams.size(); ++i) open_conn(i);
  const int64_t hard_end = a.end_ns + static_cast<int64_t>(a.drain_s * 1e9);
  std::vector<epoll_event> events(512);
  std::vector<char> rbuf(1 << 16);
  while (live > 0 && now_ns() < hard_end) {
    int timeout_ms = 100;
    if (!due.empty()) timeout_ms = static_cast<int>(std::clamp<int64_t>((due.top().first - now_ns() + 999999) / 1000000, 0, 100));
    int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) die(std::string("epoll_wait: ") + std::strerror(errno));
    const int64_t t = now_ns();  // one clock read per wake-up: all events of it were ready at once
    while (!due.empty() && due.top().first <= t) {
      const size_t i = due.top().second;
      due.pop();
      Stream& s = streams[i];
      if (s.fd >= 0 && s.connected && !s.in_flight && !send_next(i)) retire(i);
    }
    for (int e = 0; e < n; ++e) {
      const size_t i = events[e].data.u64;
      Stream& s = streams[i];
      if (s.fd < 0) continue;
      if (!s.connected) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          std::fprintf(stderr, "connect failed: %s\n", std::strerror(err));
          drop(i);
          continue;
        }
        s.connected = true;
        arm(i, EPOLLIN, EPOLL_CTL_MOD);
        due.emplace(a.start_ns + static_cast<int64_t>(a.ramp_s * 1e9 * static_cast<double>(i) /
                                                      static_cast<double>(streams.size())), i);
        continue;
      }
      if ((events[e].events & EPOLLOUT) && s.out_off < s.out.size()) {
        ssize_t w = send(s.fd, s.out.data() + s.out_off, s.out.size() - s.out_off, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN) {
          drop(i);
          continue;
        }
        if (w > 0) s.out_off += static_cast<size_t>(w);
        if (s.out_off == s.out.size()) arm(i, EPOLLIN, EPOLL_CTL_MOD);
      }
      if (!(events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) continue;
      ssize_t r = recv(s.fd, rbuf.data(), rbuf.size(), 0);
      if (r < 0 && errno == EAGAIN) continue;
      if (r <= 0) {
        drop(i);
        continue;
      }
      s.rr.buf.append(rbuf.data(), static_cast<size_t>(r));
      const bool good = s.rr.feed([&](const char* p, size_t len) { s.sse.append(p, len); });
      if (!good) {
        drop(i);
        continue;
      }
      size_t cut;
      while ((cut = s.sse.find("\n\n")) != std::string::npos) {
        const std::string ev = s.sse.substr(0, cut);
        s.sse.erase(0, cut + 2);
        if (ev.find("data: [DONE]") != std::string::npos) {
          s.saw_done = true;
        } else if (event_has_text(ev)) {
          if (s.tokens++ == 0) s.first = t;
        }
      }
      if (!s.rr.done) continue;
      finish(i, s.rr.status == 200 && s.saw_done);
      due.emplace(t + static_cast<int64_t>(think(rng)), i);
    }
  }
  for (auto& s : streams)
    if (s.fd >= 0 && s.in_flight) {
      std::fprintf(out, "-1\t%lld\t%lld\t%lld\t%d\t%d\t0\n", static_cast<long long>(s.start),
                   static_cast<long long>(s.first), static_cast<long long>(now_ns()), s.rr.status, s.tokens);
    }
  std::fclose(out);
  std::fprintf(stderr, "streams: %lld connection failures\n", static_cast<long long>(failures));
  return 0;
}

// ------------------------------------------------------------------------------------------------- attack
std::string deep_body(int levels) {
  return "{\"prompt\": " + std::string(static_cast<size_t>(levels), '[') + std::string(static_cast<size_t>(levels), ']') +
         ", \"model\": \"x\"}";
}

std::string many_keys_body(int keys) {
  std::string s = "{";
  for (int i = 0; i < keys; ++i) s += (i ? ",\"unknown_key_" : "\"unknown_key_") + std::to_string(i) + "\": " + std::to_string(i);
  return s + ", \"prompt\": \"Once\"}";
}

struct Hostile {
  const char* kind;
  int fd = -1;
  std::string out;
  size_t off = 0;
  ResponseReader rr;
  int64_t start = 0, end = 0;
};

// Sends both bodies at once (one connection each) and reads both answers; returns when both are done.
void send_pair(const Args& a, std::vector<Hostile>& pair, const std::vector<std::string>& requests, FILE* out) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  for (size_t i = 0; i < pair.size(); ++i) {
    Hostile& h = pair[i];
    h.fd = connect_nonblocking(a);
    h.out = requests[i];
    h.off = 0;
    h.rr.reset();
    h.start = now_ns();
    h.end = 0;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT;
    ev.data.u64 = i;
    epoll_ctl(ep, EPOLL_CTL_ADD, h.fd, &ev);
  }
  size_t open = pair.size();
  std::vector<epoll_event> events(4);
  std::vector<char> rbuf(1 << 16);
  while (open > 0) {
    int n = epoll_wait(ep, events.data(), 4, 60000);
    if (n == 0) break;  // 60 s without progress: record what is missing as failed
    for (int e = 0; e < n; ++e) {
      Hostile& h = pair[events[e].data.u64];
      if (h.fd < 0) continue;
      bool closed = false;
      if ((events[e].events & EPOLLOUT) && h.off < h.out.size()) {
        ssize_t w = send(h.fd, h.out.data() + h.off, h.out.size() - h.off, MSG_NOSIGNAL);
        if (w > 0) h.off += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) closed = true;  // the server may answer before the body's end
        if (h.off == h.out.size() || closed) {
          epoll_event ev{};
          ev.events = EPOLLIN;
          ev.data.u64 = events[e].data.u64;
          epoll_ctl(ep, EPOLL_CTL_MOD, h.fd, &ev);
        }
      }
      if (events[e].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        ssize_t r = recv(h.fd, rbuf.data(), rbuf.size(), 0);
        if (r > 0) {
          h.rr.buf.append(rbuf.data(), static_cast<size_t>(r));
          h.rr.feed([](const char*, size_t) {});
          if (h.rr.done) closed = true;
        } else if (r == 0 || errno != EAGAIN) {
          closed = true;
        }
      }
      if (closed) {
        h.end = now_ns();
        close(h.fd);
        h.fd = -1;
        --open;
      }
    }
  }
  for (auto& h : pair) {
    if (h.fd >= 0) close(h.fd);
    std::fprintf(out, "%s\t%lld\t%lld\t%d\n", h.kind, static_cast<long long>(h.start),
                 static_cast<long long>(h.end ? h.end : now_ns()), h.end ? h.rr.status : -1);
  }
  std::fflush(out);
  close(ep);
}

int run_attack(const Args& a) {
  if (a.nice != 0 && setpriority(PRIO_PROCESS, 0, a.nice) != 0) die(std::string("setpriority: ") + std::strerror(errno));
  std::vector<double> edges;
  std::stringstream es(a.edges);
  for (std::string item; std::getline(es, item, ',');) edges.push_back(std::stod(item));
  if (edges.size() < 3) die("--edges needs at least 3 values (two windows)");
  auto request = [](const std::string& body) {
    return "POST /v1/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\nConnection: close\r\n"
           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  const std::vector<std::string> requests = {request(deep_body(a.levels)), request(many_keys_body(a.keys))};
  std::vector<Hostile> pair(2);
  pair[0].kind = "deep";
  pair[1].kind = "keys";
  FILE* out = std::fopen(a.out.c_str(), "w");
  if (!out) die("cannot write --out " + a.out);
  std::fprintf(out, "kind\tstart_ns\tend_ns\tstatus\n");
  const int64_t interval = static_cast<int64_t>(a.interval_s * 1e9);
  auto sleep_until = [](int64_t t) {
    for (int64_t d; (d = t - now_ns()) > 0;) {
      timespec ts{static_cast<time_t>(d / 1000000000), static_cast<long>(d % 1000000000)};
      nanosleep(&ts, nullptr);
    }
  };
  for (size_t w = 1; w + 1 < edges.size(); w += 2) {
    const int64_t w0 = a.start_ns + static_cast<int64_t>(edges[w] * 1e9);
    const int64_t w1 = a.start_ns + static_cast<int64_t>(edges[w + 1] * 1e9);
    // Pairs at w0 + k * interval (k >= 0) while inside the window; a pair that overruns delays the next.
    for (int64_t t = w0; t < w1; t += interval) {
      sleep_until(t);
      if (now_ns() >= w1) break;
      send_pair(a, pair, requests, out);
    }
  }
  std::fclose(out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse_args(argc, argv);
  return a.mode == "streams" ? run_streams(a) : run_attack(a);
}
