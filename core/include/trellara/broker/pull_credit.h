// pull_credit.h — how many messages a remote applier's JetStream pull consumer may still be sent,
// and when to ask it for more (docs/broker.md "Remote apply"). Talks to no broker: the applier's
// adapter (applier/broker/nats_stream.cpp) sends the requests and feeds in what arrives.
//
// The rules come from how nats-server serves pull requests (2.9, Debian 12's, and later):
//  - Waiting requests are served round robin: a request that still wants messages goes to the back
//    of the queue after each message. A delivered message does not say which request it answers
//    (it arrives with its own subject), so only the total is known: credit = what every request
//    asked for, less the messages delivered, less what the server said it will not send of the
//    requests it ended (the Nats-Pending-Messages of their 408/409 status).
//  - A request that got its whole batch ends with no status (a newer server sends 409 Batch
//    Completed, pending 0): that is already in the total.
//  - A request with an expiry can end with no status at all: a message that finds an expired
//    request at the head of the queue removes it silently (nats-server consumer.go nextWaiting; the
//    408 is sent only when the expiry timer wins the race). Counting it as still open stalled the
//    reader until something else noticed. So requests are sent without an expiry: they end by
//    count, by their byte budget (409, with its pending count), or with the consumer (its leader
//    changed, it was deleted, the connection was re-established) — and the last are said or seen.
// The credit is kept exact, or below the truth where the server does not say (a status without its
// pending count counts as nothing delivered to that request): a low credit only asks again early,
// a high one would wait for messages nobody will send.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace trellara::broker {

// One status message of a pull request (a message with no payload and a Status header).
struct PullStatus {
  std::string code;                          // "100", "404", "408", "409"...
  std::string description;                   // the Description header ("Request Timeout"...)
  std::optional<int64_t> pending_messages;   // Nats-Pending-Messages: what it will not send of the request
  std::optional<int64_t> pending_bytes;      // Nats-Pending-Bytes: what was left of its byte budget
};

// What a status means for reading.
struct PullStatusMeaning {
  enum class Kind : uint8_t {
    Ignore,     // a heartbeat: nothing ended
    Ended,      // that request ended; `pending` of its batch will not be sent
    AllEnded,   // every request sent so far is void (a new consumer leader): ask again
    Fatal,      // reading cannot go on with this consumer (`message` says why)
  } kind = Kind::Ignore;
  std::optional<int64_t> pending;  // Ended: nullopt when the server did not say
  std::string message;             // Fatal: why
};

// `batch` and `max_bytes`: what every request asks for.
PullStatusMeaning InterpretPullStatus(const PullStatus& status, int64_t batch, int64_t max_bytes);

class PullCredit {
 public:
  explicit PullCredit(int64_t batch) : batch_(batch) {}

  // Whether to ask for another batch now: when the requests still open may carry at most half a
  // batch more, so the server always has a request to send into while the reader drains the rest.
  bool ShouldAsk() const { return credit_ <= batch_ / 2; }
  // A request for `batch` messages was sent as `id` (ids grow by one from 1).
  void Asked(uint64_t id);
  // A message arrived.
  void Delivered();
  // The server ended request `id`, not sending `pending` messages of its batch (nullopt: it did not
  // say; counted as nothing delivered to it, at most the whole credit). False when `id` is not a
  // request of this credit's (an earlier reading's, or voided by Forget): nothing counted.
  bool Ended(uint64_t id, std::optional<int64_t> pending);
  // Every request sent so far is void (the server's consumer or the connection lost them): the
  // credit is zero and their late statuses are not counted; their late messages only lower it.
  void Forget();

  int64_t credit() const { return credit_; }
  int64_t batch() const { return batch_; }
  uint64_t last_id() const { return last_id_; }

 private:
  int64_t batch_;
  int64_t credit_ = 0;
  uint64_t last_id_ = 0;       // the last request sent
  uint64_t void_through_ = 0;  // requests up to this id were voided by Forget
};

}  // namespace trellara::broker
