// forward_internal.h — what the parts of `trellara forward` share (docs/broker.md): the command's
// options, its counters and the Forwarder, whose methods live by concern in forward_command.cpp
// (the main loop and the command), forward_publish.cpp (connecting, resuming after the stream's
// last record, publishing with acknowledgements, the consumer offset), forward_remote.cpp (remote
// appliers: retention, positions, refills, the stream's tail) and forward_report.cpp (progress
// lines, state files, metrics, the summary). Internal to applier/commands: included by these files
// only; it adds no rule of its own.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "broker/broker_state.h"
#include "broker/nats_stream.h"
#include "commands/commands.h"
#include "engine/applier.h"
#include "engine/metrics_server.h"
#include "kit/log_watch.h"
#include "pg/source_timelines.h"
#include "trellara/report/metrics.h"
#include "trellara/base/cadence.h"
#include "trellara/broker/broker.h"
#include "trellara/broker/replica_intake.h"
#include "trellara/log/consumer_lock.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/reader.h"
#include "trellara/log/retention.h"
#include "trellara/base/fault.h"
#include "trellara/log/uring_device.h"
#include "trellara/record/envelope.h"

namespace trellara::cli::forward {

using Clock = std::chrono::steady_clock;
using apply::InstallStopHandlers;
using apply::StopRequested;
inline constexpr const char* kForwarderConsumer = log::kForwarderConsumer;
inline constexpr uint64_t kOffsetWriteEvery = 512;  // records; and at least every kApplierOffsetWrite
// While publishing, refill requests and remote appliers' positions are read at least this often.
inline constexpr auto kAnswerInterval = std::chrono::milliseconds(20);
// Idle, waiting on the log directory's watch: refill requests and positions are heard this often.
inline constexpr auto kRefillHearInterval = std::chrono::milliseconds(50);
// With nothing to publish, the stream's tail is checked this often (CheckTail).
inline constexpr auto kTailCheckInterval = std::chrono::seconds(2);
// Records published before their acknowledgements are awaited (one connection keeps their order):
// the broker's round trip is paid once per batch, not per record. A batch goes out as messages of
// several records each (core pack.h PlanPacks: up to 256 records or 512 KiB); the batch is what
// the log held when it was read, never held back for more, so a quiet flow's record leaves at once.
inline constexpr size_t kBatchRecords = 4096;
inline constexpr size_t kBatchBytes = 16u << 20;

struct Options {
  std::string config_path;
  bool until_caught_up = false;
  OutputFormat format = OutputFormat::Text;
};

struct Counters {
  uint64_t published = 0;        // acknowledged as new records
  uint64_t already_held = 0;     // acknowledged as duplicates (the broker had them)
  uint64_t publish_retries = 0;  // publishes not acknowledged and tried again
  uint64_t resyncs = 0;          // resumed after the stream's last record again
  uint64_t ack_latency_us_sum = 0;
  uint64_t ack_latency_us_max = 0;
  uint64_t refills = 0;            // refill requests answered by publishing again
  uint64_t refilled_records = 0;   // records published again on the refill subject
  uint64_t positions = 0;          // remote appliers' positions recorded
};

class Forwarder {
 public:
  Forwarder(FlowConfig config, Options options, std::string identity)
      : config_(std::move(config)), options_(std::move(options)), identity_(std::move(identity)) {}

  void Run();

 private:
  // Each remote applier named in [transport] remote_appliers holds the log as consumer
  // "remote.<name>" from the start: the log is kept until that applier reports past it, so whatever
  // the broker loses can be published again.
  void RegisterRemoteAppliers();

  // Reads what arrived on the plain subjects within `wait`: refill requests (answered, and the
  // records published again) and remote appliers' positions (recorded). True when something came.
  bool Answer(std::chrono::milliseconds wait);

  void RecordPosition(const std::string& text);

  // A remote applier found a hole at `from`: everything from there up to what this forwarder has
  // published goes out again on the refill subject (the applier passes over what follows the hole
  // until it comes), each record under a name the broker's duplicate window has not seen.
  void Refill(const broker::NatsStream::Heard& heard);

  // With nothing to publish, the stream's tail is checked: a tail the broker lost shows no hole to
  // any remote applier (no later record arrives), so the forwarder publishes it again itself
  // (core DecideTailRepublish). The broker not answering is left to the publishing path to report.
  void CheckTail();

  // Publishes offsets [first, end) of the local log again on the refill subject, under refill ids.
  void Republish(log::LogReader& reader, uint64_t first, uint64_t end);

  // Connects (retrying while the broker cannot be reached) and makes sure the stream exists.
  void ConnectStream();

  // Positions the reader after the stream's last record (core DecideForwardStart). False when
  // stopped while the broker could not answer.
  bool Resync();

  // Publishes `records` in order on the records subject (the first expecting the subject's last
  // record to be the one published before) until the stream acknowledged every one. False when
  // stopped, or when the stream's last record is not the expected one (the reader was repositioned
  // by Resync: reading goes on from there).
  bool PublishRecords(const std::vector<log::LogRecord>& records);

  // Sends `records` packed into messages (core PlanPacks/EncodePack) — on the records subject, or
  // (`refill`) on the refill subject under refill ids — retrying what is not acknowledged with a
  // capped, doubling backoff. On the records subject each acknowledged message (in order, with
  // nothing unacknowledged before it) moves acked_end_ past its last record.
  bool SendUntilAcknowledged(const std::vector<log::LogRecord>& records, std::optional<uint64_t> refill);

  // The forwarder's consumer offset: the next offset it publishes (what it holds of the log).
  void WriteOffset();

  void WriteOffsetAt(uint64_t next);

  // Hands the metrics server the current figures: at most every 500 ms unless `force`.
  void PublishMetrics(bool force);

  void Event(const std::string& event, const std::string& fields);

  void PrintLine(const std::string& state);

  // consumers/.forwarder.state for trellara status (broker_state.h), on each change of state.
  void SayState(const std::string& state, const std::string& detail);

  void Finish(const std::string& state);

  // Reads the log's TIMELINE into timeline_header_ (none: an older log without one).
  void ReadTimeline();

  FlowConfig config_;
  Options options_;
  std::string identity_;
  std::optional<std::string> timeline_header_;  // Trellara-Timeline of every message (replica_intake.h)
  std::unique_ptr<log::LogDevice> device_;
  std::unique_ptr<log::ConsumerLock> lock_;
  std::unique_ptr<log::LogReader> reader_;
  std::unique_ptr<LogDirWatch> log_watch_;  // woken by the relay's writes (kit/log_watch.h)
  std::unique_ptr<broker::NatsStream> stream_;
  uint64_t last_sequence_ = 0;  // the stream sequence of the subject's last record we know of
  uint64_t acked_end_ = 0;      // every offset below it is acknowledged by the stream (what WriteOffset records)
  uint64_t stop_offset_ = 0;
  std::optional<uint64_t> written_offset_;
  bool unavailable_ = false;
  bool defect_retention_ = false;
  bool stopped_ = false;
  std::string said_state_;
  apply::Published<metrics::ForwardSnapshot> snapshot_;  // what metrics_ serves (before it: outlives it)
  std::unique_ptr<apply::MetricsServer> metrics_;
  Clock::time_point last_metrics_{};
  std::map<std::string, uint64_t> remote_written_;  // remote.<applier> -> the offset recorded
  Clock::time_point last_answer_{};
  Clock::time_point last_tail_check_{};
  Counters counters_;
};

}  // namespace trellara::cli::forward
