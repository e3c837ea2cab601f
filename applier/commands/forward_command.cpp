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

namespace trellara::cli {
namespace {

using Clock = std::chrono::steady_clock;
using apply::InstallStopHandlers;
using apply::StopRequested;
constexpr const char* kForwarderConsumer = "forwarder";
constexpr uint64_t kOffsetWriteEvery = 512;  // records; and at least every kApplierOffsetWrite
// While publishing, refill requests and remote appliers' positions are read at least this often.
constexpr auto kAnswerInterval = std::chrono::milliseconds(20);
// With nothing to publish, the stream's tail is checked this often (CheckTail).
constexpr auto kTailCheckInterval = std::chrono::seconds(2);
// Records published before their acknowledgements are awaited (one connection keeps their order):
// the broker's round trip is paid once per batch, not per record.
constexpr size_t kBatchRecords = 1024;
constexpr size_t kBatchBytes = 4u << 20;

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

// The identity of the flow's local log, from the source: system identifier and log start LSN.
std::string ReadLogIdentity(const FlowConfig& config) {
  if (config.source_conninfo.empty())
    throw CommandFailed("configuration " + config.path + ": trellara forward needs [source] conninfo (it names "
                        "each record by the source's system identifier and the LSN the flow's log started at)",
                        kExitConfig);
  auto source = ConnectPinned(config, config.source_conninfo, "source", "trellara forward");
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
  if (!started)
    throw CommandFailed("the relay of flow " + config.flow_name + " has not recorded where its log started yet "
                        "(trellara.flows.log_started_lsn is NULL); start the flow and run trellara forward again",
                        kExitCouldNotRun);
  auto lsn = ParseLsn(*started);
  if (!sysid || !lsn) throw CommandFailed("the source returned an unreadable log identity for flow " + config.flow_name);
  return trellara::broker::LogIdentity(std::stoull(*sysid), *lsn);
}

class Forwarder {
 public:
  Forwarder(FlowConfig config, Options options, std::string identity)
      : config_(std::move(config)), options_(std::move(options)), identity_(std::move(identity)) {}

  void Run() {
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
        if (!Answer(wait)) std::this_thread::sleep_for(wait);
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

 private:
  // Each remote applier named in [transport] remote_appliers holds the log as consumer
  // "remote.<name>" from the start: the log is kept until that applier reports past it, so whatever
  // the broker loses can be published again.
  void RegisterRemoteAppliers() {
    // Negative control (tests only, TRELLARA_FAULTS=defect.forward_retention_by_forwarder:1:defect):
    // only the forwarder's own progress holds the log, which the lost-message scenario must catch.
    defect_retention_ = fault::Hit("defect.forward_retention_by_forwarder") == fault::Action::Defect;
    if (defect_retention_) return;
    for (const auto& name : config_.transport.remote_appliers) {
      Status registered =
          log::RegisterConsumer(*device_, config_.log_directory, trellara::broker::RemoteConsumerName(name));
      if (!registered.ok())
        throw CommandFailed("remote applier " + name + " of flow " + config_.flow_name + ": " +
                                registered.error().message, kExitCouldNotRun);
    }
  }

  // Reads what arrived on the plain subjects within `wait`: refill requests (answered, and the
  // records published again) and remote appliers' positions (recorded). True when something came.
  bool Answer(std::chrono::milliseconds wait) {
    last_answer_ = Clock::now();
    if (!stream_) return false;
    bool heard_any = false;
    for (int round = 0; round < 64; round++) {
      auto request = stream_->Hear(trellara::broker::RefillRequestSubject(config_.flow_name), round == 0 ? wait.count() : 0);
      auto position = stream_->Hear(trellara::broker::PositionSubject(config_.flow_name), 0);
      if (!request || !position) return heard_any;  // the connection is down; asked again later
      if (!*request && !*position) return heard_any;
      heard_any = true;
      if (*position) RecordPosition((*position)->text);
      if (*request) Refill(**request);
    }
    return heard_any;
  }

  void RecordPosition(const std::string& text) {
    auto position = trellara::broker::ParsePosition(text);
    if (!position) {
      Event("warning", "reason=\"" + position.error().message + "\"");
      return;
    }
    const auto& names = config_.transport.remote_appliers;
    if (defect_retention_ || position->log_identity != identity_ ||
        std::find(names.begin(), names.end(), position->applier) == names.end()) {
      if (!defect_retention_)
        Event("warning", "reason=\"remote applier " + position->applier + " reported offset " +
                             std::to_string(position->next_offset) + " of log " + position->log_identity +
                             "; the log is kept only for the remote appliers of log " + identity_ +
                             " named in [transport] remote_appliers\"");
      return;
    }
    const std::string consumer = trellara::broker::RemoteConsumerName(position->applier);
    auto it = remote_written_.find(consumer);
    if (it != remote_written_.end() && it->second == position->next_offset) return;
    Status written = log::WriteConsumerOffset(*device_, config_.log_directory, consumer, position->next_offset);
    if (!written.ok())
      throw CommandFailed("cannot record remote applier " + position->applier + "'s position " +
                          std::to_string(position->next_offset) + " in " + config_.log_directory + "/consumers/" +
                          consumer + ": " + written.error().message);
    remote_written_[consumer] = position->next_offset;
    counters_.positions++;
  }

  // A remote applier found a hole at `from`: everything from there up to what this forwarder has
  // published goes out again on the refill subject (the applier passes over what follows the hole
  // until it comes), each record under a name the broker's duplicate window has not seen.
  void Refill(const broker::NatsStream::Heard& heard) {
    auto request = trellara::broker::ParseRefillRequest(heard.text);
    if (!request) {
      Event("warning", "reason=\"" + request.error().message + "\"");
      return;
    }
    auto reader = log::LogReader::Open(*device_, config_.log_directory);
    if (!reader)
      throw CommandFailed("cannot open the log of flow " + config_.flow_name + " to refill: " + reader.error().message);
    const trellara::broker::RefillAnswer answer =
        trellara::broker::DecideRefill(*request, identity_, reader.value()->next_offset(), acked_end_);
    if (!heard.reply.empty()) {
      Status sent = stream_->Send(heard.reply, trellara::broker::EncodeRefillAnswer(answer));
      if (!sent.ok()) return;  // the applier asks again
    }
    Event("refill", "from=" + std::to_string(request->from) + " seen=" + std::to_string(request->to) + " answer=\"" +
                        trellara::broker::EncodeRefillAnswer(answer) + "\"");
    if (answer.kind != trellara::broker::RefillAnswer::Kind::Ok || answer.first >= answer.end) return;
    Republish(*reader.value(), answer.first, answer.end);
  }

  // With nothing to publish, the stream's tail is checked: a tail the broker lost shows no hole to
  // any remote applier (no later record arrives), so the forwarder publishes it again itself
  // (core DecideTailRepublish). The broker not answering is left to the publishing path to report.
  void CheckTail() {
    last_tail_check_ = Clock::now();
    std::optional<uint64_t> highest;
    for (const std::string& subject : {std::string(), trellara::broker::RefillSubject(config_.flow_name)}) {
      auto last = stream_->LastRecord(subject);
      if (!last) return;
      if (!last.value()) continue;
      auto name = trellara::broker::ParseDeliveredId(last.value()->message_id);
      if (!name || name->flow != config_.flow_name || name->log_identity != identity_) continue;
      highest = std::max(highest.value_or(0), name->offset);
    }
    auto reader = log::LogReader::Open(*device_, config_.log_directory);
    if (!reader)
      throw CommandFailed("cannot open the log of flow " + config_.flow_name + ": " + reader.error().message);
    auto first = trellara::broker::DecideTailRepublish(highest, acked_end_, reader.value()->next_offset());
    if (!first) return;
    Event("tail_republish", "stream_holds_to=" + (highest ? std::to_string(*highest) : std::string("none")) +
                                " published_end=" + std::to_string(acked_end_) + " from=" + std::to_string(*first) +
                                " reason=\"the broker lost the stream's tail\"");
    Republish(*reader.value(), *first, acked_end_);
  }

  // Publishes offsets [first, end) of the local log again on the refill subject, under refill ids.
  void Republish(log::LogReader& reader, uint64_t first, uint64_t end) {
    counters_.refills++;
    const uint64_t refill = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    Status seek = reader.Seek(first);
    if (!seek.ok())
      throw CommandFailed("cannot refill flow " + config_.flow_name + " from offset " + std::to_string(first) +
                          ": " + seek.error().message);
    std::vector<log::LogRecord> batch;
    for (uint64_t o = first; o < end && !StopRequested();) {
      batch.clear();
      for (; o < end && batch.size() < kBatchRecords; o++) {
        auto next = reader.Next();
        if (!next || !*next)
          throw CommandFailed("cannot read offset " + std::to_string(o) + " of flow " + config_.flow_name +
                              " to refill it" + (next ? "" : ": " + next.error().message));
        batch.push_back(std::move(**next));
      }
      if (!SendUntilAcknowledged(batch, refill)) return;
      counters_.refilled_records += batch.size();
    }
  }

  // Connects (retrying while the broker cannot be reached) and makes sure the stream exists.
  void ConnectStream() {
    broker::StreamSettings settings;
    settings.servers = config_.transport.servers;
    settings.stream = config_.transport.stream;
    settings.subject = trellara::broker::FlowSubject(config_.flow_name);
    settings.stream_subjects = trellara::broker::StreamSubjects(config_.flow_name);
    settings.credentials = config_.transport.credentials;
    auto wait = cadence::kBrokerRetry.min;
    while (!StopRequested()) {
      bool misconfigured = false;
      auto stream = broker::NatsStream::Open(settings, &misconfigured);
      if (misconfigured)
        throw CommandFailed("trellara forward of flow " + config_.flow_name + ": " + stream.error().message +
                                " ([transport] in " + config_.path + ")",
                            kExitConfig);
      Status ready = stream ? stream.value()->Listen(trellara::broker::RefillRequestSubject(config_.flow_name))
                            : Status(stream.error());
      if (ready.ok()) ready = stream.value()->Listen(trellara::broker::PositionSubject(config_.flow_name));
      if (ready.ok()) {
        stream_ = std::move(stream.value());
        return;
      }
      Event("retry", "state=broker_quorum_unavailable error=\"" + ready.error().message + "\"");
      counters_.publish_retries++;
      std::this_thread::sleep_for(wait);
      wait = cadence::kBrokerRetry.After(wait, false);
    }
  }

  // Positions the reader after the stream's last record (core DecideForwardStart). False when
  // stopped while the broker could not answer.
  bool Resync() {
    auto wait = cadence::kBrokerRetry.min;
    while (!StopRequested() && stream_) {
      auto last = stream_->LastRecord();
      if (!last) {
        Event("retry", "state=broker_quorum_unavailable error=\"" + last.error().message + "\"");
        counters_.publish_retries++;
        std::this_thread::sleep_for(wait);
        wait = cadence::kBrokerRetry.After(wait, false);
        continue;
      }
      std::optional<trellara::broker::RecordName> last_name;
      last_sequence_ = 0;
      if (last.value()) {
        auto parsed = trellara::broker::ParseMessageId(last.value()->message_id);
        if (!parsed)
          throw CommandFailed("stream " + config_.transport.stream + ": " + parsed.error().message);
        last_name = *parsed;
        last_sequence_ = last.value()->sequence;
      }
      auto reader = log::LogReader::Open(*device_, config_.log_directory);
      if (!reader)
        throw CommandFailed("cannot open the log of flow " + config_.flow_name + " at " + config_.log_directory + ": " +
                            reader.error().message, kExitCouldNotRun);
      const uint64_t first = reader.value()->next_offset();
      const uint64_t end = std::max(ReadLogProgress(config_).end_offset, first);
      auto start = trellara::broker::DecideForwardStart(last_name, config_.flow_name, identity_, first, end,
                                                        config_.transport.stream);
      if (!start) throw CommandFailed("trellara forward of flow " + config_.flow_name + ": " + start.error().message);
      Status seek = reader.value()->Seek(*start);
      if (!seek.ok())
        throw CommandFailed("cannot position the log of flow " + config_.flow_name + " at offset " +
                            std::to_string(*start) + ": " + seek.error().message);
      reader_ = std::move(reader.value());
      acked_end_ = *start;
      counters_.resyncs++;
      Event("resumed", "next_offset=" + std::to_string(*start) + " stream_sequence=" + std::to_string(last_sequence_));
      return true;
    }
    return false;
  }

  // Publishes `records` in order on the records subject (the first expecting the subject's last
  // record to be the one published before) until the stream acknowledged every one. False when
  // stopped, or when the stream's last record is not the expected one (the reader was repositioned
  // by Resync: reading goes on from there).
  bool PublishRecords(const std::vector<log::LogRecord>& records) {
    for (size_t i = 0; i < records.size(); i++) {
      // Fault point (tests): the record is read from the log, not published yet (`crash` dies here).
      fault::Hit("forward.before_publish");
      // Negative control (tests only, TRELLARA_FAULTS=defect.forward_progress_before_ack:1:defect):
      // the forwarder records a record as published before the broker acknowledged it.
      if (fault::Hit("defect.forward_progress_before_ack") == fault::Action::Defect)
        WriteOffsetAt(records[i].offset + 1);
    }
    return SendUntilAcknowledged(records, std::nullopt);
  }

  // Sends `records` — on the records subject, or (`refill`) on the refill subject under refill ids
  // — retrying what is not acknowledged with a capped, doubling backoff. On the records subject
  // each acknowledged record (in order, with nothing unacknowledged before it) moves acked_end_.
  bool SendUntilAcknowledged(const std::vector<log::LogRecord>& records, std::optional<uint64_t> refill) {
    const std::string subject = refill ? trellara::broker::RefillSubject(config_.flow_name) : "";
    std::vector<broker::NatsStream::OutRecord> out;
    for (const auto& record : records) {
      const trellara::broker::RecordName name{config_.flow_name, identity_, record.offset};
      out.push_back({refill ? trellara::broker::RefillMessageId(name, *refill) : trellara::broker::MessageId(name),
                     {{"Trellara-Offset", std::to_string(record.offset)},
                      {"Trellara-Type", std::to_string(record.type)},
                      {"Trellara-Commit-Lsn", FormatLsn(record.commit_lsn)}},
                     std::span<const uint8_t>(record.payload.data(), record.payload.size())});
    }
    size_t done = 0;
    auto wait = cadence::kBrokerRetry.min;
    for (bool first_attempt = true; !StopRequested(); first_attempt = false) {
      std::vector<broker::NatsStream::OutRecord> rest(out.begin() + static_cast<std::ptrdiff_t>(done), out.end());
      const auto sent = Clock::now();
      // The first attempt expects the subject's last record to be the one published before: nothing
      // else writes on it. A retry does not: what an unanswered attempt stored is not known, and the
      // broker drops it again by its id (a remote applier skips what is left of it).
      auto answers = stream_->PublishBatch(
          rest, refill || !first_attempt ? std::nullopt : std::optional<uint64_t>(last_sequence_), subject);
      const auto us = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - sent).count());
      size_t k = 0;
      for (; k < answers.size() && answers[k].ack; k++) {
        const broker::PublishAck& ack = *answers[k].ack;
        counters_.ack_latency_us_sum += us;
        counters_.ack_latency_us_max = std::max(counters_.ack_latency_us_max, us);
        if (refill) continue;
        if (ack.duplicate)
          counters_.already_held++;
        else
          counters_.published++;
        last_sequence_ = std::max(last_sequence_, ack.sequence);
        acked_end_ = records[done + k].offset + 1;
        // Fault point (tests): the broker acknowledged the record, the forwarder's progress is not
        // written yet (`crash` dies here).
        fault::Hit("forward.after_ack_before_progress");
      }
      done += k;
      if (done == out.size()) {
        if (unavailable_) Event("resumed", "state=running offset=" + std::to_string(records.back().offset));
        return true;
      }
      const broker::PublishError& error = *answers[k].error;
      const uint64_t offset = records[done].offset;
      if (error.kind == broker::PublishFailure::WrongLast && !refill) {
        Event("resync", "offset=" + std::to_string(offset) + " error=\"" + error.message + "\"");
        Resync();
        return false;  // stopped, or read on from where the stream ends
      }
      if (error.kind == broker::PublishFailure::Refused)
        throw CommandFailed("stream " + config_.transport.stream + " refused offset " + std::to_string(offset) +
                            " of flow " + config_.flow_name + ": " + error.message);
      // Not acknowledged: the rest again, from the first unacknowledged record (the broker drops
      // what it already holds by its id inside its duplicate window; a remote applier skips the rest).
      counters_.publish_retries++;
      Event("retry", "state=broker_quorum_unavailable offset=" + std::to_string(offset) + " attempt_wait_ms=" +
                         std::to_string(wait.count()) + " error=\"" + error.message + "\"");
      std::this_thread::sleep_for(wait);
      wait = cadence::kBrokerRetry.After(wait, false);
    }
    return false;
  }

  // The forwarder's consumer offset: the next offset it publishes (what it holds of the log).
  void WriteOffset() {
    if (reader_) WriteOffsetAt(acked_end_);
  }
  void WriteOffsetAt(uint64_t next) {
    if (written_offset_ && *written_offset_ == next) return;
    Status written = log::WriteConsumerOffset(*device_, config_.log_directory, kForwarderConsumer, next);
    if (!written.ok())
      throw CommandFailed("cannot record the forwarder's offset " + std::to_string(next) + " in " +
                          config_.log_directory + "/consumers/" + kForwarderConsumer + ": " + written.error().message);
    written_offset_ = next;
  }

  // Hands the metrics server the current figures: at most every 500 ms unless `force`.
  void PublishMetrics(bool force) {
    if (!metrics_ || (!force && Clock::now() - last_metrics_ < std::chrono::milliseconds(500))) return;
    last_metrics_ = Clock::now();
    metrics::ForwardSnapshot s;
    s.flow = config_.flow_name;
    s.stream = config_.transport.stream;
    s.quorum_available = stream_ && !unavailable_;
    s.stopped = stopped_;
    s.published = counters_.published;
    s.already_held = counters_.already_held;
    s.publish_retries = counters_.publish_retries;
    s.resyncs = counters_.resyncs;
    s.refills = counters_.refills;
    s.refilled_records = counters_.refilled_records;
    s.positions = counters_.positions;
    s.next_offset = acked_end_;
    s.acks = counters_.published + counters_.already_held + counters_.refilled_records;
    s.ack_latency_seconds_sum = static_cast<double>(counters_.ack_latency_us_sum) / 1e6;
    s.ack_latency_seconds_max = static_cast<double>(counters_.ack_latency_us_max) / 1e6;
    snapshot_.Set(s);
  }

  void Event(const std::string& event, const std::string& fields) {
    if (event == "retry") unavailable_ = true;
    if (event == "resumed") unavailable_ = false;  // the stream answered
    if (event == "retry" || event == "resumed") SayState(unavailable_ ? "broker_quorum_unavailable" : "running", fields);
    if (event == "retry" || event == "resumed") PublishMetrics(true);
    std::cerr << "forward flow=" << config_.flow_name << " event=" << event << " " << fields << std::endl;
  }

  void PrintLine(const std::string& state) {
    std::cerr << "forward flow=" << config_.flow_name << " state=" << state << " next_offset="
              << acked_end_ << " published=" << counters_.published
              << " already_held=" << counters_.already_held << " publish_retries=" << counters_.publish_retries
              << std::endl;
  }

  // consumers/.forwarder.state for trellara status (broker_state.h), on each change of state.
  void SayState(const std::string& state, const std::string& detail) {
    if (state == said_state_) return;
    said_state_ = state;
    broker::WriteBrokerState(config_.log_directory, broker::kForwarderStateFile, "trellara forward", state,
                             state == "broker_quorum_unavailable" ? detail : "");
  }

  void Finish(const std::string& state) {
    stopped_ = true;
    SayState("stopped", "");
    PublishMetrics(true);
    const uint64_t acked = counters_.published + counters_.already_held;
    const double mean_ms = acked ? static_cast<double>(counters_.ack_latency_us_sum) / acked / 1000.0 : 0.0;
    if (options_.format == OutputFormat::Json) {
      nlohmann::json j{{"flow", config_.flow_name},
                       {"state", state},
                       {"stream", config_.transport.stream},
                       {"log_identity", identity_},
                       {"next_offset", acked_end_},
                       {"published", counters_.published},
                       {"already_held", counters_.already_held},
                       {"publish_retries", counters_.publish_retries},
                       {"resyncs", counters_.resyncs},
                       {"refills", counters_.refills},
                       {"refilled_records", counters_.refilled_records},
                       {"positions", counters_.positions},
                       {"ack_latency_ms_mean", mean_ms},
                       {"ack_latency_ms_max", counters_.ack_latency_us_max / 1000.0}};
      std::cout << j.dump() << "\n";
    } else {
      std::cout << "forward: flow " << config_.flow_name << " " << state << " at offset "
                << acked_end_ << " of stream " << config_.transport.stream << ": "
                << counters_.published << " published, " << counters_.already_held << " already held, "
                << counters_.publish_retries << " publish retries, ack latency mean " << mean_ms << " ms\n";
    }
  }

  FlowConfig config_;
  Options options_;
  std::string identity_;
  std::unique_ptr<log::LogDevice> device_;
  std::unique_ptr<log::ConsumerLock> lock_;
  std::unique_ptr<log::LogReader> reader_;
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

void Run(const Options& options) {
  FlowConfig config = LoadConfigOrFail(options.config_path);
  if (config.transport.kind != TransportKind::Nats)
    throw CommandFailed("configuration " + config.path + ": trellara forward publishes to a broker, and "
                        "[transport] kind is \"local\"; set kind = \"nats\", servers and stream (docs/broker.md)",
                        kExitConfig);
  std::string identity = ReadLogIdentity(config);
  InstallStopHandlers();
  Forwarder forwarder(std::move(config), options, std::move(identity));
  forwarder.Run();
}

}  // namespace

void RegisterForward(CLI::App& app) {
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
