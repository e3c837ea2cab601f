// parquet_probe.cpp — test tool (built for tests only, never installed): writes one Parquet file
// with core's lake writer from a JSON spec, so an independent reader (tests/lake/read_parquet.mjs)
// can read it back. It prints the writer's Iceberg metrics as JSON on stdout; on a writer error it
// prints the error on stderr and exits 1 (the file is not written).
//
//   trellara_parquet_probe SPEC.json OUT.parquet [MANIFEST.avro MANIFEST_LIST.avro]
//
// With the two Avro paths it also writes an Iceberg v2 manifest holding the file (as
// spec["file_path"], default OUT.parquet, added by snapshot spec["snapshot_id"], default 1) and
// the manifest list of that snapshot (spec["sequence_number"], default 1, and
// spec["parent_snapshot_id"] when given, the manifest as MANIFEST.avro), for the Avro reader
// (tests/lake/read_avro.mjs, npm avsc).
//
// SPEC: {"compression": "zstd" | "uncompressed", "row_group_rows_max": N, "page_rows_max": N,
//        "columns": [{"name", "field_id", "type" (Iceberg name), "required", "precision", "scale"}],
//        "rows": [[value, ...], ...]}
// Values: null; booleans; integers (int, date, long, time, timestamp, timestamptz); numbers or
// "NaN" / "Infinity" / "-Infinity" (float, double); decimal text ("-12.30"); strings (string);
// {"hex": "..."} for raw bytes (binary always, string to pass bytes that are not UTF-8); uuid text.
// It converts JSON to cells and nothing more: every check on the values is the writer's.
//
//   trellara_parquet_probe --table TABLE_SPEC.json DIR
//
// writes a whole Iceberg table of 1..N append snapshots into DIR (see RunTable) for the table
// reader (tests/lake/read_iceberg.mjs), without the fan-in.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "trellara/lake/decimal.h"
#include "trellara/lake/iceberg_manifest.h"
#include "trellara/lake/iceberg_table.h"
#include "trellara/lake/parquet_writer.h"

namespace {

using trellara::Error;
using trellara::MakeError;
using trellara::Result;
using namespace trellara::lake;
using Json = nlohmann::json;

std::string Hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

Result<std::string> Unhex(const std::string& hex) {
  if (hex.size() % 2 != 0) return MakeError("hex string of odd length: " + hex);
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    try {
      out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    } catch (const std::exception&) {
      return MakeError("not hex: " + hex);
    }
  }
  return out;
}

Result<double> FloatingOf(const Json& value) {
  if (value.is_number()) return value.get<double>();
  if (value == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (value == "Infinity") return std::numeric_limits<double>::infinity();
  if (value == "-Infinity") return -std::numeric_limits<double>::infinity();
  return MakeError("not a floating value: " + value.dump());
}

Result<CellValue> CellOf(const ParquetColumn& column, const Json& value) {
  if (value.is_null()) return CellValue{NullValue{}};
  switch (column.type) {
    case ColumnType::kBoolean: return CellValue{value.get<bool>()};
    case ColumnType::kInt:
    case ColumnType::kDate: {
      const auto wide = value.get<int64_t>();
      if (wide < std::numeric_limits<int32_t>::min() || wide > std::numeric_limits<int32_t>::max()) {
        return MakeError("value " + value.dump() + " of column " + column.name + " is not an int32");
      }
      return CellValue{static_cast<int32_t>(wide)};
    }
    case ColumnType::kLong:
    case ColumnType::kTime:
    case ColumnType::kTimestamp:
    case ColumnType::kTimestampTz: return CellValue{value.get<int64_t>()};
    case ColumnType::kFloat: {
      auto d = FloatingOf(value);
      if (!d.ok()) return d.error();
      return CellValue{static_cast<float>(*d)};
    }
    case ColumnType::kDouble: {
      auto d = FloatingOf(value);
      if (!d.ok()) return d.error();
      return CellValue{*d};
    }
    case ColumnType::kDecimal: {
      // Parsed at the widest precision: whether the value fits the column is the writer's check
      // (its error names the column and the row).
      auto unscaled = ParseDecimalText(value.get<std::string>(), kDecimalPrecisionMax, column.decimal_scale);
      if (!unscaled.ok()) return unscaled.error();
      return CellValue{DecimalValue{*unscaled}};
    }
    case ColumnType::kString:
    case ColumnType::kBinary: {
      if (value.is_object()) {
        auto bytes = Unhex(value.at("hex").get<std::string>());
        if (!bytes.ok()) return bytes.error();
        return CellValue{*bytes};
      }
      return CellValue{value.get<std::string>()};
    }
    case ColumnType::kUuid: {
      auto bytes = ParseUuidText(value.get<std::string>());
      if (!bytes.ok()) return bytes.error();
      return CellValue{*bytes};
    }
  }
  return MakeError("unknown column type");
}

bool WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) std::cerr << "parquet_probe: cannot write " << path << "\n";
  return static_cast<bool>(out);
}

// A fixed sync marker: the probe's files are reproducible (a real writer picks its own).
constexpr AvroSyncMarker kProbeSync = {0x54, 0x52, 0x45, 0x4c, 0x4c, 0x41, 0x52, 0x41,
                                       0x2d, 0x50, 0x52, 0x4f, 0x42, 0x45, 0x2d, 0x31};

int WriteManifests(const Json& spec, const std::vector<ParquetColumn>& columns, const ParquetFile& file,
                   const std::string& out_path, const std::string& manifest_path, const std::string& list_path,
                   Json& metrics) {
  DataManifest manifest;
  manifest.table_schema_json = IcebergSchemaJson(columns, 0);
  manifest.snapshot_id = spec.value("snapshot_id", int64_t{1});
  manifest.files.push_back(DataFileEntryOf(spec.value("file_path", out_path), file));
  auto manifest_bytes = WriteDataManifest(manifest, kProbeSync);
  if (!manifest_bytes.ok()) {
    std::cerr << "parquet_probe: " << manifest_bytes.error().message << "\n";
    return 1;
  }
  if (!WriteBytes(manifest_path, *manifest_bytes)) return 1;
  ManifestList list;
  list.snapshot_id = manifest.snapshot_id;
  if (spec.contains("parent_snapshot_id")) list.parent_snapshot_id = spec.at("parent_snapshot_id").get<int64_t>();
  list.sequence_number = spec.value("sequence_number", int64_t{1});
  list.manifests.push_back({manifest_path, static_cast<int64_t>(manifest_bytes->size()), list.sequence_number,
                            list.sequence_number, manifest.snapshot_id, 1, file.record_count});
  auto list_bytes = WriteManifestList(list, kProbeSync);
  if (!list_bytes.ok()) {
    std::cerr << "parquet_probe: " << list_bytes.error().message << "\n";
    return 1;
  }
  if (!WriteBytes(list_path, *list_bytes)) return 1;
  metrics["manifest_length"] = manifest_bytes->size();
  metrics["table_schema_json"] = manifest.table_schema_json;
  return 0;
}

// The writer's options and columns from a spec; exit code 2 (a bad spec) on an error.
Result<ParquetWriterOptions> OptionsOf(const Json& spec) {
  ParquetWriterOptions options;
  const std::string compression = spec.value("compression", "zstd");
  if (compression == "uncompressed") {
    options.compression = ParquetCompression::kUncompressed;
  } else if (compression != "zstd") {
    return MakeError("compression '" + compression + "' is not zstd or uncompressed");
  }
  options.row_group_rows_max = spec.value("row_group_rows_max", kRowGroupRowsMaxDefault);
  options.page_rows_max = spec.value("page_rows_max", kPageRowsMaxDefault);
  return options;
}

Result<std::vector<ParquetColumn>> ColumnsOf(const Json& spec) {
  std::vector<ParquetColumn> columns;
  for (const Json& c : spec.at("columns")) {
    auto type = ParseColumnTypeName(c.at("type").get<std::string>());
    if (!type.ok()) return type.error();
    columns.push_back({c.at("name").get<std::string>(), c.at("field_id").get<int32_t>(), *type,
                       c.value("required", false), c.value("precision", 0), c.value("scale", 0)});
  }
  return columns;
}

// The Parquet file of ROWS; an error is the writer's (or a value the probe cannot convert).
Result<ParquetFile> WriteRows(const std::vector<ParquetColumn>& columns, const ParquetWriterOptions& options,
                              const Json& rows) {
  auto writer = ParquetWriter::Create(columns, options);
  if (!writer.ok()) return writer.error();
  for (const Json& row : rows) {
    std::vector<CellValue> cells;
    for (size_t i = 0; i < row.size() && i < columns.size(); i++) {
      auto cell = CellOf(columns[i], row[i]);
      if (!cell.ok()) return cell.error();
      cells.push_back(std::move(*cell));
    }
    trellara::Status appended = writer->AppendRow(cells);
    if (!appended.ok()) return appended.error();
  }
  return std::move(*writer).Finish();
}

int Run(const std::string& spec_path, const std::string& out_path, const std::string& manifest_path,
        const std::string& list_path) {
  std::ifstream in(spec_path);
  const Json spec = Json::parse(in);
  auto options = OptionsOf(spec);
  auto columns = ColumnsOf(spec);
  if (!options.ok() || !columns.ok()) {
    std::cerr << "parquet_probe: " << (options.ok() ? columns.error() : options.error()).message << "\n";
    return 2;
  }
  auto file = WriteRows(*columns, *options, spec.at("rows"));
  if (!file.ok()) {
    std::cerr << "parquet_probe: " << file.error().message << "\n";
    return 1;
  }
  if (!WriteBytes(out_path, file->bytes)) return 1;
  Json metrics = {{"record_count", file->record_count},
                  {"file_size_bytes", file->file_size_bytes},
                  {"split_offsets", file->split_offsets},
                  {"columns", Json::array()}};
  for (const ColumnMetrics& m : file->columns) {
    Json column = {{"field_id", m.field_id},
                   {"column_size_bytes", m.column_size_bytes},
                   {"value_count", m.value_count},
                   {"null_count", m.null_count}};
    if (m.nan_count) column["nan_count"] = *m.nan_count;
    if (m.lower_bound) column["lower_bound_hex"] = Hex(*m.lower_bound);
    if (m.upper_bound) column["upper_bound_hex"] = Hex(*m.upper_bound);
    metrics["columns"].push_back(column);
  }
  if (!manifest_path.empty()) {
    const int written = WriteManifests(spec, *columns, *file, out_path, manifest_path, list_path, metrics);
    if (written != 0) return written;
  }
  std::cout << metrics.dump() << "\n";
  return 0;
}

// --table: a whole Iceberg table, laid out as the fan-in lays out its tables (applier/lake/):
//   DIR/data/snap-<i>.parquet          the one data file snapshot i adds
//   DIR/metadata/snap-<i>-m0.avro      the manifest of snapshot i (its file, ADDED)
//   DIR/metadata/snap-<id>.avro        snapshot i's manifest list: the manifests of snapshots 0..i,
//                                      each with the sequence number and snapshot that added it
//   DIR/metadata/v<i+1>.metadata.json  the table after snapshot i (core's TableMetadataJson), its
//                                      metadata-log naming v1..v<i>
// Snapshot i has sequence number i+1 and the previous snapshot as its parent. Its summary is
// operation append, added-data-files, added-records, added-files-size, total-data-files,
// total-records, total-files-size, and the spec's own "summary" keys. Prints
// {"metadata": [path of each metadata file], "snapshots": [{"snapshot_id", "data_file",
// "manifest", "manifest_list", "record_count", "file_size_bytes", "summary"}]}.
//
// TABLE SPEC: {"table_uuid", "compression", "row_group_rows_max", "page_rows_max", "columns",
//              "properties": {..}, "snapshots": [{"snapshot_id", "timestamp_ms", "rows", "summary": {..}}]}
int RunTable(const std::string& spec_path, const std::string& dir) {
  std::ifstream in(spec_path);
  const Json spec = Json::parse(in);
  auto options = OptionsOf(spec);
  auto columns = ColumnsOf(spec);
  if (!options.ok() || !columns.ok()) {
    std::cerr << "parquet_probe: " << (options.ok() ? columns.error() : options.error()).message << "\n";
    return 2;
  }
  if (spec.at("snapshots").empty()) {
    std::cerr << "parquet_probe: a table spec needs at least one snapshot\n";
    return 2;
  }
  std::filesystem::create_directories(dir + "/data");
  std::filesystem::create_directories(dir + "/metadata");
  IcebergTableMetadata table;
  table.table_uuid = spec.at("table_uuid").get<std::string>();
  table.location = dir;
  table.columns = *columns;
  const Json properties = spec.value("properties", Json::object());  // items() of a temporary would dangle
  for (const auto& [key, value] : properties.items()) table.properties[key] = value.get<std::string>();
  const std::string schema_json = IcebergSchemaJson(*columns, 0);
  std::vector<ManifestListEntry> manifests;  // every snapshot's manifest so far
  int64_t total_files = 0, total_records = 0, total_bytes = 0;
  Json out = {{"metadata", Json::array()}, {"snapshots", Json::array()}};
  for (size_t i = 0; i < spec.at("snapshots").size(); i++) {
    const Json& s = spec.at("snapshots")[i];
    const int64_t snapshot_id = s.at("snapshot_id").get<int64_t>();
    const int64_t sequence = static_cast<int64_t>(i) + 1;
    auto file = WriteRows(*columns, *options, s.at("rows"));
    if (!file.ok()) {
      std::cerr << "parquet_probe: snapshot " << i << ": " << file.error().message << "\n";
      return 1;
    }
    const std::string data_path = dir + "/data/snap-" + std::to_string(i) + ".parquet";
    if (!WriteBytes(data_path, file->bytes)) return 1;

    DataManifest manifest{schema_json, 0, snapshot_id, {DataFileEntryOf(data_path, *file)}};
    auto manifest_bytes = WriteDataManifest(manifest, kProbeSync);
    if (!manifest_bytes.ok()) {
      std::cerr << "parquet_probe: " << manifest_bytes.error().message << "\n";
      return 1;
    }
    const std::string manifest_path = dir + "/metadata/snap-" + std::to_string(i) + "-m0.avro";
    if (!WriteBytes(manifest_path, *manifest_bytes)) return 1;
    manifests.push_back({manifest_path, static_cast<int64_t>(manifest_bytes->size()), sequence, sequence,
                         snapshot_id, 1, file->record_count});

    ManifestList list;
    list.snapshot_id = snapshot_id;
    if (i > 0) list.parent_snapshot_id = table.snapshots.back().snapshot_id;
    list.sequence_number = sequence;
    list.manifests = manifests;
    auto list_bytes = WriteManifestList(list, kProbeSync);
    if (!list_bytes.ok()) {
      std::cerr << "parquet_probe: " << list_bytes.error().message << "\n";
      return 1;
    }
    const std::string list_path = dir + "/metadata/snap-" + std::to_string(snapshot_id) + ".avro";
    if (!WriteBytes(list_path, *list_bytes)) return 1;

    total_files += 1;
    total_records += file->record_count;
    total_bytes += file->file_size_bytes;
    IcebergSnapshot snapshot;
    snapshot.snapshot_id = snapshot_id;
    snapshot.parent_snapshot_id = list.parent_snapshot_id;
    snapshot.sequence_number = sequence;
    snapshot.timestamp_ms = s.at("timestamp_ms").get<int64_t>();
    snapshot.manifest_list = list_path;
    snapshot.summary = {{"operation", "append"},
                        {"added-data-files", "1"},
                        {"added-records", std::to_string(file->record_count)},
                        {"added-files-size", std::to_string(file->file_size_bytes)},
                        {"total-data-files", std::to_string(total_files)},
                        {"total-records", std::to_string(total_records)},
                        {"total-files-size", std::to_string(total_bytes)}};
    const Json extra_summary = s.value("summary", Json::object());  // items() of a temporary would dangle
    for (const auto& [key, value] : extra_summary.items()) snapshot.summary[key] = value.get<std::string>();
    if (i > 0) {
      table.metadata_log.push_back({table.last_updated_ms, out["metadata"].back().get<std::string>()});
    }
    table.snapshots.push_back(snapshot);
    table.last_updated_ms = snapshot.timestamp_ms;
    const std::string metadata_path = dir + "/metadata/v" + std::to_string(i + 1) + ".metadata.json";
    const std::string text = TableMetadataJson(table);
    if (!WriteBytes(metadata_path, std::vector<uint8_t>(text.begin(), text.end()))) return 1;
    out["metadata"].push_back(metadata_path);
    out["snapshots"].push_back({{"snapshot_id", snapshot_id},
                                {"data_file", data_path},
                                {"manifest", manifest_path},
                                {"manifest_list", list_path},
                                {"record_count", file->record_count},
                                {"file_size_bytes", file->file_size_bytes},
                                {"summary", snapshot.summary}});
  }
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool table = argc == 4 && std::string(argv[1]) == "--table";
  if (argc != 3 && argc != 5 && !table) {
    std::cerr << "usage: trellara_parquet_probe SPEC.json OUT.parquet [MANIFEST.avro MANIFEST_LIST.avro]\n"
                 "       trellara_parquet_probe --table TABLE_SPEC.json DIR\n";
    return 2;
  }
  try {
    if (table) return RunTable(argv[2], argv[3]);
    return Run(argv[1], argv[2], argc == 5 ? argv[3] : "", argc == 5 ? argv[4] : "");
  } catch (const std::exception& e) {
    std::cerr << "parquet_probe: " << e.what() << "\n";
    return 2;
  }
}
