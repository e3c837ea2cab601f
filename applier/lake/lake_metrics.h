// lake_metrics.h — `trellara lake fanin run --metrics-listen HOST:PORT` (docs/lake.md "Metrics"):
// GET /metrics and GET /readyz of the fan-in, from what its catalog says. A thread of its own reads
// the catalog once a second (its own connection) and publishes the figures; the HTTP server renders
// the last ones (core lake/lake_metrics.h). It never touches the fan-in's own connection or loop.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "engine/metrics_server.h"
#include "lake/fanin.h"
#include "trellara/lake/lake_metrics.h"

namespace trellara::cli::lake {

class LakeMetrics {
 public:
  // Starts the sampler and the server, or throws CommandFailed naming --metrics-listen.
  LakeMetrics(const LakeConfig& config, const std::string& listen);
  ~LakeMetrics();  // stops both
  LakeMetrics(const LakeMetrics&) = delete;
  LakeMetrics& operator=(const LakeMetrics&) = delete;

 private:
  void Sample();
  const LakeConfig& config_;
  apply::Published<trellara::lake::LakeFigures> figures_;
  std::unique_ptr<apply::MetricsServer> server_;
  std::atomic<bool> stop_{false};
  std::thread sampler_;
};

}  // namespace trellara::cli::lake
