// stream_receiver.cpp — the remote applier's replica of the flow's log, fed from the stream
// (stream_receiver.h, docs/broker.md "Remote apply").
#include "broker/stream_receiver.h"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <thread>

#include "broker/broker_state.h"
#include "pg/source_timelines.h"
#include "kit/errors.h"
#include "trellara/base/cadence.h"
#include "trellara/base/fault.h"
#include "trellara/broker/broker.h"
#include "trellara/broker/pack.h"
#include "trellara/broker/replica_intake.h"
#include "trellara/log/atomic_file.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/record/envelope.h"

namespace trellara::cli {
namespace apply {
bool StopRequested();  // engine/applier.cpp
}
namespace broker {
namespace {

using Clock = std::chrono::steady_clock;
namespace core = trellara::broker;

// The replica's own facts, beside the consumer files (a leading '.' keeps them out of the
// consumer names): which log it holds, and where reading the stream resumes (a hint only).
constexpr const char* kIdentityFile = "consumers/.stream.identity";
constexpr const char* kIdentityTmpFile = "consumers/.stream.identity.tmp";
constexpr const char* kPositionHintFile = "consumers/.stream.position";
// The source timeline of the log the replica holds, as the relay writes it beside its own log
// (TIMELINE), so the applier's promotion check reads both the same way (pg/source_timelines.h).
constexpr const char* kTimelineFile = "TIMELINE";
constexpr const char* kTimelineTmpFile = "TIMELINE.tmp";
// One Pump reads at most this much before it makes what it appended durable.
constexpr size_t kPumpRecordsMax = 4096;
constexpr size_t kPumpBytesMax = 8u << 20;
constexpr auto kPumpTimeMax = std::chrono::milliseconds(100);
constexpr int64_t kAskTimeoutMs = 2000;
// Nothing delivered for this long: the stream's leader is asked (Probe).
constexpr auto kProbeAfterIdle = std::chrono::milliseconds(500);
// The durable position is sent again this often, so a forwarder that restarted learns it.
constexpr auto kPositionResend = std::chrono::seconds(5);

std::optional<std::string> ReadSmallFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string text;
  std::getline(in, text);
  return text;
}

}  // namespace

StreamReceiver::StreamReceiver(const FlowConfig& config, log::LogDevice& device) : config_(config), device_(device) {}
// What this process received, once, at its end (success, stop or failure alike).
StreamReceiver::~StreamReceiver() {
  if (thread_.joinable()) {
    stop_ = true;
    thread_.join();
    // The applier's last position (its final offset write) may have come after the thread's last
    // turn: sent here, so the source's log is not kept for it until the next run.
    std::optional<uint64_t> last;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last.swap(position_to_send_);
    }
    if (last && writer_) SendPosition(*last);
  }
  const ReceiverCounters& c = counters_;
  Event("stream_summary", "expected_offset=" + std::to_string(expected()) + " appended=" + std::to_string(c.appended) +
                              " duplicates=" + std::to_string(c.duplicates) +
                              " unchecked_duplicates=" + std::to_string(c.unchecked_duplicates) +
                              " holes=" + std::to_string(c.holes) + " passed_over=" + std::to_string(c.passed_over) +
                              " refills_asked=" + std::to_string(c.refills_asked) +
                              " read_restarts=" + std::to_string(c.read_restarts));
}

void StreamReceiver::Event(const std::string& event, const std::string& fields) {
  // One write per line: the applier's thread writes its own lines meanwhile.
  std::string line = "apply flow=";
  line.append(config_.flow_name).append(" event=").append(event).append(" stream=");
  line.append(config_.transport.stream).append(" ").append(fields).append("\n");
  std::cerr << line << std::flush;
}

bool StreamReceiver::Stopping() const { return stop_ || apply::StopRequested(); }

void StreamReceiver::StartThread() {
  if (thread_.joinable()) return;
  own_thread_ = true;  // before the thread starts: it reads this (thread_ is assigned after it starts)
  thread_ = std::thread([this] { ThreadMain(); });
}

void StreamReceiver::ThreadMain() {
  // Reads a little at a time, so a stop and the applier's positions are seen promptly.
  constexpr auto kThreadPumpWait = std::chrono::milliseconds(50);
  try {
    for (;;) {
      std::optional<uint64_t> position;
      if (Stopping()) break;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        position.swap(position_to_send_);
      }
      if (position) SendPosition(*position);
      std::optional<ConflictingDelivery> conflict;
      const size_t appended = Pump(kThreadPumpWait, conflict);
      const bool conflicted = conflict.has_value();  // conflict_ is the applier's once handed over
      {
        std::lock_guard<std::mutex> lock(mutex_);
        appended_since_wait_ += appended;
        if (conflicted) conflict_ = std::move(conflict);
      }
      if (appended > 0 || conflicted) changed_.notify_all();
      if (conflicted) break;  // the applier quarantines it and stops
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    failure_ = std::current_exception();
  }
  changed_.notify_all();
}

bool StreamReceiver::WaitForRecords(std::chrono::milliseconds wait, std::optional<ConflictingDelivery>& conflict) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, wait, [&] { return appended_since_wait_ > 0 || conflict_ || failure_; });
  if (failure_) {
    std::exception_ptr failure = failure_;
    failure_ = nullptr;
    std::rethrow_exception(failure);
  }
  if (conflict_) {
    conflict = std::move(conflict_);
    conflict_.reset();
  }
  const bool appended = appended_since_wait_ > 0;
  appended_since_wait_ = 0;
  return appended;
}

void StreamReceiver::Unavailable(const std::string& error) {
  std::string quoted = error;
  for (auto& c : quoted)
    if (c == '"' || c == '\n') c = '\'';
  if (!unavailable_)
    WriteBrokerState(config_.log_directory, kReceiverStateFile, "trellara apply", "broker_quorum_unavailable", quoted);
  if (!unavailable_ || Clock::now() - unavailable_since_ >= std::chrono::seconds(10)) {
    Event("retry", "state=broker_quorum_unavailable expected_offset=" + std::to_string(expected()) + " error=\"" +
                       quoted + "\"");
    unavailable_since_ = Clock::now();
  }
  unavailable_ = true;
  retry_wait_ = cadence::kBrokerRetry.After(retry_wait_.count() ? retry_wait_ : cadence::kBrokerRetry.min, false);
}

void StreamReceiver::Resumed() {
  Event("resumed", "state=running expected_offset=" + std::to_string(expected()));
  WriteBrokerState(config_.log_directory, kReceiverStateFile, "trellara apply", "running", "");
  unavailable_ = false;
  retry_wait_ = std::chrono::milliseconds(0);
}

void StreamReceiver::TakeTimeline(const NatsStream::Delivered& d) {
  // Negative control (tests only, TRELLARA_FAULTS=defect.receive_timeline_ignored:1:defect): the
  // replica never records the source's timeline, so the applier cannot check the target against it.
  if (fault::Hit("defect.receive_timeline_ignored") == fault::Action::Defect) return;
  const core::ReplicaTimelineDecision decision = core::DecideReplicaTimeline(timeline_, d.timeline_header);
  switch (decision.kind) {
    case core::ReplicaTimelineDecision::Kind::Keep:
      return;
    case core::ReplicaTimelineDecision::Kind::Write: {
      // Before any record of the message is appended: the applier sees the TIMELINE no later than
      // the first record that came with it, and checks the target against it before applying.
      Status kept = log::WriteFileAtomically(device_, config_.log_directory, kTimelineFile, kTimelineTmpFile,
                                             FormatLogTimeline(decision.timeline));
      if (!kept.ok())
        throw CommandFailed("cannot record the source timeline of the log the replica at " + config_.log_directory +
                            " holds: " + kept.error().message);
      timeline_ = decision.timeline;
      has_timeline_ = true;
      Event("timeline", "source_timeline=\"" + core::TimelineHeaderValue(decision.timeline) + "\"");
      return;
    }
    case core::ReplicaTimelineDecision::Kind::Refuse:
      break;
  }
  throw CommandFailed("stream " + config_.transport.stream + " message " + std::to_string(d.sequence) + " on " +
                          d.subject + " is refused: " + decision.reason + "; nothing of it was appended to the "
                          "replica at " + config_.log_directory + ". Give each log its own stream and start the remote "
                          "applier on a new replica directory",
                      kExitFlowBlocked);
}

bool StreamReceiver::Open() {
  const std::string& dir = config_.log_directory;
  log::RecoveryReport report;
  auto writer = log::LogWriter::Open(device_, dir, log::WriterOptions{}, &report);
  if (!writer)
    throw CommandFailed("cannot open the replica of flow " + config_.flow_name + "'s log at " + dir +
                            " (flow.log_directory; with [transport] kind = \"nats\" it is this host's copy of the log, "
                            "written by trellara apply): " + writer.error().message,
                        kExitCouldNotRun);
  writer_ = std::move(writer.value());
  expected_ = writer_->next_offset();
  if (auto identity = ReadSmallFile(dir + "/" + kIdentityFile)) identity_ = *identity;
  if (identity_.empty() && writer_->next_offset() > 0)
    throw CommandFailed("the replica at " + dir + " holds records up to offset " + std::to_string(writer_->next_offset()) +
                            " but not which log they are (" + kIdentityFile + " is missing): it was not written by "
                            "trellara apply; move it away and start again (the stream is read from its start)",
                        kExitCouldNotRun);
  auto timeline = ReadLogTimelineFile(dir);
  if (!timeline) throw CommandFailed("the replica at " + dir + ": " + timeline.error().message, kExitCouldNotRun);
  timeline_ = *timeline;
  has_timeline_ = timeline_.has_value();
  if (auto hint = ReadSmallFile(dir + "/" + kPositionHintFile)) {
    try {
      next_sequence_ = std::max<uint64_t>(1, std::stoull(*hint));
    } catch (const std::exception&) {
      next_sequence_ = 1;  // only a hint: reading from the start finds everything again
    }
  }
  return Connect();
}

bool StreamReceiver::Connect() {
  StreamSettings settings;
  settings.servers = config_.transport.servers;
  settings.stream = config_.transport.stream;
  settings.subject = core::FlowSubject(config_.flow_name);
  settings.stream_subjects = core::StreamSubjects(config_.flow_name);
  settings.credentials = config_.transport.credentials;
  while (!Stopping()) {
    bool misconfigured = false;
    auto stream = NatsStream::Open(settings, &misconfigured);
    if (misconfigured)
      throw CommandFailed("the remote applier of flow " + config_.flow_name + ": " + stream.error().message +
                              " ([transport] in " + config_.path + ")",
                          kExitConfig);
    if (stream) {
      stream_ = std::move(stream.value());
      reading_ = false;
      if (unavailable_ || !said_running_) {
        WriteBrokerState(config_.log_directory, kReceiverStateFile, "trellara apply", "running", "");
        said_running_ = true;
      }
      unavailable_ = false;
      return true;
    }
    Unavailable(stream.error().message);
    for (const auto until = Clock::now() + retry_wait_; Clock::now() < until && !Stopping();)
      std::this_thread::sleep_for(cadence::kApplierStopCheck);
  }
  return false;
}

bool StreamReceiver::StartReading() {
  Status started = stream_->StartReading(next_sequence_);
  if (!started.ok()) {
    Unavailable(started.error().message);
    return false;
  }
  reading_ = true;
  // The idle probe counts quiet time from here: a consumer just created has not had 500 ms to
  // deliver yet (from the epoch, the first quiet read of a new reader restarted it at once).
  last_delivery_ = Clock::now();
  return true;
}

void StreamReceiver::WriteHint() {
  if (holes_.missing_from()) return;  // a restart must see again what was passed over waiting for the refill
  const std::string path = config_.log_directory + "/" + kPositionHintFile;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << next_sequence_ << "\n";
    if (!out) return;  // a hint: reading from an older sequence only meets duplicates
  }
  std::rename(tmp.c_str(), path.c_str());
}

std::optional<bool> StreamReceiver::HeldSame(const log::LogRecord& delivered) {
  const uint64_t offset = delivered.offset;
  if (!compare_) {
    auto reader = log::LogReader::Open(device_, config_.log_directory);
    if (!reader) return std::nullopt;
    compare_ = std::move(reader.value());
  }
  if (!compare_->Seek(offset).ok()) return std::nullopt;  // reclaimed
  auto record = compare_->Next();
  if (!record || !*record || (*record)->offset != offset) return std::nullopt;
  const log::LogRecord& held = **record;
  return held.type == delivered.type && held.commit_lsn == delivered.commit_lsn && held.payload == delivered.payload;
}

static int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

void StreamReceiver::AskRefill(const core::RefillRequest& request) {
  const uint64_t from = request.from, to = request.to;
  const std::string& identity = request.log_identity;
  counters_.refills_asked++;
  auto answer = stream_->Ask(core::RefillRequestSubject(config_.flow_name), core::EncodeRefillRequest(request),
                             kAskTimeoutMs);
  if (!answer) {
    Event("hole", "state=awaiting_refill missing_from=" + std::to_string(from) + " seen=" + std::to_string(to) +
                      " error=\"no forwarder answered the refill request (" + answer.error().message +
                      "); is trellara forward running for this flow?\"");
    return;
  }
  auto parsed = core::ParseRefillAnswer(*answer);
  if (!parsed)
    throw CommandFailed("the forwarder of flow " + config_.flow_name + " answered a refill request with: " +
                        parsed.error().message);
  switch (parsed->kind) {
    case core::RefillAnswer::Kind::Ok:
      Event("refill_asked", "missing_from=" + std::to_string(from) + " seen=" + std::to_string(to) +
                                " republishing=" + std::to_string(parsed->first) + ".." + std::to_string(parsed->end));
      return;
    case core::RefillAnswer::Kind::Gone:
      throw CommandFailed("offsets " + std::to_string(from) + ".." + std::to_string(parsed->first - 1) + " of flow " +
                              config_.flow_name + " are lost: stream " + config_.transport.stream +
                              " does not hold them and the source's log has reclaimed them (it keeps its log only "
                              "for the remote appliers named in [transport] remote_appliers of the forwarder's "
                              "configuration). Nothing after offset " + std::to_string(from) +
                              " was applied; the target cannot be completed exactly from this stream: re-seed it "
                              "(trellara snapshot) into a new replica",
                          kExitFlowBlocked);
    case core::RefillAnswer::Kind::OtherLog:
      throw CommandFailed("the forwarder of flow " + config_.flow_name + " publishes log " + parsed->detail +
                              ", and this replica (" + config_.log_directory + ") holds log " + identity +
                              ": the flow's log was created again (a promoted server starts a new log); start this "
                              "applier on a new, empty replica directory (flow.log_directory): it reads the new log "
                              "from its start, skips what the target applied and checks the target against the new "
                              "log's timeline (docs/broker.md \"After a promotion\")",
                          kExitFlowBlocked);
  }
}

void StreamReceiver::Probe() {
  last_probe_ = Clock::now();
  auto last = stream_->LastSequence();
  if (!last) {
    Unavailable(last.error().message);
    reading_ = false;  // the consumer may be gone with the nodes: read again once the stream answers
    return;
  }
  if (unavailable_) {
    Resumed();
    reading_ = false;
    return;
  }
  if (*last >= next_sequence_ && reading_) {
    Event("read_restart", "reason=\"the stream holds sequence " + std::to_string(*last) +
                              " and nothing past " + std::to_string(next_sequence_ - 1) + " was delivered\"");
    counters_.read_restarts++;
    reading_ = false;
  }
}

size_t StreamReceiver::Pump(std::chrono::milliseconds wait, std::optional<ConflictingDelivery>& conflict) {
  idle_ = false;
  if (!stream_ && !Connect()) return 0;
  if (!reading_ && !StartReading()) {
    std::this_thread::sleep_for(std::min(wait + retry_wait_, std::chrono::milliseconds(1000)));
    if (Clock::now() - last_probe_ >= kProbeAfterIdle) Probe();
    return 0;
  }
  size_t appended = 0, bytes = 0, delivered_count = 0;
  const auto started = Clock::now();
  bool first = true;
  auto flush = [&] {
    if (appended == 0) return;
    fault::Hit("receive.after_append_before_flush");
    auto durable = writer_->Flush();
    if (!durable)
      throw CommandFailed("cannot make the replica of flow " + config_.flow_name + " at " + config_.log_directory +
                          " durable: " + durable.error().message + "; nothing past offset " +
                          std::to_string(writer_->durable_end()) + " is applied; free the disk and rerun trellara apply");
  };
  while (appended < kPumpRecordsMax && bytes < kPumpBytesMax && Clock::now() - started < kPumpTimeMax) {
    auto read = stream_->Read(first ? std::max<int64_t>(wait.count(), 1) : 1);
    first = false;
    if (!read) {
      reading_ = false;
      counters_.read_restarts++;
      Unavailable(read.error().message);
      break;
    }
    if (!*read) break;
    if (unavailable_) Resumed();
    NatsStream::Delivered& d = **read;
    delivered_count++;
    last_delivery_ = Clock::now();
    next_sequence_ = d.sequence + 1;
    // Which offsets the message holds (core pack.h): a packed message names its first and its
    // count; one without a count is a single record as an older forwarder published it.
    auto span = core::ParseDeliveredSpan(d.message_id, d.offset_header, d.format_header, d.count_header);
    std::vector<log::LogRecord> records;
    if (span && span->packed) {
      auto decoded = core::DecodePackMessage(span->format, span->first.offset, span->count, d.payload);
      if (!decoded)
        throw CommandFailed("stream " + config_.transport.stream + " message " + std::to_string(d.sequence) + " on " +
                                d.subject + ": " + decoded.error().message +
                                "; nothing of it was appended to the replica. A message trellara forward published "
                                "whole was torn or altered in the broker, or something else publishes on the flow's "
                                "subjects: remove the message (nats stream rmm " + config_.transport.stream + " " +
                                std::to_string(d.sequence) + ") and start trellara apply again; the records it named "
                                "are then refilled from the source's log",
                            kExitFlowBlocked);
      records = std::move(*decoded);
    } else if (span) {
      const auto lsn = ParseLsn(d.commit_lsn);
      if (d.offset && d.type && lsn)
        records.push_back(log::LogRecord{span->first.offset, *lsn, *d.type, std::move(d.payload)});
    }
    if (!span || records.empty())
      throw CommandFailed("stream " + config_.transport.stream + " message " + std::to_string(d.sequence) + " on " +
                          d.subject + " is not a record of a trellara log (id \"" + d.message_id + "\"" +
                          (span ? std::string() : ": " + span.error().message) +
                          "): something other than trellara forward publishes on the flow's subjects");
    max_offset_seen_ = std::max(max_offset_seen_, span->end());
    const core::RecordName& head = span->first;  // the message's first record
    const uint64_t want = writer_->next_offset();
    if (identity_.empty() && head.flow == config_.flow_name && head.offset <= want && want < span->end()) {
      // A new replica takes the identity of the log whose offset it needs first (0: a new replica
      // starts at the log's start; a stream that lost it asks the forwarder like any hole).
      identity_ = head.log_identity;
      Status kept = log::WriteFileAtomically(device_, config_.log_directory, kIdentityFile,
                                             kIdentityTmpFile, identity_ + "\n");
      if (!kept.ok())
        throw CommandFailed("cannot record which log the replica at " + config_.log_directory + " holds: " +
                            kept.error().message);
    }
    if (identity_.empty()) pending_identity_ = head.log_identity;
    if (!identity_.empty() && head.log_identity == identity_ && head.flow == config_.flow_name) TakeTimeline(d);
    const std::string& identity = identity_.empty() ? pending_identity_ : identity_;
    // The part below the replica's next offset is compared record by record with what is durable;
    // the rest is appended in order, or is a hole (core SplitDelivery, DecideArrival per record).
    if (core::SplitDelivery(head.offset, span->count, want).held_end > head.offset) flush();
    bool skipping = false;  // defect.apply_hole_check_skipped fired on this message
    for (log::LogRecord& r : records) {
      const core::RecordName name{head.flow, head.log_identity, r.offset};
      const uint64_t want_now = writer_->next_offset();
      std::optional<bool> held_same;
      if (r.offset < want_now) held_same = HeldSame(r);
      core::Arrival arrival = core::DecideArrival(name, config_.flow_name, identity, want_now, held_same);
      // Negative control (tests only, TRELLARA_FAULTS=defect.apply_hole_check_skipped:1:defect): a
      // message past a hole is taken as the next one, which the deleted-message scenario must catch.
      if (arrival == core::Arrival::Hole &&
          (skipping || fault::Hit("defect.apply_hole_check_skipped") == fault::Action::Defect)) {
        arrival = core::Arrival::Next;
        skipping = true;
      }
      switch (arrival) {
        case core::Arrival::Next: {
          auto offset = writer_->Append(r.type, r.commit_lsn, std::span<const uint8_t>(r.payload.data(), r.payload.size()));
          if (!offset)
            throw CommandFailed("cannot append offset " + std::to_string(r.offset) + " to the replica of flow " +
                                config_.flow_name + " at " + config_.log_directory + ": " + offset.error().message);
          appended++;
          bytes += r.payload.size();
          counters_.appended++;
          expected_ = writer_->next_offset();
          if (skipping) skipped_ahead_ = r.offset + 1 - writer_->next_offset();  // the defect believes it is there
          if (holes_.Appended(*offset))
            Event("refilled", "offset=" + std::to_string(*offset) + " stream_sequence=" + std::to_string(d.sequence));
          break;
        }
        case core::Arrival::Duplicate:
          counters_.duplicates++;
          break;
        case core::Arrival::UncheckedDuplicate:
          counters_.unchecked_duplicates++;
          break;
        case core::Arrival::ConflictingDuplicate:
          flush();
          conflict = ConflictingDelivery{r.offset, d.sequence, std::move(r.payload),
                                         "stream message " + std::to_string(d.sequence) + " on " + d.subject +
                                             " holds offset " + std::to_string(r.offset) +
                                             " with other content than the replica holds (and applied)"};
          WriteHint();
          return appended;
        case core::Arrival::Hole:
          // Asked once for the message (what it holds is seen up to its last offset); the rest of
          // it is passed over until the refill brings it again in order.
          if (auto request = holes_.Seen(identity, want_now, span->last_offset(), NowMs())) {
            counters_.holes++;
            fault::Hit("receive.hole_before_refill_ask");
            Event("hole", "missing_from=" + std::to_string(want_now) + " seen=" + std::to_string(r.offset) +
                              " stream_sequence=" + std::to_string(d.sequence));
            AskRefill(*request);
          } else {
            counters_.passed_over++;
          }
          break;
        case core::Arrival::OtherLog:
          throw CommandFailed("stream " + config_.transport.stream + " message " + std::to_string(d.sequence) +
                                  " holds offset " + std::to_string(r.offset) + " of flow " + name.flow + ", log " +
                                  name.log_identity + "; the replica at " + config_.log_directory + " holds flow " +
                                  config_.flow_name + ", log " + identity +
                                  ": the flow's log was created again (a promoted server starts a new log) or "
                                  "another flow publishes on this stream; give each log its own stream (delete the "
                                  "old one) and start this applier on a new, empty replica directory: it checks the "
                                  "target against the new log's timeline (docs/broker.md \"After a promotion\")",
                              kExitFlowBlocked);
      }
    }
  }
  flush();
  if (appended > 0) fault::Hit("receive.after_flush_before_hint");
  if (appended > 0 || delivered_count > 0) WriteHint();
  // A hole whose refill has not come: asked again (a forwarder that restarted, an answer lost).
  if (auto again = holes_.Due(identity_.empty() ? pending_identity_ : identity_, NowMs())) AskRefill(*again);
  if (position_ && Clock::now() - position_sent_at_ >= kPositionResend) SendPosition(*position_);
  if (delivered_count == 0 && Clock::now() - last_delivery_ >= kProbeAfterIdle &&
      Clock::now() - last_probe_ >= kProbeAfterIdle)
    Probe();
  // Idle: nothing came, no hole waits, the replica holds every offset seen, and the stream holds
  // nothing past what was read (asked of its leader: a refill still being published is not idle).
  // skipped_ahead_ is non-zero only under defect.apply_hole_check_skipped, whose replica holds
  // fewer offsets than it believes (so the defect's run ends, and the check of the target catches it).
  const core::ReplicaReadFacts facts{delivered_count > 0, holes_.missing_from().has_value(), reading_,
                                     expected() + skipped_ahead_, max_offset_seen_};
  idle_ = false;
  // Only `--until-caught-up` asks whether the replica is caught up, and it reads without the
  // thread: the threaded receiver does not ask the stream's leader after every quiet read.
  if (!own_thread_ && core::ReplicaMayBeCaughtUp(facts)) {
    auto last = stream_->LastSequence();
    idle_ = core::ReplicaCaughtUp(facts, last ? std::optional<bool>(*last >= next_sequence_) : std::nullopt);
  }
  return appended;
}

void StreamReceiver::ReportPosition(uint64_t next_offset) {
  if (thread_.joinable()) {
    std::lock_guard<std::mutex> lock(mutex_);
    position_to_send_ = next_offset;  // the thread sends it (the broker connection and the writer are its own)
    return;
  }
  SendPosition(next_offset);
}

void StreamReceiver::SendPosition(uint64_t next_offset) {
  position_ = next_offset;
  position_sent_at_ = Clock::now();
  if (stream_ && !identity_.empty()) {
    // What this host holds durably downstream is the least offset any consumer of the replica
    // still needs: the applier's and, for a partitioned flow, each partition applier's checkpoint
    // (they read this replica too, docs/partitioned.md "Through a broker"). The source keeps its
    // log from there, so a replica lost with this host can be refilled for every one of them.
    uint64_t durable = next_offset;
    auto consumers = log::ReadConsumerOffsets(device_, config_.log_directory);
    if (!consumers) {
      Event("warning", "reason=\"position not sent: cannot read the replica's consumers in " + config_.log_directory +
                           ": " + consumers.error().message + "; the source keeps its log until it is sent\"");
    } else {
      // Negative control (tests only, TRELLARA_FAULTS=defect.receive_position_ignores_partitions:1:defect):
      // the applier's own offset is sent, which lets the source go past a partition applier's checkpoint.
      if (fault::Hit("defect.receive_position_ignores_partitions") != fault::Action::Defect)
        for (const auto& [name, offset] : *consumers) durable = std::min(durable, offset);
      fault::Hit("receive.before_position_sent");
      Status sent = stream_->Send(core::PositionSubject(config_.flow_name),
                                  core::EncodePosition({config_.transport.applier, identity_, durable}));
      if (!sent.ok()) Unavailable(sent.error().message);  // sent again later; the source keeps its log meanwhile
    }
  }
  auto reclaimed = writer_->ReclaimSegments();
  if (!reclaimed)
    Event("warning", "reason=\"cannot delete the replica's segments below offset " + std::to_string(next_offset) +
                         ": " + reclaimed.error().message + "\"");
}

}  // namespace broker
}  // namespace trellara::cli
