// forward_publish.cpp — the forwarder's publishing (forward_internal.h): connecting to the broker
// and making sure the stream exists, resuming after the stream's own last record (core
// DecideForwardStart), publishing batches and collecting their acknowledgements, and moving the
// consumer offset only over acknowledged records. Never records progress for a record the broker
// has not acknowledged, and never resumes from its own offset.
#include "commands/forward_internal.h"

#include "trellara/broker/pack.h"

namespace trellara::cli::forward {

void Forwarder::ConnectStream() {
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

bool Forwarder::Resync() {
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
      // The last record the message holds (a packed message names its first; core pack.h).
      auto parsed = trellara::broker::ParsePublishedSpan(last.value()->message_id, last.value()->format_header,
                                                         last.value()->count_header);
      if (!parsed)
        throw CommandFailed("stream " + config_.transport.stream + ": " + parsed.error().message);
      last_name = parsed->last();
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
    ReadTimeline();
    if (!log_watch_ && !options_.until_caught_up)
      log_watch_ = LogDirWatch::OpenOrWarn(config_.log_directory, "forward flow=" + config_.flow_name);
    acked_end_ = *start;
    counters_.resyncs++;
    Event("resumed", "next_offset=" + std::to_string(*start) + " stream_sequence=" + std::to_string(last_sequence_));
    return true;
  }
  return false;
}

// The log's TIMELINE (written by the relay when it started the log, before its first record; a
// log's timeline never changes) goes with every message, so a remote applier's replica records it
// and the applier checks the target against it after a promotion (replica_intake.h).
void Forwarder::ReadTimeline() {
  auto timeline = ReadLogTimelineFile(config_.log_directory);
  if (!timeline)
    throw CommandFailed("trellara forward of flow " + config_.flow_name + ": " + timeline.error().message,
                        kExitCouldNotRun);
  timeline_header_.reset();
  if (timeline->has_value()) timeline_header_ = trellara::broker::TimelineHeaderValue(**timeline);
}

bool Forwarder::PublishRecords(const std::vector<log::LogRecord>& records) {
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

bool Forwarder::SendUntilAcknowledged(const std::vector<log::LogRecord>& records, std::optional<uint64_t> refill) {
  const std::string subject = refill ? trellara::broker::RefillSubject(config_.flow_name) : "";
  // Several records per message (core pack.h): each message is named by its first record and
  // says how many it holds; `first_record[k]` is the index in `records` of message k's first.
  const std::vector<size_t> counts = trellara::broker::PlanPacks(records);
  std::vector<std::vector<uint8_t>> bodies;
  std::vector<size_t> first_record;
  std::vector<broker::NatsStream::OutRecord> out;
  bodies.reserve(counts.size());
  for (size_t at = 0; const size_t count : counts) {
    const std::span<const log::LogRecord> pack(records.data() + at, count);
    const trellara::broker::RecordName name{config_.flow_name, identity_, pack.front().offset};
    // Compressed (format 2) when that is smaller: the broker's cost is per byte (core pack.h).
    trellara::broker::PackMessageBody body = trellara::broker::EncodePackMessage(pack);
    bodies.push_back(std::move(body.bytes));
    first_record.push_back(at);
    out.push_back({refill ? trellara::broker::PackRefillMessageId(name, count, *refill)
                          : trellara::broker::PackMessageId(name, count),
                   {{trellara::broker::kOffsetHeader, std::to_string(name.offset)},
                    {trellara::broker::kFormatHeader, body.format},
                    {trellara::broker::kCountHeader, std::to_string(count)}},
                   std::span<const uint8_t>(bodies.back().data(), bodies.back().size())});
    if (timeline_header_) out.back().headers.emplace_back(trellara::broker::kTimelineHeader, *timeline_header_);
    at += count;
  }
  first_record.push_back(records.size());
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
      const size_t in_message = first_record[done + k + 1] - first_record[done + k];
      if (refill) {
        counters_.refilled_records += in_message;
        continue;
      }
      // A duplicate is acknowledged by its id (the first offset): what the broker holds under it
      // may be another cut of the same records, or nothing it still stores — a remote applier
      // finds any difference as a hole, the idle tail check as a short tail (docs/broker.md).
      if (ack.duplicate)
        counters_.already_held += in_message;
      else
        counters_.published += in_message;
      last_sequence_ = std::max(last_sequence_, ack.sequence);
      acked_end_ = records[first_record[done + k + 1] - 1].offset + 1;
      // Fault point (tests): the broker acknowledged the record, the forwarder's progress is not
      // written yet (`crash` dies here). Hit once per record of the message, so a test's nth
      // names a record whatever the packing.
      for (size_t r = 0; r < in_message; r++) fault::Hit("forward.after_ack_before_progress");
    }
    done += k;
    if (done == out.size()) {
      if (unavailable_) Event("resumed", "state=running offset=" + std::to_string(records.back().offset));
      return true;
    }
    const broker::PublishError& error = *answers[k].error;
    const uint64_t offset = records[first_record[done]].offset;
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

void Forwarder::WriteOffset() {
  if (reader_) WriteOffsetAt(acked_end_);
}

void Forwarder::WriteOffsetAt(uint64_t next) {
  if (written_offset_ && *written_offset_ == next) return;
  Status written = log::WriteConsumerOffset(*device_, config_.log_directory, kForwarderConsumer, next);
  if (!written.ok())
    throw CommandFailed("cannot record the forwarder's offset " + std::to_string(next) + " in " +
                        config_.log_directory + "/consumers/" + kForwarderConsumer + ": " + written.error().message);
  written_offset_ = next;
}

}  // namespace trellara::cli::forward
