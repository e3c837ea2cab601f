// broker_hop.cpp — the forwarder, the lossy stream and the remote applier's receiver of the
// simulator (broker_hop.h). The rules come from core; this file only moves records between them.
#include "broker_hop.h"

#include <algorithm>

#include "trellara/capture/relay_progress.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/retention.h"
#include "trellara/record/envelope.h"

namespace trellara::sim {

BrokerHop::BrokerHop(log::SimulatedDevice& source, const std::string& source_dir, log::SimulatedDevice& replica,
                     std::mt19937_64& random, HopHooks hooks, std::string flow, std::string log_identity)
    : source_(source),
      source_dir_(source_dir),
      replica_(replica),
      random_(random),
      hooks_(std::move(hooks)),
      flow_(std::move(flow)),
      identity_(std::move(log_identity)) {}

std::string BrokerHop::Name(uint64_t offset) const { return "offset " + std::to_string(offset); }

// ---------------------------------------------------------------------------------------------
// the broker

BrokerHop::Publish BrokerHop::PublishBatch(const std::vector<log::LogRecord>& records, std::optional<uint64_t> refill) {
  if (hooks_.fire("broker.publish_fails")) return Publish::Refused;  // no quorum: nothing stored
  // Cut into messages as the product's forwarder does (core PlanPacks), with this process's limit.
  const std::vector<size_t> counts =
      single_record_messages_ ? std::vector<size_t>(records.size(), 1)
                              : broker::PlanPacks(records, broker::PackLimits{pack_records_max_, broker::kPackBytesMax});
  size_t at = 0;
  for (const size_t count : counts) {
    const std::span<const log::LogRecord> pack(records.data() + at, count);
    at += count;
    const broker::RecordName name{flow_, identity_, pack.front().offset};
    Message m;
    if (single_record_messages_)
      m.id = refill ? broker::RefillMessageId(name, *refill) : broker::MessageId(name);
    else
      m.id = refill ? broker::PackRefillMessageId(name, count, *refill) : broker::PackMessageId(name, count);
    m.offset_header = std::to_string(name.offset);
    m.refill = refill.has_value();
    m.first = name.offset;
    m.count = count;
    if (single_record_messages_) {
      m.type = pack.front().type;
      m.commit_lsn = pack.front().commit_lsn;
      m.body = pack.front().payload;
    } else {
      // As the product's forwarder: compressed (format 2) when that is smaller.
      broker::PackMessageBody body = broker::EncodePackMessage(pack);
      m.format_header = body.format;
      m.count_header = std::to_string(count);
      m.body = std::move(body.bytes);
    }
    // Inside the duplicate window: dropped by its id (first offset and count), acknowledged —
    // whether the broker still stores the message under that id or not.
    if (!seen_ids_.insert(m.id).second) continue;
    stream_.push_back(std::move(m));
  }
  if (hooks_.fire("broker.ack_lost")) return Publish::AckLost;  // stored; the acknowledgement never came
  return Publish::Acked;
}

void BrokerHop::BrokerStep() {
  // The broker loses an acknowledged message the remote applier has not read yet (a loss of a
  // message it already holds changes nothing it can see).
  std::vector<size_t> unread;
  for (size_t i = read_sequence_ - 1; i < stream_.size(); ++i)
    if (!stream_[i].lost) unread.push_back(i);
  if (unread.empty() || !hooks_.fire("broker.lose_acknowledged")) return;
  Message& m = stream_[unread[random_() % unread.size()]];
  m.lost = true;
  hooks_.trace("the broker loses acknowledged " + std::string(m.refill ? "refilled " : "") + "message of " +
               Name(m.first) + ".." + std::to_string(m.end() - 1));
}

// ---------------------------------------------------------------------------------------------
// the forwarder

std::optional<broker::RecordName> BrokerHop::LastPublished() {
  // The records subject's last message the broker still holds, read as the product's forwarder
  // reads it: its last record (core ParsePublishedSpan).
  for (auto it = stream_.rbegin(); it != stream_.rend(); ++it) {
    if (it->refill || it->lost) continue;
    auto span = broker::ParsePublishedSpan(it->id, it->format_header, it->count_header);
    if (!span.ok()) {
      harness_failed_ = true;
      hooks_.harness_error("the stream's last message is unreadable: " + span.error().message);
      return std::nullopt;
    }
    return span->last();
  }
  return std::nullopt;
}

bool BrokerHop::ForwarderStart() {
  auto exists = source_.Exists(source_dir_);
  if (!exists.ok() || !*exists) return false;
  auto reader = log::LogReader::Open(source_, source_dir_);
  if (!reader.ok()) {
    hooks_.harness_error("forwarder: reader open: " + reader.error().message);
    return false;
  }
  // The remote applier holds the log until it reports past it (retention); the defect leaves
  // only the forwarder's own progress holding it.
  if (!hooks_.defect("forward_retention_by_forwarder")) {
    Status registered = log::RegisterConsumer(source_, source_dir_, broker::RemoteConsumerName(kRemoteApplier));
    if (!registered.ok()) {
      hooks_.harness_error("forwarder: register remote applier: " + registered.error().message);
      return false;
    }
  }
  const uint64_t first = (*reader)->next_offset();
  uint64_t end = first;
  for (;;) {
    auto next = (*reader)->Next();
    if (!next.ok()) {
      hooks_.harness_error("forwarder: scanning the log: " + next.error().message);
      return false;
    }
    if (!next->has_value()) break;
    end = (**next).offset + 1;
  }
  std::optional<broker::RecordName> last = LastPublished();
  if (!last && harness_failed_) return false;
  auto start = broker::DecideForwardStart(last, flow_, identity_, first, end, "SIM");
  if (!start.ok()) {
    hooks_.violate("no_acknowledged_transaction_lost", "the forwarder refuses to start: " + start.error().message);
    return false;
  }
  Status seek = (*reader)->Seek(*start);
  if (!seek.ok()) {
    hooks_.harness_error("forwarder: seek to " + std::to_string(*start) + ": " + seek.error().message);
    return false;
  }
  forward_reader_ = std::move(*reader);
  forward_next_ = acked_end_ = *start;
  // Each forwarder process packs with its own limit (a restart may cut the same records otherwise:
  // the broker's window then drops a message by its first offset whatever it held); now and then
  // it plays an older version, publishing one record per message.
  single_record_messages_ = random_() % 6 == 0;
  pack_records_max_ = 1 + random_() % 6;
  expect_last_ = true;
  auto offsets = log::ReadConsumerOffsets(source_, source_dir_);
  if (offsets.ok()) {
    auto it = offsets->find(kForwarderConsumer);
    forwarder_progress_ = it == offsets->end() ? 0 : it->second;
  }
  forwarder_running_ = true;
  hooks_.trace("forwarder starts after the stream's last record: publishing from " + Name(*start) + " (log holds " +
               std::to_string(first) + ".." + std::to_string(end) + ")");
  return true;
}

void BrokerHop::ForwarderCrash(const std::string& why) {
  if (!forwarder_running_) return;
  hooks_.trace("forwarder process crash (" + why + ")");
  forwarder_running_ = false;
  forward_reader_.reset();
  refill_queue_.clear();
}

void BrokerHop::ForwarderStep(bool log_ready) {
  if (!forwarder_running_) {
    if (log_ready) ForwarderStart();
    return;
  }
  if (log_ready) {
    // Retention of the source log (the relay's job in the product, placed here): never a segment
    // a registered consumer — the forwarder, the remote applier — still needs.
    auto kept = log::ApplyRetention(source_, source_dir_, UINT64_MAX, &CompletesTransaction);
    if (!kept.ok()) return hooks_.harness_error("retention: " + kept.error().message);
  }
  // A refill first: the hole blocks the remote applier.
  if (!refill_queue_.empty()) {
    Refill& job = refill_queue_.front();
    auto reader = log::LogReader::Open(source_, source_dir_);
    if (!reader.ok() || !(*reader)->Seek(job.first).ok()) {
      hooks_.trace("forwarder cannot re-read " + Name(job.first) + " to refill it (reclaimed); the refill is dropped");
      refill_queue_.pop_front();
      return;
    }
    std::vector<log::LogRecord> batch;
    for (uint64_t o = job.first; o < job.end && batch.size() < 8; ++o) {
      auto next = (*reader)->Next();
      if (!next.ok() || !next->has_value()) break;
      batch.push_back(std::move(**next));
    }
    const Publish result = PublishBatch(batch, job.refill);
    if (result == Publish::Acked) {
      job.first += batch.size();
      hooks_.trace("forwarder refilled " + std::to_string(batch.size()) + " record(s) from " +
                   Name(batch.empty() ? job.first : batch.front().offset));
      if (job.first >= job.end || batch.empty()) refill_queue_.pop_front();
    }
    if (hooks_.fire("forwarder.crash_during_refill")) ForwarderCrash("during a refill");
    return;
  }
  std::vector<log::LogRecord> batch;
  const size_t want = 1 + random_() % 8;
  while (batch.size() < want) {
    auto next = forward_reader_->Next();
    if (!next.ok()) return hooks_.harness_error("forwarder read: " + next.error().message);
    if (!next->has_value()) break;
    batch.push_back(std::move(**next));
  }
  if (batch.empty()) {
    // Nothing to publish: the forwarder checks the stream's tail (a lost tail shows no hole).
    std::optional<uint64_t> highest;
    for (const auto& m : stream_)
      if (!m.lost) highest = std::max(highest.value_or(0), m.end() - 1);
    auto reader = log::LogReader::Open(source_, source_dir_);
    if (!reader.ok()) return hooks_.harness_error("forwarder: reader open: " + reader.error().message);
    if (auto first = broker::DecideTailRepublish(highest, acked_end_, (*reader)->next_offset())) {
      hooks_.trace("forwarder: the stream's tail ends before " + Name(acked_end_ - 1) + "; republishing from " +
                   Name(*first));
      refill_queue_.push_back(Refill{*first, acked_end_, ++refill_seq_});
    }
    return;
  }
  for (const auto& r : batch) truth_[r.offset] = r;
  const uint64_t end = batch.back().offset + 1;
  auto record_progress = [this](uint64_t offset) {
    Status s = log::WriteConsumerOffset(source_, source_dir_, kForwarderConsumer, offset);
    if (!s.ok()) return hooks_.harness_error("forwarder progress: " + s.error().message);
    forwarder_progress_ = offset;
  };
  // Defect: progress recorded before the broker's acknowledgement.
  if (hooks_.defect("forward_progress_before_ack")) record_progress(end);
  // The first publish of a process's life expects the stream's last record to be the one before.
  const std::optional<broker::RecordName> last = LastPublished();
  if (harness_failed_) return;
  if (expect_last_ && last && last->offset + 1 != batch.front().offset) {
    hooks_.trace("the broker refuses the forwarder's publish: the stream's last record is " + Name(last->offset) +
                 ", not " + Name(batch.front().offset - 1) + "; the forwarder resynchronizes");
    return ForwarderCrash("resync after an unexpected last record");
  }
  expect_last_ = false;
  switch (PublishBatch(batch, std::nullopt)) {
    case Publish::Refused:
      hooks_.trace("the broker refuses " + std::to_string(batch.size()) + " record(s) (no quorum); retried");
      if (!forward_reader_->Seek(forward_next_).ok()) ForwarderCrash("cannot re-read after a refused publish");
      return;
    case Publish::AckLost:
      return ForwarderCrash("no acknowledgement for a stored batch: resumes after the stream's last record");
    case Publish::Acked:
      break;
  }
  forward_next_ = acked_end_ = end;
  hooks_.trace("forwarder published " + Name(batch.front().offset) + ".." + std::to_string(end - 1) +
               ", acknowledged");
  if (hooks_.fire("forwarder.crash_after_ack_before_progress")) return ForwarderCrash("acknowledged, progress not written");
  record_progress(end);
}

// ---------------------------------------------------------------------------------------------
// the receiver

bool BrokerHop::ReceiverStart() {
  (void)replica_.MakeDirectory("/remote");
  log::WriterOptions options;
  options.segment_bytes_max = 4096 + random_() % 4096;
  log::RecoveryReport report;
  auto writer = log::LogWriter::Open(replica_, kReplicaDir, options, &report);
  if (!writer.ok()) {
    hooks_.violate("no_acknowledged_transaction_lost", "the remote applier cannot open its replica: " + writer.error().message);
    blocked_ = true;
    return false;
  }
  replica_writer_ = std::move(*writer);
  read_sequence_ = hint_sequence_;
  hole_watch_ = broker::HoleWatch{};
  seen_end_ = 0;
  receiver_running_ = true;
  hooks_.trace("receiver opens the replica at " + Name(replica_writer_->next_offset()) + ", reads the stream from sequence " +
               std::to_string(read_sequence_) + " (" + std::to_string(report.torn_tail_bytes) + " torn bytes truncated)");
  return true;
}

void BrokerHop::ReceiverCrash() {
  receiver_running_ = false;
  replica_writer_.reset();
}

void BrokerHop::RemotePowerLoss() {
  hooks_.trace("POWER LOSS on the remote applier's host: unsynced replica writes are lost or torn");
  replica_writer_.reset();
  replica_.PowerLoss();
  receiver_running_ = false;
}

std::optional<bool> BrokerHop::HeldSame(const log::LogRecord& r) {
  auto reader = log::LogReader::Open(replica_, kReplicaDir);
  if (!reader.ok() || !(*reader)->Seek(r.offset).ok()) return std::nullopt;
  auto held = (*reader)->Next();
  if (!held.ok() || !held->has_value() || (**held).offset != r.offset) return std::nullopt;
  return (**held).type == r.type && (**held).commit_lsn == r.commit_lsn && (**held).payload == r.payload;
}

void BrokerHop::AskRefill(const broker::RefillRequest& request) {
  refills_++;
  if (!forwarder_running_) {
    hooks_.trace("refill from " + Name(request.from) + " asked; no forwarder answers (asked again later)");
    return;
  }
  auto reader = log::LogReader::Open(source_, source_dir_);
  if (!reader.ok()) return hooks_.harness_error("refill: reader open: " + reader.error().message);
  const broker::RefillAnswer answer = broker::DecideRefill(request, identity_, (*reader)->next_offset(), acked_end_);
  hooks_.trace("refill from " + Name(request.from) + " asked; the forwarder answers \"" +
               broker::EncodeRefillAnswer(answer) + "\"");
  switch (answer.kind) {
    case broker::RefillAnswer::Kind::Ok:
      if (answer.first < answer.end) refill_queue_.push_back(Refill{answer.first, answer.end, ++refill_seq_});
      return;
    case broker::RefillAnswer::Kind::Gone:
      blocked_ = true;
      return hooks_.violate("no_acknowledged_transaction_lost",
                            "offsets from " + std::to_string(request.from) + " are lost: the stream lost them and the "
                            "source log reclaimed them (first retained " + std::to_string(answer.first) + ")");
    case broker::RefillAnswer::Kind::OtherLog:
      return hooks_.harness_error("refill answered other-log " + answer.detail);
  }
}

void BrokerHop::Deliver(const Message& m, int64_t now_ms, bool& appended) {
  // What the message holds, read as the product's receiver reads it (core pack.h).
  auto span = broker::ParseDeliveredSpan(m.id, m.offset_header, m.format_header, m.count_header);
  if (!span.ok()) return hooks_.harness_error("the stream delivered an unreadable message: " + span.error().message);
  std::vector<log::LogRecord> records;
  if (span->packed) {
    auto decoded = broker::DecodePackMessage(span->format, span->first.offset, span->count, m.body);
    if (!decoded.ok()) return hooks_.harness_error("the stream delivered a torn message: " + decoded.error().message);
    records = std::move(*decoded);
  } else {
    records.push_back(log::LogRecord{span->first.offset, m.commit_lsn, m.type, m.body});
  }
  seen_end_ = std::max(seen_end_, span->end());
  // The part below the replica's next offset is compared with what is durable; the rest is
  // appended in order or is a hole (core SplitDelivery, DecideArrival per record).
  if (broker::SplitDelivery(span->first.offset, span->count, replica_writer_->next_offset()).held_end >
      span->first.offset) {
    auto durable = replica_writer_->Flush();
    if (!durable.ok()) return hooks_.harness_error("replica flush: " + durable.error().message);
  }
  for (const log::LogRecord& r : records) {
    const broker::RecordName name{span->first.flow, span->first.log_identity, r.offset};
    const uint64_t want = replica_writer_->next_offset();
    std::optional<bool> held;
    if (r.offset < want) held = HeldSame(r);
    broker::Arrival arrival = broker::DecideArrival(name, flow_, identity_, want, held);
    if (arrival == broker::Arrival::Hole && hooks_.defect("apply_hole_check_skipped")) arrival = broker::Arrival::Next;
    switch (arrival) {
      case broker::Arrival::Next: {
        auto offset = replica_writer_->Append(r.type, r.commit_lsn, std::span<const uint8_t>(r.payload));
        if (!offset.ok()) return hooks_.harness_error("replica append: " + offset.error().message);
        appended = true;
        if (hole_watch_.Appended(*offset)) hooks_.trace("receiver: the hole at " + Name(*offset) + " is refilled");
        break;
      }
      case broker::Arrival::Duplicate:
      case broker::Arrival::UncheckedDuplicate:
        duplicates_++;
        break;
      case broker::Arrival::ConflictingDuplicate:
        blocked_ = true;
        return hooks_.violate("replica_matches_log", "the stream delivered " + Name(r.offset) +
                                                         " with other content than the replica holds");
      case broker::Arrival::Hole:
        // Asked once for the message; the rest of it is passed over until the refill brings it.
        if (auto request = hole_watch_.Seen(identity_, want, span->last_offset(), now_ms)) {
          holes_seen_++;
          hooks_.trace("receiver: hole at " + Name(want) + " (a message of " + Name(span->first.offset) + ".." +
                       std::to_string(span->last_offset()) + " arrived)");
          AskRefill(*request);
        }
        break;
      case broker::Arrival::OtherLog:
        return hooks_.harness_error("the stream delivered a record of another log");
    }
  }
}

void BrokerHop::ReceiverPump(int64_t now_ms) {
  if (!receiver_running_ || blocked_) return;
  std::vector<const Message*> batch;
  const size_t want = 1 + random_() % 4;
  while (batch.size() < want && read_sequence_ <= stream_.size()) {
    const Message& m = stream_[read_sequence_ - 1];
    read_sequence_++;
    if (!m.lost) batch.push_back(&m);
  }
  if (!batch.empty() && hooks_.fire("broker.duplicate_delivery")) {
    const size_t i = random_() % batch.size();
    batch.insert(batch.begin() + static_cast<std::ptrdiff_t>(i) + 1, batch[i]);
  }
  if (batch.size() >= 2 && hooks_.fire("broker.reorder_delivery")) {
    const size_t i = random_() % (batch.size() - 1);
    std::swap(batch[i], batch[i + 1]);
  }
  bool appended = false;
  for (const Message* m : batch) {
    Deliver(*m, now_ms, appended);
    if (blocked_) return;
  }
  if (appended) {
    if (hooks_.fire("receiver.power_loss_after_append")) {
      RemotePowerLoss();
      return hooks_.applier_dies("its host lost power");
    }
    auto durable = replica_writer_->Flush();
    if (!durable.ok()) return hooks_.harness_error("replica flush: " + durable.error().message);
    if (hooks_.fire("receiver.crash_after_append")) {
      ReceiverCrash();
      return hooks_.applier_dies("after appending to its replica");
    }
  }
  // Where reading resumes after a restart: not while a hole is open (what was passed over must
  // be seen again).
  if (!hole_watch_.missing_from()) hint_sequence_ = read_sequence_;
  if (auto again = hole_watch_.Due(identity_, now_ms)) AskRefill(*again);
  if (position_ && now_ms - position_sent_ms_ >= kPositionResendMs) ReportPosition(*position_, now_ms);
}

void BrokerHop::ReportPosition(uint64_t next_offset, int64_t now_ms) {
  position_ = next_offset;
  position_sent_ms_ = now_ms;
  if (forwarder_running_ && !hooks_.defect("forward_retention_by_forwarder")) {
    Status s = log::WriteConsumerOffset(source_, source_dir_, broker::RemoteConsumerName(kRemoteApplier), next_offset);
    if (!s.ok()) return hooks_.harness_error("forwarder: remote position: " + s.error().message);
  }
  if (replica_writer_) {
    auto reclaimed = replica_writer_->ReclaimSegments();
    if (!reclaimed.ok()) hooks_.harness_error("replica retention: " + reclaimed.error().message);
  }
}

bool BrokerHop::Drained(uint64_t log_end) const {
  return receiver_running_ && !blocked_ && !hole_watch_.missing_from() && replica_writer_ &&
         replica_writer_->durable_end() >= log_end && forwarder_running_ && forward_next_ >= log_end;
}

bool BrokerHop::Stored(uint64_t offset) const {
  for (const auto& m : stream_)
    if (m.first <= offset && offset < m.end()) return true;
  return false;
}

void BrokerHop::CheckReplica() {
  auto exists = replica_.Exists(kReplicaDir);
  if (!exists.ok() || !*exists) return;
  auto reader = log::LogReader::Open(replica_, kReplicaDir);
  if (!reader.ok()) return;
  for (;;) {
    auto next = (*reader)->Next();
    if (!next.ok() || !next->has_value()) return;
    const log::LogRecord& r = **next;
    auto t = truth_.find(r.offset);
    if (t == truth_.end()) {
      hooks_.violate("replica_matches_log", "the replica holds " + Name(r.offset) + ", which the forwarder never read");
      return;
    }
    if (t->second.type != r.type || t->second.commit_lsn != r.commit_lsn || t->second.payload != r.payload) {
      hooks_.violate("replica_matches_log", "the replica holds another record at " + Name(r.offset) +
                                                " than the source log (commit " + FormatLsn(r.commit_lsn) + " against " +
                                                FormatLsn(t->second.commit_lsn) + ")");
      return;
    }
  }
}

}  // namespace trellara::sim
