// parquet_writer.h — writes one Parquet file of a flat Iceberg table in memory: a schema of
// primitive columns, each with its Iceberg field id, rows appended one at a time, row groups cut
// by row count or buffered bytes, PLAIN-encoded data pages v1, uncompressed or ZSTD.
//
// It is strict: a value of the wrong kind for its column, a null in a required column, a string
// that is not UTF-8, a decimal that does not fit its precision or a UUID that is not 16 bytes is an
// Error naming the column, its field id and the row, and the row is not appended (nothing of it).
// It returns, with the bytes, what an Iceberg manifest entry needs for the file (record count,
// size, split offsets, per-column sizes, value/null/NaN counts and bounds in Iceberg's binary
// single-value serialization).
//
// What it never does: nested types (struct, list, map), dictionary or delta encodings, page
// indexes, bloom filters, CRCs, truncating bounds, or writing to disk (the caller owns the file
// and its durability).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "trellara/base/result.h"
#include "trellara/lake/decimal.h"

namespace trellara::lake {

// The Iceberg primitive types the lake writes, named as in Iceberg's spec; the Parquet type each
// maps to is in parquet_writer.cpp (ParquetShapeOf) and docs/lake.md.
enum class ColumnType {
  kBoolean,
  kInt,          // int32
  kLong,         // int64
  kFloat,
  kDouble,
  kDecimal,      // decimal(precision, scale)
  kDate,         // days since 1970-01-01, int32
  kTime,         // microseconds since midnight, int64, not adjusted to UTC
  kTimestamp,    // microseconds since the epoch, int64, without time zone
  kTimestampTz,  // microseconds since the epoch, int64, adjusted to UTC
  kString,       // UTF-8
  kBinary,
  kUuid,         // 16 bytes, RFC 4122 byte order
};

// Iceberg's name of the type: "boolean", "int", "long", ..., "timestamptz", "decimal" (without its
// precision and scale), "uuid".
std::string ColumnTypeName(ColumnType type);
// The inverse for the plain names ("boolean", "int", ..., "uuid"; "decimal" without parameters).
Result<ColumnType> ParseColumnTypeName(std::string_view name);

struct ParquetColumn {
  std::string name;
  int32_t field_id = 0;  // Iceberg field id, unique in the schema, >= 0
  ColumnType type = ColumnType::kLong;
  bool required = false;
  int decimal_precision = 0;  // kDecimal only: 1..38
  int decimal_scale = 0;      // kDecimal only: 0..precision
};

// One cell. The alternative must match the column's type:
//   kBoolean                                  -> bool
//   kInt, kDate                               -> int32_t
//   kLong, kTime, kTimestamp, kTimestampTz    -> int64_t
//   kFloat -> float, kDouble -> double
//   kDecimal                                  -> DecimalValue (unscaled, at the column's scale)
//   kString, kBinary, kUuid                   -> std::string (bytes)
struct NullValue {};
struct DecimalValue {
  Int128 unscaled = 0;
};
using CellValue = std::variant<NullValue, bool, int32_t, int64_t, float, double, DecimalValue, std::string>;

enum class ParquetCompression { kUncompressed, kZstd };

// Limits, with units; defaults are for lake data files of CDC batches.
inline constexpr int64_t kPageRowsMaxDefault = 20'000;
inline constexpr int64_t kPageBytesTargetDefault = 1 << 20;
inline constexpr int64_t kRowGroupRowsMaxDefault = 1'000'000;
inline constexpr int64_t kRowGroupBytesMaxDefault = int64_t{128} << 20;
// One BYTE_ARRAY value: PostgreSQL's own limit on a field (1 GB) and far below Parquet's 2^31.
inline constexpr int64_t kByteArrayValueBytesMax = int64_t{1} << 30;
inline constexpr int kZstdLevelDefault = 3;

struct ParquetWriterOptions {
  ParquetCompression compression = ParquetCompression::kZstd;
  int zstd_level = kZstdLevelDefault;
  int64_t page_rows_max = kPageRowsMaxDefault;
  int64_t page_bytes_target = kPageBytesTargetDefault;  // a page closes once its values pass this
  int64_t row_group_rows_max = kRowGroupRowsMaxDefault;
  int64_t row_group_bytes_max = kRowGroupBytesMaxDefault;  // buffered (uncompressed) bytes
  std::string created_by;  // empty: "trellara version <version>"
  std::vector<std::pair<std::string, std::string>> key_value_metadata;
};

// What an Iceberg data_file entry records about one column (keyed by field id there).
struct ColumnMetrics {
  int32_t field_id = 0;
  int64_t column_size_bytes = 0;  // compressed bytes of its column chunks, page headers included
  int64_t value_count = 0;        // values including nulls and NaNs
  int64_t null_count = 0;
  std::optional<int64_t> nan_count;  // float and double columns only
  // Iceberg single-value serialization; absent when every value is null (or NaN). Not truncated.
  std::optional<std::string> lower_bound;
  std::optional<std::string> upper_bound;
};

struct ParquetFile {
  std::vector<uint8_t> bytes;       // the whole file, "PAR1" ... footer, footer length, "PAR1"
  int64_t record_count = 0;
  int64_t file_size_bytes = 0;
  std::vector<int64_t> split_offsets;  // byte offset of each row group, ascending
  std::vector<ColumnMetrics> columns;  // in schema order
};

class ParquetWriter {
 public:
  // Checks the schema (names non-empty, UTF-8 and unique; field ids >= 0 and unique; decimal
  // precision 1..38 and scale 0..precision) and the options.
  static Result<ParquetWriter> Create(std::vector<ParquetColumn> columns, ParquetWriterOptions options);

  ParquetWriter(ParquetWriter&&) noexcept;
  ParquetWriter& operator=(ParquetWriter&&) noexcept;
  ~ParquetWriter();

  // Appends one row (one cell per column, in schema order) after checking every cell; on an Error
  // nothing of the row is kept and the writer can go on with the next row.
  Status AppendRow(std::span<const CellValue> row);
  // Closes the current row group now (nothing happens when it holds no row).
  Status FinishRowGroup();
  // Closes the last row group and returns the file. The writer is spent afterwards.
  Result<ParquetFile> Finish() &&;

  int64_t rows_appended() const;

 private:
  struct State;
  explicit ParquetWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace trellara::lake
