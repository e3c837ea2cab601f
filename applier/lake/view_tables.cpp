// view_tables.cpp — the current-state and history views as Iceberg tables (view_tables.h). The
// rules of what they hold are core's (trellara/lake/views.h); this file reads the catalog, writes
// the files and commits. It must never build a view from an epoch past the horizon and never
// delete a file.
#include "lake/view_tables.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>

#include "kit/errors.h"
#include "lake/catalog_text.h"
#include "lake/object_store.h"
#include "pg/pg_connection.h"
#include "trellara/base/fault.h"
#include "trellara/lake/iceberg_manifest.h"
#include "trellara/lake/iceberg_table.h"
#include "trellara/lake/parquet_writer.h"
#include "trellara/lake/views.h"
#include "trellara/record/envelope.h"
#include "trellara/report/pilot_package.h"

namespace trellara::cli::lake {
namespace core = trellara::lake;
using json = nlohmann::json;

namespace {

constexpr const char* kCurrentSuffix = "__current";
constexpr const char* kHistorySuffix = "__history";
// Columns every view row starts with, before the source's columns (docs/lake.md "Views").
constexpr int32_t kCurrentOwnColumns = 4;
constexpr int32_t kHistoryOwnColumns = 8;

PgResult MustView(PgConnection& catalog, const LakeConfig& config, PgResult r, const std::string& what) {
  if (r.ok()) return r;
  throw CommandFailed("lake " + config.name + ": " + what + " failed on the catalog database " + catalog.Describe() +
                      ": " + r.Describe());
}
PgResult RunView(PgConnection& catalog, const LakeConfig& config, const std::string& sql, const SqlParams& params,
             const std::string& what) {
  return MustView(catalog, config, catalog.ExecParams(sql, params), what);
}

void SayView(const LakeConfig& config, const std::string& event, const std::string& fields) {
  std::cerr << "lake fanin lake=" << config.name << " event=" << event << (fields.empty() ? "" : " " + fields)
            << std::endl;
}

std::string ThroughText(const std::optional<uint64_t>& through) {
  return through ? core::EpochName(*through) : std::string("none");
}

std::vector<core::ParquetColumn> CurrentColumns(const std::vector<std::string>& source_columns) {
  using T = core::ColumnType;
  std::vector<core::ParquetColumn> c = {{"_source", 1, T::kString, true, 0, 0},
                                        {"_commit_lsn", 2, T::kString, true, 0, 0},
                                        {"_xid", 3, T::kLong, true, 0, 0},
                                        {"_commit_time", 4, T::kTimestampTz, true, 0, 0}};
  int32_t id = kCurrentOwnColumns + 1;
  for (const auto& name : source_columns) c.push_back({name, id++, T::kString, false, 0, 0});
  return c;
}

std::vector<core::ParquetColumn> HistoryColumns(const std::vector<std::string>& source_columns) {
  using T = core::ColumnType;
  std::vector<core::ParquetColumn> c = {{"_source", 1, T::kString, true, 0, 0},
                                        {"_valid_from_lsn", 2, T::kString, true, 0, 0},
                                        {"_valid_from_xid", 3, T::kLong, true, 0, 0},
                                        {"_valid_from_time", 4, T::kTimestampTz, true, 0, 0},
                                        {"_valid_to_lsn", 5, T::kString, false, 0, 0},
                                        {"_valid_to_xid", 6, T::kLong, false, 0, 0},
                                        {"_valid_to_time", 7, T::kTimestampTz, false, 0, 0},
                                        {"_is_current", 8, T::kBoolean, true, 0, 0}};
  int32_t id = kHistoryOwnColumns + 1;
  for (const auto& name : source_columns) c.push_back({name, id++, T::kString, false, 0, 0});
  return c;
}

void AddValues(std::vector<core::CellValue>& cells, const core::ViewCells& values) {
  for (const auto& v : values) {
    if (v) cells.emplace_back(std::in_place_type<std::string>, *v);
    else cells.emplace_back(std::in_place_type<core::NullValue>);
  }
}

std::vector<std::vector<core::CellValue>> CurrentRows(const core::TableViews& views) {
  std::vector<std::vector<core::CellValue>> rows;
  for (const auto& v : views.Current()) {
    std::vector<core::CellValue> cells;
    cells.emplace_back(std::in_place_type<std::string>, v.source);
    cells.emplace_back(std::in_place_type<std::string>, FormatLsn(v.valid_from_lsn));
    cells.emplace_back(std::in_place_type<int64_t>, static_cast<int64_t>(v.valid_from_xid));
    cells.emplace_back(std::in_place_type<int64_t>, static_cast<int64_t>(v.valid_from_time_us));
    AddValues(cells, v.values);
    rows.push_back(std::move(cells));
  }
  return rows;
}

std::vector<std::vector<core::CellValue>> HistoryRows(const core::TableViews& views) {
  std::vector<std::vector<core::CellValue>> rows;
  for (const auto& v : views.history) {
    std::vector<core::CellValue> cells;
    cells.emplace_back(std::in_place_type<std::string>, v.source);
    cells.emplace_back(std::in_place_type<std::string>, FormatLsn(v.valid_from_lsn));
    cells.emplace_back(std::in_place_type<int64_t>, static_cast<int64_t>(v.valid_from_xid));
    cells.emplace_back(std::in_place_type<int64_t>, static_cast<int64_t>(v.valid_from_time_us));
    if (v.valid_to_lsn) {
      cells.emplace_back(std::in_place_type<std::string>, FormatLsn(*v.valid_to_lsn));
      cells.emplace_back(std::in_place_type<int64_t>, static_cast<int64_t>(*v.valid_to_xid));
      cells.emplace_back(std::in_place_type<int64_t>, static_cast<int64_t>(*v.valid_to_time_us));
    } else {
      for (int i = 0; i < 3; i++) cells.emplace_back(std::in_place_type<core::NullValue>);
    }
    cells.emplace_back(std::in_place_type<bool>, v.is_current());
    AddValues(cells, v.values);
    rows.push_back(std::move(cells));
  }
  return rows;
}

// The change-log tables the views are built for (not the events table), with their columns.
std::map<std::string, std::vector<std::string>> BaseTables(PgConnection& catalog, const LakeConfig& config) {
  PgResult r = RunView(catalog, config, "SELECT table_name, source_columns FROM trellara_lake.tables WHERE lake = $1 "
                                    "ORDER BY table_name", {config.name}, "reading the lake's tables");
  std::map<std::string, std::vector<std::string>> out;
  for (int i = 0; i < r.rows(); i++) {
    const std::string table = *r.Value(i, 0);
    if (table.rfind("_trellara__", 0) == 0) continue;  // DDL and logical messages: no rows to keep
    std::vector<std::string> columns;
    for (const auto& v : ParseArray(r.Value(i, 1).value_or("{}"))) columns.push_back(v.value_or(""));
    out[table] = columns;
  }
  return out;
}

// The changes of every epoch up to `through` (inclusive), by lake table.
std::map<std::string, std::vector<core::ViewChange>> ChangesThrough(PgConnection& catalog, const LakeConfig& config,
                                                                    const std::optional<uint64_t>& through) {
  std::map<std::string, std::vector<core::ViewChange>> out;
  if (!through) return out;
  PgResult r = RunView(catalog, config,
                   "SELECT c.relation, c.store, c.commit_lsn::text, c.xid, c.position, t.commit_time_us, c.op, "
                   "c.columns, c.vals, c.unchanged, c.key_columns, c.old_key FROM trellara_lake.changes c JOIN "
                   "trellara_lake.transactions t USING (lake, store, commit_lsn, xid) WHERE c.lake = $1 AND "
                   "c.epoch <= $2 AND c.relation NOT LIKE '\\_trellara.%' "
                   "ORDER BY c.relation, c.store, c.commit_lsn, c.xid, c.position",
                   {config.name, std::to_string(*through)}, "reading the changes below the views' horizon");
  auto strings = [](const std::optional<std::string>& text) {
    std::vector<std::string> v;
    for (const auto& s : ParseArray(text.value_or("{}"))) v.push_back(s.value_or(""));
    return v;
  };
  for (int i = 0; i < r.rows(); i++) {
    core::ViewChange c;
    c.source = *r.Value(i, 1);
    c.commit_lsn = ParseLsn(*r.Value(i, 2)).value_or(0);
    c.xid = static_cast<uint32_t>(std::stoull(*r.Value(i, 3)));
    c.position = static_cast<uint32_t>(std::stoul(*r.Value(i, 4)));
    c.commit_time_us = std::stoull(*r.Value(i, 5));
    auto op = core::ParseViewOp(*r.Value(i, 6));
    if (!op) throw CommandFailed("lake " + config.name + ": a staged change of relation " + *r.Value(i, 0) + ": " + op.error().message);
    c.op = *op;
    c.columns = strings(r.Value(i, 7));
    c.values = ParseArray(r.Value(i, 8).value_or("{}"));
    c.unchanged = strings(r.Value(i, 9));
    c.key_columns = strings(r.Value(i, 10));
    if (r.Value(i, 11)) c.old_key = ParseArray(*r.Value(i, 11));
    if (c.op == core::ViewOp::kTruncate) c.values.assign(c.columns.size(), std::nullopt);
    out[TableNameOf(*r.Value(i, 0))].push_back(std::move(c));
  }
  return out;
}

struct BuiltViews {
  std::map<std::string, core::TableViews> tables;      // base table -> its views
  std::map<std::string, std::string> refused;          // base table -> why it has no views
};

BuiltViews BuildViews(PgConnection& catalog, const LakeConfig& config, const ViewHorizon& horizon) {
  BuiltViews built;
  auto changes = ChangesThrough(catalog, config, horizon.through_epoch);
  for (auto& [table, columns] : BaseTables(catalog, config)) {
    auto views = core::BuildTableViews(table, columns, std::move(changes[table]));
    if (!views) built.refused[table] = views.error().message;
    else built.tables.emplace(table, std::move(*views));
  }
  return built;
}

// What one view table's commit changes in the catalog.
struct ViewPointer {
  std::string table, base, kind, uuid, metadata, previous;
  bool exists = false;
  json snapshots, metadata_log;
  uint64_t rows = 0;
};

std::string UuidOf(const std::string& seed) {
  std::string u = pilot::Sha256Hex(seed).substr(0, 32);
  return u.substr(0, 8) + "-" + u.substr(8, 4) + "-4" + u.substr(13, 3) + "-8" + u.substr(17, 3) + "-" + u.substr(20, 12);
}

// Writes one view table's new snapshot (data file, manifest, manifest list, metadata file) and
// returns what its catalog commit moves. The snapshot replaces the table's content: its manifest
// list names only its own manifest (operation "overwrite").
ViewPointer WriteViewTable(PgConnection& catalog, ObjectStore& store, const LakeConfig& config, const std::string& base,
                           const std::string& kind, const std::vector<core::ParquetColumn>& columns,
                           const std::vector<std::vector<core::CellValue>>& rows, const ViewHorizon& horizon) {
  ViewPointer p;
  p.table = base + (kind == "current" ? kCurrentSuffix : kHistorySuffix);
  p.base = base;
  p.kind = kind;
  PgResult held = RunView(catalog, config, "SELECT table_uuid, snapshots::text, metadata_log::text FROM trellara_lake.views "
                                       "WHERE lake = $1 AND table_name = $2",
                      {config.name, p.table}, "reading view table " + p.table);
  p.uuid = held.rows() == 1 ? *held.Value(0, 0) : UuidOf(config.name + "/" + p.table);
  p.snapshots = json::parse(held.rows() == 1 ? held.Value(0, 1).value_or("[]") : "[]");
  p.metadata_log = json::parse(held.rows() == 1 ? held.Value(0, 2).value_or("[]") : "[]");
  auto writer = core::ParquetWriter::Create(columns, core::ParquetWriterOptions{});
  if (!writer) throw CommandFailed("view table " + p.table + ": " + writer.error().message);
  for (const auto& row : rows)
    if (Status s = writer->AppendRow(row); !s.ok()) throw CommandFailed("view table " + p.table + ": " + s.error().message);
  auto file = std::move(*writer).Finish();
  if (!file) throw CommandFailed("view table " + p.table + ": " + file.error().message);
  p.rows = static_cast<uint64_t>(file->record_count);
  const std::string through = ThroughText(horizon.through_epoch);
  const std::string address = pilot::Sha256Hex(std::span<const uint8_t>(file->bytes.data(), file->bytes.size()));
  const std::string table_key = config.name + "/" + p.table;
  const std::string data_key = table_key + "/data/views-" + through + "-" + address + ".parquet";
  const std::string data_path = store.Location(data_key);
  store.PutOnce(data_key, file->bytes);
  const int64_t sequence = static_cast<int64_t>(p.snapshots.size()) + 1;
  const std::string receipt = pilot::Sha256Hex(p.table + "/" + std::to_string(sequence) + "/" + through + "/" + address);
  const int64_t snapshot_id = core::SnapshotIdOf(receipt);
  core::DataManifest manifest{core::IcebergSchemaJson(columns, 0), 0, snapshot_id, {core::DataFileEntryOf(data_path, *file)}};
  core::AvroSyncMarker sync{};
  for (size_t i = 0; i < sync.size(); i++) sync[i] = static_cast<uint8_t>(std::stoul(receipt.substr(i * 2, 2), nullptr, 16));
  auto manifest_bytes = core::WriteDataManifest(manifest, sync);
  if (!manifest_bytes) throw CommandFailed("view table " + p.table + ": " + manifest_bytes.error().message);
  const std::string manifest_key = table_key + "/metadata/" + receipt.substr(0, 32) + "-m0.avro";
  const std::string manifest_path = store.Location(manifest_key);
  store.PutOnce(manifest_key, *manifest_bytes);
  core::ManifestList list;
  list.snapshot_id = snapshot_id;
  if (!p.snapshots.empty()) list.parent_snapshot_id = p.snapshots.back()["snapshot-id"].get<int64_t>();
  list.sequence_number = sequence;
  list.manifests.push_back({manifest_path, static_cast<int64_t>(manifest_bytes->size()), sequence, sequence, snapshot_id, 1,
                            file->record_count});
  auto list_bytes = core::WriteManifestList(list, sync);
  if (!list_bytes) throw CommandFailed("view table " + p.table + ": " + list_bytes.error().message);
  const std::string list_key = table_key + "/metadata/snap-" + std::to_string(snapshot_id) + "-" + receipt.substr(0, 16) + ".avro";
  const std::string list_path = store.Location(list_key);
  store.PutOnce(list_key, *list_bytes);
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch()).count();
  p.snapshots.push_back({{"snapshot-id", snapshot_id}, {"sequence", sequence}, {"timestamp-ms", now_ms},
                         {"manifest-list", list_path}, {"through-epoch", through}, {"horizon-epochs", horizon.epochs},
                         {"data-file", data_path}, {"records", file->record_count}});
  core::IcebergTableMetadata md;
  md.table_uuid = p.uuid;
  md.location = store.Location(table_key);
  md.last_updated_ms = now_ms;
  md.columns = columns;
  md.properties = {{"trellara.lake", config.name}, {"trellara.view-of", base}, {"trellara.view", kind}};
  for (size_t i = 0; i < p.snapshots.size(); i++) {
    const json& s = p.snapshots[i];
    core::IcebergSnapshot is;
    is.snapshot_id = s["snapshot-id"].get<int64_t>();
    if (i > 0) is.parent_snapshot_id = p.snapshots[i - 1]["snapshot-id"].get<int64_t>();
    is.sequence_number = s["sequence"].get<int64_t>();
    is.timestamp_ms = s["timestamp-ms"].get<int64_t>();
    is.manifest_list = s["manifest-list"].get<std::string>();
    const int64_t replaced = i > 0 ? p.snapshots[i - 1]["records"].get<int64_t>() : 0;
    is.summary = {{"operation", i > 0 ? "overwrite" : "append"},
                  {"added-data-files", "1"},
                  {"added-records", std::to_string(s["records"].get<int64_t>())},
                  {"deleted-data-files", i > 0 ? "1" : "0"},
                  {"deleted-records", std::to_string(replaced)},
                  {"total-data-files", "1"},
                  {"total-records", std::to_string(s["records"].get<int64_t>())},
                  {"trellara.view", kind},
                  {"trellara.views-through-epoch", s["through-epoch"].get<std::string>()},
                  {"trellara.views-horizon-epochs", std::to_string(s["horizon-epochs"].get<uint64_t>())}};
    md.snapshots.push_back(is);
  }
  for (const auto& e : p.metadata_log) md.metadata_log.push_back({e["timestamp-ms"].get<int64_t>(), e["metadata-file"].get<std::string>()});
  PgResult current = RunView(catalog, config, "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = $1 AND "
                                          "table_namespace = $1 AND table_name = $2",
                         {config.name, p.table}, "reading the catalog's pointer of " + p.table);
  if (current.rows() == 1 && current.Value(0, 0)) {
    p.exists = true;
    p.previous = *current.Value(0, 0);
    md.metadata_log.push_back({now_ms, p.previous});
    p.metadata_log.push_back({{"timestamp-ms", now_ms}, {"metadata-file", p.previous}});
  }
  const std::string text = core::TableMetadataJson(md);
  const std::string metadata_key =
      table_key + "/metadata/" + std::to_string(sequence) + "-" + pilot::Sha256Hex(text).substr(0, 32) + ".metadata.json";
  p.metadata = store.Location(metadata_key);
  store.PutOnce(metadata_key, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  return p;
}

}  // namespace

ViewHorizon ReadViewHorizon(PgConnection& catalog, const LakeConfig& config, bool allow_defects) {
  PgResult r = RunView(catalog, config,
                   "SELECT e.epoch, coalesce(p.state, 'open'), p.pending_receipt IS NOT NULL FROM (SELECT DISTINCT "
                   "epoch FROM trellara_lake.transactions WHERE lake = $1 UNION SELECT epoch FROM trellara_lake.epochs "
                   "WHERE lake = $1) e LEFT JOIN trellara_lake.epochs p ON p.lake = $1 AND p.epoch = e.epoch "
                   "ORDER BY e.epoch",
                   {config.name}, "reading the epochs for the views' horizon");
  std::vector<core::EpochState> states;
  std::vector<uint64_t> indexes;
  for (int i = 0; i < r.rows(); i++) {
    const std::string state = *r.Value(i, 1);
    const bool pending = r.Value(i, 2) == std::optional<std::string>("t");
    core::EpochState s = core::EpochState::Open;
    if (pending) s = core::EpochState::PendingCatalogCommit;
    else if (state == "complete") s = core::EpochState::Complete;
    else if (state == "complete_with_gaps") s = core::EpochState::CompleteWithGaps;
    else if (state == "quarantined") s = core::EpochState::Quarantined;
    // Negative control (tests only): an epoch published with gaps is taken as complete, so the
    // views reach past the horizon.
    if (allow_defects && s == core::EpochState::CompleteWithGaps &&
        fault::Hit("defect.lake_views_past_incomplete_epoch") == fault::Action::Defect)
      s = core::EpochState::Complete;
    states.push_back(s);
    indexes.push_back(std::stoull(*r.Value(i, 0)));
  }
  ViewHorizon h;
  h.epochs = core::CompleteHorizon(states);
  if (h.epochs > 0) h.through_epoch = indexes[h.epochs - 1];
  return h;
}

bool PublishViews(PgConnection& catalog, ObjectStore& store, const LakeConfig& config, ViewsMemory& memory) {
  const ViewHorizon horizon = ReadViewHorizon(catalog, config, true);
  const std::string through = ThroughText(horizon.through_epoch);
  // Which view tables are not at the horizon (or missing for a table with changes below it).
  PgResult recorded = RunView(catalog, config, "SELECT base_table, through_epoch FROM trellara_lake.views WHERE lake = $1",
                          {config.name}, "reading the views' horizon");
  std::map<std::string, std::optional<uint64_t>> at;
  for (int i = 0; i < recorded.rows(); i++)
    at[*recorded.Value(i, 0)] = recorded.Value(i, 1) ? std::optional<uint64_t>(std::stoull(*recorded.Value(i, 1))) : std::nullopt;
  if (!horizon.through_epoch && at.empty()) return false;  // nothing complete yet, no view to withdraw
  bool stale = false;
  const auto bases = BaseTables(catalog, config);
  auto behind = [&](const std::string& base) {
    auto a = at.find(base);
    return a == at.end() ? horizon.through_epoch.has_value() : a->second != horizon.through_epoch;
  };
  for (const auto& [base, columns] : bases) {
    auto r = memory.refused_at.find(base);
    if (behind(base) && (r == memory.refused_at.end() || r->second != horizon.through_epoch)) stale = true;
  }
  if (!stale) return false;
  BuiltViews built = BuildViews(catalog, config, horizon);
  for (const auto& [table, why] : built.refused) {
    auto r = memory.refused_at.find(table);
    if (r == memory.refused_at.end() || r->second != horizon.through_epoch)
      SayView(config, "views_refused", "table=" + table + " through_epoch=" + through + " reason=\"" + why + "\"");
    memory.refused_at[table] = horizon.through_epoch;
  }
  std::vector<ViewPointer> pointers;
  for (const auto& [base, views] : built.tables) {
    if (!behind(base)) continue;  // already at the horizon (another table was behind)
    pointers.push_back(WriteViewTable(catalog, store, config, base, "current", CurrentColumns(views.columns),
                                      CurrentRows(views), horizon));
    pointers.push_back(WriteViewTable(catalog, store, config, base, "history", HistoryColumns(views.columns),
                                      HistoryRows(views), horizon));
  }
  if (pointers.empty()) return false;
  MustView(catalog, config, catalog.Exec("BEGIN"), "BEGIN of the views' catalog commit");
  for (const auto& p : pointers) {
    PgResult moved = p.exists
        ? RunView(catalog, config, "UPDATE iceberg_tables SET metadata_location = $3, previous_metadata_location = $4 WHERE "
                               "catalog_name = $1 AND table_namespace = $1 AND table_name = $2 AND metadata_location = $4",
              {config.name, p.table, p.metadata, p.previous}, "moving the pointer of " + p.table)
        : RunView(catalog, config, "INSERT INTO iceberg_tables VALUES ($1, $1, $2, $3, NULL, 'TABLE') ON CONFLICT DO NOTHING",
              {config.name, p.table, p.metadata}, "creating view table " + p.table);
    if (moved.affected() != 1) {
      catalog.Exec("ROLLBACK");
      throw CommandFailed("view table " + p.table + " moved in the catalog while the views were rebuilt to " + through +
                          " (another fan-in of lake " + config.name + "?); nothing was committed; run one fan-in");
    }
    RunView(catalog, config,
        "INSERT INTO trellara_lake.views (lake, table_name, base_table, kind, table_uuid, through_epoch, horizon_epochs, "
        "rows, snapshots, metadata_log, built_at) VALUES ($1, $2, $3, $4, $5, $6::bigint, $7, $8, $9::jsonb, $10::jsonb, "
        "now()) ON CONFLICT (lake, table_name) DO UPDATE SET through_epoch = EXCLUDED.through_epoch, horizon_epochs = "
        "EXCLUDED.horizon_epochs, rows = EXCLUDED.rows, snapshots = EXCLUDED.snapshots, metadata_log = "
        "EXCLUDED.metadata_log, built_at = now()",
        {config.name, p.table, p.base, p.kind, p.uuid,
         horizon.through_epoch ? std::optional<std::string>(std::to_string(*horizon.through_epoch)) : std::nullopt,
         std::to_string(horizon.epochs), std::to_string(p.rows), p.snapshots.dump(), p.metadata_log.dump()},
        "recording view table " + p.table);
  }
  MustView(catalog, config, catalog.Exec("COMMIT"), "COMMIT of the views' catalog commit");
  for (const auto& p : pointers)
    SayView(config, "views_published", "table=" + p.table + " through_epoch=" + through + " rows=" + std::to_string(p.rows));
  return true;
}

json DescribeViews(PgConnection& catalog, const LakeConfig& config) {
  const ViewHorizon horizon = ReadViewHorizon(catalog, config);
  PgResult r = RunView(catalog, config, "SELECT table_name, base_table, kind, through_epoch, rows, built_at::text FROM "
                                    "trellara_lake.views WHERE lake = $1 ORDER BY table_name",
                   {config.name}, "reading the views");
  json tables = json::array();
  for (int i = 0; i < r.rows(); i++) {
    const auto through = r.Value(i, 3);
    tables.push_back({{"table", *r.Value(i, 0)}, {"view_of", *r.Value(i, 1)}, {"kind", *r.Value(i, 2)},
                      {"through_epoch", through ? json(core::EpochName(std::stoull(*through))) : json(nullptr)},
                      {"rows", std::stoull(*r.Value(i, 4))}, {"built_at", r.Value(i, 5).value_or("")}});
  }
  return {{"horizon_epochs", horizon.epochs},
          {"through_epoch", horizon.through_epoch ? json(core::EpochName(*horizon.through_epoch)) : json(nullptr)},
          {"tables", tables}};
}

json VerifyViews(PgConnection& catalog, ObjectStore& store, const LakeConfig& config, json& problems) {
  const ViewHorizon horizon = ReadViewHorizon(catalog, config);
  const std::string through = ThroughText(horizon.through_epoch);
  BuiltViews built = BuildViews(catalog, config, horizon);
  PgResult r = RunView(catalog, config,
                   "SELECT v.table_name, v.base_table, v.kind, v.through_epoch, v.rows, v.snapshots::text, "
                   "i.metadata_location FROM trellara_lake.views v LEFT JOIN iceberg_tables i ON i.catalog_name = v.lake "
                   "AND i.table_namespace = v.lake AND i.table_name = v.table_name WHERE v.lake = $1 ORDER BY v.table_name",
                   {config.name}, "reading the views");
  json out = json::array();
  std::set<std::string> seen;
  for (int i = 0; i < r.rows(); i++) {
    const std::string table = *r.Value(i, 0), base = *r.Value(i, 1), kind = *r.Value(i, 2);
    seen.insert(table);
    const std::string recorded = r.Value(i, 3) ? core::EpochName(std::stoull(*r.Value(i, 3))) : "none";
    const uint64_t rows = std::stoull(*r.Value(i, 4));
    if (recorded != through)
      problems.push_back("view table " + table + " is built through " + recorded + "; the views' horizon (the first "
                         "epochs, every one complete) is through " + through);
    auto b = built.tables.find(base);
    std::optional<uint64_t> expected;
    if (b != built.tables.end()) expected = kind == "current" ? b->second.Current().size() : b->second.history.size();
    if (!expected)
      problems.push_back("view table " + table + " exists but its table " + base + " has no views: " +
                         (built.refused.count(base) ? built.refused[base] : "no such change-log table"));
    else if (*expected != rows)
      problems.push_back("view table " + table + " holds " + std::to_string(rows) + " rows; the changes below the "
                         "horizon (through " + through + ") give " + std::to_string(*expected));
    const json snapshots = json::parse(r.Value(i, 5).value_or("[]"));
    if (snapshots.empty() || snapshots.back()["records"].get<uint64_t>() != rows) {
      problems.push_back("view table " + table + ": its last snapshot does not hold the " + std::to_string(rows) +
                         " rows recorded");
    } else {
      const std::string path = snapshots.back()["data-file"].get<std::string>();
      const auto key = store.KeyOf(path);
      const auto content = key ? store.Get(*key) : std::nullopt;
      if (!content) problems.push_back("view table " + table + ": data file " + path + " is missing");
      else if (path.find(pilot::Sha256Hex(*content)) == std::string::npos)
        problems.push_back("view table " + table + ": data file " + path + " does not hold the content its name addresses");
    }
    const auto location = r.Value(i, 6);
    const auto object = location ? store.KeyOf(*location) : std::nullopt;
    if (!object || !store.Exists(*object))
      problems.push_back("view table " + table + ": the catalog's metadata file " + location.value_or("(none)") + " is missing");
    out.push_back({{"table", table}, {"kind", kind}, {"through_epoch", recorded}, {"rows", rows},
                   {"expected_rows", expected ? json(*expected) : json(nullptr)}});
  }
  if (horizon.through_epoch)
    for (const auto& [base, views] : built.tables)
      for (const char* suffix : {kCurrentSuffix, kHistorySuffix})
        if (!seen.count(base + suffix))
          problems.push_back("view table " + base + suffix + " is missing; the views' horizon is through " + through);
  json refused = json::object();
  for (const auto& [table, why] : built.refused) refused[table] = why;
  return {{"horizon_epochs", horizon.epochs}, {"through_epoch", through}, {"tables", out}, {"refused", refused}};
}

}  // namespace trellara::cli::lake
