// lake_parquet_test.cpp — the lake's Parquet writer: the Thrift compact protocol byte for byte, the
// RLE/bit-packed hybrid (the format spec's own example and a round trip through a decoder written
// here from the spec), exact decimals, the file's frame and page header, the Iceberg metrics, and
// every strict check (a rejected row leaves nothing behind). Reading whole files back is the
// independent reader's job (tests/integration/test_lake_parquet.py), not ours.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

#include "trellara/base/assert.h"
#include "trellara/lake/decimal.h"
#include "trellara/lake/parquet_writer.h"
#include "trellara/lake/rle_hybrid.h"
#include "trellara/lake/thrift_compact.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_lake_parquet_test {

using namespace trellara;
using namespace trellara::lake;
using Bytes = std::vector<uint8_t>;

Bytes Finished(ThriftCompactWriter&& w) { return std::move(w).Finish(); }

std::string AsString(const Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

uint32_t ReadVarint(const Bytes& in, size_t& pos) {
  uint32_t value = 0;
  int shift = 0;
  while (true) {
    const uint8_t byte = in.at(pos++);
    value |= static_cast<uint32_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return value;
    shift += 7;
  }
}

// A decoder of the hybrid encoding written from Encodings.md, for the round trip only.
std::vector<uint32_t> DecodeHybrid(const Bytes& in, int bit_width, size_t count) {
  std::vector<uint32_t> values;
  size_t pos = 0;
  while (values.size() < count) {
    const uint32_t header = ReadVarint(in, pos);
    if ((header & 1) == 0) {
      uint32_t value = 0;
      for (int b = 0; b < (bit_width + 7) / 8; b++) value |= static_cast<uint32_t>(in.at(pos++)) << (8 * b);
      values.insert(values.end(), header >> 1, value);
    } else {
      const size_t n = (header >> 1) * 8;
      uint64_t buffer = 0;
      int bits = 0;
      for (size_t i = 0; i < n; i++) {
        while (bits < bit_width) {
          buffer |= static_cast<uint64_t>(in.at(pos++)) << bits;
          bits += 8;
        }
        values.push_back(static_cast<uint32_t>(buffer & ((uint64_t{1} << bit_width) - 1)));
        buffer >>= bit_width;
        bits -= bit_width;
      }
    }
  }
  CHECK(pos == in.size());
  values.resize(count);  // the last bit-packed run is padded
  return values;
}

Bytes Hybrid(const std::vector<uint32_t>& values, int bit_width) {
  Bytes out;
  EncodeRleBitPackedHybrid(values, bit_width, out);
  return out;
}

TEST_CASE("thrift_compact_encodes_known_values_byte_for_byte", "[lake]") {
  {
    ThriftCompactWriter w;
    w.FieldI32(1, 1);   // delta 1, type i32 (5): 0x15, zigzag(1) = 2
    w.FieldI32(2, -1);  // zigzag(-1) = 1
    w.FieldI64(3, 300);  // type i64 (6): 0x16... delta 1 -> 0x16; zigzag(300) = 600 = 0xD8 0x04
    w.FieldBool(4, true);   // the value is the type nibble: 0x11
    w.FieldBool(5, false);  // 0x12
    w.FieldBinary(6, "PAR");  // 0x18, length 3, bytes
    w.FieldI32(27, 0);   // delta 21 > 15: long form 0x05, zigzag(27) = 54 = 0x36, value 0
    CHECK(Finished(std::move(w)) ==
          Bytes{0x15, 0x02, 0x15, 0x01, 0x16, 0xD8, 0x04, 0x11, 0x12, 0x18, 0x03, 'P', 'A', 'R', 0x05, 0x36, 0x00, 0x00});
  }
  {
    ThriftCompactWriter w;
    w.BeginStructField(2);  // 0x2C
    w.FieldI32(1, 5);       // 0x15 0x0A (inner ids restart from 0)
    w.EndStruct();          // 0x00
    w.FieldI32(3, 7);       // delta from 2 is 1: 0x15 0x0E
    w.BeginListField(4, ThriftType::kI32, 3);  // 0x19, size 3 << 4 | 5 = 0x35
    w.ListI32(0);
    w.ListI32(-2);
    w.ListI32(64);  // zigzag 128 = 0x80 0x01
    w.BeginListField(5, ThriftType::kStruct, 20);  // 0x19, 0xFC, varint 20
    for (int i = 0; i < 20; i++) {
      w.BeginListStruct();
      w.EndStruct();
    }
    Bytes expected{0x2C, 0x15, 0x0A, 0x00, 0x15, 0x0E, 0x19, 0x35, 0x00, 0x03, 0x80, 0x01, 0x19, 0xFC, 0x14};
    expected.insert(expected.end(), 20, 0x00);
    expected.push_back(0x00);
    CHECK(Finished(std::move(w)) == expected);
  }
  CHECK(ThriftCompactWriter::ZigZag32(std::numeric_limits<int32_t>::min()) == 0xFFFFFFFFu);
  CHECK(ThriftCompactWriter::ZigZag64(std::numeric_limits<int64_t>::max()) == 0xFFFFFFFFFFFFFFFEull);
  Bytes varint;
  ThriftCompactWriter::PutVarint(varint, 0xFFFFFFFFFFFFFFFFull);
  CHECK(varint == Bytes{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01});
}

TEST_CASE("thrift_compact_refuses_a_field_id_that_does_not_increase", "[lake]") {
  ThriftCompactWriter w;
  w.FieldI32(3, 1);
  CHECK_THROWS_AS(w.FieldI32(3, 2), AssertionFailure);
}

TEST_CASE("rle_hybrid_matches_the_spec_and_round_trips", "[lake]") {
  // Encodings.md's example: bit width 3, values 0..7 bit-packed: 10001000 11000110 11111010.
  CHECK(Hybrid({0, 1, 2, 3, 4, 5, 6, 7}, 3) == Bytes{0x03, 0x88, 0xC6, 0xFA});
  // Eight equal values are one RLE run: header 8 << 1, the value in one byte.
  CHECK(Hybrid({1, 1, 1, 1, 1, 1, 1, 1}, 1) == Bytes{0x10, 0x01});
  CHECK(Hybrid({0, 1, 0, 1, 0, 1, 0, 1}, 1) == Bytes{0x03, 0xAA});
  // Fewer than 8 values: one padded group.
  CHECK(Hybrid({1, 0, 1}, 1) == Bytes{0x03, 0x05});
  // A long run: 1000 << 1 = 2000 = varint D0 0F.
  CHECK(Hybrid(std::vector<uint32_t>(1000, 0), 1) == Bytes{0xD0, 0x0F, 0x00});
  // Literals before a run are completed to a group of 8 from the run; the run's rest (5) is too
  // short for RLE and ends as a padded bit-packed group.
  CHECK(Hybrid({1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1) == Bytes{0x03, 0xFD, 0x03, 0x1F});
  // A wide RLE value takes ceil(width / 8) little-endian bytes.
  CHECK(Hybrid(std::vector<uint32_t>(9, 0x1234), 13) == Bytes{0x12, 0x34, 0x12});

  std::mt19937 random(20261207);
  for (int round = 0; round < 300; round++) {
    const int bit_width = 1 + static_cast<int>(random() % 32);
    const size_t count = random() % 2000;
    std::vector<uint32_t> values;
    const uint64_t limit = uint64_t{1} << bit_width;
    while (values.size() < count) {
      const auto value = static_cast<uint32_t>(random() % limit);
      const size_t repeat = random() % 3 == 0 ? random() % 40 : 1;
      values.insert(values.end(), std::min(repeat, count - values.size()), value);
    }
    const Bytes encoded = Hybrid(values, bit_width);
    INFO("round " << round << " bit width " << bit_width << " count " << count);
    CHECK(DecodeHybrid(encoded, bit_width, values.size()) == values);
  }
}

TEST_CASE("decimal_widths_bytes_and_text_are_exact", "[lake]") {
  CHECK(DecimalFixedBytes(1) == 1);
  CHECK(DecimalFixedBytes(2) == 1);
  CHECK(DecimalFixedBytes(3) == 2);
  CHECK(DecimalFixedBytes(9) == 4);
  CHECK(DecimalFixedBytes(10) == 5);
  CHECK(DecimalFixedBytes(18) == 8);
  CHECK(DecimalFixedBytes(19) == 9);
  CHECK(DecimalFixedBytes(38) == 16);

  CHECK(DecimalMinimalBigEndian(0) == std::string("\x00", 1));
  CHECK(DecimalMinimalBigEndian(127) == "\x7F");
  CHECK(DecimalMinimalBigEndian(128) == std::string("\x00\x80", 2));
  CHECK(DecimalMinimalBigEndian(-1) == "\xFF");
  CHECK(DecimalMinimalBigEndian(-128) == "\x80");
  CHECK(DecimalMinimalBigEndian(-129) == "\xFF\x7F");
  CHECK(DecimalBigEndian(-2, 3) == "\xFF\xFF\xFE");

  CHECK(*ParseDecimalText("-12.3", 9, 2) == -1230);
  CHECK(*ParseDecimalText("+0.05", 3, 2) == 5);
  CHECK(*ParseDecimalText(".5", 2, 1) == 5);
  CHECK(*ParseDecimalText("7.", 3, 0) == 7);
  CHECK(*ParseDecimalText("1.2300", 5, 2) == 123);  // trailing zeros beyond the scale are exact
  const Int128 largest = PowerOfTen(38) - 1;
  CHECK(*ParseDecimalText("99999999999999999999999999999999999999", 38, 0) == largest);
  CHECK(*ParseDecimalText("-9999999999999999999999999999.9999999999", 38, 10) == -largest);
  CHECK(FormatDecimalText(-1230, 2) == "-12.30");
  CHECK(FormatDecimalText(5, 3) == "0.005");
  CHECK(FormatDecimalText(-largest, 0) == "-99999999999999999999999999999999999999");

  CHECK_FALSE(ParseDecimalText("1.234", 9, 2).ok());  // would round
  CHECK_FALSE(ParseDecimalText("1000", 5, 2).ok());   // 1000.00 needs precision 6
  CHECK_FALSE(ParseDecimalText("100000000000000000000000000000000000000", 38, 0).ok());
  CHECK_FALSE(ParseDecimalText("NaN", 9, 2).ok());
  CHECK_FALSE(ParseDecimalText("1.2.3", 9, 2).ok());
  CHECK_FALSE(ParseDecimalText("-", 9, 2).ok());
  CHECK_FALSE(ParseDecimalText("", 9, 2).ok());
  CHECK(ParseDecimalText("1.234", 9, 2).error().message.find("rounded") != std::string::npos);

  CHECK(*ParseUuidText("00112233-4455-6677-8899-AABBCCDDEEFF") ==
        std::string("\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xAA\xBB\xCC\xDD\xEE\xFF", 16));
  CHECK_FALSE(ParseUuidText("00112233445566778899aabbccddeeff").ok());
  CHECK_FALSE(ParseUuidText("0011223x-4455-6677-8899-aabbccddeeff").ok());
}

ParquetWriterOptions Uncompressed() {
  ParquetWriterOptions options;
  options.compression = ParquetCompression::kUncompressed;
  return options;
}

uint32_t FooterLength(const Bytes& file) {
  uint32_t length;
  std::memcpy(&length, file.data() + file.size() - 8, 4);
  return length;
}

TEST_CASE("parquet_file_is_framed_by_par1_with_a_v1_plain_page", "[lake]") {
  auto writer = ParquetWriter::Create({{"id", 1, ColumnType::kInt, true}}, Uncompressed());
  REQUIRE(writer.ok());
  CellValue row[] = {int32_t{7}};
  REQUIRE(writer->AppendRow(row).ok());
  auto file = std::move(*writer).Finish();
  REQUIRE(file.ok());
  const Bytes& bytes = file->bytes;
  REQUIRE(bytes.size() > 12);
  CHECK(AsString(Bytes(bytes.begin(), bytes.begin() + 4)) == "PAR1");
  CHECK(AsString(Bytes(bytes.end() - 4, bytes.end())) == "PAR1");
  CHECK(file->file_size_bytes == static_cast<int64_t>(bytes.size()));
  // The one page right after the magic: PageHeader{type DATA_PAGE, sizes 4 and 4,
  // data_page_header{num_values 1, PLAIN, RLE, RLE}} and the value 7 (little-endian int32).
  const Bytes page{0x15, 0x00, 0x15, 0x08, 0x15, 0x08, 0x2C, 0x15, 0x02, 0x15, 0x00, 0x15, 0x06, 0x15, 0x06,
                   0x00, 0x00, 0x07, 0x00, 0x00, 0x00};
  CHECK(Bytes(bytes.begin() + 4, bytes.begin() + 4 + static_cast<long>(page.size())) == page);
  // The footer fills the rest exactly.
  CHECK(4 + page.size() + FooterLength(bytes) + 8 == bytes.size());
  CHECK(file->split_offsets == std::vector<int64_t>{4});
  CHECK(file->record_count == 1);
  REQUIRE(file->columns.size() == 1);
  CHECK(file->columns[0].column_size_bytes == static_cast<int64_t>(page.size()));
  CHECK(file->columns[0].lower_bound == std::string("\x07\x00\x00\x00", 4));
}

std::vector<ParquetColumn> EveryTypeColumns() {
  return {
      {"b", 1, ColumnType::kBoolean},         {"i", 2, ColumnType::kInt},
      {"l", 3, ColumnType::kLong},            {"f", 4, ColumnType::kFloat},
      {"d", 5, ColumnType::kDouble},          {"dec", 6, ColumnType::kDecimal, false, 20, 4},
      {"day", 7, ColumnType::kDate},          {"t", 8, ColumnType::kTime},
      {"ts", 9, ColumnType::kTimestamp},      {"tz", 10, ColumnType::kTimestampTz},
      {"s", 11, ColumnType::kString},         {"bin", 12, ColumnType::kBinary},
      {"u", 13, ColumnType::kUuid},
  };
}

TEST_CASE("parquet_metrics_are_iceberg_single_values_of_the_true_extremes", "[lake]") {
  ParquetWriterOptions options;  // ZSTD
  options.row_group_rows_max = 2;
  auto writer = ParquetWriter::Create(EveryTypeColumns(), options);
  REQUIRE(writer.ok());
  const std::string uuid_low(16, '\x01');
  const std::string uuid_high(16, '\xF0');
  std::vector<std::vector<CellValue>> rows = {
      {true, int32_t{-5}, int64_t{9}, 1.5f, std::nan(""), DecimalValue{-129}, int32_t{19000}, int64_t{1},
       int64_t{-1}, int64_t{5}, std::string("b\xC3\xA9"), std::string("\xFF", 1), uuid_high},
      {false, int32_t{3}, NullValue{}, std::nanf(""), -2.0, DecimalValue{128}, int32_t{-1}, int64_t{86'399'999'999},
       int64_t{0}, NullValue{}, std::string(""), std::string("\x00", 1), uuid_low},
      {NullValue{}, NullValue{}, NullValue{}, 0.0f, 0.0, NullValue{}, NullValue{}, NullValue{}, NullValue{},
       NullValue{}, NullValue{}, NullValue{}, NullValue{}},
  };
  for (const auto& row : rows) REQUIRE(writer->AppendRow(row).ok());
  auto file = std::move(*writer).Finish();
  REQUIRE(file.ok());
  CHECK(file->record_count == 3);
  CHECK(file->split_offsets.size() == 2);  // two row groups: rows 0-1, row 2
  const auto& m = file->columns;
  REQUIRE(m.size() == 13);
  for (const ColumnMetrics& column : m) CHECK(column.value_count == 3);
  CHECK(m[0].null_count == 1);
  CHECK(m[0].lower_bound == std::string("\x00", 1));
  CHECK(m[0].upper_bound == "\x01");
  CHECK(m[1].lower_bound == "\xFB\xFF\xFF\xFF");  // -5 little-endian
  CHECK(m[2].null_count == 2);
  CHECK(m[2].lower_bound == m[2].upper_bound);
  // float: NaN counted, never a bound; the zero minimum is -0.0.
  CHECK(m[3].nan_count == 1);
  float f_low;
  REQUIRE(m[3].lower_bound->size() == 4);
  std::memcpy(&f_low, m[3].lower_bound->data(), 4);
  CHECK((f_low == 0.0f && std::signbit(f_low)));
  CHECK(m[4].nan_count == 1);
  CHECK_FALSE(m[2].nan_count.has_value());
  // decimal: the fewest big-endian two's complement bytes.
  CHECK(m[5].lower_bound == "\xFF\x7F");                 // -129
  CHECK(m[5].upper_bound == std::string("\x00\x80", 2));  // 128
  CHECK(m[9].null_count == 2);
  CHECK(m[10].lower_bound == "");  // the empty string is the least string
  CHECK(m[10].upper_bound == "b\xC3\xA9");
  CHECK(m[11].lower_bound == std::string("\x00", 1));
  CHECK(m[11].upper_bound == "\xFF");
  CHECK(m[12].lower_bound == uuid_low);  // unsigned byte order
  CHECK(m[12].upper_bound == uuid_high);
  int64_t sizes = 0;
  for (const ColumnMetrics& column : m) sizes += column.column_size_bytes;
  CHECK(sizes < file->file_size_bytes);
}

TEST_CASE("parquet_all_null_column_has_counts_and_no_bounds", "[lake]") {
  auto writer = ParquetWriter::Create({{"s", 4, ColumnType::kString}}, Uncompressed());
  REQUIRE(writer.ok());
  for (int i = 0; i < 20; i++) {
    CellValue row[] = {NullValue{}};
    REQUIRE(writer->AppendRow(row).ok());
  }
  auto file = std::move(*writer).Finish();
  REQUIRE(file.ok());
  CHECK(file->columns[0].null_count == 20);
  CHECK_FALSE(file->columns[0].lower_bound.has_value());
  CHECK_FALSE(file->columns[0].upper_bound.has_value());
}

TEST_CASE("parquet_rejected_row_names_column_and_row_and_leaves_nothing", "[lake]") {
  auto writer = ParquetWriter::Create(
      {{"id", 1, ColumnType::kLong, true}, {"price", 2, ColumnType::kDecimal, false, 5, 2},
       {"name", 3, ColumnType::kString}, {"u", 4, ColumnType::kUuid}},
      Uncompressed());
  REQUIRE(writer.ok());
  std::vector<CellValue> good = {int64_t{1}, DecimalValue{99999}, std::string("ok"), NullValue{}};
  REQUIRE(writer->AppendRow(good).ok());

  std::vector<CellValue> too_wide = {int64_t{2}, DecimalValue{100000}, std::string("x"), NullValue{}};
  Status status = writer->AppendRow(too_wide);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.error().message, Catch::Contains("column 'price' (field id 2, decimal(5, 2))") &&
                                         Catch::Contains("row 1 ") && Catch::Contains("1000.00") &&
                                         Catch::Contains("does not fit precision 5"));
  CHECK(writer->AppendRow(std::vector<CellValue>{int64_t{2}, DecimalValue{-100000}, NullValue{}, NullValue{}})
            .error().message.find("-1000.00") != std::string::npos);

  std::vector<CellValue> bad_utf8 = {int64_t{2}, NullValue{}, std::string("caf\xE9"), NullValue{}};
  status = writer->AppendRow(bad_utf8);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(status.error().message, Catch::Contains("column 'name' (field id 3, string)") &&
                                         Catch::Contains("row 1 ") && Catch::Contains("not valid UTF-8") &&
                                         Catch::Contains("caf\\xe9"));

  status = writer->AppendRow(std::vector<CellValue>{NullValue{}, NullValue{}, NullValue{}, NullValue{}});
  CHECK_THAT(status.error().message, Catch::Contains("column 'id'") && Catch::Contains("null in a required column"));
  status = writer->AppendRow(std::vector<CellValue>{int32_t{2}, NullValue{}, NullValue{}, NullValue{}});
  CHECK_THAT(status.error().message, Catch::Contains("a int32 value given where the type takes a int64"));
  status = writer->AppendRow(std::vector<CellValue>{int64_t{2}, NullValue{}, NullValue{}, std::string(15, 'u')});
  CHECK_THAT(status.error().message, Catch::Contains("column 'u'") && Catch::Contains("uuid of 15 bytes"));
  CHECK_FALSE(writer->AppendRow(std::vector<CellValue>{int64_t{2}}).ok());

  // None of the rejected rows left a value in any column.
  CHECK(writer->rows_appended() == 1);
  REQUIRE(writer->AppendRow(std::vector<CellValue>{int64_t{3}, DecimalValue{-99999}, NullValue{}, NullValue{}}).ok());
  auto file = std::move(*writer).Finish();
  REQUIRE(file.ok());
  CHECK(file->record_count == 2);
  CHECK(file->columns[0].lower_bound == std::string("\x01\0\0\0\0\0\0\0", 8));
  CHECK(file->columns[0].upper_bound == std::string("\x03\0\0\0\0\0\0\0", 8));
  CHECK(file->columns[1].null_count == 0);
  CHECK(file->columns[2].null_count == 1);
}

TEST_CASE("parquet_schema_and_options_are_checked", "[lake]") {
  auto check_error = [](std::vector<ParquetColumn> columns, const std::string& expected) {
    auto writer = ParquetWriter::Create(std::move(columns), ParquetWriterOptions{});
    REQUIRE_FALSE(writer.ok());
    CHECK_THAT(writer.error().message, Catch::Contains(expected));
  };
  check_error({}, "no columns");
  check_error({{"a", 1, ColumnType::kInt}, {"b", 1, ColumnType::kInt}}, "a second column has this field id");
  check_error({{"a", 1, ColumnType::kInt}, {"a", 2, ColumnType::kInt}}, "a second column has this name");
  check_error({{"", 1, ColumnType::kInt}}, "no name");
  check_error({{"a", -1, ColumnType::kInt}}, "field ids are >= 0");
  check_error({{"a", 1, ColumnType::kDecimal, false, 39, 0}}, "precision must be 1..38");
  check_error({{"a", 1, ColumnType::kDecimal, false, 5, 6}}, "scale must be 0..precision");
  check_error({{"a", 1, ColumnType::kInt, false, 5, 0}}, "for decimal columns only");
  ParquetWriterOptions options;
  options.zstd_level = 99;
  CHECK_FALSE(ParquetWriter::Create({{"a", 1, ColumnType::kInt}}, options).ok());
  CHECK(*ParseColumnTypeName("timestamptz") == ColumnType::kTimestampTz);
  CHECK_THAT(ParseColumnTypeName("int32").error().message, Catch::Contains("boolean, int, long"));
}

TEST_CASE("parquet_pages_and_row_groups_split_where_the_limits_say", "[lake]") {
  ParquetWriterOptions options = Uncompressed();
  options.page_rows_max = 3;
  options.row_group_rows_max = 7;
  auto writer = ParquetWriter::Create({{"v", 1, ColumnType::kLong, true}}, options);
  REQUIRE(writer.ok());
  for (int64_t i = 0; i < 20; i++) {
    CellValue row[] = {i};
    REQUIRE(writer->AppendRow(row).ok());
  }
  auto file = std::move(*writer).Finish();
  REQUIRE(file.ok());
  CHECK(file->split_offsets.size() == 3);  // 7 + 7 + 6 rows
  // 3 + 3 + 1 rows per group of 7: three pages; 6 rows: two pages; 8 pages of 17 header bytes
  // (sizes below 64 fit one varint byte) around 20 values of 8 bytes.
  CHECK(file->columns[0].column_size_bytes == 8 * 17 + 20 * 8);
}

}  // namespace unit_lake_parquet_test
