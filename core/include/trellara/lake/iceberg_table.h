// iceberg_table.h — an Iceberg (format version 2) table's metadata file, as JSON text (spec,
// "Table Metadata"): an unpartitioned, unsorted table of one schema, its snapshots (each an append
// of data files, with its manifest list and summary), the snapshot log, the metadata log and the
// `main` branch at the current snapshot. It returns text; where it is stored and how the catalog
// points at it is the adapter's business (applier/lake/).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trellara/lake/parquet_writer.h"

namespace trellara::lake {

struct IcebergSnapshot {
  int64_t snapshot_id = 0;
  std::optional<int64_t> parent_snapshot_id;
  int64_t sequence_number = 0;
  int64_t timestamp_ms = 0;
  std::string manifest_list;                  // its location
  std::map<std::string, std::string> summary;  // "operation" is written first ("append")
};

struct IcebergTableMetadata {
  std::string table_uuid;
  std::string location;
  int64_t last_updated_ms = 0;
  std::vector<ParquetColumn> columns;          // the one schema (id 0)
  std::map<std::string, std::string> properties;
  std::vector<IcebergSnapshot> snapshots;      // oldest first; the last is the current one
  struct LogEntry {
    int64_t timestamp_ms = 0;
    std::string metadata_file;
  };
  std::vector<LogEntry> metadata_log;          // previous metadata files, oldest first
};

// The metadata file's JSON text (keys in the spec's order, no insignificant whitespace).
std::string TableMetadataJson(const IcebergTableMetadata& table);

// A snapshot id from a publication's receipt (positive, 63 bits): the same publication always
// gets the same id.
int64_t SnapshotIdOf(const std::string& receipt_hex);

}  // namespace trellara::lake
