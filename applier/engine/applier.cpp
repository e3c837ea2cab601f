// applier.cpp — the main loop of the applier (applier.h), which applies the flow's durable log to the target, one target
// transaction per source transaction, exactly once (DESIGN §2, §6).
//
// The loop reads log frames in order and feeds core's TransactionBarrier, which decides when a
// transaction is whole and verified. Whole transactions wait in pipeline_ (core ApplyPipeline) for the next
// batch (apply_pipeline.cpp); a chunked transaction drains the pipeline and is applied alone
// (apply_transaction.cpp), streaming its chunks back from the log. Where the loop reads from and
// how far it acknowledges (the consumer offset, continuity) is apply_log.cpp; the metrics it
// publishes, apply_metrics.cpp.
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
#include "kit/state_file.h"
#include "trellara/record/codec.h"
#include "trellara/base/fault.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/scan.h"
#include "trellara/log/uring_device.h"
#include "trellara/capture/relay_progress.h"

namespace trellara::cli {
namespace apply {
namespace {

// At the end of the log: cadence::kApplierTail (base/cadence.h). The caught-up bookkeeping runs at
// most once per kTailPollInterval, not on every poll.
constexpr auto kTailPollMin = cadence::kApplierTail.min;
constexpr auto kTailPollInterval = cadence::kApplierTail.max;

// --until-caught-up retries a transient failure on a live target at most this many times, then
// ends with exit 1 and the last error; a lost connection ends it at once (a one-shot run is
// rerun by whoever scheduled it; following a restarting target is the daemon's job).
constexpr uint32_t kUntilCaughtUpAttemptsMax = 5;

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
    auto receiver_device = log::OpenUringDevice();
    if (!receiver_device)
      Fail("cannot open the log device for the replica at " + config_.log_directory + ": " +
           receiver_device.error().message);
    receiver_device_ = std::move(receiver_device.value());
    receiver_ = std::make_unique<broker::StreamReceiver>(config_, *receiver_device_);
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
  // A daemon's receiver reads the stream while the applier applies; --until-caught-up read the
  // stream up to its end in OpenLog and applies that.
  if (receiver_ && !until_caught_up_) receiver_->StartThread();
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
    retry_since_ = UtcNowText();
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
  j["updated_at"] = UtcNowText();
  ReplaceStateFile(config_.log_directory + "/" + log::kApplierStateFile, j.dump() + "\n");
}

void Applier::WriteStatus(const std::string& state, const std::string& last_error) {
  session_.WriteStatus(state, last_error, StatusFigures{written_offset_, counters_.applied, counters_.skipped_duplicates});
}

ProgressFigures Applier::Figures(bool with_log_end) const {
  ProgressFigures f;
  f.batches = batches_;
  f.start_offset = start_offset_;
  f.consumer_offset = written_offset_;
  // Stopped before the log was opened (waiting for its directory, or for the broker): nothing read.
  f.next_log_offset = reader_ ? reader_->next_offset() : start_offset_;
  f.waiting = pipeline_.size();
  f.log_end = f.next_log_offset;
  if (with_log_end) {
    auto end = log::PublishedEndOffset(*device_, config_.log_directory);
    if (end) f.log_end = std::max(*end, f.next_log_offset);
  }
  return f;
}

bool Applier::IdleWait(std::chrono::milliseconds wait) {
  if (!receiver_) {
    // A local log: the relay's next write wakes the watch; the wait is only the fallback.
    if (log_watch_)
      (void)log_watch_->Wait(wait);
    else
      std::this_thread::sleep_for(wait);
    return false;
  }
  std::optional<broker::ConflictingDelivery> conflict;
  const bool appended = receiver_->threaded() ? receiver_->WaitForRecords(wait, conflict)
                                              : receiver_->Pump(wait, conflict) > 0;
  if (conflict) StopOnConflict(*conflict);
  return appended;
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
  // Whether a record was read since the caught-up bookkeeping last ran (below).
  bool read_since_tail_work = false;
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
        // The offset is forced only when nothing arrived since the last bookkeeping: a quiet log
        // gets its final offset within two kTailPollInterval. A log that keeps arriving reaches
        // its end after every batch; there the offset follows the usual rule (every
        // kOffsetWriteEveryTransactions or kOffsetWriteInterval, apply_log.cpp) instead of an
        // fdatasync and a rename every kTailPollInterval that the next records wait for.
        WriteOffset(!read_since_tail_work);
        read_since_tail_work = false;
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
    read_since_tail_work = true;
    tail_sleep = kTailPollMin;
    if (receiver_ && !timeline_checked_ && receiver_->has_timeline()) {
      // The receiver wrote the replica's TIMELINE before appending the record just read (the first
      // message of a new replica that carried it): the target is checked against the source's
      // timeline before anything read after it is applied, as for a local log at start.
      if (Pump(true) == Outcome::Stopped) break;
      CheckTimeline();
    }
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
    // A partitioned transaction small enough to hold whole rides the batches too: merged from what
    // the partition appliers staged once they all hold evidence for it (MaterializePartitioned).
    if (*fed && ((*fed)->envelope || PipelinesPartitioned(**fed))) {
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

}  // namespace apply
}  // namespace trellara::cli
