// world_checks.cpp — the invariants checked after every step and at the end (world_internal.h).
#include "world_internal.h"

namespace trellara::sim::world_detail {

// ---------------------------------------------------------------------------------------------
// invariants

void World::CheckInvariants() {
  // Source confirmed only to durable log, and no acknowledged transaction lost.
  if (writer_) {
    // Accumulated: retention (broker mode) deletes segments the consumers are done with, and what
    // was durable stays so (a power loss takes only unsynced writes).
    uint64_t durable_end = writer_->durable_end();
    for (const auto& [off, meta] : appended_)
      if (off < durable_end && CompletesTransaction(meta.first)) logged_durably_.insert(meta.second);
    for (const auto& s : source_) {
      if (s.commit_lsn <= slot_confirmed_ && s.commit_lsn > log_start_.started_lsn.value_or(0) &&
          !logged_durably_.count(s.commit_lsn))
        Violate("source_confirmed_only_to_durable_log",
                "the slot is confirmed to " + Lsn(slot_confirmed_) + " but xid " + std::to_string(s.xid) + " (commit " +
                    Lsn(s.commit_lsn) + ") has no durable completing frame in the log");
    }
  }
  if (relay_refused_)
    Violate("no_acknowledged_transaction_lost",
            "the relay refuses to start: the log does not cover the slot's confirmed position " + Lsn(slot_confirmed_) +
                " (a confirmed transaction was lost)");
  if (hop_) {
    hop_->CheckReplica();
    // source_ack = broker_quorum: the slot never passes a transaction the broker did not store.
    // (A transaction logged twice needs one of its completing frames with the broker.)
    if (config_.broker_quorum) {
      std::map<uint64_t, std::pair<uint64_t, bool>> completing;  // commit LSN -> (an offset, one stored)
      for (const auto& [off, meta] : appended_)
        if (CompletesTransaction(meta.first) && meta.first != kProgressRecordType && meta.second <= slot_confirmed_ &&
            meta.second > log_start_.started_lsn.value_or(0)) {
          auto& c = completing[meta.second];
          c.first = off;
          c.second = c.second || hop_->Stored(off);
        }
      for (const auto& [lsn, c] : completing)
        if (!c.second)
          Violate("source_confirmed_only_to_broker_quorum",
                  "the slot is confirmed to " + Lsn(slot_confirmed_) + " but the broker never acknowledged offset " +
                      std::to_string(c.first) + " (commit " + Lsn(lsn) + ")");
    }
  }
  // Target-side invariants, on what a reader sees and on what survives a target crash.
  for (const TargetState* st : {&target_.committed, &target_.durable}) {
    const char* which = st == &target_.committed ? "committed" : "durable";
    for (const auto& s : source_) {
      int copies = 0;
      int present = RowsVisible(*st, s, &copies);
      if (copies > 1)
        Violate("none_applied_twice", std::string(which) + " target holds " + std::to_string(copies) + " copies of rows of xid " +
                                          std::to_string(s.xid) + " (commit " + Lsn(s.commit_lsn) + ")");
      if (present != 0 && present != s.changes)
        Violate("no_partial_transaction_visible", std::string(which) + " target shows " + std::to_string(present) + " of " +
                                                      std::to_string(s.changes) + " rows of xid " + std::to_string(s.xid) +
                                                      " (commit " + Lsn(s.commit_lsn) + ")");
      if (s.commit_lsn <= st->checkpoint && present != s.changes)
        Violate("checkpoint_never_ahead_of_data", std::string(which) + " checkpoint " + Lsn(st->checkpoint) +
                                                      " is at or past commit " + Lsn(s.commit_lsn) + " of xid " +
                                                      std::to_string(s.xid) + " whose rows are not all there");
    }
  }
  // The consumer offset never passes a transaction that is not durably applied.
  std::set<uint64_t> below_offset;
  for (const auto& [off, meta] : appended_)
    if (off < consumer_offset_ && CompletesTransaction(meta.first) && meta.first != kProgressRecordType)
      below_offset.insert(meta.second);
  for (uint64_t lsn : below_offset) {
    const SourceTx* s = SourceByLsn(lsn);
    if (s == nullptr) continue;
    int copies = 0;
    if (RowsVisible(target_.durable, *s, &copies) != s->changes)
      Violate("no_acknowledged_transaction_lost", "the consumer offset " + std::to_string(consumer_offset_) + " passed xid " +
                                                      std::to_string(s->xid) + " (commit " + Lsn(lsn) +
                                                      ") which the target does not hold durably");
  }
  // A quarantine halts: nothing after an unresolved quarantined transaction is applied.
  for (const auto& [lsn, q] : target_.quarantine) {
    if (q.state == QuarantineState::Resolved) continue;
    for (const auto& s : source_) {
      if (s.commit_lsn <= lsn) continue;
      int copies = 0;
      if (RowsVisible(target_.committed, s, &copies) > 0)
        Violate("quarantine_halts", "xid " + std::to_string(s.xid) + " (commit " + Lsn(s.commit_lsn) +
                                        ") was applied while xid " + std::to_string(q.xid) + " (commit " + Lsn(lsn) +
                                        ") is quarantined (" + QuarantineStateName(q.state) + ")");
    }
    if (target_.committed.checkpoint > lsn)
      Violate("quarantine_halts", "the checkpoint " + Lsn(target_.committed.checkpoint) + " moved past quarantined commit " + Lsn(lsn));
  }
}

void World::CheckFinal() {
  int applied = 0;
  for (const auto& s : source_) {
    int copies = 0;
    int present = RowsVisible(target_.durable, s, &copies);
    bool expected = !(halted_at_ && s.commit_lsn >= *halted_at_);
    if (present == s.changes) applied++;
    if (expected && present != s.changes)
      Violate("no_acknowledged_transaction_lost", "after draining, xid " + std::to_string(s.xid) + " (commit " +
                                                      Lsn(s.commit_lsn) + ") is not applied on the target (" +
                                                      std::to_string(present) + "/" + std::to_string(s.changes) + " rows)");
    if (!expected && present != 0)
      Violate("quarantine_halts", "xid " + std::to_string(s.xid) + " at or after the quarantined commit " +
                                      Lsn(*halted_at_) + " is on the target");
  }
  out_.applied = applied;
  if (config_.expect_halt && !halted_) Violate("quarantine_halts", "the run was expected to halt at a quarantine but did not");
  if (!config_.expect_halt && halted_ && !config_.repair_after_quarantine)
    Violate("no_acknowledged_transaction_lost", "the applier halted at a quarantine of commit " +
                                                    Lsn(halted_at_.value_or(0)) + " in a run that expects none");
}


}  // namespace trellara::sim::world_detail
