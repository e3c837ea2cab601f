// forward_remote.cpp — the forwarder's side of remote appliers (forward_internal.h): registering them
// as consumers of the log (retention), recording their positions, answering refill requests (core
// DecideRefill), republishing a tail the broker lost (core DecideTailRepublish). Never answers for
// another log, and never republishes what the local log no longer holds.
#include "commands/forward_internal.h"

#include "trellara/broker/pack.h"

namespace trellara::cli::forward {

void Forwarder::RegisterRemoteAppliers() {
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

bool Forwarder::Answer(std::chrono::milliseconds wait) {
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

void Forwarder::RecordPosition(const std::string& text) {
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

void Forwarder::Refill(const broker::NatsStream::Heard& heard) {
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

void Forwarder::CheckTail() {
  last_tail_check_ = Clock::now();
  std::optional<uint64_t> highest;
  for (const std::string& subject : {std::string(), trellara::broker::RefillSubject(config_.flow_name)}) {
    auto last = stream_->LastRecord(subject);
    if (!last) return;
    if (!last.value()) continue;
    auto span = trellara::broker::ParseDeliveredSpan(last.value()->message_id, std::nullopt,
                                                     last.value()->format_header, last.value()->count_header);
    if (!span || span->first.flow != config_.flow_name || span->first.log_identity != identity_) continue;
    highest = std::max(highest.value_or(0), span->last_offset());
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

void Forwarder::Republish(log::LogReader& reader, uint64_t first, uint64_t end) {
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
    if (!SendUntilAcknowledged(batch, refill)) return;  // counts refilled_records as acknowledged
  }
}

}  // namespace trellara::cli::forward
