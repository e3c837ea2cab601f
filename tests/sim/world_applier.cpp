// world_applier.cpp — the simulated applier: the real barrier and pipeline against the simulated target (world_internal.h).
#include "world_internal.h"

namespace trellara::sim::world_detail {

// ---------------------------------------------------------------------------------------------
// applier

void World::ApplierStart() {
  if (hop_ && !hop_->ReceiverStart()) return;  // the replica first (recovered), then the applier reads it
  auto offsets = log::ReadConsumerOffsets(ApplierDevice(), ApplierDir());
  if (!offsets.ok()) {
    // The consumer offset is written atomically (tmp, fdatasync, rename, directory fsync): a
    // damaged one means the durable acknowledgement of what was applied is gone.
    Violate("no_acknowledged_transaction_lost", "the applier cannot read its consumer offset: " + offsets.error().message);
    applier_refused_ = true;
    return;
  }
  auto it = offsets->find(kConsumer);
  consumer_offset_ = it == offsets->end() ? 0 : it->second;
  auto exists = ApplierDevice().Exists(ApplierDir());
  if (!exists.ok() || !*exists) return;    // no log yet
  if (!hop_ && !log_recovered_) return;    // after a power loss the relay recovers the log first
  auto reader = log::LogReader::Open(ApplierDevice(), ApplierDir());
  if (!reader.ok()) {
    out_.harness_error = "applier: reader open: " + reader.error().message;
    return;
  }
  reader_ = std::move(*reader);
  Status seek = reader_->Seek(consumer_offset_);
  if (!seek.ok()) {
    out_.harness_error = "applier: seek to consumer offset " + std::to_string(consumer_offset_) + ": " + seek.error().message;
    return;
  }
  barrier_ = std::make_unique<TransactionBarrier>();
  static constexpr uint64_t kCacheBounds[] = {0, 4096, 64u << 20};
  chunk_cache_ = std::make_unique<VerifiedChunkCache>(kCacheBounds[config_.seed % 3]);
  barrier_->SetChunkSink([cache = chunk_cache_.get()](uint64_t offset, Chunk&& chunk) {
    cache->Offer(offset, std::move(chunk));
  });
  PipelineLimits limits;
  limits.batch_transactions_max = 3;
  pipeline_ = std::make_unique<ApplyPipeline>(consumer_offset_, limits);
  deferred_chunked_.clear();
  applier_running_ = true;
  Trace("applier starts at consumer offset " + std::to_string(consumer_offset_));
}

std::vector<std::pair<uint64_t, int>> World::RowsOf(const ReadyTransaction& ready) {
  std::vector<std::pair<uint64_t, int>> rows;
  auto add = [&rows](const std::vector<Change>& changes) {
    for (const auto& c : changes)
      rows.push_back({std::stoull(c.new_tuple.at(0).data), std::stoi(c.new_tuple.at(1).data)});
  };
  if (ready.envelope) {
    add(ready.envelope->changes);
  } else {
    auto read = [this](uint64_t offset) -> Result<std::vector<uint8_t>> {
      auto r = log::LogReader::Open(ApplierDevice(), ApplierDir());
      if (!r.ok()) return r.error();
      Status s = (*r)->Seek(offset);
      if (!s.ok()) return s.error();
      auto rec = (*r)->Next();
      if (!rec.ok()) return rec.error();
      if (!rec->has_value()) return MakeError("offset " + std::to_string(offset) + " is not readable");
      return std::move((**rec).payload);
    };
    Status s = ForEachVerifiedChunk(ready, read, [&add](const Chunk& chunk) {
      add(chunk.changes);
      return Status::Ok();
    }, chunk_cache_.get());
    if (!s.ok()) out_.harness_error = "re-reading chunks: " + s.error().message;
  }
  return rows;
}

void World::Quarantine(const TxIdentity& tx, const Sha256& checksum, const QuarantineCause& cause) {
  uint32_t attempts = 0;
  auto it = target_.quarantine.find(tx.commit_lsn);
  if (it != target_.quarantine.end()) attempts = it->second.attempts;
  QuarantineRecord q = BuildQuarantine(tx, checksum, cause, attempts);
  target_.quarantine[tx.commit_lsn] = q;
  out_.quarantined++;
  Trace("QUARANTINE " + q.message);
  if (Defect("apply_skip_quarantined")) {
    Trace("defect apply_skip_quarantined: moving on past the quarantined transaction");
    return;
  }
  halted_ = true;
  halted_at_ = tx.commit_lsn;
}

World::TxResult World::ExecuteOnTarget(const ReadyTransaction& ready, bool alone) {
  const TxIdentity& tx = ready.tx;
  std::vector<std::pair<uint64_t, int>> rows = RowsOf(ready);
  TargetState work = target_.committed;  // BEGIN
  bool checkpoint_first = Defect("apply_checkpoint_outside_transaction");
  if (checkpoint_first) {
    TargetState cp = target_.committed;
    cp.checkpoint = CheckpointAfter(cp.checkpoint, tx.commit_lsn);
    target_.Commit(cp);
    work.checkpoint = cp.checkpoint;
  }
  bool autocommit = config_.defect == "apply_rows_autocommit";
  for (size_t i = 0; i < rows.size(); ++i) {
    if (target_.blocked_lsn && *target_.blocked_lsn == tx.commit_lsn && rows[i].second == 0) {
      Trace("target refuses a row of " + DescribeTransaction(tx) + ": 23505 duplicate key");
      if (!alone) return TxResult::Failed;
      QuarantineCause cause = CauseFromStatementError("23505", "duplicate key value violates unique constraint \"events_pkey\"",
                                                      "Key (tx, k)=(" + std::to_string(rows[i].first) + ", 0) already exists.");
      Quarantine(tx, ready.checksum, cause);
      return TxResult::Quarantined;
    }
    work.rows[rows[i]] += 1;
    if (autocommit) {
      out_.defect_fired = true;
      TargetState st = target_.committed;
      st.rows[rows[i]] += 1;
      target_.Commit(st);
    }
    if (i == 0 && Fire("applier.crash_before_commit")) {
      ApplierCrash("inside the open target transaction of " + DescribeTransaction(tx));
      throw CrashSignal{};
    }
  }
  // trellara.applied_transactions has PRIMARY KEY (flow, commit_lsn): a second dedup row for the
  // same boundary fails the transaction with 23505 (the defect writes it as an upsert instead).
  if (work.dedup.count(tx.commit_lsn) && !Defect("apply_skip_dedup_check")) {
    Trace("dedup row insert for " + DescribeTransaction(tx) + " failed: 23505 (already applied); rolled back");
    return TxResult::Failed;
  }
  work.dedup[tx.commit_lsn] = DedupRow{tx.origin_sysid, tx.xid, ready.checksum};
  if (Fire("target.checkpoint_update_fails")) {
    Trace("origin progress update failed for " + DescribeTransaction(tx) + "; the transaction rolls back");
    return TxResult::Failed;
  }
  work.checkpoint = CheckpointAfter(work.checkpoint, tx.commit_lsn);
  if (Fire("target.commit_fails")) {
    Trace("COMMIT of " + DescribeTransaction(tx) + " failed; rolled back");
    return TxResult::Failed;
  }
  if (autocommit) {
    // The rows are already committed one by one; the final commit records dedup and checkpoint.
    TargetState st = target_.committed;
    st.dedup = work.dedup;
    st.checkpoint = work.checkpoint;
    target_.Commit(st);
  } else {
    target_.Commit(work);
  }
  auto q = target_.quarantine.find(tx.commit_lsn);
  if (q != target_.quarantine.end()) q->second.state = QuarantineState::Resolved;
  Trace("target committed " + DescribeTransaction(tx) + " (" + std::to_string(rows.size()) + " rows)");
  return TxResult::Committed;
}

void World::WriteOffset() {
  if (Defect("apply_ack_before_commit")) pipeline_->DefectTreatEverythingReadAsDone();
  uint64_t flushed = target_.flushed_lsn();
  if (Defect("apply_offset_ignores_flush")) flushed = UINT64_MAX;
  uint64_t offset = pipeline_->DurableOffset(flushed);
  if (offset <= consumer_offset_) return;
  if (Fire("applier.offset_write_lost")) return;
  Status s = log::WriteConsumerOffset(ApplierDevice(), ApplierDir(), kConsumer, offset);
  if (!s.ok()) {
    out_.harness_error = "consumer offset write: " + s.error().message;
    return;
  }
  consumer_offset_ = offset;
  Trace("consumer offset -> " + std::to_string(offset));
  if (hop_) hop_->ReportPosition(offset, NowMs());
}

void World::ProcessPipeline() {
  ApplyPipeline& p = *pipeline_;
  for (int guard = 0; guard < 64 && !halted_; ++guard) {
    PipelineStep next = p.Next();
    if (next == PipelineStep::Idle) break;
    if (next == PipelineStep::Form) {
      size_t n = p.Candidates();
      for (size_t i = 0; i < n; ++i) {
        const PipelineTx& c = p.at(i);
        Admission a = Admission::Alone;
        if (Defect("apply_skip_dedup_check")) {
          a = Admission::Apply;
        } else {
          ApplyDecision d = DecideApply(c.ready.tx, c.ready.checksum, target_.Evidence(c.ready.tx));
          a = d.action == ApplyAction::SkipDuplicate ? Admission::Duplicate
              : d.action == ApplyAction::Apply && !target_.Evidence(c.ready.tx).quarantine ? Admission::Apply
                                                                                           : Admission::Alone;
        }
        if (!p.Admit(i, a, 1)) break;
      }
      p.Seal();
      continue;
    }
    if (next == PipelineStep::Collect) {
      std::vector<bool> committed;
      bool failed = false;
      for (size_t i = 0; i < p.in_flight(); ++i) {
        const PipelineTx& t = p.at(i);
        if (t.duplicate) {
          committed.push_back(false);
          out_.duplicates_skipped++;
          Trace("duplicate skipped: " + DescribeTransaction(t.ready.tx));
          continue;
        }
        if (failed) {
          committed.push_back(false);
          continue;
        }
        TxResult r = ExecuteOnTarget(t.ready, false);
        committed.push_back(r == TxResult::Committed);
        if (r != TxResult::Committed) failed = true;
      }
      auto outcome = p.Collect(committed);
      if (!outcome.ok()) {
        out_.harness_error = "pipeline collect: " + outcome.error().message;
        return;
      }
      if (Fire("applier.crash_after_commit_before_offset")) {
        ApplierCrash("after target commit, before the consumer offset");
        throw CrashSignal{};
      }
      continue;
    }
    // Alone: the one-at-a-time path.
    PipelineTx& t = p.front();
    ApplyDecision d = DecideApply(t.ready.tx, t.ready.checksum, target_.Evidence(t.ready.tx));
    if (Defect("apply_skip_dedup_check")) d.action = ApplyAction::Apply;
    if (d.action == ApplyAction::SkipDuplicate) {
      out_.duplicates_skipped++;
      p.RetireAlone();
      continue;
    }
    if (d.action == ApplyAction::WaitReplayReady) {
      if (Defect("apply_skip_quarantined")) {
        p.RetireAlone();
        continue;
      }
      halted_ = true;
      halted_at_ = t.ready.tx.commit_lsn;
      return;
    }
    if (d.action == ApplyAction::QuarantineConflict) {
      Quarantine(t.ready.tx, t.ready.checksum, d.cause);
      if (!halted_) p.RetireAlone();
      return;
    }
    TxResult r = ExecuteOnTarget(t.ready, true);
    if (r == TxResult::Committed) {
      p.RetireAlone();
    } else if (r == TxResult::Quarantined) {
      if (!halted_) p.RetireAlone();
      return;
    } else {
      return;  // transient: retried at the next applier step
    }
  }
}

void World::ApplierStep() {
  if (applier_refused_) return;
  if (!applier_running_) {
    ApplierStart();
    return;
  }
  try {
    if (hop_) {
      hop_->ReceiverPump(NowMs());
      if (!applier_running_) return;  // the remote host lost power, or the process died
    }
    if (!halted_) {
      // Read up to a few frames.
      int reads = 1 + static_cast<int>(random_() % 4);
      for (int i = 0; i < reads && pipeline_->unsent() < 6; ++i) {
        auto rec = reader_->Next();
        if (!rec.ok()) {
          out_.harness_error = "applier read: " + rec.error().message;
          return;
        }
        if (!rec->has_value()) break;
        const log::LogRecord& r = **rec;
        LogFrame frame{r.offset, r.type, r.commit_lsn, std::span<const uint8_t>(r.payload)};
        // Defect: apply chunk rows as they arrive, outside any verified transaction.
        if (r.type == static_cast<uint8_t>(RecordType::Chunk) && Defect("apply_chunks_before_commit_marker")) {
          auto dec = DecodeRecord(std::span<const uint8_t>(r.payload));
          if (dec.ok()) {
            TargetState st = target_.committed;
            for (const auto& c : std::get<Chunk>(*dec).changes)
              st.rows[{std::stoull(c.new_tuple.at(0).data), std::stoi(c.new_tuple.at(1).data)}] += 1;
            target_.Commit(st);
          }
        }
        auto fed = barrier_->Feed(frame);
        if (!fed.ok()) {
          // As the real applier does (Pump before BarrierFailed): everything before the failure is
          // applied first; if that cannot finish now, restart and come back to it.
          ProcessPipeline();
          if (halted_) return;
          if (!pipeline_->empty()) {
            ApplierCrash("transactions before a barrier failure are not all applied yet; retrying");
            return;
          }
          WriteOffset();
          const auto& failure = barrier_->failure();
          Trace("barrier failure: " + fed.error().message);
          if (failure && failure->tx) {
            if (Defect("apply_ignore_barrier_failure")) {
              TargetState st = target_.committed;
              // Apply the chunks that did arrive for the failed transaction.
              auto whole = ReadWholeLog();
              for (const auto& lr : whole) {
                if (lr.type != static_cast<uint8_t>(RecordType::Chunk) || lr.commit_lsn != failure->tx->commit_lsn) continue;
                auto dec = DecodeRecord(std::span<const uint8_t>(lr.payload));
                if (!dec.ok()) continue;
                for (const auto& c : std::get<Chunk>(*dec).changes)
                  st.rows[{std::stoull(c.new_tuple.at(0).data), std::stoi(c.new_tuple.at(1).data)}] = 1;
              }
              target_.Commit(st);
              halted_ = true;
              return;
            }
            QuarantineCause cause;
            cause.reason = QuarantineReason::BarrierFailure;
            cause.detail = failure->reason;
            Quarantine(*failure->tx, Sha256{}, cause);
          } else {
            halted_ = true;
          }
          halted_ = true;
          return;
        }
        if (fed->has_value()) {
          ReadyTransaction ready = std::move(**fed);
          if (ready.chunked()) {
            // A chunked transaction goes alone with nothing queued: drain the pipeline first.
            ProcessPipeline();
            WriteOffset();
            if (halted_ || !pipeline_->empty()) {
              deferred_chunked_.push_back(std::move(ready));
              break;
            }
            ReadyTransaction tx = std::move(ready);
            ApplyDecision d = DecideApply(tx.tx, tx.checksum, target_.Evidence(tx.tx));
            if (Defect("apply_skip_dedup_check")) d.action = ApplyAction::Apply;
            if (d.action == ApplyAction::SkipDuplicate) {
              out_.duplicates_skipped++;
            } else if (d.action == ApplyAction::Apply) {
              TxResult res = ExecuteOnTarget(tx, true);
              if (res != TxResult::Committed) {
                // Retry from the log: the applier restarts at its consumer offset.
                ApplierCrash("chunked transaction not committed; restarting from the consumer offset");
                return;
              }
            } else {
              if (d.action == ApplyAction::QuarantineConflict) Quarantine(tx.tx, tx.checksum, d.cause);
              else halted_ = true;
              return;
            }
            Status s = pipeline_->AppliedAlone(barrier_->RetainFromOffset().value_or(r.offset + 1), tx.tx.commit_lsn);
            if (!s.ok()) {
              out_.harness_error = "AppliedAlone: " + s.error().message;
              return;
            }
          } else {
            // Like the real applier: finished with everything below RetainFromOffset (never past
            // the first frame of a chunked transaction still open in the barrier).
            uint64_t after = barrier_->RetainFromOffset().value_or(r.offset + 1);
            pipeline_->ReadWhole(std::move(ready), after);
          }
        } else {
          pipeline_->ReadNothing(barrier_->RetainFromOffset().value_or(r.offset + 1));
        }
      }
      if (!deferred_chunked_.empty()) {
        // Not expected with one reader loop; restart from the offset to keep it simple and safe.
        ApplierCrash("chunked transaction arrived behind a non-empty pipeline; re-reading");
        return;
      }
      // Some steps only read ahead (the previous batch is still in flight on a real applier).
      if (random_() % 3 != 0) ProcessPipeline();
    }
    if (applier_running_) WriteOffset();
  } catch (const CrashSignal&) {
    // The applier process died; its in-memory state is gone (ApplierCrash already ran).
  }
}


}  // namespace trellara::sim::world_detail
