// envelope.h — the in-memory model of one log record: Envelope, Chunk, Manifest, CommitMarker.
//
// This is the vocabulary every other part of Trellara speaks (plugin, log, applier, inspect).
// It mirrors proto/trellara.proto; codec.h converts between the two. The model holds plain values
// only: it never refers to Postgres or protobuf-c structures.
#pragma once

#include "trellara/record/record_type.h"
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace trellara {

inline constexpr uint32_t kFormatVersion = 1;

enum class Op : uint8_t { Insert = 1, Update = 2, Delete = 3, Truncate = 4, Message = 5, Ddl = 6 };
enum class ReplicaIdentity : uint8_t { Default = 1, Nothing = 2, Full = 3, Index = 4 };
enum class BoundaryMode : uint8_t { Whole = 1, StrictChunk = 2, Partitioned = 3 };
enum class OldImage : uint8_t { None = 0, Key = 1, Full = 2 };

const char* OpName(Op op);                      // "insert", "update", ...
const char* ReplicaIdentityName(ReplicaIdentity ri);  // "default", "nothing", "full", "index"
const char* BoundaryModeName(BoundaryMode mode);      // "whole", "strict_chunk", "partitioned"
const char* OldImageName(OldImage image);             // "none", "key", "full"

// One column value. `unchanged_toast` is not null: it means "not sent, unchanged at the source".
struct Value {
  enum class Kind : uint8_t { Null = 0, Text = 1, Binary = 2, UnchangedToast = 3 };
  Kind kind = Kind::Null;
  std::string data;  // Text: the type output; Binary: the send representation; else empty

  static Value Null() { return Value{Kind::Null, {}}; }
  static Value Text(std::string s) { return Value{Kind::Text, std::move(s)}; }
  static Value Binary(std::string s) { return Value{Kind::Binary, std::move(s)}; }
  static Value UnchangedToast() { return Value{Kind::UnchangedToast, {}}; }
  bool operator==(const Value&) const = default;
};

using Sha256 = std::array<uint8_t, 32>;

struct Column {
  std::string name;
  uint32_t type_oid = 0;
  std::string type_name;
  int32_t typmod = -1;
  bool is_key = false;
  bool operator==(const Column&) const = default;
};

struct RelationInfo {
  uint32_t oid = 0;
  std::string schema;
  std::string name;
  std::vector<Column> columns;
  ReplicaIdentity replica_identity = ReplicaIdentity::Default;
  Sha256 fingerprint{};  // ComputeFingerprint(*this); see checksum.h
  bool operator==(const RelationInfo&) const = default;
  size_t KeyColumnCount() const;
};

struct TruncateInfo {
  std::vector<uint32_t> relation_oids;  // source order
  bool cascade = false;
  bool restart_identity = false;
  bool operator==(const TruncateInfo&) const = default;
};

struct LogicalMessage {
  bool transactional = true;
  std::string prefix;
  std::string content;
  bool operator==(const LogicalMessage&) const = default;
};

// DDL captured by the extension's event triggers (proto Ddl; docs/schema-changes.md). One Ddl is
// what one command did to one relation: structured steps and the relation's definition after it.
enum class DdlStepKind : uint8_t {
  CreateTable = 1, AddColumn = 2, DropColumn = 3, RenameColumn = 4, RenameTable = 5, AlterColumnType = 6,
  SetNotNull = 7, DropNotNull = 8, SetDefault = 9, DropDefault = 10, AddPrimaryKey = 11, DropPrimaryKey = 12,
  ReplicaIdentity = 13, DropTable = 14, NoShapeChange = 15, Unsupported = 16,
  // The relation is the parent; column = the partition's schema, new_name = its name; Attach's
  // detail = the partition's bound ("FOR VALUES ...").
  AttachPartition = 17, DetachPartition = 18,
  // A type or domain one of the relation's columns uses was renamed (ALTER TYPE / ALTER DOMAIN ...
  // RENAME TO): column = old name, new_name = new name, as format_type prints them; detail starts
  // with "ALTER DOMAIN" for a domain.
  RenameType = 19,
  // An enum a column uses got a label (ALTER TYPE ... ADD VALUE): column = the type as format_type
  // prints it, new_name = the label, label = its neighbour in the enum's order after the command
  // ("" when it is the only label), before = whether it sits before that neighbour. Or a label was
  // renamed (RENAME VALUE): column = the type, label = the old label, new_name = the new one.
  EnumAddValue = 20, EnumRenameValue = 21,
};
inline constexpr DdlStepKind kLastDdlStepKind = DdlStepKind::EnumRenameValue;
const char* DdlStepKindName(DdlStepKind kind);  // "create_table", "add_column", ...

struct DdlStep {
  DdlStepKind kind = DdlStepKind::Unsupported;
  std::string column;    // the column it names (RenameColumn: old name; RenameTable: old table name;
                         // DropPrimaryKey: the constraint name)
  std::string new_name;  // RenameColumn / RenameTable
  std::string detail;    // the subcommand as a person reads it
  bool using_expression = false;  // AlterColumnType with USING
  std::string label;              // EnumAddValue: the neighbour; EnumRenameValue: the old label
  bool before = false;            // EnumAddValue: the label sits before `label`
  bool operator==(const DdlStep&) const = default;
};

enum class DefaultKind : uint8_t { None = 0, Immutable = 1, Mutable = 2 };

struct DdlColumn {
  std::string name;
  uint32_t type_oid = 0;
  std::string type_name;  // format_type(atttypid, atttypmod)
  int32_t typmod = -1;
  bool not_null = false;
  DefaultKind default_kind = DefaultKind::None;
  std::string default_expr;     // "" when none
  std::string generated;        // "s" stored generated, "" otherwise
  std::string identity;         // "a" / "d" / ""
  std::string generation_expr;  // generated columns
  std::string collation;        // non-default collation, "" otherwise
  bool operator==(const DdlColumn&) const = default;
};

struct RelationDefinition {
  uint32_t oid = 0;
  std::string schema;
  std::string name;
  std::string relkind = "r";
  bool is_partition = false;
  std::vector<DdlColumn> columns;  // attribute order, dropped excluded, generated included
  std::vector<std::string> primary_key;
  std::string primary_key_name;
  ReplicaIdentity replica_identity = ReplicaIdentity::Default;
  std::string identity_index;
  std::string partition_key;            // relkind "p": "RANGE (created_at)" (pg_get_partkeydef)
  std::string partition_parent_schema;  // is_partition: the parent, and the bound ("FOR VALUES ...")
  std::string partition_parent_name;
  std::string partition_bound;
  bool operator==(const RelationDefinition&) const = default;
};

struct Ddl {
  std::string command_tag;
  std::string object_type;
  std::string schema;
  std::string object_identity;
  std::string sql;
  uint32_t relation_oid = 0;
  std::string relation_schema;  // before the command
  std::string relation_name;
  std::vector<DdlStep> steps;
  std::optional<RelationDefinition> definition;  // after; nullopt after DROP TABLE
  std::vector<std::string> publications;
  // Capture only (the logical message): the (sub)transaction that ran the command. The output
  // plugin clears it before the change is assembled; never logged, never hashed.
  uint32_t capture_xid = 0;
  bool operator==(const Ddl&) const = default;
};

struct Change {
  Op op = Op::Insert;
  uint32_t relation_oid = 0;  // Insert/Update/Delete; Ddl: the relation after the command (0 after
                              // DROP TABLE); 0 for Truncate/Message
  OldImage old_image = OldImage::None;
  std::vector<Value> old_tuple;  // Key: key columns in column order; Full: every column
  std::vector<Value> new_tuple;  // Insert/Update: every column
  TruncateInfo truncate;
  LogicalMessage message;
  Ddl ddl;
  bool operator==(const Change&) const = default;
};

struct RelationCount {
  uint32_t relation_oid = 0;
  uint64_t inserts = 0;
  uint64_t updates = 0;
  uint64_t deletes = 0;
  uint64_t truncates = 0;
  bool operator==(const RelationCount&) const = default;
};

// (flow, origin system identifier, xid, commit_lsn) names a source transaction.
struct TxIdentity {
  std::string flow;
  uint64_t origin_sysid = 0;
  uint32_t xid = 0;
  uint64_t commit_lsn = 0;
  bool operator==(const TxIdentity&) const = default;
};

struct Envelope {
  TxIdentity tx;
  uint64_t begin_lsn = 0;
  int64_t commit_time_us = 0;
  std::vector<RelationInfo> relations;
  std::vector<Change> changes;
  std::vector<RelationCount> counts;
  BoundaryMode boundary_mode = BoundaryMode::Whole;
  Sha256 checksum{};
  bool operator==(const Envelope&) const = default;
};

struct Chunk {
  TxIdentity tx;
  uint32_t seq = 0;
  uint32_t partition_id = 0;
  uint32_t event_count = 0;
  std::vector<RelationInfo> relations;
  std::vector<Change> changes;
  Sha256 checksum{};
  // Partitioned transactions (BoundaryMode::Partitioned): the chunk's sequence within its
  // partition, and each change's 0-based position in the source transaction (ascending; as many
  // as changes). Empty positions: a strict chunk.
  uint32_t partition_seq = 0;
  std::vector<uint32_t> positions;
  bool operator==(const Chunk&) const = default;
};

struct ChunkRef {
  uint32_t seq = 0;
  uint32_t partition_id = 0;
  uint32_t event_count = 0;
  Sha256 checksum{};
  uint32_t partition_seq = 0;  // partitioned: the chunk's sequence within its partition
  bool operator==(const ChunkRef&) const = default;
};

struct Manifest {
  TxIdentity tx;
  uint64_t begin_lsn = 0;
  int64_t commit_time_us = 0;
  std::vector<ChunkRef> chunks;
  std::vector<RelationInfo> relations;
  std::vector<RelationCount> counts;
  uint64_t total_changes = 0;
  BoundaryMode boundary_mode = BoundaryMode::StrictChunk;
  Sha256 checksum{};  // over every chunk's changes in chunk seq order
  // Partitioned: the version and width of the partition map the relay routed with (0 when strict).
  uint32_t map_version = 0;
  uint32_t partitions = 0;
  bool operator==(const Manifest&) const = default;
};

struct CommitMarker {
  TxIdentity tx;
  Sha256 manifest_checksum{};
  uint64_t total_changes = 0;
  uint32_t total_chunks = 0;
  bool operator==(const CommitMarker&) const = default;
};

using Record = std::variant<Envelope, Chunk, Manifest, CommitMarker>;

RecordType TypeOf(const Record& record);
const char* RecordTypeName(RecordType type);  // "envelope", "chunk", "manifest", "commit_marker"
const TxIdentity& TxOf(const Record& record);

// Adds one change to per-relation counts (Truncate counts once per truncated relation).
void CountChange(const Change& change, std::vector<RelationCount>& counts);

// "0/3A1F2B0", as Postgres prints an LSN.
std::string FormatLsn(uint64_t lsn);
std::optional<uint64_t> ParseLsn(const std::string& text);
std::string HexEncode(const uint8_t* data, size_t len);
inline std::string HexEncode(const Sha256& digest) { return HexEncode(digest.data(), digest.size()); }
// The bytes of lower- or upper-case hex digits; nullopt for an odd length or a non-hex digit.
std::optional<std::vector<uint8_t>> HexDecode(std::string_view hex);

}  // namespace trellara
