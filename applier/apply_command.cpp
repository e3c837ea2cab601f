// apply_command.cpp — `trellara apply --config F [--until-caught-up]`: the CLI and the main loop
// of the applier (applier.h), which applies the flow's durable log to the target, one target
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
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "applier.h"
#include "commands.h"
#include "config.h"
#include "trellara/fault.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/retention.h"
#include "trellara/log/scan.h"
#include "trellara/log/uring_device.h"

namespace trellara::cli {
namespace apply {
namespace {

// The consumer offset is written (fdatasync + rename) at most this often while applying, and
// always when the applier reaches the end of the log, halts or stops. Re-reading transactions
// committed after the last write is safe: their dedup rows make them SkipDuplicate.
constexpr uint64_t kOffsetWriteEveryTransactions = 512;
constexpr auto kOffsetWriteInterval = std::chrono::seconds(1);
constexpr auto kTailPollInterval = std::chrono::milliseconds(200);

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
    : config_(std::move(config)), until_caught_up_(until_caught_up), session_(config_), progress_(config_.flow_name) {}

void Applier::Run() {
  auto device = log::OpenUringDevice();
  if (!device) Fail("cannot open the log device for " + config_.log_directory + ": " + device.error().message);
  device_ = std::move(device.value());
  // One applier per flow: first the lock in the log directory (it also stops two appliers of
  // one log that point at different targets), then the target's advisory lock.
  auto lock = log::ConsumerLock::Acquire(config_.log_directory, kConsumerName);
  if (!lock)
    Fail("another applier of flow " + config_.flow_name + " is running on this log: " + lock.error().message +
         "; stop it first, or leave it running: only one applier per flow may apply");
  log_lock_ = std::move(lock.value());
  session_.Connect();
  conn_ = &session_.conn();
  OpenLog();
  WriteStatus("running", "");
  Loop();
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
  auto reader = log::LogReader::Open(*device_, config_.log_directory);
  if (!reader)
    Fail("cannot open the log of flow " + config_.flow_name + " at " + config_.log_directory + " (flow.log_directory): " +
         reader.error().message);
  reader_ = std::move(reader.value());
  auto offsets = log::ReadConsumerOffsets(*device_, config_.log_directory);
  if (!offsets) Fail("cannot read the consumer offsets of " + config_.log_directory + ": " + offsets.error().message);
  if (auto it = offsets->find(kConsumerName); it != offsets->end()) {
    Status seek = reader_->Seek(it->second);
    if (!seek.ok())
      Fail("cannot resume flow " + config_.flow_name + " at its consumer offset " + std::to_string(it->second) +
           " (" + config_.log_directory + "/consumers/" + kConsumerName + "): " + seek.error().message);
  }
  written_offset_ = reader_->next_offset();
  start_offset_ = written_offset_;
  pipeline_ = ApplyPipeline(start_offset_, PipelineLimits{kBatchMaxTransactions, kBatchMaxStatements});
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
  for (;;) {
    if (StopRequested()) break;
    if (reader_->next_offset() >= stop_offset_) {  // --until-caught-up: the end present at start
      if (Pump(true) == Outcome::Stopped) break;
      WriteOffset(true);
      break;
    }
    auto next = reader_->Next();
    if (!next)
      Fail("reading the log of flow " + config_.flow_name + " at offset " + std::to_string(reader_->next_offset()) +
           " failed: " + next.error().message + "; nothing past the last committed transaction was applied");
    if (!*next) {
      if (Pump(true) == Outcome::Stopped) break;
      WriteOffset(true);
      if (until_caught_up_) break;
      if (!at_tail_reported) {
        WriteStatus("caught_up", "");
        at_tail_reported = true;
      }
      if (progress_.tty()) progress_.Show(counters_, [&] { return Figures(true); });
      std::this_thread::sleep_for(kTailPollInterval);
      continue;
    }
    at_tail_reported = false;
    const log::LogRecord& record = **next;
    LogFrame frame{record.offset, record.type, record.commit_lsn,
                   std::span<const uint8_t>(record.payload.data(), record.payload.size())};
    auto fed = barrier_.Feed(frame);
    if (!fed) {
      if (Pump(true) == Outcome::Stopped) break;  // everything before the failure is applied first
      BarrierFailed(barrier_.failure().value_or(BarrierFailure{std::nullopt, record.offset, fed.error().message}));
    }
    // Everything below `retain` is finished with once what it holds is applied.
    const uint64_t retain = barrier_.RetainFromOffset().value_or(record.offset + 1);
    if (*fed && (*fed)->envelope) {
      pipeline_.ReadWhole(std::move(**fed), retain);
      if (pipeline_.full() && Pump(false) == Outcome::Stopped) break;
    } else if (*fed) {
      // A chunked transaction: applied alone, streaming its chunks back from the log.
      if (Pump(true) == Outcome::Stopped) break;
      if (Process(**fed) == Outcome::Stopped) break;
      Status done = pipeline_.AppliedAlone(retain, (*fed)->tx.commit_lsn);
      if (!done.ok()) Fail("flow " + config_.flow_name + ": " + done.error().message);
      unwritten_transactions_++;
    } else {
      pipeline_.ReadNothing(retain);
    }
    WriteOffset(false);
    progress_.Show(counters_, [&] { return Figures(progress_.tty()); });
  }
  WriteOffset(true);
  const bool stopped = StopRequested();
  for (const auto& open : barrier_.OpenTransactions())
    std::cerr << "trellara: " << DescribeTransaction(open.tx) << " is still being written to the log (first offset "
              << open.first_offset << ", " << open.chunks_received << " chunks so far); it is applied by the next run\n";
  WriteStatus(stopped ? "stopped" : "caught_up", "");
  progress_.Print(stopped ? "stopped" : "caught_up", counters_, Figures(false));
}

}  // namespace apply

void RegisterApply(CLI::App& app) {
  auto* cmd = app.add_subcommand("apply", "apply the flow's durable log to the target, exactly once (--config F)");
  auto config_path = std::make_shared<std::string>();
  auto until_caught_up = std::make_shared<bool>(false);
  cmd->add_option("--config", *config_path, "the flow's TOML configuration file")->required();
  cmd->add_flag("--until-caught-up", *until_caught_up,
                "apply every durable record present at start, then exit 0 (non-zero if blocked by a quarantine)");
  cmd->callback([config_path, until_caught_up] {
    auto config = LoadFlowConfig(*config_path);
    if (!config) throw CommandFailed(config.error().message, 2);
    apply::InstallStopHandlers();
    apply::Applier applier(std::move(config.value()), *until_caught_up);
    applier.Run();
  });
}

}  // namespace trellara::cli
