// stream_receiver.h — the remote applier's half of the broker hop (docs/broker.md "Remote apply"):
// reads the flow's JetStream stream and keeps a replica of the flow's log on the applier's host,
// at the same offsets as the source's log, which `trellara apply` then applies exactly as it
// applies a local log (and which every operator command reads as it reads a local one).
//
// The replica holds offsets [first, expected) durably, in order, with nothing missing; `expected`
// is its only claim and the stream's sequence numbers are only a hint for where to read from.
// A delivered message holds several records (core pack.h: its id names the first, a header the
// count; one without the header is a single record of an older forwarder); it is unpacked, split
// at the replica's next offset (SplitDelivery), and each record goes through the per-record rules.
// A message that does not unpack (torn, altered) stops the applier: nothing of it is appended.
// What a delivered record is, core decides (broker.h DecideArrival): the next offset is appended
// (and made durable before anything reads it); a record below it is a duplicate, compared byte
// for byte with what the replica holds (a different one stops the flow: ConflictingDelivery);
// a record above it is a hole: never skipped — the forwarder is asked to publish again everything
// from `expected` on (the refill subject), and records are passed over until `expected` arrives.
// The applier's durable position (its consumer offset, written after the target's flush) is sent
// back to the forwarder, which keeps the source's log until every remote applier is past it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "broker/nats_stream.h"
#include "trellara/capture/slot_sync.h"
#include "kit/config.h"
#include "trellara/broker/replica_intake.h"
#include "trellara/log/device.h"
#include "trellara/log/reader.h"
#include "trellara/log/writer.h"

namespace trellara::cli::broker {

// The stream delivered offset `offset` with other content than the replica holds (and applied).
struct ConflictingDelivery {
  uint64_t offset = 0;
  uint64_t stream_sequence = 0;
  std::vector<uint8_t> payload;  // what the stream delivered
  std::string detail;            // what differs
};

struct ReceiverCounters {
  uint64_t appended = 0;             // records appended to the replica
  uint64_t duplicates = 0;           // delivered again, same content (skipped)
  uint64_t unchecked_duplicates = 0; // delivered again below what the replica still holds (skipped)
  uint64_t holes = 0;                // holes found (a refill asked for each)
  uint64_t passed_over = 0;          // records above a hole, passed over until it is refilled
  uint64_t refills_asked = 0;        // refill requests sent (a hole is asked again until answered)
  uint64_t read_restarts = 0;        // reading the stream started again (broker lost the consumer)
};

class StreamReceiver {
 public:
  // `device`: the receiver's own (its writer's io_uring ring is used by its thread only).
  StreamReceiver(const FlowConfig& config, log::LogDevice& device);
  ~StreamReceiver();  // stops and joins the thread, if any

  // Opens (creating) the replica in flow.log_directory and connects to the broker, retrying while
  // it cannot be reached. False when a stop was requested meanwhile.
  bool Open();
  // Reads what the stream delivers within `wait` (more while messages keep coming, bounded) and
  // appends the next records durably. Returns how many were appended; the conflict, if any.
  size_t Pump(std::chrono::milliseconds wait, std::optional<ConflictingDelivery>& conflict);
  // True when the last Pump found nothing to read, no hole is waiting for a refill, the replica
  // holds every offset the stream showed, and the stream's leader says it holds nothing unread.
  // Not known (false) once StartThread ran: only the unthreaded `--until-caught-up` reads it.
  bool idle() const { return idle_; }
  // The applier's durable position in the replica (its consumer offset): sent to the forwarder,
  // and the replica's segments wholly below it are deleted (by the thread, when there is one).
  void ReportPosition(uint64_t next_offset);

  // A daemon applier: from here on Pump runs in the receiver's own thread, so the stream is read
  // and the replica made durable while the applier applies (before, and with --until-caught-up,
  // the applier calls Pump itself when it has nothing to apply).
  void StartThread();
  bool threaded() const { return thread_.joinable(); }
  // The threaded receiver: waits up to `wait` for records appended since the last call (true when
  // some were); `conflict` is set when the thread stopped on one; what ended the thread (a
  // CommandFailed) is thrown here.
  bool WaitForRecords(std::chrono::milliseconds wait, std::optional<ConflictingDelivery>& conflict);

  uint64_t expected() const { return expected_; }
  bool broker_available() const { return !unavailable_; }
  const ReceiverCounters& counters() const { return counters_; }  // the receiver's thread, or once it ended
  const std::string& log_identity() const { return identity_; }
  // Whether the replica holds a TIMELINE file (written before the first record of a message that
  // carried one is appended): the applier checks the target against it once it appears.
  bool has_timeline() const { return has_timeline_; }

 private:
  void ThreadMain();
  bool Stopping() const;  // a stop was requested, or the applier is ending
  void SendPosition(uint64_t next_offset);
  bool Connect();
  bool StartReading();
  // Sends `request` to the forwarder and acts on its answer (a lost or reclaimed range stops the flow).
  void AskRefill(const trellara::broker::RefillRequest& request);
  // Whether the replica holds `delivered`'s offset with the same type, commit LSN and payload
  // (nullopt: no longer held).
  std::optional<bool> HeldSame(const log::LogRecord& delivered);
  void WriteHint();
  // The delivered message's timeline header against the replica's TIMELINE (core
  // DecideReplicaTimeline): written when the replica has none, refused when another.
  void TakeTimeline(const NatsStream::Delivered& d);
  // Idle for a while: asks the stream's leader for its last sequence. No answer: the broker has
  // no quorum (said, and reading starts again once it answers). Records past what was read and
  // none delivered: the consumer was lost with the broker, reading starts again.
  void Probe();
  void Event(const std::string& event, const std::string& fields);
  void Unavailable(const std::string& error);
  void Resumed();

  const FlowConfig& config_;
  log::LogDevice& device_;
  std::unique_ptr<log::LogWriter> writer_;
  std::unique_ptr<log::LogReader> compare_;
  std::unique_ptr<NatsStream> stream_;
  std::string identity_;               // the log this replica holds ("" until its first record)
  std::string pending_identity_;       // a new replica: the log of the records seen before its first
  std::optional<LogTimeline> timeline_;  // the replica's TIMELINE (none yet: a new replica, an older forwarder)
  std::atomic<bool> has_timeline_{false};  // timeline_ is set (read by the applier's thread)
  uint64_t next_sequence_ = 1;         // where reading resumes in the stream (a hint)
  uint64_t max_offset_seen_ = 0;       // one past the highest offset any delivered message held
  uint64_t skipped_ahead_ = 0;         // defect.apply_hole_check_skipped only: the offsets it skipped
  bool reading_ = false;
  std::atomic<bool> idle_{false};
  std::atomic<uint64_t> expected_{0};  // the writer's next offset (read by the applier's thread)
  trellara::broker::HoleWatch holes_;  // the missing offset a refill was asked for, and when to ask again
  std::chrono::steady_clock::time_point unavailable_since_{};
  std::atomic<bool> unavailable_{false};
  bool said_running_ = false;
  std::chrono::milliseconds retry_wait_{0};
  std::chrono::steady_clock::time_point last_delivery_{};
  std::chrono::steady_clock::time_point last_probe_{};
  std::optional<uint64_t> position_;   // the last position reported
  std::chrono::steady_clock::time_point position_sent_at_{};
  ReceiverCounters counters_;

  // The thread (daemon mode) and what it hands to the applier's thread, under mutex_.
  std::thread thread_;
  bool own_thread_ = false;  // StartThread ran: Pump runs in thread_ only
  std::mutex mutex_;
  std::condition_variable changed_;
  std::atomic<bool> stop_{false};       // the applier is ending: the thread returns
  uint64_t appended_since_wait_ = 0;
  std::optional<ConflictingDelivery> conflict_;
  std::exception_ptr failure_;
  std::optional<uint64_t> position_to_send_;
};

}  // namespace trellara::cli::broker
