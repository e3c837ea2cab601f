// iceberg_table.cpp — an Iceberg table's metadata file (iceberg_table.h).
#include "trellara/lake/iceberg_table.h"

#include <nlohmann/json.hpp>

#include "trellara/lake/iceberg_manifest.h"

namespace trellara::lake {

std::string TableMetadataJson(const IcebergTableMetadata& table) {
  using ordered = nlohmann::ordered_json;
  int32_t last_column_id = 0;
  for (const auto& c : table.columns) last_column_id = std::max(last_column_id, c.field_id);
  ordered md;
  md["format-version"] = kIcebergFormatVersion;
  md["table-uuid"] = table.table_uuid;
  md["location"] = table.location;
  md["last-sequence-number"] = table.snapshots.empty() ? 0 : table.snapshots.back().sequence_number;
  md["last-updated-ms"] = table.last_updated_ms;
  md["last-column-id"] = last_column_id;
  md["current-schema-id"] = 0;
  md["schemas"] = ordered::array({ordered::parse(IcebergSchemaJson(table.columns, 0))});
  md["default-spec-id"] = 0;
  md["partition-specs"] = ordered::array({ordered{{"spec-id", 0}, {"fields", ordered::array()}}});
  md["last-partition-id"] = 999;  // the spec's value for a table with no partition field yet
  md["default-sort-order-id"] = 0;
  md["sort-orders"] = ordered::array({ordered{{"order-id", 0}, {"fields", ordered::array()}}});
  ordered properties = ordered::object();
  for (const auto& [k, v] : table.properties) properties[k] = v;
  md["properties"] = properties;
  if (!table.snapshots.empty()) md["current-snapshot-id"] = table.snapshots.back().snapshot_id;
  ordered snapshots = ordered::array(), snapshot_log = ordered::array();
  for (const auto& s : table.snapshots) {
    ordered snap;
    snap["snapshot-id"] = s.snapshot_id;
    if (s.parent_snapshot_id) snap["parent-snapshot-id"] = *s.parent_snapshot_id;
    snap["sequence-number"] = s.sequence_number;
    snap["timestamp-ms"] = s.timestamp_ms;
    snap["manifest-list"] = s.manifest_list;
    ordered summary;
    auto op = s.summary.find("operation");
    summary["operation"] = op == s.summary.end() ? std::string("append") : op->second;
    for (const auto& [k, v] : s.summary)
      if (k != "operation") summary[k] = v;
    snap["summary"] = summary;
    snap["schema-id"] = 0;
    snapshots.push_back(snap);
    snapshot_log.push_back(ordered{{"timestamp-ms", s.timestamp_ms}, {"snapshot-id", s.snapshot_id}});
  }
  md["snapshots"] = snapshots;
  md["snapshot-log"] = snapshot_log;
  ordered metadata_log = ordered::array();
  for (const auto& e : table.metadata_log)
    metadata_log.push_back(ordered{{"timestamp-ms", e.timestamp_ms}, {"metadata-file", e.metadata_file}});
  md["metadata-log"] = metadata_log;
  ordered refs = ordered::object();
  if (!table.snapshots.empty())
    refs["main"] = ordered{{"snapshot-id", table.snapshots.back().snapshot_id}, {"type", "branch"}};
  md["refs"] = refs;
  return md.dump();
}

int64_t SnapshotIdOf(const std::string& receipt_hex) {
  uint64_t id = 0;
  for (size_t i = 0; i < 16 && i < receipt_hex.size(); i++) {
    const char c = receipt_hex[i];
    id = id * 16 + static_cast<uint64_t>(c >= 'a' ? c - 'a' + 10 : c >= 'A' ? c - 'A' + 10 : c - '0');
  }
  id &= 0x7fffffffffffffffull;
  return static_cast<int64_t>(id == 0 ? 1 : id);
}

}  // namespace trellara::lake
