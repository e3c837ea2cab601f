// pull_credit.cpp — a pull consumer's outstanding credit and what its statuses mean (pull_credit.h).
#include "trellara/broker/pull_credit.h"

#include <algorithm>

namespace trellara::broker {

PullStatusMeaning InterpretPullStatus(const PullStatus& status, int64_t batch, int64_t max_bytes) {
  using Kind = PullStatusMeaning::Kind;
  const auto has = [&](const char* words) { return status.description.find(words) != std::string::npos; };
  const auto ended = [](std::optional<int64_t> pending) { return PullStatusMeaning{Kind::Ended, pending, {}}; };
  const auto fatal = [&](std::string why) {
    return PullStatusMeaning{Kind::Fatal, std::nullopt,
                             "answered " + status.code + (status.description.empty() ? "" : " " + status.description) +
                                 (why.empty() ? "" : ": " + why)};
  };
  if (status.code == "100") return {};  // an idle heartbeat or flow control: nothing ended
  // No messages now, the request expired or its interest went away. Refused outright ("No
  // Messages", "Requests Pending": no count) means nothing of it was delivered.
  if (status.code == "404" || status.code == "408") return ended(status.pending_messages.value_or(batch));
  if (status.code == "409") {
    if (has("Message Size Exceeds MaxBytes")) {
      // The next message does not fit in what is left of the request's byte budget. With the whole
      // budget left, that message alone is larger than any request may carry: asking again loops.
      if (status.pending_bytes && *status.pending_bytes >= max_bytes)
        return fatal("the next message is larger than a pull request's whole byte budget of " +
                     std::to_string(max_bytes) + " bytes; raise it (applier/broker/nats_stream.cpp kPullMaxBytes) "
                     "or lower the forwarder's message size");
      return ended(status.pending_messages);
    }
    if (has("Batch Completed")) return ended(status.pending_messages.value_or(0));  // all delivered
    if (has("Exceeded MaxWaiting")) return ended(batch);  // never queued: nothing delivered
    if (has("Leadership Change")) return {Kind::AllEnded, std::nullopt, {}};
    // Consumer Deleted, a limit of the consumer's configuration: this consumer cannot be read on.
    return fatal("");
  }
  return fatal("");
}

void PullCredit::Asked(uint64_t id) {
  last_id_ = std::max(last_id_, id);
  credit_ += batch_;
}

void PullCredit::Delivered() {
  if (credit_ > 0) credit_--;  // zero only after Forget: a voided request's late message
}

bool PullCredit::Ended(uint64_t id, std::optional<int64_t> pending) {
  if (id == 0 || id > last_id_ || id <= void_through_) return false;
  const int64_t gone = pending ? std::clamp<int64_t>(*pending, 0, batch_) : batch_;
  credit_ -= std::min(gone, credit_);
  return true;
}

void PullCredit::Forget() {
  void_through_ = last_id_;
  credit_ = 0;
}

}  // namespace trellara::broker
