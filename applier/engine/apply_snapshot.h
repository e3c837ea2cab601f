// apply_snapshot.h — what the applier knows of its flow's snapshot registry (docs/snapshot.md):
// the control version it checks in every target transaction (trellara.control_check), the tables
// being (or once) copied with their chunks, the chunks it knows to be copied with their parsed
// snapshots, and the holds requested by verify / reseed --where.
//
// It is a cache, never the authority: the target's rows are. It is replaced whole whenever the
// control version moves (SQLSTATE TR010 from control_check, or the idle poll), and a chunk it does
// not know to be copied is read again FOR SHARE inside the transaction that needs it. The SQL that
// fills it lives in ApplySession; the rule that uses it in apply_snapshot.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "trellara/record/envelope.h"
#include "trellara/apply/snapshot.h"

namespace trellara::cli::apply {

// The SQLSTATE trellara.control_check raises when the registry changed since the applier read it.
inline constexpr const char* kRegistryChangedSqlstate = "TR010";

// A table under snapshot, as the registry holds it.
struct SnapshotTable {
  std::string schema;
  std::string name;
  std::optional<std::string> key_column;  // nullopt: the whole table is one chunk
  std::vector<ChunkRange> ranges;         // sorted by lo, a partition of the key space
  // chunk_no -> what the applier knows without reading: Copied (cached, with its snapshot) or
  // Unknown (pending at load time, or copied since: read FOR SHARE when needed).
  std::unordered_map<int32_t, ChunkView> views;
  // core RetiredFrom over the chunks' views, recomputed whenever a view is learnt: a transaction
  // committed past it is applied as if the table had never been copied (docs/snapshot.md
  // "Retirement").
  std::optional<uint64_t> retired_from;
  // snapshot_tables.state is handoff_ready: only then can the table retire. A table whose chunks are
  // all copied but whose handoff was not recorded is still the copy's (a DDL then withholds its
  // handoff, apply_transaction.cpp).
  bool handed_off = false;
  // The partitioned tables above it on the target ("schema.name"), read with the registry: a
  // TRUNCATE that names one of them reaches this table too.
  std::vector<std::string> partition_ancestors;

  std::string Display() const { return schema + "." + name; }
  void Learnt();
  bool RetiredAt(uint64_t commit_lsn) const { return retired_from && commit_lsn > *retired_from; }
  // Being copied for a transaction committed at `commit_lsn`: chunks registered, not retired.
  bool CopyingFor(uint64_t commit_lsn) const { return !ranges.empty() && !RetiredAt(commit_lsn); }
};

// A hold requested and not yet handled by this applier.
struct RequestedHold {
  std::string hold_id;
  uint64_t lsn = 0;
};

class SnapshotRegistry {
 public:
  uint64_t version() const { return version_; }
  bool loaded() const { return loaded_; }
  // No table under snapshot: the apply paths cost nothing beyond control_check.
  bool no_tables() const { return tables_.empty(); }
  size_t table_count() const { return tables_.size(); }

  SnapshotTable* Find(const std::string& schema, const std::string& name);
  SnapshotTable* Find(const RelationInfo& relation) { return Find(relation.schema, relation.name); }
  // The tables being copied for a transaction committed at `commit_lsn` that are partitions of
  // `relation` on the target (any depth).
  std::vector<SnapshotTable*> CopyingPartitionsOf(const RelationInfo& relation, uint64_t commit_lsn);

  // Requested holds, lowest LSN first.
  const std::vector<RequestedHold>& holds() const { return holds_; }
  std::optional<uint64_t> first_hold_lsn() const {
    return holds_.empty() ? std::nullopt : std::optional<uint64_t>(holds_.front().lsn);
  }
  void ForgetHold(const std::string& hold_id);

  // ---- filled by ApplySession::LoadSnapshotRegistry ----
  void Reset(uint64_t version);
  SnapshotTable& AddTable(std::string schema, std::string name, std::optional<std::string> key_column);
  void AddHold(RequestedHold hold);
  void Sealed() { loaded_ = true; }

 private:
  static std::string Key(const std::string& schema, const std::string& name) { return schema + '\x1f' + name; }
  uint64_t version_ = 0;
  bool loaded_ = false;
  std::unordered_map<std::string, SnapshotTable> tables_;
  std::vector<RequestedHold> holds_;
};

}  // namespace trellara::cli::apply
