// thrift_compact.cpp — the compact protocol's byte rules (field headers, zigzag varints, list
// headers, stop bytes). It must never write a field id that does not increase within a struct: the
// assertion catches a Parquet struct written out of order here, not in a reader years later.
#include "trellara/lake/thrift_compact.h"

#include <string>
#include <utility>

#include "trellara/base/assert.h"

namespace trellara::lake {

namespace {

// A field header holds the id delta in its high nibble when the delta is 1..15.
constexpr int kShortFieldDeltaMax = 15;
// A list header holds the size in its high nibble when the size is below 15; 0xF means "size
// follows as a varint".
constexpr uint32_t kShortListSizeMax = 14;
constexpr uint8_t kStopByte = 0;

}  // namespace

ThriftCompactWriter::ThriftCompactWriter() { last_field_id_.push_back(0); }

uint32_t ThriftCompactWriter::ZigZag32(int32_t value) {
  return (static_cast<uint32_t>(value) << 1) ^ static_cast<uint32_t>(value >> 31);
}

uint64_t ThriftCompactWriter::ZigZag64(int64_t value) {
  return (static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63);
}

void ThriftCompactWriter::PutVarint(std::vector<uint8_t>& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<uint8_t>(value | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<uint8_t>(value));
}

void ThriftCompactWriter::FieldHeader(int16_t id, ThriftType type) {
  TRELLARA_ASSERT(!last_field_id_.empty(), "thrift field written after Finish");
  int16_t& last = last_field_id_.back();
  TRELLARA_ASSERT(id > last, "thrift field " + std::to_string(id) + " written after field " +
                                 std::to_string(last) + " of the same struct (ids must increase)");
  const int delta = id - last;
  if (delta <= kShortFieldDeltaMax) {
    out_.push_back(static_cast<uint8_t>((delta << 4) | static_cast<uint8_t>(type)));
  } else {
    out_.push_back(static_cast<uint8_t>(type));
    PutVarint(out_, ZigZag32(id));
  }
  last = id;
}

void ThriftCompactWriter::FieldBool(int16_t id, bool value) {
  // A boolean field's value is its header's type nibble; no value byte follows.
  FieldHeader(id, value ? ThriftType::kBooleanTrue : ThriftType::kBooleanFalse);
}

void ThriftCompactWriter::FieldI8(int16_t id, int8_t value) {
  FieldHeader(id, ThriftType::kByte);
  out_.push_back(static_cast<uint8_t>(value));
}

void ThriftCompactWriter::FieldI32(int16_t id, int32_t value) {
  FieldHeader(id, ThriftType::kI32);
  PutVarint(out_, ZigZag32(value));
}

void ThriftCompactWriter::FieldI64(int16_t id, int64_t value) {
  FieldHeader(id, ThriftType::kI64);
  PutVarint(out_, ZigZag64(value));
}

void ThriftCompactWriter::FieldBinary(int16_t id, std::string_view bytes) {
  FieldHeader(id, ThriftType::kBinary);
  ListBinary(bytes);
}

void ThriftCompactWriter::BeginStructField(int16_t id) {
  FieldHeader(id, ThriftType::kStruct);
  last_field_id_.push_back(0);
}

void ThriftCompactWriter::EndStruct() {
  TRELLARA_ASSERT(last_field_id_.size() > 1, "thrift EndStruct without an open nested struct");
  out_.push_back(kStopByte);
  last_field_id_.pop_back();
}

void ThriftCompactWriter::BeginListField(int16_t id, ThriftType element_type, uint32_t size) {
  FieldHeader(id, ThriftType::kList);
  if (size <= kShortListSizeMax) {
    out_.push_back(static_cast<uint8_t>((size << 4) | static_cast<uint8_t>(element_type)));
  } else {
    out_.push_back(static_cast<uint8_t>(0xF0 | static_cast<uint8_t>(element_type)));
    PutVarint(out_, size);
  }
}

void ThriftCompactWriter::ListI32(int32_t value) { PutVarint(out_, ZigZag32(value)); }

void ThriftCompactWriter::ListBinary(std::string_view bytes) {
  PutVarint(out_, bytes.size());
  out_.insert(out_.end(), bytes.begin(), bytes.end());
}

void ThriftCompactWriter::BeginListStruct() { last_field_id_.push_back(0); }

std::vector<uint8_t> ThriftCompactWriter::Finish() && {
  TRELLARA_ASSERT(last_field_id_.size() == 1, "thrift Finish with a nested struct still open");
  out_.push_back(kStopByte);
  last_field_id_.clear();
  return std::move(out_);
}

}  // namespace trellara::lake
