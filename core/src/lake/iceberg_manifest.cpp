// iceberg_manifest.cpp — Iceberg v2 manifest files and manifest lists: the spec's Avro schemas
// (with their field ids, which Iceberg readers resolve fields by), objects encoded by libavro,
// framed by avro_container.cpp with the metadata Iceberg requires.
//
// It must never write a manifest that disagrees with the data files' metrics it was given, never
// drop a metric silently, and never let a libavro failure pass: every libavro call is checked and
// its message returned.
#include "trellara/lake/iceberg_manifest.h"

#include <avro.h>

#include <nlohmann/json.hpp>

#include <string>
#include <utility>

#include "trellara/base/assert.h"

namespace trellara::lake {

namespace iceberg_manifest_internal {

// Iceberg spec, "Manifests" (v2 manifest_entry and data_file; maps with non-string keys are arrays
// of key/value records with logicalType "map", as Iceberg writes them).
constexpr std::string_view kManifestEntrySchema = R"json({"type": "record", "name": "manifest_entry", "fields": [
 {"name": "status", "type": "int", "field-id": 0},
 {"name": "snapshot_id", "type": ["null", "long"], "default": null, "field-id": 1},
 {"name": "sequence_number", "type": ["null", "long"], "default": null, "field-id": 3},
 {"name": "file_sequence_number", "type": ["null", "long"], "default": null, "field-id": 4},
 {"name": "data_file", "field-id": 2, "type": {"type": "record", "name": "r2", "fields": [
  {"name": "content", "type": "int", "field-id": 134},
  {"name": "file_path", "type": "string", "field-id": 100},
  {"name": "file_format", "type": "string", "field-id": 101},
  {"name": "partition", "type": {"type": "record", "name": "r102", "fields": []}, "field-id": 102},
  {"name": "record_count", "type": "long", "field-id": 103},
  {"name": "file_size_in_bytes", "type": "long", "field-id": 104},
  {"name": "column_sizes", "type": ["null", {"type": "array", "logicalType": "map", "items": {"type": "record", "name": "k117_v118", "fields": [{"name": "key", "type": "int", "field-id": 117}, {"name": "value", "type": "long", "field-id": 118}]}}], "default": null, "field-id": 108},
  {"name": "value_counts", "type": ["null", {"type": "array", "logicalType": "map", "items": {"type": "record", "name": "k119_v120", "fields": [{"name": "key", "type": "int", "field-id": 119}, {"name": "value", "type": "long", "field-id": 120}]}}], "default": null, "field-id": 109},
  {"name": "null_value_counts", "type": ["null", {"type": "array", "logicalType": "map", "items": {"type": "record", "name": "k121_v122", "fields": [{"name": "key", "type": "int", "field-id": 121}, {"name": "value", "type": "long", "field-id": 122}]}}], "default": null, "field-id": 110},
  {"name": "nan_value_counts", "type": ["null", {"type": "array", "logicalType": "map", "items": {"type": "record", "name": "k138_v139", "fields": [{"name": "key", "type": "int", "field-id": 138}, {"name": "value", "type": "long", "field-id": 139}]}}], "default": null, "field-id": 137},
  {"name": "lower_bounds", "type": ["null", {"type": "array", "logicalType": "map", "items": {"type": "record", "name": "k126_v127", "fields": [{"name": "key", "type": "int", "field-id": 126}, {"name": "value", "type": "bytes", "field-id": 127}]}}], "default": null, "field-id": 125},
  {"name": "upper_bounds", "type": ["null", {"type": "array", "logicalType": "map", "items": {"type": "record", "name": "k129_v130", "fields": [{"name": "key", "type": "int", "field-id": 129}, {"name": "value", "type": "bytes", "field-id": 130}]}}], "default": null, "field-id": 128},
  {"name": "key_metadata", "type": ["null", "bytes"], "default": null, "field-id": 131},
  {"name": "split_offsets", "type": ["null", {"type": "array", "items": "long", "element-id": 133}], "default": null, "field-id": 132},
  {"name": "equality_ids", "type": ["null", {"type": "array", "items": "int", "element-id": 136}], "default": null, "field-id": 135},
  {"name": "sort_order_id", "type": ["null", "int"], "default": null, "field-id": 140}
 ]}}
]})json";

// Iceberg spec, "Manifest Lists" (v2 manifest_file).
constexpr std::string_view kManifestFileSchema = R"json({"type": "record", "name": "manifest_file", "fields": [
 {"name": "manifest_path", "type": "string", "field-id": 500},
 {"name": "manifest_length", "type": "long", "field-id": 501},
 {"name": "partition_spec_id", "type": "int", "field-id": 502},
 {"name": "content", "type": "int", "field-id": 517},
 {"name": "sequence_number", "type": "long", "field-id": 515},
 {"name": "min_sequence_number", "type": "long", "field-id": 516},
 {"name": "added_snapshot_id", "type": "long", "field-id": 503},
 {"name": "added_files_count", "type": "int", "field-id": 504},
 {"name": "existing_files_count", "type": "int", "field-id": 505},
 {"name": "deleted_files_count", "type": "int", "field-id": 506},
 {"name": "added_rows_count", "type": "long", "field-id": 512},
 {"name": "existing_rows_count", "type": "long", "field-id": 513},
 {"name": "deleted_rows_count", "type": "long", "field-id": 514},
 {"name": "partitions", "type": ["null", {"type": "array", "element-id": 508, "items": {"type": "record", "name": "r508", "fields": [
  {"name": "contains_null", "type": "boolean", "field-id": 509},
  {"name": "contains_nan", "type": ["null", "boolean"], "default": null, "field-id": 518},
  {"name": "lower_bound", "type": ["null", "bytes"], "default": null, "field-id": 510},
  {"name": "upper_bound", "type": ["null", "bytes"], "default": null, "field-id": 511}]}}], "default": null, "field-id": 507},
 {"name": "key_metadata", "type": ["null", "bytes"], "default": null, "field-id": 519}
]})json";

constexpr int32_t kStatusAdded = 1;
constexpr int32_t kContentData = 0;
constexpr int32_t kUnpartitionedSpecId = 0;
constexpr int kUnionNull = 0;
constexpr int kUnionValue = 1;

Status AvroCheck(int rc, std::string_view what) {
  if (rc == 0) return Status::Ok();
  return MakeError("lake Iceberg manifest: libavro could not " + std::string(what) + ": " + avro_strerror());
}

// One generic libavro value of a schema, reused for every object; owns the schema and its class.
class AvroObjectEncoder {
 public:
  AvroObjectEncoder() = default;
  AvroObjectEncoder(const AvroObjectEncoder&) = delete;
  AvroObjectEncoder& operator=(const AvroObjectEncoder&) = delete;
  ~AvroObjectEncoder() {
    if (has_value_) avro_value_decref(&value_);
    if (iface_ != nullptr) avro_value_iface_decref(iface_);
    if (schema_ != nullptr) avro_schema_decref(schema_);
  }

  Status Init(std::string_view schema_json) {
    TRELLARA_TRY(AvroCheck(avro_schema_from_json_length(schema_json.data(), schema_json.size(), &schema_),
                           "parse its Iceberg schema"));
    iface_ = avro_generic_class_from_schema(schema_);
    if (iface_ == nullptr) return AvroCheck(-1, "make a value class of its schema");
    TRELLARA_TRY(AvroCheck(avro_generic_value_new(iface_, &value_), "make a value"));
    has_value_ = true;
    return Status::Ok();
  }

  avro_value_t* value() { return &value_; }

  // Appends the current value's binary encoding to `out`, then clears the value for the next.
  Status AppendEncoded(std::vector<uint8_t>& out) {
    size_t size = 0;
    TRELLARA_TRY(AvroCheck(avro_value_sizeof(&value_, &size), "size an object"));
    const size_t first = out.size();
    out.resize(first + size);
    avro_writer_t writer = avro_writer_memory(reinterpret_cast<const char*>(out.data() + first),
                                              static_cast<int64_t>(size));
    const int rc = avro_value_write(writer, &value_);
    avro_writer_free(writer);
    TRELLARA_TRY(AvroCheck(rc, "encode an object"));
    return AvroCheck(avro_value_reset(&value_), "reset a value");
  }

 private:
  avro_schema_t schema_ = nullptr;
  avro_value_iface_t* iface_ = nullptr;
  avro_value_t value_{};
  bool has_value_ = false;
};

Status Field(avro_value_t* record, const char* name, avro_value_t* field) {
  return AvroCheck(avro_value_get_by_name(record, name, field, nullptr), std::string("find field ") + name);
}

Status SetInt(avro_value_t* record, const char* name, int32_t v) {
  avro_value_t field;
  TRELLARA_TRY(Field(record, name, &field));
  return AvroCheck(avro_value_set_int(&field, v), std::string("set ") + name);
}

Status SetLong(avro_value_t* record, const char* name, int64_t v) {
  avro_value_t field;
  TRELLARA_TRY(Field(record, name, &field));
  return AvroCheck(avro_value_set_long(&field, v), std::string("set ") + name);
}

Status SetString(avro_value_t* record, const char* name, const std::string& v) {
  avro_value_t field;
  TRELLARA_TRY(Field(record, name, &field));
  // The size libavro takes counts the terminating NUL.
  return AvroCheck(avro_value_set_string_len(&field, v.c_str(), v.size() + 1), std::string("set ") + name);
}

// A ["null", T] field: the null branch, or the value branch into *branch.
Status SetNull(avro_value_t* record, const char* name) {
  avro_value_t field;
  avro_value_t branch;
  TRELLARA_TRY(Field(record, name, &field));
  TRELLARA_TRY(AvroCheck(avro_value_set_branch(&field, kUnionNull, &branch), std::string("choose null for ") + name));
  return AvroCheck(avro_value_set_null(&branch), std::string("set ") + name + " null");
}

Status ValueBranch(avro_value_t* record, const char* name, avro_value_t* branch) {
  avro_value_t field;
  TRELLARA_TRY(Field(record, name, &field));
  return AvroCheck(avro_value_set_branch(&field, kUnionValue, branch), std::string("choose a value for ") + name);
}

// An Iceberg map<int, long> (array of key/value records).
Status SetIntLongMap(avro_value_t* record, const char* name, const std::vector<std::pair<int32_t, int64_t>>& map) {
  avro_value_t array;
  TRELLARA_TRY(ValueBranch(record, name, &array));
  for (const auto& [key, value] : map) {
    avro_value_t entry;
    TRELLARA_TRY(AvroCheck(avro_value_append(&array, &entry, nullptr), std::string("append to ") + name));
    TRELLARA_TRY(SetInt(&entry, "key", key));
    TRELLARA_TRY(SetLong(&entry, "value", value));
  }
  return Status::Ok();
}

// An Iceberg map<int, binary>.
Status SetIntBytesMap(avro_value_t* record, const char* name,
                      const std::vector<std::pair<int32_t, std::string>>& map) {
  avro_value_t array;
  TRELLARA_TRY(ValueBranch(record, name, &array));
  for (const auto& [key, value] : map) {
    avro_value_t entry;
    avro_value_t bytes;
    TRELLARA_TRY(AvroCheck(avro_value_append(&array, &entry, nullptr), std::string("append to ") + name));
    TRELLARA_TRY(SetInt(&entry, "key", key));
    TRELLARA_TRY(Field(&entry, "value", &bytes));
    std::string copy = value;  // libavro takes a non-const buffer (and copies it)
    TRELLARA_TRY(AvroCheck(avro_value_set_bytes(&bytes, copy.data(), copy.size()), std::string("set ") + name));
  }
  return Status::Ok();
}

Status EncodeManifestEntry(AvroObjectEncoder& encoder, const DataManifest& manifest, const DataFileEntry& file,
                           std::vector<uint8_t>& out) {
  avro_value_t* entry = encoder.value();
  TRELLARA_TRY(SetInt(entry, "status", kStatusAdded));
  avro_value_t snapshot;
  TRELLARA_TRY(ValueBranch(entry, "snapshot_id", &snapshot));
  TRELLARA_TRY(AvroCheck(avro_value_set_long(&snapshot, manifest.snapshot_id), "set snapshot_id"));
  // Null: an ADDED entry inherits its sequence numbers from the manifest list (spec, "Sequence
  // Number Inheritance").
  TRELLARA_TRY(SetNull(entry, "sequence_number"));
  TRELLARA_TRY(SetNull(entry, "file_sequence_number"));

  avro_value_t data_file;
  TRELLARA_TRY(Field(entry, "data_file", &data_file));
  TRELLARA_TRY(SetInt(&data_file, "content", kContentData));
  TRELLARA_TRY(SetString(&data_file, "file_path", file.file_path));
  TRELLARA_TRY(SetString(&data_file, "file_format", "PARQUET"));
  TRELLARA_TRY(SetLong(&data_file, "record_count", file.record_count));
  TRELLARA_TRY(SetLong(&data_file, "file_size_in_bytes", file.file_size_bytes));

  std::vector<std::pair<int32_t, int64_t>> sizes, values, nulls, nans;
  std::vector<std::pair<int32_t, std::string>> lower, upper;
  for (const ColumnMetrics& m : file.columns) {
    sizes.emplace_back(m.field_id, m.column_size_bytes);
    values.emplace_back(m.field_id, m.value_count);
    nulls.emplace_back(m.field_id, m.null_count);
    if (m.nan_count) nans.emplace_back(m.field_id, *m.nan_count);
    if (m.lower_bound) lower.emplace_back(m.field_id, *m.lower_bound);
    if (m.upper_bound) upper.emplace_back(m.field_id, *m.upper_bound);
  }
  TRELLARA_TRY(SetIntLongMap(&data_file, "column_sizes", sizes));
  TRELLARA_TRY(SetIntLongMap(&data_file, "value_counts", values));
  TRELLARA_TRY(SetIntLongMap(&data_file, "null_value_counts", nulls));
  TRELLARA_TRY(SetIntLongMap(&data_file, "nan_value_counts", nans));
  TRELLARA_TRY(SetIntBytesMap(&data_file, "lower_bounds", lower));
  TRELLARA_TRY(SetIntBytesMap(&data_file, "upper_bounds", upper));
  TRELLARA_TRY(SetNull(&data_file, "key_metadata"));
  avro_value_t offsets;
  TRELLARA_TRY(ValueBranch(&data_file, "split_offsets", &offsets));
  for (int64_t offset : file.split_offsets) {
    avro_value_t element;
    TRELLARA_TRY(AvroCheck(avro_value_append(&offsets, &element, nullptr), "append a split offset"));
    TRELLARA_TRY(AvroCheck(avro_value_set_long(&element, offset), "set a split offset"));
  }
  TRELLARA_TRY(SetNull(&data_file, "equality_ids"));
  TRELLARA_TRY(SetNull(&data_file, "sort_order_id"));
  return encoder.AppendEncoded(out);
}

Status EncodeManifestFile(AvroObjectEncoder& encoder, const ManifestListEntry& manifest, std::vector<uint8_t>& out) {
  avro_value_t* v = encoder.value();
  TRELLARA_TRY(SetString(v, "manifest_path", manifest.manifest_path));
  TRELLARA_TRY(SetLong(v, "manifest_length", manifest.manifest_length));
  TRELLARA_TRY(SetInt(v, "partition_spec_id", kUnpartitionedSpecId));
  TRELLARA_TRY(SetInt(v, "content", kContentData));
  TRELLARA_TRY(SetLong(v, "sequence_number", manifest.sequence_number));
  TRELLARA_TRY(SetLong(v, "min_sequence_number", manifest.min_sequence_number));
  TRELLARA_TRY(SetLong(v, "added_snapshot_id", manifest.added_snapshot_id));
  TRELLARA_TRY(SetInt(v, "added_files_count", manifest.added_files_count));
  TRELLARA_TRY(SetInt(v, "existing_files_count", 0));
  TRELLARA_TRY(SetInt(v, "deleted_files_count", 0));
  TRELLARA_TRY(SetLong(v, "added_rows_count", manifest.added_rows_count));
  TRELLARA_TRY(SetLong(v, "existing_rows_count", 0));
  TRELLARA_TRY(SetLong(v, "deleted_rows_count", 0));
  avro_value_t partitions;  // an unpartitioned table: an empty summary
  TRELLARA_TRY(ValueBranch(v, "partitions", &partitions));
  TRELLARA_TRY(SetNull(v, "key_metadata"));
  return encoder.AppendEncoded(out);
}

}  // namespace iceberg_manifest_internal

std::string IcebergSchemaJson(std::span<const ParquetColumn> columns, int32_t schema_id) {
  nlohmann::ordered_json fields = nlohmann::ordered_json::array();
  for (const ParquetColumn& column : columns) {
    std::string type = ColumnTypeName(column.type);
    if (column.type == ColumnType::kDecimal) {
      type += "(" + std::to_string(column.decimal_precision) + ", " + std::to_string(column.decimal_scale) + ")";
    }
    fields.push_back({{"id", column.field_id}, {"name", column.name}, {"required", column.required}, {"type", type}});
  }
  nlohmann::ordered_json schema = {{"type", "struct"}, {"schema-id", schema_id}, {"fields", fields}};
  return schema.dump();
}

DataFileEntry DataFileEntryOf(std::string file_path, const ParquetFile& file) {
  return DataFileEntry{std::move(file_path), file.record_count, file.file_size_bytes, file.split_offsets,
                       file.columns};
}

Result<std::vector<uint8_t>> WriteDataManifest(const DataManifest& manifest, const AvroSyncMarker& sync) {
  using namespace iceberg_manifest_internal;
  AvroObjectEncoder encoder;
  TRELLARA_TRY(encoder.Init(kManifestEntrySchema));
  std::vector<uint8_t> objects;
  for (const DataFileEntry& file : manifest.files) {
    Status encoded = EncodeManifestEntry(encoder, manifest, file, objects);
    if (!encoded.ok()) return MakeError(encoded.error().message + " (data file " + file.file_path + ")");
  }
  const std::vector<std::pair<std::string, std::string>> metadata = {
      {"schema", manifest.table_schema_json},
      {"schema-id", std::to_string(manifest.schema_id)},
      {"partition-spec", "[]"},
      {"partition-spec-id", std::to_string(kUnpartitionedSpecId)},
      {"format-version", std::to_string(kIcebergFormatVersion)},
      {"content", "data"},
  };
  return AvroContainerFile(kManifestEntrySchema, metadata, sync, static_cast<int64_t>(manifest.files.size()),
                           objects);
}

Result<std::vector<uint8_t>> WriteManifestList(const ManifestList& list, const AvroSyncMarker& sync) {
  using namespace iceberg_manifest_internal;
  AvroObjectEncoder encoder;
  TRELLARA_TRY(encoder.Init(kManifestFileSchema));
  std::vector<uint8_t> objects;
  for (const ManifestListEntry& manifest : list.manifests) {
    Status encoded = EncodeManifestFile(encoder, manifest, objects);
    if (!encoded.ok()) return MakeError(encoded.error().message + " (manifest " + manifest.manifest_path + ")");
  }
  std::vector<std::pair<std::string, std::string>> metadata = {{"snapshot-id", std::to_string(list.snapshot_id)}};
  if (list.parent_snapshot_id) metadata.emplace_back("parent-snapshot-id", std::to_string(*list.parent_snapshot_id));
  metadata.emplace_back("sequence-number", std::to_string(list.sequence_number));
  metadata.emplace_back("format-version", std::to_string(kIcebergFormatVersion));
  return AvroContainerFile(kManifestFileSchema, metadata, sync, static_cast<int64_t>(list.manifests.size()), objects);
}

}  // namespace trellara::lake
