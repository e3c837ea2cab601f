// metrics_server.h — the applier's `GET /metrics` endpoint ([metrics] listen, docs/apply.md
// "Metrics"): libmicrohttpd serves, from its own thread, the last snapshot the apply loop
// published, rendered by core (trellara/report/metrics.h).
//
// The apply loop only ever copies a small struct under a mutex (Publish); rendering and the HTTP
// exchange happen on the server's thread. It never reads the log or the target and never blocks
// the apply loop on a scraper.
#pragma once

#include <mutex>
#include <string>

#include "trellara/report/metrics.h"

struct MHD_Daemon;

namespace trellara::cli::apply {

class MetricsServer {
 public:
  // Starts serving on `address`, or throws CommandFailed (exit 1) naming metrics.listen in
  // `config_path` when it cannot (the address is taken, not local to this host...).
  MetricsServer(const metrics::ListenAddress& address, const std::string& config_path,
                metrics::ApplySnapshot initial);
  ~MetricsServer();  // stops the server thread
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  void Publish(const metrics::ApplySnapshot& snapshot);
  metrics::ApplySnapshot Snapshot();
  // The answer to GET /metrics: the rendered body, or an error (a bug: a name core refuses).
  Result<std::string> Render();

 private:
  std::mutex mutex_;
  metrics::ApplySnapshot snapshot_;
  MHD_Daemon* daemon_ = nullptr;
};

}  // namespace trellara::cli::apply
