// metrics_server.h — the `GET /metrics` and `GET /readyz` endpoint of trellara apply and trellara
// forward ([metrics] listen, docs/apply.md "Metrics", docs/broker.md): libmicrohttpd serves, from
// its own thread, the last snapshot the process published, rendered by core
// (trellara/report/metrics.h).
//
// The process's loop only ever copies a small struct under a mutex (Published::Set); rendering and
// the HTTP exchange happen on the server's thread. It never reads the log, the broker or the
// target and never blocks the loop on a scraper.
#pragma once

#include <functional>
#include <mutex>
#include <string>

#include "trellara/report/metrics.h"

struct MHD_Daemon;

namespace trellara::cli::apply {

// A value one thread publishes and the server's thread reads: copied under a mutex.
template <typename T>
class Published {
 public:
  explicit Published(T initial = T{}) : value_(std::move(initial)) {}
  void Set(const T& value) {
    std::lock_guard<std::mutex> lock(mutex_);
    value_ = value;
  }
  T Get() {
    std::lock_guard<std::mutex> lock(mutex_);
    return value_;
  }

 private:
  std::mutex mutex_;
  T value_;
};

// GET /metrics (the body `metrics` renders) and GET /readyz (200 "ready", or 503 with the reason
// `ready` gives) for one process: the applier or the forwarder. Both callbacks run on the server's
// thread and must only read a Published value.
class MetricsServer {
 public:
  using Render = std::function<Result<std::string>()>;
  using Ready = std::function<metrics::Readiness()>;
  // Starts serving on `address`, or throws CommandFailed (exit 1) naming metrics.listen in
  // `config_path` when it cannot (the address is taken, not local to this host...).
  MetricsServer(const metrics::ListenAddress& address, const std::string& config_path, Render metrics, Ready ready);
  ~MetricsServer();  // stops the server thread
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  Result<std::string> RenderMetrics() { return render_(); }
  metrics::Readiness Readiness() { return ready_(); }

 private:
  Render render_;
  Ready ready_;
  MHD_Daemon* daemon_ = nullptr;
};

}  // namespace trellara::cli::apply
