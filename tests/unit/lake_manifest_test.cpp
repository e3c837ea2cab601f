// lake_manifest_test.cpp — the Avro container framing byte for byte, the Iceberg schema JSON, and
// the frame of a manifest and a manifest list (reading their objects back is the independent
// reader's job: tests/integration/test_lake_manifest.py, npm avsc).
#include <catch2/catch.hpp>

#include <string>

#include "trellara/lake/avro_container.h"
#include "trellara/lake/iceberg_manifest.h"
#include "trellara/lake/parquet_writer.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_lake_manifest_test {

using namespace trellara;
using namespace trellara::lake;
using Bytes = std::vector<uint8_t>;

const AvroSyncMarker kSync = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

Bytes Long(int64_t value) {
  Bytes out;
  PutAvroLong(out, value);
  return out;
}

void Append(Bytes& out, std::string_view text) { out.insert(out.end(), text.begin(), text.end()); }

bool Contains(const Bytes& haystack, std::string_view needle) {
  return std::string(haystack.begin(), haystack.end()).find(needle) != std::string::npos;
}

TEST_CASE("avro_long_is_zigzag_varint", "[lake]") {
  CHECK(Long(0) == Bytes{0x00});
  CHECK(Long(-1) == Bytes{0x01});
  CHECK(Long(1) == Bytes{0x02});
  CHECK(Long(-64) == Bytes{0x7F});
  CHECK(Long(64) == Bytes{0x80, 0x01});
  CHECK(Long(std::numeric_limits<int64_t>::min()) ==
        Bytes{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01});
}

TEST_CASE("avro_container_frames_header_block_and_sync", "[lake]") {
  Bytes expected{'O', 'b', 'j', 1, 0x06};  // magic; a metadata block of 3 entries
  expected.push_back(0x16);                // "avro.schema": 11 bytes
  Append(expected, "avro.schema");
  expected.push_back(0x0A);
  Append(expected, "\"int\"");
  expected.push_back(0x14);
  Append(expected, "avro.codec");
  expected.push_back(0x08);
  Append(expected, "null");
  expected.push_back(0x02);
  Append(expected, "k");
  expected.push_back(0x02);
  Append(expected, "v");
  expected.push_back(0x00);  // end of the metadata map
  expected.insert(expected.end(), kSync.begin(), kSync.end());
  CHECK(AvroContainerFile("\"int\"", {{"k", "v"}}, kSync, 0, {}) == expected);

  // Two ints (1, -1) in one block: count 2, size 2, the objects, the sync marker.
  Bytes with_block = expected;
  with_block.insert(with_block.end(), {0x04, 0x04, 0x02, 0x01});
  with_block.insert(with_block.end(), kSync.begin(), kSync.end());
  CHECK(AvroContainerFile("\"int\"", {{"k", "v"}}, kSync, 2, {0x02, 0x01}) == with_block);
}

std::vector<ParquetColumn> Columns() {
  return {{"id", 1, ColumnType::kLong, true}, {"price", 2, ColumnType::kDecimal, false, 9, 2},
          {"name", 3, ColumnType::kString}};
}

TEST_CASE("iceberg_schema_json_names_ids_types_and_requiredness", "[lake]") {
  const auto columns = Columns();
  CHECK(IcebergSchemaJson(columns, 3) ==
        R"j({"type":"struct","schema-id":3,"fields":[{"id":1,"name":"id","required":true,"type":"long"},)j"
        R"j({"id":2,"name":"price","required":false,"type":"decimal(9, 2)"},)j"
        R"j({"id":3,"name":"name","required":false,"type":"string"}]})j");
}

TEST_CASE("iceberg_manifest_and_list_are_avro_containers_with_iceberg_metadata", "[lake]") {
  auto writer = ParquetWriter::Create(Columns(), ParquetWriterOptions{});
  REQUIRE(writer.ok());
  REQUIRE(writer->AppendRow(std::vector<CellValue>{int64_t{7}, DecimalValue{-1250}, std::string("x")}).ok());
  auto file = std::move(*writer).Finish();
  REQUIRE(file.ok());

  DataManifest manifest;
  manifest.table_schema_json = IcebergSchemaJson(Columns(), 0);
  manifest.snapshot_id = 4'611'686'018'427'387'904;  // 2^62: snapshot ids use all 63 bits
  manifest.files.push_back(DataFileEntryOf("/lake/t/data/a.parquet", *file));
  auto bytes = WriteDataManifest(manifest, kSync);
  REQUIRE(bytes.ok());
  CHECK(Bytes(bytes->begin(), bytes->begin() + 4) == Bytes{'O', 'b', 'j', 1});
  CHECK(Bytes(bytes->end() - 16, bytes->end()) == Bytes(kSync.begin(), kSync.end()));
  for (std::string_view key : {"schema", "partition-spec", "partition-spec-id", "format-version", "content",
                               "\"field-id\": 100", "/lake/t/data/a.parquet", "PARQUET"}) {
    INFO(key);
    CHECK(Contains(*bytes, key));
  }

  ManifestList list;
  list.snapshot_id = manifest.snapshot_id;
  list.parent_snapshot_id = 5;
  list.sequence_number = 2;
  list.manifests.push_back({"/lake/t/metadata/m0.avro", static_cast<int64_t>(bytes->size()), 2, 2,
                            manifest.snapshot_id, 1, 1});
  auto list_bytes = WriteManifestList(list, kSync);
  REQUIRE(list_bytes.ok());
  for (std::string_view key : {"snapshot-id", "parent-snapshot-id", "sequence-number", "4611686018427387904",
                               "/lake/t/metadata/m0.avro", "\"field-id\": 500"}) {
    INFO(key);
    CHECK(Contains(*list_bytes, key));
  }
}

}  // namespace unit_lake_manifest_test
