// thrift_compact.h — Apache Thrift's compact protocol, the write side only, for the structs of a
// Parquet file (page headers and the footer). It encodes exactly what it is told, field by field;
// which fields a Parquet struct must carry is parquet_writer.cpp's business, not this file's.
//
// It never reads, never allocates outside its own buffer, and never reorders fields: Thrift readers
// accept any order, but field ids must be written in increasing order within a struct so every
// header fits the short (delta) form and the bytes are reproducible.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace trellara::lake {

// Compact protocol type ids (Thrift's TCompactProtocol, "Types" table).
enum class ThriftType : uint8_t {
  kBooleanTrue = 1,
  kBooleanFalse = 2,
  kByte = 3,
  kI16 = 4,
  kI32 = 5,
  kI64 = 6,
  kDouble = 7,
  kBinary = 8,
  kList = 9,
  kSet = 10,
  kMap = 11,
  kStruct = 12,
};

// Writes one top-level struct (a Parquet PageHeader or FileMetaData): the caller writes its fields
// in increasing id order, opens and closes nested structs and lists, then calls Finish(), which
// writes the closing stop byte and checks that every nested struct was closed.
class ThriftCompactWriter {
 public:
  ThriftCompactWriter();

  void FieldBool(int16_t id, bool value);
  void FieldI8(int16_t id, int8_t value);
  void FieldI32(int16_t id, int32_t value);
  void FieldI64(int16_t id, int64_t value);
  void FieldBinary(int16_t id, std::string_view bytes);

  // A struct-valued field (or a union: a struct with exactly one field set); close with EndStruct.
  void BeginStructField(int16_t id);
  void EndStruct();

  // A list-valued field of `size` elements of `element_type`; then write exactly `size` elements
  // with the List* calls (or BeginListStruct/EndStruct for struct elements).
  void BeginListField(int16_t id, ThriftType element_type, uint32_t size);
  void ListI32(int32_t value);
  void ListBinary(std::string_view bytes);
  void BeginListStruct();

  // The stop byte of the top-level struct; returns the encoded bytes.
  std::vector<uint8_t> Finish() &&;

  // Building blocks, public for tests.
  static uint32_t ZigZag32(int32_t value);
  static uint64_t ZigZag64(int64_t value);
  static void PutVarint(std::vector<uint8_t>& out, uint64_t value);

 private:
  void FieldHeader(int16_t id, ThriftType type);

  std::vector<uint8_t> out_;
  // Last field id written at each nesting level; the compact protocol encodes field ids as deltas
  // from it. Index 0 is the top-level struct.
  std::vector<int16_t> last_field_id_;
};

}  // namespace trellara::lake
