// forward_command.cpp — `trellara forward --config F [--until-caught-up] [--format text|json]`:
// publishes a flow's local log to its NATS JetStream stream (docs/broker.md).
//
// A registered consumer of the log ("forwarder") that publishes every record unchanged — the
// frame's payload with its checksum, the record type, offset and commit LSN as headers — with a
// deduplication id naming the flow, the log's identity and the offset (core broker.h), waits for
// the stream's acknowledgement, and only then counts the record as published and moves its
// consumer offset. Each publish expects the subject's last record to be the one it published
// before, so the stream never receives a record out of order from it. On start, and whenever the
// stream answers differently than expected, it resumes after the stream's own last record —
// never from its consumer offset, which can be ahead of a stream that lost acknowledged records.
//
// When the broker has no quorum (or cannot be reached) it retries with a capped, doubling backoff,
// counting the retries, and says `state=broker_quorum_unavailable` until a publish is acknowledged
// again. It never skips a record and never signals a process it did not start.
// Exit 0 stopped (SIGTERM/SIGINT) or caught up (--until-caught-up), 2 configuration or setup,
// 1 the stream and the log disagree or the stream refused a record (the message says how).
#include <CLI/CLI.hpp>

#include "commands/forward_internal.h"

namespace trellara::cli {
namespace forward {

void Forwarder::Run() {
  if (config_.metrics_listen) {
    metrics::ForwardSnapshot initial;
    initial.flow = config_.flow_name;
    initial.stream = config_.transport.stream;
    initial.quorum_available = false;  // not ready until the stream answered
    snapshot_.Set(initial);
    metrics_ = std::make_unique<apply::MetricsServer>(
        *config_.metrics_listen, config_.path,
        [this] { return metrics::RenderExposition(metrics::ForwardFamilies(snapshot_.Get())); },
        [this] { return metrics::ForwardReadiness(snapshot_.Get()); });
  }
  auto device = log::OpenUringDevice();
  if (!device) throw CommandFailed("cannot open the log device: " + device.error().message, kExitCouldNotRun);
  device_ = std::move(device.value());
  bool held_by_another = false;
  auto lock = log::ConsumerLock::Acquire(config_.log_directory, kForwarderConsumer, &held_by_another);
  if (!lock)
    throw CommandFailed(std::string(held_by_another ? "another trellara forward of flow " + config_.flow_name +
                                                          " is running: "
                                                    : "cannot take the forwarder's lock: ") +
                            lock.error().message,
                        kExitCouldNotRun);
  lock_ = std::move(lock.value());
  RegisterRemoteAppliers();
  const LogProgress progress = ReadLogProgress(config_);
  stop_offset_ = progress.end_offset;
  ConnectStream();
  if (!Resync()) {
    Finish("stopped");
    return;
  }
  auto last_offset_write = Clock::now();
  auto wait = cadence::kApplierTail.min;
  auto last_line = Clock::now();
  uint64_t unwritten = 0;
  std::vector<log::LogRecord> batch;
  while (!StopRequested()) {
    // What the log holds now, up to one batch (--until-caught-up: up to its end at start).
    batch.clear();
    size_t bytes = 0;
    while (batch.size() < kBatchRecords && bytes < kBatchBytes &&
           !(options_.until_caught_up && reader_->next_offset() >= stop_offset_)) {
      auto next = reader_->Next();
      if (!next)
        throw CommandFailed("reading the log of flow " + config_.flow_name + " at offset " +
                            std::to_string(reader_->next_offset()) + ": " + next.error().message);
      if (!next.value()) break;
      bytes += next.value()->payload.size();
      batch.push_back(std::move(*next.value()));
    }
    if (batch.empty()) {
      if (Clock::now() - last_tail_check_ >= kTailCheckInterval ||
          (options_.until_caught_up && reader_->next_offset() >= stop_offset_))
        CheckTail();
      if (options_.until_caught_up && reader_->next_offset() >= stop_offset_) break;
      WriteOffset();
      unwritten = 0;
      if (log_watch_) {
        // The relay's next write wakes the watch; refill requests and positions are heard between
        // waits, at least every kRefillHearInterval.
        if (!Answer(std::chrono::milliseconds(0))) (void)log_watch_->Wait(std::min(wait, kRefillHearInterval));
      } else if (!Answer(wait)) {
        std::this_thread::sleep_for(wait);
      }
      PublishMetrics(false);
      wait = cadence::kApplierTail.After(wait, false);
      continue;
    }
    wait = cadence::kApplierTail.min;
    if (!PublishRecords(batch)) {  // stopped, or resynced: read on from the reader's new position
      if (StopRequested()) break;
      continue;
    }
    unwritten += batch.size();
    if (unwritten >= kOffsetWriteEvery || Clock::now() - last_offset_write >= cadence::kApplierOffsetWrite) {
      WriteOffset();
      unwritten = 0;
      last_offset_write = Clock::now();
    }
    if (Clock::now() - last_line >= cadence::kApplyProgressLine) {
      PrintLine("progress");
      last_line = Clock::now();
    }
    if (Clock::now() - last_answer_ >= kAnswerInterval) Answer(std::chrono::milliseconds(0));
    PublishMetrics(false);
  }
  WriteOffset();
  Finish(StopRequested() ? "stopped" : "caught_up");
}

}  // namespace forward

// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace forward_command {
namespace {

using forward::Options;
using apply::InstallStopHandlers;

// The identity of the flow's local log, from the source: system identifier and log start LSN.
// Waits while the relay has not yet recorded where the flow's log started (a flow just created):
// nullopt when a stop was requested meanwhile.
std::optional<std::string> ReadLogIdentity(const FlowConfig& config) {
  if (config.source_conninfo.empty())
    throw CommandFailed("configuration " + config.path + ": trellara forward needs [source] conninfo (it names "
                        "each record by the source's system identifier and the LSN the flow's log started at)",
                        kExitConfig);
  auto source = ConnectPinned(config, config.source_conninfo, "source", "trellara forward");
  bool said_waiting = false;
  for (;;) {
    auto row = MustSucceed(*source,
                           source->ExecParams("SELECT (SELECT system_identifier FROM pg_control_system())::text, "
                                              "log_started_lsn::text FROM trellara.flows WHERE name = $1",
                                              {config.flow_name}),
                           "reading the log identity of flow " + config.flow_name);
    if (row.rows() == 0)
      throw CommandFailed("flow " + config.flow_name + " does not exist on the source (trellara.flows); create it "
                          "with trellara.create_flow", kExitCouldNotRun);
    const auto sysid = row.Value(0, 0);
    const auto started = row.Value(0, 1);
    if (started) {
      auto lsn = ParseLsn(*started);
      if (!sysid || !lsn)
        throw CommandFailed("the source returned an unreadable log identity for flow " + config.flow_name);
      return trellara::broker::LogIdentity(std::stoull(*sysid), *lsn);
    }
    // A flow just created: its relay records where the log starts when it first runs.
    if (!said_waiting)
      std::cerr << "forward flow=" << config.flow_name << " event=waiting reason=\"the relay has not recorded "
                << "where the flow's log started yet (trellara.flows.log_started_lsn is NULL); is the flow's relay "
                << "running (trellara.status())?\"" << std::endl;
    said_waiting = true;
    for (int i = 0; i < 10; i++) {
      if (apply::StopRequested()) return std::nullopt;
      std::this_thread::sleep_for(cadence::kApplierStopCheck);
    }
  }
}

void Run(const Options& options) {
  FlowConfig config = LoadConfigOrFail(options.config_path);
  if (config.transport.kind != TransportKind::Nats)
    throw CommandFailed("configuration " + config.path + ": trellara forward publishes to a broker, and "
                        "[transport] kind is \"local\"; set kind = \"nats\", servers and stream (docs/broker.md)",
                        kExitConfig);
  InstallStopHandlers();
  std::optional<std::string> identity = ReadLogIdentity(config);
  if (!identity) return;  // stopped while waiting for the flow's log to start
  forward::Forwarder forwarder(std::move(config), options, std::move(*identity));
  forwarder.Run();
}

}  // namespace
}  // namespace forward_command

void RegisterForward(CLI::App& app) {
  using namespace forward_command;
  auto options = std::make_shared<Options>();
  auto* cmd = app.add_subcommand("forward", "publish the flow's local log to its NATS JetStream stream "
                                            "([transport] kind = \"nats\"), each record once, in order");
  AddConfigOption(cmd, options->config_path);
  cmd->add_flag("--until-caught-up", options->until_caught_up,
                "stop once the log's end as it was at start is published (default: follow the log until SIGTERM)");
  AddFormatOption(cmd, options->format);
  cmd->callback([options] { Run(*options); });
}

}  // namespace trellara::cli
