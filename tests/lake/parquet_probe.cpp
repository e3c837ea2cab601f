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
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "trellara/lake/decimal.h"
#include "trellara/lake/iceberg_manifest.h"
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

int Run(const std::string& spec_path, const std::string& out_path, const std::string& manifest_path,
        const std::string& list_path) {
  std::ifstream in(spec_path);
  const Json spec = Json::parse(in);
  ParquetWriterOptions options;
  const std::string compression = spec.value("compression", "zstd");
  if (compression == "uncompressed") {
    options.compression = ParquetCompression::kUncompressed;
  } else if (compression != "zstd") {
    std::cerr << "parquet_probe: compression '" << compression << "' is not zstd or uncompressed\n";
    return 2;
  }
  options.row_group_rows_max = spec.value("row_group_rows_max", kRowGroupRowsMaxDefault);
  options.page_rows_max = spec.value("page_rows_max", kPageRowsMaxDefault);
  std::vector<ParquetColumn> columns;
  for (const Json& c : spec.at("columns")) {
    auto type = ParseColumnTypeName(c.at("type").get<std::string>());
    if (!type.ok()) {
      std::cerr << "parquet_probe: " << type.error().message << "\n";
      return 2;
    }
    columns.push_back({c.at("name").get<std::string>(), c.at("field_id").get<int32_t>(), *type,
                       c.value("required", false), c.value("precision", 0), c.value("scale", 0)});
  }
  auto writer = ParquetWriter::Create(columns, options);
  if (!writer.ok()) {
    std::cerr << "parquet_probe: " << writer.error().message << "\n";
    return 1;
  }
  for (const Json& row : spec.at("rows")) {
    std::vector<CellValue> cells;
    for (size_t i = 0; i < row.size() && i < columns.size(); i++) {
      auto cell = CellOf(columns[i], row[i]);
      if (!cell.ok()) {
        std::cerr << "parquet_probe: " << cell.error().message << "\n";
        return 1;
      }
      cells.push_back(std::move(*cell));
    }
    trellara::Status appended = writer->AppendRow(cells);
    if (!appended.ok()) {
      std::cerr << "parquet_probe: " << appended.error().message << "\n";
      return 1;
    }
  }
  auto file = std::move(*writer).Finish();
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
    const int written = WriteManifests(spec, columns, *file, out_path, manifest_path, list_path, metrics);
    if (written != 0) return written;
  }
  std::cout << metrics.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::cerr << "usage: trellara_parquet_probe SPEC.json OUT.parquet [MANIFEST.avro MANIFEST_LIST.avro]\n";
    return 2;
  }
  try {
    return Run(argv[1], argv[2], argc == 5 ? argv[3] : "", argc == 5 ? argv[4] : "");
  } catch (const std::exception& e) {
    std::cerr << "parquet_probe: " << e.what() << "\n";
    return 2;
  }
}
