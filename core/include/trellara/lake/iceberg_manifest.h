// iceberg_manifest.h — Iceberg (format version 2) manifest files and manifest lists for the
// lake's data files, as Avro container files whose objects are encoded with libavro (Debian's
// libavro-dev) against the spec's schemas, field ids included.
//
// Scope, as built: unpartitioned tables, data files only (content 0), every entry ADDED by one
// snapshot with its sequence number inherited from the manifest list. It returns bytes; where they
// are stored and how the catalog points at them is not this file's business.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "trellara/base/result.h"
#include "trellara/lake/avro_container.h"
#include "trellara/lake/parquet_writer.h"

namespace trellara::lake {

inline constexpr int kIcebergFormatVersion = 2;

// The Iceberg schema JSON of a flat table (spec, "Appendix C: JSON serialization"):
// {"type": "struct", "schema-id": N, "fields": [{"id", "name", "required", "type"}, ...]}.
std::string IcebergSchemaJson(std::span<const ParquetColumn> columns, int32_t schema_id);

// One data file of a manifest: where it is and what ParquetWriter said about it.
struct DataFileEntry {
  std::string file_path;  // full location, as readers will open it
  int64_t record_count = 0;
  int64_t file_size_bytes = 0;
  std::vector<int64_t> split_offsets;
  std::vector<ColumnMetrics> columns;
};
DataFileEntry DataFileEntryOf(std::string file_path, const ParquetFile& file);

struct DataManifest {
  std::string table_schema_json;  // IcebergSchemaJson
  int32_t schema_id = 0;
  int64_t snapshot_id = 0;        // the snapshot that adds every entry
  std::vector<DataFileEntry> files;
};
// The manifest file: metadata schema, schema-id, partition-spec "[]", partition-spec-id 0,
// format-version 2, content "data"; one manifest_entry (status ADDED) per file.
Result<std::vector<uint8_t>> WriteDataManifest(const DataManifest& manifest, const AvroSyncMarker& sync);

struct ManifestListEntry {
  std::string manifest_path;
  int64_t manifest_length = 0;
  int64_t sequence_number = 0;
  int64_t min_sequence_number = 0;
  int64_t added_snapshot_id = 0;
  int32_t added_files_count = 0;
  int64_t added_rows_count = 0;
};

struct ManifestList {
  int64_t snapshot_id = 0;
  std::optional<int64_t> parent_snapshot_id;
  int64_t sequence_number = 0;
  std::vector<ManifestListEntry> manifests;
};
// The manifest list of a snapshot: metadata snapshot-id, parent-snapshot-id (when there is one),
// sequence-number, format-version 2; one manifest_file per manifest (data content, spec 0, an
// empty partitions summary).
Result<std::vector<uint8_t>> WriteManifestList(const ManifestList& list, const AvroSyncMarker& sync);

}  // namespace trellara::lake
