// envelope.cpp — small pure functions over the record model: names, counts, LSN text.
// Never does I/O and never encodes; see codec.cpp for bytes.
#include "trellara/record/envelope.h"

#include <cinttypes>
#include <cstdio>

namespace trellara {

const char* OpName(Op op) {
  switch (op) {
    case Op::Insert: return "insert";
    case Op::Update: return "update";
    case Op::Delete: return "delete";
    case Op::Truncate: return "truncate";
    case Op::Message: return "message";
    case Op::Ddl: return "ddl";
  }
  return "unknown";
}

const char* DdlStepKindName(DdlStepKind kind) {
  switch (kind) {
    case DdlStepKind::CreateTable: return "create_table";
    case DdlStepKind::AddColumn: return "add_column";
    case DdlStepKind::DropColumn: return "drop_column";
    case DdlStepKind::RenameColumn: return "rename_column";
    case DdlStepKind::RenameTable: return "rename_table";
    case DdlStepKind::AlterColumnType: return "alter_column_type";
    case DdlStepKind::SetNotNull: return "set_not_null";
    case DdlStepKind::DropNotNull: return "drop_not_null";
    case DdlStepKind::SetDefault: return "set_default";
    case DdlStepKind::DropDefault: return "drop_default";
    case DdlStepKind::AddPrimaryKey: return "add_primary_key";
    case DdlStepKind::DropPrimaryKey: return "drop_primary_key";
    case DdlStepKind::ReplicaIdentity: return "replica_identity";
    case DdlStepKind::DropTable: return "drop_table";
    case DdlStepKind::NoShapeChange: return "no_shape_change";
    case DdlStepKind::Unsupported: return "unsupported";
    case DdlStepKind::AttachPartition: return "attach_partition";
    case DdlStepKind::DetachPartition: return "detach_partition";
    case DdlStepKind::RenameType: return "rename_type";
    case DdlStepKind::EnumAddValue: return "enum_add_value";
    case DdlStepKind::EnumRenameValue: return "enum_rename_value";
  }
  return "unknown";
}

const char* ReplicaIdentityName(ReplicaIdentity ri) {
  switch (ri) {
    case ReplicaIdentity::Default: return "default";
    case ReplicaIdentity::Nothing: return "nothing";
    case ReplicaIdentity::Full: return "full";
    case ReplicaIdentity::Index: return "index";
  }
  return "unknown";
}

const char* BoundaryModeName(BoundaryMode mode) {
  switch (mode) {
    case BoundaryMode::Whole: return "whole";
    case BoundaryMode::StrictChunk: return "strict_chunk";
    case BoundaryMode::Partitioned: return "partitioned";
  }
  return "unknown";
}

const char* OldImageName(OldImage image) {
  switch (image) {
    case OldImage::None: return "none";
    case OldImage::Key: return "key";
    case OldImage::Full: return "full";
  }
  return "unknown";
}

size_t RelationInfo::KeyColumnCount() const {
  size_t n = 0;
  for (const auto& c : columns) n += c.is_key ? 1 : 0;
  return n;
}

RecordType TypeOf(const Record& record) {
  return static_cast<RecordType>(record.index() + 1);
}

const char* RecordTypeName(RecordType type) {
  switch (type) {
    case RecordType::Envelope: return "envelope";
    case RecordType::Chunk: return "chunk";
    case RecordType::Manifest: return "manifest";
    case RecordType::CommitMarker: return "commit_marker";
    case RecordType::Progress: return "progress";
    case RecordType::Test: return "test";
  }
  return "unknown";
}

const TxIdentity& TxOf(const Record& record) {
  return std::visit([](const auto& r) -> const TxIdentity& { return r.tx; }, record);
}

void CountChange(const Change& change, std::vector<RelationCount>& counts) {
  auto slot = [&counts](uint32_t oid) -> RelationCount& {
    for (auto& c : counts)
      if (c.relation_oid == oid) return c;
    counts.push_back(RelationCount{oid, 0, 0, 0, 0});
    return counts.back();
  };
  switch (change.op) {
    case Op::Insert: slot(change.relation_oid).inserts++; break;
    case Op::Update: slot(change.relation_oid).updates++; break;
    case Op::Delete: slot(change.relation_oid).deletes++; break;
    case Op::Truncate:
      for (uint32_t oid : change.truncate.relation_oids) slot(oid).truncates++;
      break;
    case Op::Message:
    case Op::Ddl: break;
  }
}

std::string FormatLsn(uint64_t lsn) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%X/%X", static_cast<unsigned>(lsn >> 32),
                static_cast<unsigned>(lsn & 0xffffffffu));
  return buf;
}

std::optional<uint64_t> ParseLsn(const std::string& text) {
  unsigned hi = 0, lo = 0;
  int consumed = 0;
  if (text.size() > 17 || std::sscanf(text.c_str(), "%8X/%8X%n", &hi, &lo, &consumed) != 2 ||
      static_cast<size_t>(consumed) != text.size())
    return std::nullopt;
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

std::string HexEncode(const uint8_t* data, size_t len) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.resize(len * 2);
  for (size_t i = 0; i < len; i++) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xf];
  }
  return out;
}

std::optional<std::vector<uint8_t>> HexDecode(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  const auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); i++) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

}  // namespace trellara
