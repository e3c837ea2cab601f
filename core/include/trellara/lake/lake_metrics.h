// lake_metrics.h — the fleet fan-in's Prometheus metrics (docs/lake.md "Metrics"): what the catalog
// says about the lake, as metric families for core's exposition renderer (report/metrics.h), and
// the fan-in's readiness. Pure: the adapter (applier/lake/lake_metrics.cpp) reads the catalog and
// hands the figures over; nothing here reads a clock, a socket or a database.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trellara/report/metrics.h"

namespace trellara::lake {

struct LakeStoreFigures {
  std::string store;
  uint64_t next_offset = 0;         // the fan-in's position in the store's log
  double progress_lag_seconds = 0;  // now - the commit time the store is read through
};

struct LakeFigures {
  std::string lake;
  bool catalog_reachable = true;
  std::map<std::string, uint64_t> epochs_by_state;  // every EpochStateName, 0 when none
  uint64_t transactions_admitted = 0;  // in the dedup sets (every epoch)
  uint64_t changes_admitted = 0;
  uint64_t transactions_published = 0;  // counted in published epochs
  uint64_t pending_commits = 0;         // publications whose catalog commit is not settled
  uint64_t views_complete_through_epoch = 0;
  double last_publish_age_seconds = -1;  // since the newest catalog commit; -1: none yet
  std::vector<LakeStoreFigures> stores;
};

std::vector<metrics::Family> LakeFamilies(const LakeFigures& figures);
// Not ready: the catalog cannot be read, or an epoch is quarantined (reason names it).
metrics::Readiness LakeReadiness(const LakeFigures& figures);

}  // namespace trellara::lake
