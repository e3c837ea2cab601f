// view_tables.h — the lake's current-state and SCD2 history views as Iceberg tables
// (docs/lake.md "Views"): for each change-log table `<schema>__<name>`, `<schema>__<name>__current`
// and `<schema>__<name>__history`, rebuilt (one overwrite snapshot each) whenever the views'
// horizon moves, from the changes of the epochs below it only. What the views hold is core's
// (trellara/lake/views.h); which epochs they may reach is core's too (epoch.h CompleteHorizon,
// over the states the catalog holds). This is the adapter: it reads the changes from the catalog
// (trellara_lake.changes), writes content-addressed Parquet files, manifests and metadata files
// through the object store, and moves every view table's pointer and records the horizon
// (trellara_lake.views) in one catalog transaction. It never deletes a file and never builds a view
// from an epoch that is not `complete` (complete_with_gaps, quarantined, pending or open).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "lake/fanin.h"

namespace trellara::cli {
class PgConnection;
}

namespace trellara::cli::lake {

class ObjectStore;

// How far the views may reach: the first `epochs` epochs the catalog lists, every one published
// `complete` with no pending receipt; `through_epoch` is the index of the last of them.
struct ViewHorizon {
  uint64_t epochs = 0;
  std::optional<uint64_t> through_epoch;
  bool operator==(const ViewHorizon&) const = default;
};

// The horizon from what the catalog holds now. `allow_defects`: the fan-in's publication path only
// (the negative control defect.lake_views_past_incomplete_epoch); plan and verify never pass it.
ViewHorizon ReadViewHorizon(PgConnection& catalog, const LakeConfig& config, bool allow_defects = false);

// The fan-in's memory between passes: tables refused views (no key, ...) at a horizon, so a pass
// neither rebuilds for them nor says so again until the horizon moves.
struct ViewsMemory {
  std::map<std::string, std::optional<uint64_t>> refused_at;  // base table -> horizon it was refused at
};

// Rebuilds every view table whose recorded horizon is not the catalog's horizon now; one catalog
// transaction for all of them. Throws CommandFailed naming the table on any failure (nothing of
// it committed). Returns whether it committed anything.
bool PublishViews(PgConnection& catalog, ObjectStore& store, const LakeConfig& config, ViewsMemory& memory);

// `lake plan`: the horizon and each view table's recorded horizon and row count.
nlohmann::json DescribeViews(PgConnection& catalog, const LakeConfig& config);

// `lake fanin verify`: each view table at the catalog's horizon, its metadata file present, its
// row counts what core computes from the catalog's changes below the horizon. Appends a line to
// `problems` for each difference; returns the report's "views" object.
nlohmann::json VerifyViews(PgConnection& catalog, ObjectStore& store, const LakeConfig& config, nlohmann::json& problems);

}  // namespace trellara::cli::lake
