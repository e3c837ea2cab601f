// apply_log.cpp — the applier's place in the flow's log (applier.h): opening it as consumer
// "applier", resuming at the consumer offset or where continuity says, refusing another flow's
// log, and recording the consumer offset.
//
// Durability of the consumer offset: the offset only passes transactions that the target reports
// as flushed (pg_replication_origin_progress(origin, true), core ApplyOffsetTracker), so the
// session may commit with synchronous_commit = off (the default, as native logical replication's
// apply worker does) and a target crash still loses nothing the log no longer holds. It never
// passes the first frame of an open chunked transaction (TransactionBarrier::RetainFromOffset).
//
// It never resumes past what the target's origin progress proves applied (core DecideContinuity
// decides; a consumer offset that claims more is rewound or refused), and never applies a log
// that holds another flow's transactions.
#include <chrono>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>

#include "engine/applier.h"
#include "kit/errors.h"
#include "kit/config.h"
#include "trellara/base/cadence.h"
#include "trellara/base/exit_codes.h"
#include "trellara/base/fault.h"
#include "pg/source_timelines.h"
#include "trellara/capture/slot_sync.h"
#include "trellara/record/codec.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/retention.h"
#include "trellara/log/scan.h"

namespace trellara::cli::apply {
namespace {

// The consumer offset is written (fdatasync + rename) at most this often while applying, and
// always when the applier reaches the end of the log, halts or stops. Re-reading transactions
// committed after the last write is safe: their dedup rows make them SkipDuplicate.
constexpr uint64_t kOffsetWriteEveryTransactions = 512;
constexpr auto kOffsetWriteInterval = cadence::kApplierOffsetWrite;

}  // namespace

// Promotion (issue 41): the log's TIMELINE (written by the relay; for a broker replica by the
// receiver, from the first message that carried it; none for a log of an older version) against
// what the target applied; core DecideTimelineContinuity decides. A target ahead of the promoted
// server fails closed before anything is applied (exit 3, blocked).
void Applier::CheckTimeline() {
  auto timeline = ReadLogTimelineFile(config_.log_directory);
  if (!timeline) Fail(timeline.error().message);
  if (!timeline->has_value()) return;
  timeline_checked_ = true;
  const LogTimeline& log_timeline = **timeline;
  const TargetTimelineFacts facts = session_.ReadTimelineFacts(log_timeline.branch_lsn);
  const TimelineContinuity d = DecideTimelineContinuity(log_timeline, facts, config_.flow_name);
  switch (d.kind) {
    case TimelineContinuity::Kind::kProceed:
      return;
    case TimelineContinuity::Kind::kRecord:
      session_.RecordTimeline(log_timeline);
      std::cerr << "trellara apply: " << d.reason << std::endl;
      return;
    case TimelineContinuity::Kind::kFailClosed:
      break;
  }
  const std::string message = d.reason + "; " + d.next_step;
  WriteStateFile("refused", message, "");
  WriteStatus("blocked", message);
  Fail(message, kExitFlowBlocked);
}

void Applier::OpenLog() {
  CheckTimeline();
  // Registers consumer "applier" (so the relay retains from here on); refuses one marked lost.
  if (Status registered = log::RegisterConsumer(*device_, config_.log_directory, kConsumerName); !registered.ok())
    Fail(registered.error().message);
  ResumeLog();
  start_offset_ = written_offset_;
  if (until_caught_up_ && receiver_) {
    // A remote applier's "now" is what the stream holds: read until it delivers nothing more
    // (and no hole waits for its refill), then apply up to there.
    std::optional<broker::ConflictingDelivery> conflict;
    while (!StopRequested()) {
      receiver_->Pump(std::chrono::milliseconds(200), conflict);
      if (conflict) StopOnConflict(*conflict);
      if (receiver_->idle()) break;
    }
  }
  if (until_caught_up_) {
    // --until-caught-up applies what is durable now, not what the source writes meanwhile: a
    // source faster than the applier must not keep the command from ending.
    auto end = log::PublishedEndOffset(*device_, config_.log_directory);
    if (!end)
      Fail("cannot read the end of the log of flow " + config_.flow_name + " at " + config_.log_directory + ": " +
           end.error().message);
    stop_offset_ = *end;
  }
  // Fault point (tests): `stall` here lets the source write past the end the run will stop at.
  fault::Hit("apply.after_log_opened");
}

// (Re)opens the log at the consumer offset — or where continuity says (CheckContinuity) — with
// nothing of a previous session kept: whatever was read and not recorded in the consumer offset
// is read again, and its dedup rows make it SkipDuplicate where it committed.
void Applier::ResumeLog() {
  chunk_reader_.reset();
  barrier_ = TransactionBarrier();
  // The chunks the barrier verifies are kept, within kChunkCacheBytes, for the pass that applies
  // their transaction (ForEachVerifiedChunk): decoded and hashed once, not twice.
  chunk_cache_.Clear();
  // Each accepted chunk goes on to the early path (apply_early.cpp), or to the cache.
  accepted_chunks_.clear();
  barrier_.SetChunkSink(
      [this](uint64_t offset, Chunk&& chunk) { accepted_chunks_.emplace_back(offset, std::move(chunk)); });
  // A reconnect dropped the early transaction's session with it; everything is read again.
  early_.attempt.End();
  expects_.clear();
  unwritten_transactions_ = 0;
  covered_lsn_ = 0;
  auto reader = log::LogReader::Open(*device_, config_.log_directory);
  if (!reader)
    Fail("cannot open the log of flow " + config_.flow_name + " at " + config_.log_directory + " (flow.log_directory): " +
         reader.error().message);
  reader_ = std::move(reader.value());
  if (!receiver_ && !log_watch_ && !until_caught_up_)
    log_watch_ = LogDirWatch::OpenOrWarn(config_.log_directory, "apply flow=" + config_.flow_name);
  auto offsets = log::ReadConsumerOffsets(*device_, config_.log_directory);
  if (!offsets) Fail("cannot read the consumer offsets of " + config_.log_directory + ": " + offsets.error().message);
  const auto it = offsets->find(kConsumerName);
  if (it == offsets->end()) {
    CheckContinuity(std::nullopt);  // a first run: only whose log this is
  } else {
    const uint64_t resume = CheckContinuity(it->second);
    Status seek = reader_->Seek(resume);
    if (!seek.ok())
      Fail("cannot resume flow " + config_.flow_name + " at its consumer offset " + std::to_string(resume) +
           " (" + config_.log_directory + "/consumers/" + kConsumerName + "): " + seek.error().message);
    if (resume != it->second) {
      // Recorded at once, so that nothing (a crash, retention) relies on the old claim.
      Status written = log::WriteConsumerOffset(*device_, config_.log_directory, kConsumerName, resume);
      if (!written.ok())
        Fail("cannot rewind the consumer offset of flow " + config_.flow_name + " to " + std::to_string(resume) +
             " in " + config_.log_directory + "/consumers/" + kConsumerName + ": " + written.error().message);
    }
  }
  written_offset_ = reader_->next_offset();
  // Whatever was read or in flight before is read again from here (dedup decides what is done).
  pipeline_ = ApplyPipeline(written_offset_, PipelineLimits{kBatchMaxTransactions, kBatchMaxStatements, config_.group_transactions});
}

// Continuity (DESIGN §2): the target's origin progress must not be behind what the consumer
// offset claims. Reads the facts from the log and the target; core DecideContinuity decides.
// Returns the offset to resume from (the consumer offset, or where it rewinds); refuses otherwise.
// Without a recorded offset (a first run) it only checks that the log is this flow's.
uint64_t Applier::CheckContinuity(std::optional<uint64_t> recorded_offset) {
  const uint64_t consumer_offset = recorded_offset.value_or(0);
  // Negative control (tests only): an applier that acknowledges on read also trusts that
  // acknowledgement; the rewind would otherwise repair what the kill -9 scenario must catch.
  if (fault::Hit("defect.apply_ack_before_commit") == fault::Action::Defect) return consumer_offset;
  // Negative control (tests only, TRELLARA_FAULTS=defect.apply_continuity_unchecked:1:defect): the
  // consumer offset is trusted whatever the target holds, which the restored-target scenario must catch.
  if (fault::Hit("defect.apply_continuity_unchecked") == fault::Action::Defect) return consumer_offset;
  auto scan = log::LogReader::Open(*device_, config_.log_directory);
  if (!scan) Fail("cannot open the log of flow " + config_.flow_name + " at " + config_.log_directory + ": " + scan.error().message);
  log::LogReader& r = **scan;
  auto read_at = [&](uint64_t offset) -> std::optional<log::LogRecord> {
    if (!r.Seek(offset).ok()) return std::nullopt;
    auto next = r.Next();
    if (!next || !*next) return std::nullopt;
    return std::move(**next);
  };
  ContinuityFacts facts;
  facts.flow = config_.flow_name;
  facts.consumer_offset = consumer_offset;
  facts.log_first_offset = r.next_offset();
  // The first transaction record the log holds: its flow must be ours, and its LSN bounds the gap.
  for (uint64_t o = facts.log_first_offset;; o++) {
    auto record = read_at(o);
    if (!record) break;
    if (!IsTransactionRecord(record->type)) continue;
    CheckLogFlow(*record);
    facts.log_first_lsn = record->commit_lsn;
    break;
  }
  if (!recorded_offset) return facts.log_first_offset;
  for (uint64_t o = consumer_offset; o > facts.log_first_offset;) {
    auto record = read_at(--o);
    if (!record) break;
    if (EndsTransaction(record->type)) {
      facts.claimed_lsn = record->commit_lsn;
      break;
    }
  }
  if (!facts.claimed_lsn) return consumer_offset;
  facts.origin_progress_lsn = session_.FlushedProgress();
  facts.last_dedup_lsn = session_.LastDedupLsn();
  const uint64_t proven = ProvenProgress(facts);
  if (*facts.claimed_lsn <= proven) return consumer_offset;
  if (r.Seek(facts.log_first_offset).ok()) {
    while (r.next_offset() < consumer_offset) {
      auto next = r.Next();
      if (!next || !*next) break;
      if (IsTransactionRecord((*next)->type) && (*next)->commit_lsn > proven) {
        facts.first_offset_after_progress = (*next)->offset;
        break;
      }
    }
  }
  const ContinuityDecision decision = DecideContinuity(facts);
  switch (decision.action) {
    case ContinuityAction::Continue:
      return consumer_offset;
    case ContinuityAction::Rewind:
      std::cerr << decision.message << std::endl;
      return decision.rewind_to_offset;
    case ContinuityAction::Refuse:
      break;
  }
  WriteStateFile("refused", decision.message, "");
  Fail(decision.message);
}

// A configuration pointing at another flow's log: refused before anything is applied.
void Applier::CheckLogFlow(const log::LogRecord& record) {
  if (flow_checked_) return;
  auto decoded = DecodeRecord(std::span<const uint8_t>(record.payload.data(), record.payload.size()));
  if (!decoded) return;  // the barrier reports an undecodable record with its offset
  CheckFlowOf(TxOf(*decoded));
  flow_checked_ = true;
}

void Applier::CheckFlowOf(const TxIdentity& tx) {
  if (tx.flow == config_.flow_name) return;
  Fail("the log at " + config_.log_directory + " (flow.log_directory in " + config_.path + ") belongs to flow " +
       tx.flow + ", not to flow " + config_.flow_name + " (flow.name): it holds " + DescribeTransaction(tx) +
       "; nothing was applied. Point flow.log_directory at flow " + config_.flow_name +
       "'s log (trellara.flows.log_directory on the source), or set flow.name = \"" + tx.flow + "\" if this is "
       "that flow's configuration");
}

// Records the consumer offset: as far as the target has durably committed (core
// ApplyOffsetTracker over the origin's flushed progress). Not forced, at most every
// kOffsetWriteInterval or kOffsetWriteEveryTransactions.
void Applier::WriteOffset(bool force) {
  if (!force && unwritten_transactions_ < kOffsetWriteEveryTransactions &&
      Clock::now() - last_offset_write_ < kOffsetWriteInterval)
    return;
  CollectBatch();  // the session must be out of pipeline mode to ask for the flushed progress
  if (pipeline_.offsets_waiting() == 0 && pipeline_.safe_offset() == written_offset_) return;
  // Negative control (tests only, TRELLARA_FAULTS=defect.apply_offset_ignores_flush:1:defect): the
  // offset follows what committed instead of what the target flushed, which the target-crash
  // scenario must catch.
  const bool defect = fault::Hit("defect.apply_offset_ignores_flush") == fault::Action::Defect;
  const uint64_t safe = pipeline_.offsets_waiting() == 0 ? pipeline_.safe_offset()
                        : defect                          ? pipeline_.DurableOffset(UINT64_MAX)
                                                          : pipeline_.DurableOffset(session_.FlushedProgress());
  unwritten_transactions_ = 0;
  last_offset_write_ = Clock::now();
  if (safe == written_offset_) return;
  // Fault point (tests): the target has committed, the consumer offset is not written yet.
  // `crash` dies here; `error` fails the write as a full or read-only disk would.
  Status written = fault::Hit("apply.after_commit_before_offset") == fault::Action::Error
                       ? Status(MakeError("injected fault apply.after_commit_before_offset"))
                       : log::WriteConsumerOffset(*device_, config_.log_directory, kConsumerName, safe);
  if (!written.ok())
    Fail("cannot record consumer offset " + std::to_string(safe) + " of flow " + config_.flow_name + " in " +
         config_.log_directory + "/consumers/" + kConsumerName + ": " + written.error().message +
         "; everything up to it is committed on the target, rerun trellara apply once the directory is writable");
  written_offset_ = safe;
  if (receiver_) receiver_->ReportPosition(safe);  // after the write: the forwarder may let go below it
  offset_written_unix_seconds_ =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace trellara::cli::apply
