// applier.cpp — the main loop of the applier (applier.h), which applies the flow's durable log to the target, one target
// transaction per source transaction, exactly once (DESIGN §2, §6).
//
// The loop reads log frames in order and feeds core's TransactionBarrier, which decides when a
// transaction is whole and verified. Whole transactions wait in pipeline_ (core ApplyPipeline) for the next
// batch (apply_pipeline.cpp); a chunked transaction drains the pipeline and is applied alone
// (apply_transaction.cpp), streaming its chunks back from the log.
//
// Durability of the consumer offset: the offset only passes transactions that the target reports
// as flushed (pg_replication_origin_progress(origin, true), core ApplyOffsetTracker), so the
// session may commit with synchronous_commit = off (the default, as native logical replication's
// apply worker does) and a target crash still loses nothing the log no longer holds. It never
// passes the first frame of an open chunked transaction (TransactionBarrier::RetainFromOffset).
//
// Transient failures (core IsTransientFailure: deadlock, serialization failure, timeouts, cancel,
// shutdown, a lost connection, a read-only target...) are thrown as TransientFailure from wherever
// they happen and caught here, at the level of the loop (Run/RecoverFrom): the session is dropped
// (the server rolls back, the origin setup ends with it), the applier backs off (core
// RetryBackoff), reconnects, re-checks continuity and resumes reading from the consumer offset —
// the dedup rows make re-reading what was already committed safe. Never quarantined. Each retry is
// one structured line on stderr and the state file consumers/.applier.state (trellara status).
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>
#include <memory>
#include <string>
#include <thread>

#include "trellara/base/cadence.h"
#include "engine/applier.h"
#include "kit/errors.h"
#include "kit/config.h"
#include "trellara/record/codec.h"
#include "trellara/base/fault.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/retention.h"
#include "trellara/log/scan.h"
#include "trellara/log/uring_device.h"
#include "trellara/capture/relay_progress.h"

namespace trellara::cli {
namespace apply {
namespace {

// The consumer offset is written (fdatasync + rename) at most this often while applying, and
// always when the applier reaches the end of the log, halts or stops. Re-reading transactions
// committed after the last write is safe: their dedup rows make them SkipDuplicate.
constexpr uint64_t kOffsetWriteEveryTransactions = 512;
constexpr auto kOffsetWriteInterval = cadence::kApplierOffsetWrite;
// At the end of the log: cadence::kApplierTail (base/cadence.h). The caught-up bookkeeping runs at
// most once per kTailPollInterval, not on every poll.
constexpr auto kTailPollMin = cadence::kApplierTail.min;
constexpr auto kTailPollInterval = cadence::kApplierTail.max;
// The metrics snapshot is handed to the server at most this often while applying (and at every
// state change): a copy under a mutex and, then only, one read of the log's index for its end.
constexpr auto kMetricsPublishInterval = cadence::kApplierMetricsPublish;

// --until-caught-up retries a transient failure on a live target at most this many times, then
// ends with exit 1 and the last error; a lost connection ends it at once (a one-shot run is
// rerun by whoever scheduled it; following a restarting target is the daemon's job).
constexpr uint32_t kUntilCaughtUpAttemptsMax = 5;

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

// The jitter of the backoff: TRELLARA_RETRY_SEED reproduces it, otherwise pid and time.
uint64_t RetrySeed() {
  if (const char* seed = std::getenv("TRELLARA_RETRY_SEED")) return std::strtoull(seed, nullptr, 10);
  return (static_cast<uint64_t>(getpid()) << 32) ^ static_cast<uint64_t>(std::time(nullptr));
}


volatile std::sig_atomic_t g_stop_requested = 0;
extern "C" void OnStopSignal(int) { g_stop_requested = 1; }

}  // namespace

void InstallStopHandlers() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool StopRequested() { return g_stop_requested != 0; }

Applier::Applier(FlowConfig config, bool until_caught_up)
    : config_(std::move(config)),
      until_caught_up_(until_caught_up),
      session_(config_),
      progress_(config_.flow_name),
      backoff_(BackoffPolicy{}, RetrySeed()) {}

void Applier::Run() {
  if (config_.metrics_listen) {
    metrics::ApplySnapshot initial;
    initial.flow = config_.flow_name;
    initial.state = metrics::ApplyState::kRunning;
    metrics_snapshot_.Set(initial);
    metrics_ = std::make_unique<MetricsServer>(
        *config_.metrics_listen, config_.path,
        [this] { return metrics::RenderExposition(metrics::ApplyFamilies(metrics_snapshot_.Get())); },
        [this] {
          const metrics::ApplySnapshot s = metrics_snapshot_.Get();
          return metrics::ApplyReadiness(s, s.broker_quorum_available);
        });
  }
  auto device = log::OpenUringDevice();
  if (!device) Fail("cannot open the log device for " + config_.log_directory + ": " + device.error().message);
  device_ = std::move(device.value());
  if (config_.transport.kind == TransportKind::Nats) {
    // A remote applier: flow.log_directory is its replica of the log, created here.
    receiver_ = std::make_unique<broker::StreamReceiver>(config_, *device_);
    if (!receiver_->Open()) {
      progress_.Print("stopped", counters_, Figures(false));
      return;
    }
  }
  // One applier per flow: first the lock in the log directory (it also stops two appliers of
  // one log that point at different targets), then the target's advisory lock.
  if (!WaitForLogDirectory()) {  // stopped while waiting
    progress_.Print("stopped", counters_, Figures(false));
    return;
  }
  bool held_by_another = false;
  auto lock = log::ConsumerLock::Acquire(config_.log_directory, kConsumerName, &held_by_another);
  if (!lock && held_by_another)
    Fail("another applier of flow " + config_.flow_name + " is running on this log: " + lock.error().message +
         "; stop it first, or leave it running: only one applier per flow may apply");
  if (!lock)
    Fail("the applier of flow " + config_.flow_name + " cannot take its lock in the log directory " +
         config_.log_directory + " (flow.log_directory): " + lock.error().message);
  log_lock_ = std::move(lock.value());
  session_.Connect();
  conn_ = &session_.conn();
  LoadRegistry();
  OpenLog();
  WriteStatus("running", "");
  WriteStateFile("running", "", "");
  ReadQuarantineOpen();
  PublishMetrics(metrics::ApplyState::kRunning, true);
  for (;;) {
    try {
      Loop();
      return;
    } catch (const TransientFailure& failure) {
      if (!RecoverFrom(failure)) return;  // stopped while waiting
    }
  }
}

// The relay creates the flow's log directory when it first starts, a moment after
// trellara.create_flow(); an applier started right after (a script, a service unit ordered after
// the source) waits for it instead of failing. --until-caught-up does not wait: there is nothing to
// catch up with, and a wrong log_directory must not look like an idle flow. Returns false when a
// stop signal arrived while waiting.
bool Applier::WaitForLogDirectory() {
  struct stat st;
  auto state = [&]() -> int { return ::stat(config_.log_directory.c_str(), &st) == 0 ? 0 : errno; };
  int err = state();
  if (err == 0 && !S_ISDIR(st.st_mode))
    Fail("flow.log_directory " + config_.log_directory + " of flow " + config_.flow_name +
         " is not a directory; set it to the flow's log directory (SELECT log_directory FROM trellara.flows)");
  if (err == 0) return true;
  const std::string why = "the log directory " + config_.log_directory + " of flow " + config_.flow_name +
                          " (flow.log_directory) " +
                          (err == ENOENT ? "does not exist yet" : "cannot be read: " + std::string(std::strerror(err)));
  if (until_caught_up_ || err != ENOENT)
    Fail(why + "; check flow.log_directory against SELECT log_directory FROM trellara.flows on the source, and "
               "that the flow's relay has started (SELECT flow, state FROM trellara.status())");
  auto announce = [&] {
    std::cerr << "apply flow=" << config_.flow_name << " event=waiting reason=\"" << why
              << "; waiting for the flow's relay to create it (SELECT flow, state FROM trellara.status() on the "
                 "source)\"" << std::endl;
  };
  announce();  // no state file: it lives in the directory being waited for
  auto next_announcement = Clock::now() + std::chrono::seconds(60);
  while ((err = state()) == ENOENT) {
    if (StopRequested()) return false;
    if (Clock::now() >= next_announcement) {
      announce();
      next_announcement = Clock::now() + std::chrono::seconds(60);
    }
    std::this_thread::sleep_for(cadence::kApplierStopCheck);
  }
  if (err != 0 || !S_ISDIR(st.st_mode))
    Fail("the log directory " + config_.log_directory + " of flow " + config_.flow_name +
         " appeared but cannot be used: " + (err != 0 ? std::string(std::strerror(err)) : "not a directory"));
  return true;
}

// A transient failure: drop the session, back off, reconnect, resume from the consumer offset.
// Returns false when a stop signal arrived while waiting (the command then ends with exit 0).
bool Applier::RecoverFrom(TransientFailure failure) {
  const uint64_t done = counters_.applied + counters_.skipped_duplicates;
  if (done != done_at_last_failure_) {  // progress since the last failure: a new series
    backoff_.Reset();
    retry_since_ = UtcNow();
    done_at_last_failure_ = done;
  }
  for (;;) {
    session_.Disconnect();
    conn_ = nullptr;
    const uint64_t wait_ms = backoff_.NextDelayMs();
    const std::string state = failure.connection_lost ? "reconnecting" : "retrying";
    if (until_caught_up_ && (failure.connection_lost || backoff_.attempt() > kUntilCaughtUpAttemptsMax)) {
      WriteStateFile("failed", failure.what(), failure.sqlstate);
      throw CommandFailed(std::string(failure.what()) +
                              (failure.connection_lost
                                   ? "; --until-caught-up does not reconnect: rerun trellara apply, it resumes "
                                     "exactly once (without --until-caught-up it reconnects by itself)"
                                   : "; still failing after " + std::to_string(kUntilCaughtUpAttemptsMax) +
                                         " retries: rerun trellara apply once the target can take it"),
                          1);
    }
    std::string quoted = failure.what();
    for (auto& c : quoted)
      if (c == '"' || c == '\n') c = '\'';
    std::cerr << "apply flow=" << config_.flow_name << " event=retry state=" << state
              << " sqlstate=" << (failure.sqlstate.empty() ? "none" : failure.sqlstate)
              << " kind=" << TransientName(failure.sqlstate) << " attempt=" << backoff_.attempt()
              << " next_wait_ms=" << wait_ms << " since=" << retry_since_ << " consumer_offset=" << written_offset_
              << " error=\"" << quoted << "\"" << std::endl;
    WriteStateFile(state, failure.what(), failure.sqlstate);
    retries_++;
    PublishMetrics(metrics::ApplyState::kRetrying, true);
    for (const auto until = Clock::now() + std::chrono::milliseconds(wait_ms); Clock::now() < until;) {
      if (StopRequested()) {
        WriteStateFile("stopped", failure.what(), failure.sqlstate);
        PublishMetrics(metrics::ApplyState::kStopped, true);
        progress_.Print("stopped", counters_, Figures(false));
        return false;
      }
      std::this_thread::sleep_for(cadence::kApplierStopCheck);
    }
    try {
      session_.Connect(true);
      conn_ = &session_.conn();
      LoadRegistry();
      ResumeLog();
      WriteStatus("running", failure.what());
      WriteStateFile("running", failure.what(), failure.sqlstate);
      PublishMetrics(metrics::ApplyState::kRunning, true);
      std::cerr << "apply flow=" << config_.flow_name << " event=resumed attempt=" << backoff_.attempt()
                << " consumer_offset=" << written_offset_ << std::endl;
      return true;
    } catch (const TransientFailure& again) {
      failure = again;
    }
  }
}

// consumers/.applier.state, replaced atomically (write, rename): what `trellara status` shows
// while the target cannot answer. Best effort: the applier's work never depends on it.
void Applier::WriteStateFile(const std::string& state, const std::string& last_error, const std::string& sqlstate) {
  nlohmann::ordered_json j;
  j["state"] = state;
  j["pid"] = static_cast<int64_t>(getpid());
  j["last_error"] = last_error;
  j["sqlstate"] = sqlstate;
  j["attempt"] = state == "retrying" || state == "reconnecting" || state == "failed" ? backoff_.attempt() : 0;
  j["since"] = retry_since_;
  j["updated_at"] = UtcNow();
  const std::string path = config_.log_directory + "/" + log::kApplierStateFile;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump() << "\n";
    if (!out) {
      std::cerr << "trellara: warning: cannot write " << tmp << "\n";
      return;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::cerr << "trellara: warning: cannot replace " << path << "\n";
}

void Applier::WriteStatus(const std::string& state, const std::string& last_error) {
  session_.WriteStatus(state, last_error, StatusFigures{written_offset_, counters_.applied, counters_.skipped_duplicates});
}

ProgressFigures Applier::Figures(bool with_log_end) const {
  ProgressFigures f;
  f.batches = batches_;
  f.start_offset = start_offset_;
  f.consumer_offset = written_offset_;
  f.next_log_offset = reader_->next_offset();
  f.waiting = pipeline_.size();
  f.log_end = f.next_log_offset;
  if (with_log_end) {
    auto end = log::PublishedEndOffset(*device_, config_.log_directory);
    if (end) f.log_end = std::max(*end, f.next_log_offset);
  }
  return f;
}

// ---- the log -------------------------------------------------------------------------

void Applier::OpenLog() {
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

bool Applier::IdleWait(std::chrono::milliseconds wait) {
  if (!receiver_) {
    std::this_thread::sleep_for(wait);
    return false;
  }
  std::optional<broker::ConflictingDelivery> conflict;
  const size_t appended = receiver_->Pump(wait, conflict);
  if (conflict) StopOnConflict(*conflict);
  return appended > 0;
}

void Applier::StopOnConflict(const broker::ConflictingDelivery& conflict) {
  std::string message = "the broker delivered offset " + std::to_string(conflict.offset) + " of flow " +
                        config_.flow_name + " again with other content: " + conflict.detail;
  auto decoded = DecodeRecord(std::span<const uint8_t>(conflict.payload.data(), conflict.payload.size()));
  if (decoded) {
    ReadyTransaction ready;
    ready.tx = TxOf(*decoded);
    QuarantineCause cause;
    cause.reason = QuarantineReason::ChecksumConflict;
    cause.detail = message;
    Pump(true);
    const Evidence evidence = session_.ReadEvidence(ready.tx);
    Quarantine(ready, cause, evidence.previous_attempts);
    message = BuildQuarantine(ready.tx, ready.checksum, cause, evidence.previous_attempts).message;
  }
  message += "; nothing after the replica's offset " + std::to_string(receiver_->expected()) +
             " is applied until the stream is repaired (docs/broker.md \"Conflicting duplicates\")";
  WriteOffset(true);
  WriteStatus("blocked", message);
  WriteStateFile("blocked", message, "");
  Fail(message, kExitFlowBlocked);
}

void Applier::BarrierFailed(const BarrierFailure& failure) {
  std::string message = "the log of flow " + config_.flow_name + " cannot be applied past offset " +
                        std::to_string(failure.offset) + ": " + failure.reason;
  if (failure.tx) {
    ReadyTransaction ready;
    ready.tx = *failure.tx;
    QuarantineCause cause;
    cause.reason = QuarantineReason::BarrierFailure;
    cause.detail = failure.reason;
    const Evidence evidence = session_.ReadEvidence(ready.tx);
    Quarantine(ready, cause, evidence.previous_attempts);
    message = BuildQuarantine(ready.tx, ready.checksum, cause, evidence.previous_attempts).message;
  }
  WriteOffset(true);
  WriteStatus("blocked", message);
  Fail(message, kExitFlowBlocked);
}

void Applier::Loop() {
  progress_.Start();
  last_offset_write_ = Clock::now();
  bool at_tail_reported = false;
  std::chrono::milliseconds tail_sleep = kTailPollMin;
  Clock::time_point last_tail_work{};
  for (;;) {
    if (StopRequested()) break;
    if (reader_->next_offset() >= stop_offset_) {  // --until-caught-up: the end present at start
      AbandonEarly("the run ends at the log's end present at its start");
      if (Pump(true) == Outcome::Stopped) break;
      WriteOffset(true);
      break;
    }
    auto next = reader_->Next();
    if (!next)
      Fail("reading the log of flow " + config_.flow_name + " at offset " + std::to_string(reader_->next_offset()) +
           " failed: " + next.error().message + "; nothing past the last committed transaction was applied");
    if (!*next) {
      if (early_.attempt.active() && !until_caught_up_ && Clock::now() - early_.last_frame < config_.early_apply_idle) {
        // The relay is writing the early transaction: nothing else touches the target meanwhile.
        tail_sleep = IdleWait(tail_sleep) ? kTailPollMin : cadence::kApplierTail.After(tail_sleep, false);
        continue;
      }
      AbandonEarly(until_caught_up_ ? "the run ends at the log's end present at its start"
                                    : "no record for " + std::to_string(config_.early_apply_idle.count()) + " ms" +
                                          " in the middle of the transaction ([apply] early_apply_idle)");
      if (Pump(true) == Outcome::Stopped) break;
      if (until_caught_up_) {
        WriteOffset(true);
        break;
      }
      if (Clock::now() - last_tail_work >= kTailPollInterval) {
        last_tail_work = Clock::now();
        WriteOffset(true);
        // Idle and caught up: learn of holds and registrations; a progress marker at or past a
        // hold's LSN reaches it (everything up to it is applied, nothing after).
        PollRegistry();
        if (!registry_.holds().empty() && !StopAtHolds(std::nullopt)) break;
        if (!at_tail_reported) {
          WriteStatus("caught_up", "");
          WriteStateFile("caught_up", "", "");
          ReadQuarantineOpen();
          PublishMetrics(metrics::ApplyState::kCaughtUp, true);
          at_tail_reported = true;
        }
      } else {
        WriteOffset(false);
      }
      PublishMetrics(metrics::ApplyState::kCaughtUp, false);
      if (progress_.tty()) progress_.Show(counters_, [&] { return Figures(true); });
      if (IdleWait(tail_sleep)) {
        at_tail_reported = false;
        tail_sleep = kTailPollMin;
      } else {
        tail_sleep = cadence::kApplierTail.After(tail_sleep, false);
      }
      continue;
    }
    at_tail_reported = false;
    tail_sleep = kTailPollMin;
    const log::LogRecord& record = **next;
    // How far the log read so far covers the source (relay_progress.h): the LSN of the last
    // transaction end or progress marker.
    if (EndsTransaction(record.type) || record.type == kProgressRecordType)
      covered_lsn_ = std::max(covered_lsn_, record.commit_lsn);
    if (early_.attempt.active() && !EarlyFrame(record))
      AbandonEarly("log offset " + std::to_string(record.offset) + " holds a record of something else");
    if (early_.attempt.active()) early_.last_frame = Clock::now();  // a re-emitted chunk counts: the relay is alive
    LogFrame frame{record.offset, record.type, record.commit_lsn,
                   std::span<const uint8_t>(record.payload.data(), record.payload.size())};
    auto fed = barrier_.Feed(frame);
    if (!fed) {
      AbandonEarly("the barrier refused log offset " + std::to_string(record.offset));
      if (Pump(true) == Outcome::Stopped) break;  // everything before the failure is applied first
      BarrierFailed(barrier_.failure().value_or(BarrierFailure{std::nullopt, record.offset, fed.error().message}));
    }
    if (fed && *fed) CheckFlowOf((*fed)->tx);  // a log of two flows is not applied either
    if (fed)
      for (auto& [offset, chunk] : accepted_chunks_) EarlyChunk(offset, std::move(chunk));
    accepted_chunks_.clear();
    // Everything below `retain` is finished with once what it holds is applied.
    const uint64_t retain = barrier_.RetainFromOffset().value_or(record.offset + 1);
    if (*fed && (*fed)->envelope) {
      pipeline_.ReadWhole(std::move(**fed), retain);
      // Negative control (defect.apply_ack_before_commit, apply_pipeline.cpp): also acknowledged
      // while read, every 16 transactions, so a kill loses those waiting for the next batch even
      // when each batch takes everything read before it.
      if (pipeline_.unsent() % 16 == 0 && fault::Hit("defect.apply_ack_before_commit") == fault::Action::Defect)
        DefectAckEverythingRead();
      if (pipeline_.full() && Pump(false) == Outcome::Stopped) break;
    } else if (*fed) {
      // A chunked transaction: committed by the early path when it staged every chunk, else
      // applied alone, streaming its chunks back from the log.
      Outcome processed = Outcome::Applied;
      if (!FinishEarly(**fed)) {
        if (Pump(true) == Outcome::Stopped) break;
        if (!registry_.holds().empty() && !StopAtHolds((*fed)->tx.commit_lsn)) break;
        processed = Process(**fed);
      }
      chunk_cache_.Clear();  // handled (or stopping): its chunks are not needed again
      if (processed == Outcome::Stopped) break;
      Status done = pipeline_.AppliedAlone(retain, (*fed)->tx.commit_lsn);
      if (!done.ok()) Fail("flow " + config_.flow_name + ": " + done.error().message);
      unwritten_transactions_++;
    } else {
      pipeline_.ReadNothing(retain);
    }
    if (!early_.attempt.active()) WriteOffset(false);
    progress_.Show(counters_, [&] { return Figures(progress_.tty()); });
    PublishMetrics(metrics::ApplyState::kRunning, false);
  }
  AbandonEarly("the applier is stopping");
  WriteOffset(true);
  const bool stopped = StopRequested();
  for (const auto& open : barrier_.OpenTransactions())
    std::cerr << "trellara: " << DescribeTransaction(open.tx) << " is still being written to the log (first offset "
              << open.first_offset << ", " << open.chunks_received << " chunks so far); it is applied by the next run\n";
  WriteStatus(stopped ? "stopped" : "caught_up", "");
  WriteStateFile(stopped ? "stopped" : "caught_up", "", "");
  PublishMetrics(stopped ? metrics::ApplyState::kStopped : metrics::ApplyState::kCaughtUp, true);
  progress_.Print(stopped ? "stopped" : "caught_up", counters_, Figures(false));
}

// ---- metrics -------------------------------------------------------------------------

void Applier::PublishMetrics(metrics::ApplyState state, bool force) {
  if (!metrics_) return;
  const auto now = Clock::now();
  if (!force && now - last_metrics_publish_ < kMetricsPublishInterval) return;
  last_metrics_publish_ = now;
  metrics::ApplySnapshot s;
  s.flow = config_.flow_name;
  s.state = state;
  s.transactions_applied = counters_.applied;
  s.duplicates_skipped = counters_.skipped_duplicates;
  s.quarantined = quarantined_;
  s.quarantine_open = quarantine_open_;
  s.retries = retries_;
  s.statements = counters_.statements;
  s.last_commit_lsn = applied_lsn_;
  if (reader_ && device_) {
    // The published end: one read of the last segment's index (log/scan.h). Unreadable for a
    // moment (a segment being rolled) it keeps the last figure rather than inventing one.
    auto end = log::PublishedEndOffset(*device_, config_.log_directory);
    if (end)
      s.lag_records = *end > reader_->next_offset() ? *end - reader_->next_offset() : 0;
    else
      s.lag_records = metrics_snapshot_.Get().lag_records;
  }
  const bool caught_up = state == metrics::ApplyState::kCaughtUp || (s.lag_records == 0 && pipeline_.size() == 0);
  const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  s.lag_seconds = metrics::ApplyLagSeconds(caught_up, last_commit_time_us_, now_us);
  s.last_checkpoint_unix_seconds = offset_written_unix_seconds_;
  s.broker_quorum_available = !receiver_ || receiver_->broker_available();
  metrics_snapshot_.Set(s);
}

void Applier::ReadQuarantineOpen() {
  if (!metrics_ || conn_ == nullptr) return;
  PgResult r = conn_->ExecParams(
      "SELECT count(*) FROM trellara.quarantine WHERE flow = $1 AND state IN ('quarantined', 'replay_ready')",
      {config_.flow_name});
  if (!r.ok() || r.rows() != 1 || !r.Value(0, 0)) {
    // The figure stays as last read; the apply loop's own statements report a lost target.
    std::cerr << "trellara: warning: flow " << config_.flow_name
              << ": cannot read the open quarantine rows for trellara_apply_quarantine_open (kept at "
              << quarantine_open_ << "): " << r.Describe() << "\n";
    return;
  }
  quarantine_open_ = std::stoull(*r.Value(0, 0));
}

}  // namespace apply
}  // namespace trellara::cli
