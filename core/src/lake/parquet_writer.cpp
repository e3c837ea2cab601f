// parquet_writer.cpp — the Parquet file layout (parquet-format's parquet.thrift and Encodings.md)
// for flat Iceberg tables: the type mapping of Iceberg's spec ("Parquet" appendix), PLAIN data
// pages v1 with RLE/bit-packed definition levels, ZSTD pages, column chunk statistics and the
// footer; and the Iceberg metrics of the file.
//
// It must never write a value it has not checked against its column, never round, truncate or
// replace a value, and never write a statistic that is not exact (min/max are the true extremes of
// the non-null, non-NaN values, compared in the type's Parquet sort order).
#include "trellara/lake/parquet_writer.h"

#include <zstd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <set>
#include <string>

#include "trellara/base/assert.h"
#include "trellara/base/text.h"
#include "trellara/lake/rle_hybrid.h"
#include "trellara/lake/thrift_compact.h"

namespace trellara::lake {

// Every fixed-width value is copied from memory in the host's byte order; Parquet's is
// little-endian.
static_assert(std::endian::native == std::endian::little, "the Parquet writer assumes a little-endian host");

namespace parquet_writer_internal {

// parquet.thrift enums and union members, by their numbers in the format.
enum class PhysicalType : int32_t {
  kBoolean = 0,
  kInt32 = 1,
  kInt64 = 2,
  kFloat = 4,
  kDouble = 5,
  kByteArray = 6,
  kFixedLenByteArray = 7,
};
enum class ConvertedType : int32_t {
  kNone = -1,
  kUtf8 = 0,
  kDecimal = 5,
  kDate = 6,
  kTimestampMicros = 10,
};
// LogicalType union members (parquet.thrift `union LogicalType`).
enum class LogicalKind : int16_t {
  kNone = 0,
  kString = 1,
  kDecimal = 5,
  kDate = 6,
  kTime = 7,
  kTimestamp = 8,
  kUuid = 14,
};
constexpr int32_t kRepetitionRequired = 0;
constexpr int32_t kRepetitionOptional = 1;
constexpr int32_t kEncodingPlain = 0;
constexpr int32_t kEncodingRle = 3;
constexpr int32_t kCodecUncompressed = 0;
constexpr int32_t kCodecZstd = 6;
constexpr int32_t kPageTypeDataPage = 0;
// FileMetaData.version: 1, as every writer of data pages v1 sets it.
constexpr int32_t kFileFormatVersion = 1;
constexpr std::string_view kMagic = "PAR1";
constexpr int16_t kTimeUnitMicros = 2;  // TimeUnit union member MICROS
constexpr int kDefinitionLevelBitWidth = 1;  // flat optional columns: levels 0 (null) and 1
constexpr int32_t kUuidBytes = 16;

struct ParquetShape {
  PhysicalType physical = PhysicalType::kInt64;
  int32_t type_length = 0;  // FIXED_LEN_BYTE_ARRAY only
  ConvertedType converted = ConvertedType::kNone;
  LogicalKind logical = LogicalKind::kNone;
  bool adjusted_to_utc = false;  // TIME and TIMESTAMP only
};

// Iceberg spec, "Parquet" type mapping. A converted type is written only where it means exactly
// the logical type: TIME_MICROS and TIMESTAMP_MICROS imply adjusted-to-UTC, so time and timestamp
// (without zone) carry the logical type alone.
ParquetShape ParquetShapeOf(const ParquetColumn& column) {
  switch (column.type) {
    case ColumnType::kBoolean: return {PhysicalType::kBoolean};
    case ColumnType::kInt: return {PhysicalType::kInt32};
    case ColumnType::kLong: return {PhysicalType::kInt64};
    case ColumnType::kFloat: return {PhysicalType::kFloat};
    case ColumnType::kDouble: return {PhysicalType::kDouble};
    case ColumnType::kDecimal: {
      ParquetShape shape{PhysicalType::kFixedLenByteArray, DecimalFixedBytes(column.decimal_precision),
                         ConvertedType::kDecimal, LogicalKind::kDecimal};
      if (column.decimal_precision <= kDecimalInt32PrecisionMax) {
        shape.physical = PhysicalType::kInt32;
        shape.type_length = 0;
      } else if (column.decimal_precision <= kDecimalInt64PrecisionMax) {
        shape.physical = PhysicalType::kInt64;
        shape.type_length = 0;
      }
      return shape;
    }
    case ColumnType::kDate: return {PhysicalType::kInt32, 0, ConvertedType::kDate, LogicalKind::kDate};
    case ColumnType::kTime: return {PhysicalType::kInt64, 0, ConvertedType::kNone, LogicalKind::kTime, false};
    case ColumnType::kTimestamp:
      return {PhysicalType::kInt64, 0, ConvertedType::kNone, LogicalKind::kTimestamp, false};
    case ColumnType::kTimestampTz:
      return {PhysicalType::kInt64, 0, ConvertedType::kTimestampMicros, LogicalKind::kTimestamp, true};
    case ColumnType::kString: return {PhysicalType::kByteArray, 0, ConvertedType::kUtf8, LogicalKind::kString};
    case ColumnType::kBinary: return {PhysicalType::kByteArray};
    case ColumnType::kUuid:
      return {PhysicalType::kFixedLenByteArray, kUuidBytes, ConvertedType::kNone, LogicalKind::kUuid};
  }
  TRELLARA_ASSERT(false, "unknown lake column type");
  return {};
}

// The CellValue alternative a column of `type` takes.
size_t CellIndexOf(ColumnType type) {
  switch (type) {
    case ColumnType::kBoolean: return 1;
    case ColumnType::kInt:
    case ColumnType::kDate: return 2;
    case ColumnType::kLong:
    case ColumnType::kTime:
    case ColumnType::kTimestamp:
    case ColumnType::kTimestampTz: return 3;
    case ColumnType::kFloat: return 4;
    case ColumnType::kDouble: return 5;
    case ColumnType::kDecimal: return 6;
    case ColumnType::kString:
    case ColumnType::kBinary:
    case ColumnType::kUuid: return 7;
  }
  TRELLARA_ASSERT(false, "unknown lake column type");
  return 0;
}

const char* CellKindName(size_t index) {
  static constexpr const char* kNames[] = {"null", "bool", "int32", "int64", "float", "double", "decimal", "bytes"};
  return index < std::size(kNames) ? kNames[index] : "unknown";
}

bool IsNaN(const CellValue& value) {
  if (const auto* f = std::get_if<float>(&value)) return std::isnan(*f);
  if (const auto* d = std::get_if<double>(&value)) return std::isnan(*d);
  return false;
}

// Parquet's sort order of the column's type for two non-null, non-NaN values of the same
// alternative: signed for integers and decimals, numeric for floats, unsigned byte-wise for
// strings, binary and UUIDs (std::string compares as unsigned char).
bool CellLess(const CellValue& a, const CellValue& b) {
  TRELLARA_ASSERT(a.index() == b.index(), "statistics compare values of different kinds");
  switch (a.index()) {
    case 1: return std::get<bool>(a) < std::get<bool>(b);
    case 2: return std::get<int32_t>(a) < std::get<int32_t>(b);
    case 3: return std::get<int64_t>(a) < std::get<int64_t>(b);
    case 4: return std::get<float>(a) < std::get<float>(b);
    case 5: return std::get<double>(a) < std::get<double>(b);
    case 6: return std::get<DecimalValue>(a).unscaled < std::get<DecimalValue>(b).unscaled;
    case 7: return std::get<std::string>(a) < std::get<std::string>(b);
    default: TRELLARA_ASSERT(false, "statistics compare a null");
  }
  return false;
}

// Minimum and maximum of the non-null, non-NaN values seen.
struct Bounds {
  std::optional<CellValue> min;
  std::optional<CellValue> max;

  void Add(const CellValue& value) {
    if (IsNaN(value)) return;
    if (!min || CellLess(value, *min)) min = value;
    if (!max || CellLess(*max, value)) max = value;
  }
  void Merge(const Bounds& other) {
    if (other.min) Add(*other.min);
    if (other.max) Add(*other.max);
  }
};

// A zero bound is written as -0.0 when it is a minimum and +0.0 when it is a maximum
// (parquet.thrift, ColumnOrder: readers cannot know which zero the data held).
CellValue SignedZeroForBound(CellValue value, bool is_min) {
  if (auto* f = std::get_if<float>(&value); f && *f == 0.0f) *f = is_min ? -0.0f : 0.0f;
  if (auto* d = std::get_if<double>(&value); d && *d == 0.0) *d = is_min ? -0.0 : 0.0;
  return value;
}

template <typename T>
void PutLittleEndian(std::vector<uint8_t>& out, T value) {
  uint8_t bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

template <typename T>
std::string LittleEndianString(T value) {
  std::string bytes(sizeof(T), '\0');
  std::memcpy(bytes.data(), &value, sizeof(T));
  return bytes;
}

// PLAIN encoding of a non-null value, as a statistic holds it: without the 4-byte length a
// BYTE_ARRAY value has inside a page.
std::string PlainStatisticBytes(const ParquetShape& shape, const CellValue& value) {
  switch (value.index()) {
    case 1: return std::string(1, std::get<bool>(value) ? '\1' : '\0');
    case 2: return LittleEndianString(std::get<int32_t>(value));
    case 3: return LittleEndianString(std::get<int64_t>(value));
    case 4: return LittleEndianString(std::get<float>(value));
    case 5: return LittleEndianString(std::get<double>(value));
    case 6: {
      const Int128 unscaled = std::get<DecimalValue>(value).unscaled;
      if (shape.physical == PhysicalType::kInt32) return LittleEndianString(static_cast<int32_t>(unscaled));
      if (shape.physical == PhysicalType::kInt64) return LittleEndianString(static_cast<int64_t>(unscaled));
      return DecimalBigEndian(unscaled, shape.type_length);
    }
    case 7: return std::get<std::string>(value);
    default: TRELLARA_ASSERT(false, "statistic of a null");
  }
  return {};
}

// Iceberg spec, "Binary single-value serialization".
std::string IcebergSingleValue(const CellValue& value) {
  switch (value.index()) {
    case 1: return std::string(1, std::get<bool>(value) ? '\1' : '\0');
    case 2: return LittleEndianString(std::get<int32_t>(value));
    case 3: return LittleEndianString(std::get<int64_t>(value));
    case 4: return LittleEndianString(std::get<float>(value));
    case 5: return LittleEndianString(std::get<double>(value));
    case 6: return DecimalMinimalBigEndian(std::get<DecimalValue>(value).unscaled);
    case 7: return std::get<std::string>(value);
    default: TRELLARA_ASSERT(false, "Iceberg bound of a null");
  }
  return {};
}

struct ColumnChunkRecord {
  int64_t data_page_offset = 0;
  int64_t num_values = 0;
  int64_t uncompressed_bytes = 0;  // page headers + uncompressed page bodies
  int64_t compressed_bytes = 0;    // page headers + page bodies as written
  int64_t null_count = 0;
  Bounds bounds;
};

struct RowGroupRecord {
  int64_t file_offset = 0;
  int64_t num_rows = 0;
  std::vector<ColumnChunkRecord> columns;
};

struct ColumnWriter {
  ParquetColumn column;
  ParquetShape shape;

  // The page being filled.
  std::vector<uint32_t> page_levels;  // optional columns: 1 value present, 0 null
  std::vector<uint8_t> page_values;   // PLAIN values (not booleans)
  std::vector<bool> page_booleans;    // booleans, bit-packed when the page closes
  int64_t page_rows = 0;

  // The column chunk of the current row group: its pages as written.
  std::vector<uint8_t> chunk_bytes;
  int64_t chunk_rows = 0;
  int64_t chunk_nulls = 0;
  int64_t chunk_uncompressed_bytes = 0;
  Bounds chunk_bounds;

  // The whole file, for Iceberg's metrics.
  int64_t file_column_bytes = 0;
  int64_t file_nulls = 0;
  int64_t file_nans = 0;
  Bounds file_bounds;

  int64_t BufferedBytes() const {
    return static_cast<int64_t>(chunk_bytes.size() + page_values.size() + page_booleans.size() / 8 +
                                page_levels.size() / 8);
  }
};

std::string DescribeColumn(const ParquetColumn& column) {
  std::string type = ColumnTypeName(column.type);
  if (column.type == ColumnType::kDecimal) {
    type += "(" + std::to_string(column.decimal_precision) + ", " + std::to_string(column.decimal_scale) + ")";
  }
  return "column '" + EscapeInvalidUtf8(column.name) + "' (field id " + std::to_string(column.field_id) + ", " +
         type + (column.required ? ", required" : "") + ")";
}

Status CellError(const ParquetColumn& column, int64_t row, const std::string& what) {
  return MakeError("lake Parquet file: " + DescribeColumn(column) + " row " + std::to_string(row) +
                   " (0-based, in this file): " + what);
}

// Every check a cell must pass before any cell of its row is appended.
Status CheckCell(const ColumnWriter& writer, const CellValue& value, int64_t row) {
  const ParquetColumn& column = writer.column;
  if (std::holds_alternative<NullValue>(value)) {
    if (column.required) {
      return CellError(column, row, "null in a required column; the source row must carry a value, or the "
                                    "table's schema must declare the column optional");
    }
    return Status::Ok();
  }
  const size_t expected = CellIndexOf(column.type);
  if (value.index() != expected) {
    return CellError(column, row, std::string("a ") + CellKindName(value.index()) + " value given where the type takes a " +
                                      CellKindName(expected) + " (a bug in the caller's conversion)");
  }
  switch (column.type) {
    case ColumnType::kDecimal: {
      const Int128 unscaled = std::get<DecimalValue>(value).unscaled;
      if (!DecimalFitsPrecision(unscaled, column.decimal_precision)) {
        return CellError(column, row, "value " + FormatDecimalText(unscaled, column.decimal_scale) +
                                          " does not fit precision " + std::to_string(column.decimal_precision) +
                                          "; the table's schema must declare a wider decimal");
      }
      break;
    }
    case ColumnType::kString: {
      const auto& bytes = std::get<std::string>(value);
      if (!IsValidUtf8(bytes)) {
        return CellError(column, row, "string is not valid UTF-8 ('" + EscapeInvalidUtf8(bytes.substr(0, 64)) +
                                          "'); Iceberg strings are UTF-8: convert the source's encoding, or "
                                          "declare the column binary");
      }
      [[fallthrough]];
    }
    case ColumnType::kBinary: {
      const auto& bytes = std::get<std::string>(value);
      if (static_cast<int64_t>(bytes.size()) > kByteArrayValueBytesMax) {
        return CellError(column, row, "value of " + std::to_string(bytes.size()) + " bytes is longer than the " +
                                          std::to_string(kByteArrayValueBytesMax) + "-byte limit of one value");
      }
      break;
    }
    case ColumnType::kUuid: {
      const auto& bytes = std::get<std::string>(value);
      if (bytes.size() != static_cast<size_t>(kUuidBytes)) {
        return CellError(column, row, "uuid of " + std::to_string(bytes.size()) + " bytes; a uuid is 16 bytes");
      }
      break;
    }
    default: break;
  }
  return Status::Ok();
}

// Appends a checked cell to its column's page.
void AppendCell(ColumnWriter& writer, const CellValue& value) {
  writer.page_rows++;
  writer.chunk_rows++;
  if (std::holds_alternative<NullValue>(value)) {
    writer.page_levels.push_back(0);
    writer.chunk_nulls++;
    writer.file_nulls++;
    return;
  }
  if (!writer.column.required) writer.page_levels.push_back(1);
  if (IsNaN(value)) writer.file_nans++;
  writer.chunk_bounds.Add(value);
  std::vector<uint8_t>& out = writer.page_values;
  switch (value.index()) {
    case 1: writer.page_booleans.push_back(std::get<bool>(value)); break;
    case 2: PutLittleEndian(out, std::get<int32_t>(value)); break;
    case 3: PutLittleEndian(out, std::get<int64_t>(value)); break;
    case 4: PutLittleEndian(out, std::get<float>(value)); break;
    case 5: PutLittleEndian(out, std::get<double>(value)); break;
    case 6: {
      const std::string bytes = PlainStatisticBytes(writer.shape, value);
      out.insert(out.end(), bytes.begin(), bytes.end());
      break;
    }
    case 7: {
      const auto& bytes = std::get<std::string>(value);
      if (writer.shape.physical == PhysicalType::kByteArray) {
        PutLittleEndian(out, static_cast<uint32_t>(bytes.size()));
      }
      out.insert(out.end(), bytes.begin(), bytes.end());
      break;
    }
    default: TRELLARA_ASSERT(false, "append of an unchecked cell");
  }
}

Result<std::vector<uint8_t>> CompressZstd(const std::vector<uint8_t>& body, int level, const ParquetColumn& column) {
  std::vector<uint8_t> compressed(ZSTD_compressBound(body.size()));
  const size_t size = ZSTD_compress(compressed.data(), compressed.size(), body.data(), body.size(), level);
  if (ZSTD_isError(size)) {
    return MakeError("lake Parquet file: ZSTD compression of a page of " + DescribeColumn(column) + " failed: " +
                     ZSTD_getErrorName(size));
  }
  compressed.resize(size);
  return compressed;
}

// Closes the column's current page: definition levels (optional columns: 4-byte little-endian
// length, then the RLE/bit-packed hybrid), the PLAIN values, compression, the PageHeader.
Status ClosePage(ColumnWriter& writer, const ParquetWriterOptions& options) {
  if (writer.page_rows == 0) return Status::Ok();
  std::vector<uint8_t> body;
  if (!writer.column.required) {
    TRELLARA_ASSERT(static_cast<int64_t>(writer.page_levels.size()) == writer.page_rows,
                    "one definition level per row of an optional column");
    std::vector<uint8_t> levels;
    EncodeRleBitPackedHybrid(writer.page_levels, kDefinitionLevelBitWidth, levels);
    PutLittleEndian(body, static_cast<uint32_t>(levels.size()));
    body.insert(body.end(), levels.begin(), levels.end());
  } else {
    TRELLARA_ASSERT(writer.page_levels.empty(), "a required column has no definition levels");
  }
  if (writer.shape.physical == PhysicalType::kBoolean) {
    // PLAIN booleans: one bit per value, least significant bit first.
    const size_t first = body.size();
    body.resize(first + (writer.page_booleans.size() + 7) / 8, 0);
    for (size_t i = 0; i < writer.page_booleans.size(); i++) {
      if (writer.page_booleans[i]) body[first + i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    }
  } else {
    body.insert(body.end(), writer.page_values.begin(), writer.page_values.end());
  }
  if (body.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return MakeError("lake Parquet file: a page of " + DescribeColumn(writer.column) + " holds " +
                     std::to_string(body.size()) + " bytes, more than a page header can describe; lower "
                     "page_bytes_target");
  }
  std::vector<uint8_t> stored;
  if (options.compression == ParquetCompression::kZstd) {
    auto compressed = CompressZstd(body, options.zstd_level, writer.column);
    if (!compressed.ok()) return compressed.error();
    stored = std::move(compressed).value();
  } else {
    stored = body;
  }
  if (stored.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return MakeError("lake Parquet file: a compressed page of " + DescribeColumn(writer.column) +
                     " is larger than a page header can describe");
  }

  ThriftCompactWriter header;
  header.FieldI32(1, kPageTypeDataPage);                     // type
  header.FieldI32(2, static_cast<int32_t>(body.size()));     // uncompressed_page_size
  header.FieldI32(3, static_cast<int32_t>(stored.size()));   // compressed_page_size
  header.BeginStructField(5);                                // data_page_header
  header.FieldI32(1, static_cast<int32_t>(writer.page_rows));  // num_values, nulls included
  header.FieldI32(2, kEncodingPlain);                        // encoding
  header.FieldI32(3, kEncodingRle);                          // definition_level_encoding
  header.FieldI32(4, kEncodingRle);                          // repetition_level_encoding
  header.EndStruct();
  const std::vector<uint8_t> header_bytes = std::move(header).Finish();

  writer.chunk_bytes.insert(writer.chunk_bytes.end(), header_bytes.begin(), header_bytes.end());
  writer.chunk_bytes.insert(writer.chunk_bytes.end(), stored.begin(), stored.end());
  writer.chunk_uncompressed_bytes += static_cast<int64_t>(header_bytes.size() + body.size());
  writer.page_levels.clear();
  writer.page_values.clear();
  writer.page_booleans.clear();
  writer.page_rows = 0;
  return Status::Ok();
}

void EncodeLogicalType(ThriftCompactWriter& w, const ParquetShape& shape, const ParquetColumn& column) {
  w.BeginStructField(10);  // SchemaElement.logicalType
  w.BeginStructField(static_cast<int16_t>(shape.logical));
  switch (shape.logical) {
    case LogicalKind::kDecimal:
      w.FieldI32(1, column.decimal_scale);
      w.FieldI32(2, column.decimal_precision);
      break;
    case LogicalKind::kTime:
    case LogicalKind::kTimestamp:
      w.FieldBool(1, shape.adjusted_to_utc);  // isAdjustedToUTC
      w.BeginStructField(2);                  // unit (TimeUnit union)
      w.BeginStructField(kTimeUnitMicros);
      w.EndStruct();
      w.EndStruct();
      break;
    default: break;  // STRING, DATE, UUID: empty structs
  }
  w.EndStruct();
  w.EndStruct();
}

void EncodeSchemaElement(ThriftCompactWriter& w, const ColumnWriter& writer) {
  const ParquetColumn& column = writer.column;
  const ParquetShape& shape = writer.shape;
  w.BeginListStruct();
  w.FieldI32(1, static_cast<int32_t>(shape.physical));  // type
  if (shape.physical == PhysicalType::kFixedLenByteArray) w.FieldI32(2, shape.type_length);
  w.FieldI32(3, column.required ? kRepetitionRequired : kRepetitionOptional);
  w.FieldBinary(4, column.name);
  if (shape.converted != ConvertedType::kNone) w.FieldI32(6, static_cast<int32_t>(shape.converted));
  if (column.type == ColumnType::kDecimal) {
    w.FieldI32(7, column.decimal_scale);
    w.FieldI32(8, column.decimal_precision);
  }
  w.FieldI32(9, column.field_id);
  if (shape.logical != LogicalKind::kNone) EncodeLogicalType(w, shape, column);
  w.EndStruct();
}

void EncodeColumnChunk(ThriftCompactWriter& w, const ColumnWriter& writer, const ColumnChunkRecord& chunk,
                       ParquetCompression compression) {
  w.BeginListStruct();
  w.FieldI64(2, chunk.data_page_offset);  // file_offset: where the chunk starts
  w.BeginStructField(3);                  // meta_data (ColumnMetaData)
  w.FieldI32(1, static_cast<int32_t>(writer.shape.physical));
  if (writer.column.required) {
    w.BeginListField(2, ThriftType::kI32, 1);
    w.ListI32(kEncodingPlain);
  } else {
    w.BeginListField(2, ThriftType::kI32, 2);
    w.ListI32(kEncodingPlain);
    w.ListI32(kEncodingRle);
  }
  w.BeginListField(3, ThriftType::kBinary, 1);  // path_in_schema
  w.ListBinary(writer.column.name);
  w.FieldI32(4, compression == ParquetCompression::kZstd ? kCodecZstd : kCodecUncompressed);
  w.FieldI64(5, chunk.num_values);
  w.FieldI64(6, chunk.uncompressed_bytes);
  w.FieldI64(7, chunk.compressed_bytes);
  w.FieldI64(9, chunk.data_page_offset);
  w.BeginStructField(12);  // statistics
  w.FieldI64(3, chunk.null_count);
  if (chunk.bounds.min) {
    w.FieldBinary(5, PlainStatisticBytes(writer.shape, SignedZeroForBound(*chunk.bounds.max, false)));  // max_value
    w.FieldBinary(6, PlainStatisticBytes(writer.shape, SignedZeroForBound(*chunk.bounds.min, true)));   // min_value
    w.FieldBool(7, true);  // is_max_value_exact
    w.FieldBool(8, true);  // is_min_value_exact
  }
  w.EndStruct();
  w.EndStruct();
  w.EndStruct();
}

}  // namespace parquet_writer_internal

std::string ColumnTypeName(ColumnType type) {
  switch (type) {
    case ColumnType::kBoolean: return "boolean";
    case ColumnType::kInt: return "int";
    case ColumnType::kLong: return "long";
    case ColumnType::kFloat: return "float";
    case ColumnType::kDouble: return "double";
    case ColumnType::kDecimal: return "decimal";
    case ColumnType::kDate: return "date";
    case ColumnType::kTime: return "time";
    case ColumnType::kTimestamp: return "timestamp";
    case ColumnType::kTimestampTz: return "timestamptz";
    case ColumnType::kString: return "string";
    case ColumnType::kBinary: return "binary";
    case ColumnType::kUuid: return "uuid";
  }
  return "unknown";
}

Result<ColumnType> ParseColumnTypeName(std::string_view name) {
  static constexpr ColumnType kAll[] = {
      ColumnType::kBoolean, ColumnType::kInt,  ColumnType::kLong,      ColumnType::kFloat,
      ColumnType::kDouble,  ColumnType::kDecimal, ColumnType::kDate,   ColumnType::kTime,
      ColumnType::kTimestamp, ColumnType::kTimestampTz, ColumnType::kString, ColumnType::kBinary,
      ColumnType::kUuid};
  std::string accepted;
  for (ColumnType type : kAll) {
    if (ColumnTypeName(type) == name) return type;
    accepted += (accepted.empty() ? "" : ", ") + ColumnTypeName(type);
  }
  return MakeError("lake column type '" + EscapeInvalidUtf8(name) + "' is not one of: " + accepted);
}

struct ParquetWriter::State {
  ParquetWriterOptions options;
  std::vector<parquet_writer_internal::ColumnWriter> columns;
  std::vector<uint8_t> out;
  std::vector<parquet_writer_internal::RowGroupRecord> row_groups;
  int64_t rows_total = 0;
  int64_t row_group_rows = 0;
  bool finished = false;
  // A page that could not be written (compression failed) leaves a column without a row the
  // others have: the writer refuses everything after it.
  std::optional<Error> failed;
};

ParquetWriter::ParquetWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}
ParquetWriter::ParquetWriter(ParquetWriter&&) noexcept = default;
ParquetWriter& ParquetWriter::operator=(ParquetWriter&&) noexcept = default;
ParquetWriter::~ParquetWriter() = default;

int64_t ParquetWriter::rows_appended() const { return state_->rows_total; }

Result<ParquetWriter> ParquetWriter::Create(std::vector<ParquetColumn> columns, ParquetWriterOptions options) {
  using namespace parquet_writer_internal;
  if (columns.empty()) return MakeError("lake Parquet file: the schema has no columns");
  std::set<std::string> names;
  std::set<int32_t> field_ids;
  for (const ParquetColumn& column : columns) {
    const std::string what = "lake Parquet schema: " + DescribeColumn(column) + ": ";
    if (column.name.empty()) return MakeError(what + "the column has no name");
    if (!IsValidUtf8(column.name)) return MakeError(what + "the name is not valid UTF-8");
    if (!names.insert(column.name).second) return MakeError(what + "a second column has this name");
    if (column.field_id < 0) return MakeError(what + "field ids are >= 0");
    if (!field_ids.insert(column.field_id).second) return MakeError(what + "a second column has this field id");
    if (column.type == ColumnType::kDecimal) {
      if (column.decimal_precision < 1 || column.decimal_precision > kDecimalPrecisionMax) {
        return MakeError(what + "decimal precision must be 1..38");
      }
      if (column.decimal_scale < 0 || column.decimal_scale > column.decimal_precision) {
        return MakeError(what + "decimal scale must be 0..precision");
      }
    } else if (column.decimal_precision != 0 || column.decimal_scale != 0) {
      return MakeError(what + "precision and scale are for decimal columns only");
    }
  }
  if (options.page_rows_max < 1 || options.page_rows_max > std::numeric_limits<int32_t>::max()) {
    return MakeError("lake Parquet writer: page_rows_max " + std::to_string(options.page_rows_max) +
                     " is not 1..2147483647");
  }
  if (options.page_bytes_target < 1 || options.row_group_rows_max < 1 || options.row_group_bytes_max < 1) {
    return MakeError("lake Parquet writer: page_bytes_target, row_group_rows_max and row_group_bytes_max must be >= 1");
  }
  if (options.compression == ParquetCompression::kZstd &&
      (options.zstd_level < ZSTD_minCLevel() || options.zstd_level > ZSTD_maxCLevel())) {
    return MakeError("lake Parquet writer: zstd_level " + std::to_string(options.zstd_level) + " is not " +
                     std::to_string(ZSTD_minCLevel()) + ".." + std::to_string(ZSTD_maxCLevel()));
  }
  if (options.created_by.empty()) options.created_by = std::string("trellara version ") + TRELLARA_VERSION;

  auto state = std::make_unique<State>();
  state->options = std::move(options);
  for (ParquetColumn& column : columns) {
    ColumnWriter writer;
    writer.shape = ParquetShapeOf(column);
    writer.column = std::move(column);
    state->columns.push_back(std::move(writer));
  }
  state->out.assign(kMagic.begin(), kMagic.end());
  return ParquetWriter(std::move(state));
}

Status ParquetWriter::AppendRow(std::span<const CellValue> row) {
  using namespace parquet_writer_internal;
  State& s = *state_;
  TRELLARA_ASSERT(!s.finished, "AppendRow after Finish");
  if (s.failed) return *s.failed;
  if (row.size() != s.columns.size()) {
    return MakeError("lake Parquet file: row " + std::to_string(s.rows_total) + " has " + std::to_string(row.size()) +
                     " values for " + std::to_string(s.columns.size()) + " columns");
  }
  for (size_t c = 0; c < row.size(); c++) TRELLARA_TRY(CheckCell(s.columns[c], row[c], s.rows_total));

  int64_t buffered = 0;
  for (size_t c = 0; c < row.size(); c++) {
    ColumnWriter& writer = s.columns[c];
    AppendCell(writer, row[c]);
    if (writer.page_rows >= s.options.page_rows_max ||
        static_cast<int64_t>(writer.page_values.size()) >= s.options.page_bytes_target) {
      Status closed = ClosePage(writer, s.options);
      if (!closed.ok()) {
        s.failed = closed.error();
        return closed;
      }
    }
    buffered += writer.BufferedBytes();
  }
  s.rows_total++;
  s.row_group_rows++;
  if (s.row_group_rows >= s.options.row_group_rows_max || buffered >= s.options.row_group_bytes_max) {
    return FinishRowGroup();
  }
  return Status::Ok();
}

Status ParquetWriter::FinishRowGroup() {
  using namespace parquet_writer_internal;
  State& s = *state_;
  TRELLARA_ASSERT(!s.finished, "FinishRowGroup after Finish");
  if (s.failed) return *s.failed;
  if (s.row_group_rows == 0) return Status::Ok();
  for (ColumnWriter& writer : s.columns) {
    Status closed = ClosePage(writer, s.options);
    if (!closed.ok()) {
      s.failed = closed.error();
      return closed;
    }
  }

  RowGroupRecord group;
  group.file_offset = static_cast<int64_t>(s.out.size());
  group.num_rows = s.row_group_rows;
  for (ColumnWriter& writer : s.columns) {
    TRELLARA_ASSERT(writer.chunk_rows == s.row_group_rows, "every column chunk holds every row of its row group");
    ColumnChunkRecord chunk;
    chunk.data_page_offset = static_cast<int64_t>(s.out.size());
    chunk.num_values = writer.chunk_rows;
    chunk.uncompressed_bytes = writer.chunk_uncompressed_bytes;
    chunk.compressed_bytes = static_cast<int64_t>(writer.chunk_bytes.size());
    chunk.null_count = writer.chunk_nulls;
    chunk.bounds = writer.chunk_bounds;
    s.out.insert(s.out.end(), writer.chunk_bytes.begin(), writer.chunk_bytes.end());
    writer.file_column_bytes += chunk.compressed_bytes;
    writer.file_bounds.Merge(writer.chunk_bounds);
    writer.chunk_bytes.clear();
    writer.chunk_rows = 0;
    writer.chunk_nulls = 0;
    writer.chunk_uncompressed_bytes = 0;
    writer.chunk_bounds = Bounds{};
    group.columns.push_back(std::move(chunk));
  }
  s.row_groups.push_back(std::move(group));
  s.row_group_rows = 0;
  return Status::Ok();
}

Result<ParquetFile> ParquetWriter::Finish() && {
  using namespace parquet_writer_internal;
  TRELLARA_TRY(FinishRowGroup());
  State& s = *state_;
  s.finished = true;

  ThriftCompactWriter w;
  w.FieldI32(1, kFileFormatVersion);
  w.BeginListField(2, ThriftType::kStruct, static_cast<uint32_t>(s.columns.size() + 1));  // schema
  w.BeginListStruct();  // the root: a group of every column
  w.FieldBinary(4, "table");
  w.FieldI32(5, static_cast<int32_t>(s.columns.size()));
  w.EndStruct();
  for (const ColumnWriter& writer : s.columns) EncodeSchemaElement(w, writer);
  w.FieldI64(3, s.rows_total);  // num_rows
  w.BeginListField(4, ThriftType::kStruct, static_cast<uint32_t>(s.row_groups.size()));
  for (const RowGroupRecord& group : s.row_groups) {
    int64_t uncompressed = 0;
    int64_t compressed = 0;
    w.BeginListStruct();
    w.BeginListField(1, ThriftType::kStruct, static_cast<uint32_t>(group.columns.size()));
    for (size_t c = 0; c < group.columns.size(); c++) {
      EncodeColumnChunk(w, s.columns[c], group.columns[c], s.options.compression);
      uncompressed += group.columns[c].uncompressed_bytes;
      compressed += group.columns[c].compressed_bytes;
    }
    w.FieldI64(2, uncompressed);  // total_byte_size
    w.FieldI64(3, group.num_rows);
    w.FieldI64(5, group.file_offset);
    w.FieldI64(6, compressed);  // total_compressed_size
    w.EndStruct();
  }
  if (!s.options.key_value_metadata.empty()) {
    w.BeginListField(5, ThriftType::kStruct, static_cast<uint32_t>(s.options.key_value_metadata.size()));
    for (const auto& [key, value] : s.options.key_value_metadata) {
      w.BeginListStruct();
      w.FieldBinary(1, key);
      w.FieldBinary(2, value);
      w.EndStruct();
    }
  }
  w.FieldBinary(6, s.options.created_by);
  // column_orders: TYPE_ORDER for every column, so readers trust min_value/max_value.
  w.BeginListField(7, ThriftType::kStruct, static_cast<uint32_t>(s.columns.size()));
  for (size_t c = 0; c < s.columns.size(); c++) {
    w.BeginListStruct();
    w.BeginStructField(1);
    w.EndStruct();
    w.EndStruct();
  }
  const std::vector<uint8_t> footer = std::move(w).Finish();
  s.out.insert(s.out.end(), footer.begin(), footer.end());
  PutLittleEndian(s.out, static_cast<uint32_t>(footer.size()));
  s.out.insert(s.out.end(), kMagic.begin(), kMagic.end());

  ParquetFile file;
  file.record_count = s.rows_total;
  file.file_size_bytes = static_cast<int64_t>(s.out.size());
  for (const RowGroupRecord& group : s.row_groups) file.split_offsets.push_back(group.file_offset);
  for (const ColumnWriter& writer : s.columns) {
    ColumnMetrics metrics;
    metrics.field_id = writer.column.field_id;
    metrics.column_size_bytes = writer.file_column_bytes;
    metrics.value_count = s.rows_total;
    metrics.null_count = writer.file_nulls;
    if (writer.column.type == ColumnType::kFloat || writer.column.type == ColumnType::kDouble) {
      metrics.nan_count = writer.file_nans;
    }
    if (writer.file_bounds.min) {
      metrics.lower_bound = IcebergSingleValue(SignedZeroForBound(*writer.file_bounds.min, true));
      metrics.upper_bound = IcebergSingleValue(SignedZeroForBound(*writer.file_bounds.max, false));
    }
    file.columns.push_back(std::move(metrics));
  }
  file.bytes = std::move(s.out);
  return file;
}

}  // namespace trellara::lake
