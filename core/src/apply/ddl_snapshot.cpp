// ddl_snapshot.cpp — what a captured DDL change does to the relation's snapshot (ddl_apply.h, "a
// DDL change and the relation's snapshot"; docs/snapshot.md "DDL during a snapshot").
//
// Fails closed: a finished copy with a chunk read in a source snapshot that already saw the DDL is
// quarantined, never trusted. Never calls a relation known unless its fingerprint is equal.
// Decides only; the adapter withholds copies and reads chunk states. Talks to no database.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "trellara/apply/ddl_apply.h"

namespace trellara {

DdlPolicy PolicyOnReplay(DdlPolicy configured, bool replay_ready) {
  return replay_ready ? DdlPolicy::Apply : configured;
}

bool DdlChangesShape(const DdlPlan& plan, const RelationInfo* captured, const std::optional<KnownRelation>& known) {
  return plan.action == DdlAction::Execute || plan.forget_relation || captured == nullptr || !known ||
         known->fingerprint != captured->fingerprint;
}

DdlSnapshotStep DecideDdlBesideSnapshot(const DdlSnapshotFacts& facts) {
  if (!facts.shape_changed || !facts.has_snapshot || facts.retired_at_commit) return DdlSnapshotStep::None;
  return DdlSnapshotStep::WithholdOrCheck;
}

bool CheckFinishedChunksAfterWithhold(bool withheld, bool replay_ready) { return !withheld && !replay_ready; }

std::optional<QuarantineCause> FinishedCopySawDdl(const std::vector<std::pair<int32_t, ChunkView>>& chunks,
                                                  uint32_t xid, uint64_t commit_lsn, const std::string& table,
                                                  const std::string& ddl_description, const std::string& config_path) {
  for (const auto& [chunk_no, view] : chunks) {
    if (view.kind != ChunkView::Kind::Copied || DecideHalf(view, xid, commit_lsn) != HalfDecision::InCopy) continue;
    QuarantineCause cause;
    cause.reason = QuarantineReason::DdlUnsupported;
    cause.operation = "DDL";
    cause.relation = table;
    cause.detail = ddl_description + ": chunk " + std::to_string(chunk_no) + " of the finished snapshot of " + table +
                   " was copied in a source snapshot that already saw this DDL, with the definition before it, "
                   "so the copy may lack what the stream leaves to it; mark this transaction replay-ready (it "
                   "is then applied), then copy the table again: trellara snapshot --config " + config_path +
                   " --table " + table + " --force";
    return cause;
  }
  return std::nullopt;
}

}  // namespace trellara
