// lake_metrics.cpp — the fan-in's /metrics and /readyz (lake_metrics.h).
#include "lake/lake_metrics.h"

#include <chrono>

#include "kit/errors.h"
#include "pg/pg_connection.h"
#include "trellara/lake/epoch.h"

namespace trellara::cli::lake {

LakeMetrics::LakeMetrics(const LakeConfig& config, const std::string& listen)
    : config_(config), figures_(trellara::lake::LakeFigures{config.name}) {
  auto address = metrics::ParseListenAddress(listen);
  if (!address) throw CommandFailed("--metrics-listen " + listen + ": " + address.error().message, kExitConfig);
  server_ = std::make_unique<apply::MetricsServer>(
      *address, config_.path,
      [this] { return metrics::RenderExposition(trellara::lake::LakeFamilies(figures_.Get())); },
      [this] { return trellara::lake::LakeReadiness(figures_.Get()); });
  sampler_ = std::thread([this] { Sample(); });
}

LakeMetrics::~LakeMetrics() {
  stop_ = true;
  if (sampler_.joinable()) sampler_.join();
}

void LakeMetrics::Sample() {
  std::unique_ptr<PgConnection> conn;
  while (!stop_) {
    trellara::lake::LakeFigures f;
    f.lake = config_.name;
    if (!conn || conn->connection_lost()) {
      auto c = PgConnection::Connect(config_.catalog_conninfo, "trellara lake metrics " + config_.name);
      conn = c ? std::move(c.value()) : nullptr;
    }
    bool ok = conn != nullptr;
    auto one = [&](const std::string& sql) -> PgResult {
      PgResult r = conn->ExecParams(sql, {config_.name});
      if (!r.ok()) ok = false;
      return r;
    };
    if (ok) {
      // Every epoch the catalog knows (with transactions, or a row of its own), oldest first.
      PgResult states = one("SELECT coalesce(p.state, 'open'), p.pending_receipt IS NOT NULL FROM (SELECT DISTINCT epoch "
                            "FROM trellara_lake.transactions WHERE lake = $1 UNION SELECT epoch FROM "
                            "trellara_lake.epochs WHERE lake = $1) x LEFT JOIN trellara_lake.epochs p ON p.lake = $1 AND "
                            "p.epoch = x.epoch ORDER BY x.epoch");
      std::vector<trellara::lake::EpochState> ordered;
      for (int i = 0; ok && i < states.rows(); i++) {
        std::string state = *states.Value(i, 0);
        if (states.Value(i, 1) == std::optional<std::string>("t")) state = "pending_catalog_commit";
        f.epochs_by_state[state]++;
        using S = trellara::lake::EpochState;
        ordered.push_back(state == "complete" ? S::Complete : state == "complete_with_gaps" ? S::CompleteWithGaps
                          : state == "quarantined" ? S::Quarantined : state == "pending_catalog_commit" ? S::PendingCatalogCommit
                          : S::Open);
      }
      f.views_complete_through_epoch = trellara::lake::CompleteHorizon(ordered);
      PgResult admitted = ok ? one("SELECT count(*), coalesce(sum(changes), 0) FROM trellara_lake.transactions WHERE lake = $1")
                             : PgResult();
      if (ok) {
        f.transactions_admitted = std::stoull(*admitted.Value(0, 0));
        f.changes_admitted = std::stoull(*admitted.Value(0, 1));
      }
      PgResult published = ok ? one("SELECT coalesce(sum(transactions), 0), count(*) FILTER (WHERE pending_receipt IS NOT "
                                    "NULL), coalesce(extract(epoch FROM now() - max(published_at)), -1) FROM "
                                    "trellara_lake.epochs WHERE lake = $1")
                              : PgResult();
      if (ok) {
        f.transactions_published = std::stoull(*published.Value(0, 0));
        f.pending_commits = std::stoull(*published.Value(0, 1));
        f.last_publish_age_seconds = std::stod(*published.Value(0, 2));
      }
      PgResult stores = ok ? one("SELECT store, next_offset, extract(epoch FROM now()) - through_us / 1e6 FROM "
                                 "trellara_lake.stores WHERE lake = $1 ORDER BY store")
                           : PgResult();
      for (int i = 0; ok && i < stores.rows(); i++)
        f.stores.push_back({*stores.Value(i, 0), std::stoull(*stores.Value(i, 1)), std::stod(*stores.Value(i, 2))});
    }
    f.catalog_reachable = ok;
    if (!ok) f = trellara::lake::LakeFigures{config_.name, false};
    figures_.Set(f);
    for (int i = 0; i < 10 && !stop_; i++) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace trellara::cli::lake
