// lake_metrics.cpp — the fleet fan-in's metric families (lake_metrics.h).
#include "trellara/lake/lake_metrics.h"

#include "trellara/lake/epoch.h"

namespace trellara::lake {

std::vector<metrics::Family> LakeFamilies(const LakeFigures& f) {
  using metrics::Family;
  using metrics::MetricType;
  using metrics::Sample;
  const std::vector<std::pair<std::string, std::string>> lake = {{"lake", f.lake}};
  std::vector<Family> out;
  out.push_back({"trellara_lake_catalog_reachable", "1 when the catalog database answered the last read", MetricType::kGauge,
                 {Sample{lake, uint64_t{f.catalog_reachable ? 1u : 0u}}}});
  Family states{"trellara_lake_epochs", "epochs the catalog knows, by state", MetricType::kGauge, {}};
  for (EpochState s : {EpochState::Open, EpochState::Waiting, EpochState::CompleteWithGaps, EpochState::Complete,
                       EpochState::PendingCatalogCommit, EpochState::Quarantined}) {
    const std::string name(EpochStateName(s));
    auto it = f.epochs_by_state.find(name);
    states.samples.push_back(Sample{{{"lake", f.lake}, {"state", name}}, it == f.epochs_by_state.end() ? 0 : it->second});
  }
  out.push_back(states);
  out.push_back({"trellara_lake_transactions_admitted", "source transactions in the epochs' dedup sets",
                 MetricType::kGauge, {Sample{lake, f.transactions_admitted}}});
  out.push_back({"trellara_lake_changes_admitted", "row changes of those transactions", MetricType::kGauge,
                 {Sample{lake, f.changes_admitted}}});
  out.push_back({"trellara_lake_transactions_published", "transactions counted in published epochs",
                 MetricType::kGauge, {Sample{lake, f.transactions_published}}});
  out.push_back({"trellara_lake_pending_catalog_commits", "publications whose catalog commit is not settled",
                 MetricType::kGauge, {Sample{lake, f.pending_commits}}});
  out.push_back({"trellara_lake_views_complete_through_epoch",
                 "current-state views may reach the epochs below this index (all published complete)",
                 MetricType::kGauge, {Sample{lake, f.views_complete_through_epoch}}});
  out.push_back({"trellara_lake_last_publish_age_seconds", "seconds since the newest catalog commit (-1: none yet)",
                 MetricType::kGauge, {Sample{lake, f.last_publish_age_seconds}}});
  Family offset{"trellara_lake_store_next_offset", "the fan-in's position in each store's log", MetricType::kGauge, {}};
  Family lag{"trellara_lake_store_progress_lag_seconds",
             "now minus the source commit time each store is read through", MetricType::kGauge, {}};
  for (const auto& s : f.stores) {
    offset.samples.push_back(Sample{{{"lake", f.lake}, {"store", s.store}}, s.next_offset});
    lag.samples.push_back(Sample{{{"lake", f.lake}, {"store", s.store}}, s.progress_lag_seconds});
  }
  out.push_back(offset);
  out.push_back(lag);
  return out;
}

metrics::Readiness LakeReadiness(const LakeFigures& f) {
  if (!f.catalog_reachable) return {false, "lake_catalog_unreachable"};
  auto q = f.epochs_by_state.find("quarantined");
  if (q != f.epochs_by_state.end() && q->second > 0) return {false, "lake_epoch_quarantined"};
  return {true, "ready"};
}

}  // namespace trellara::lake
