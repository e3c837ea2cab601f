// broker_hop.h — the broker hop inside the simulator (docs/simulator.md "The broker hop"): the
// forwarder on the source host, a JetStream-like stream that may refuse, lose, duplicate and
// reorder what it acknowledged, and the receiver inside the remote applier that keeps the
// applier's replica of the log on its own host (its own SimulatedDevice, so a power loss there
// tears only the replica).
//
// The decisions are the product's: DecideForwardStart (where the forwarder resumes), DecideArrival
// and HoleWatch (what a delivered record is, when a refill is asked), DecideRefill (the
// forwarder's answer), the real LogWriter/LogReader on both devices, consumer registration and
// retention (ApplyRetention) of the source log. Simulated: the broker itself, the network between
// the processes, and the processes' lives. Deterministic: every choice comes from the world's
// generator.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "trellara/broker/broker.h"
#include "trellara/broker/pack.h"
#include "trellara/broker/replica_intake.h"
#include "trellara/log/reader.h"
#include "trellara/log/simulated_device.h"
#include "trellara/log/writer.h"

namespace trellara::sim {

// What the hop needs from its world.
struct HopHooks {
  std::function<bool(const std::string& point)> fire;       // a named fault point's opportunity
  std::function<bool(const std::string& defect)> defect;    // the run's paired defect is this one
  std::function<void(const std::string& line)> trace;
  std::function<void(const std::string& invariant, const std::string& message)> violate;
  std::function<void(const std::string& message)> harness_error;
  std::function<void(const std::string& why)> applier_dies;  // the remote applier's process died
};

class BrokerHop {
 public:
  static constexpr const char* kReplicaDir = "/remote/sim";
  static constexpr const char* kForwarderConsumer = "forwarder";
  static constexpr const char* kRemoteApplier = "remote";
  static constexpr int64_t kPositionResendMs = 5000;

  BrokerHop(log::SimulatedDevice& source, const std::string& source_dir, log::SimulatedDevice& replica,
            std::mt19937_64& random, HopHooks hooks, std::string flow, std::string log_identity);

  // ---- the forwarder (source host) ----
  // Starts when not running (the source log must be recovered: `log_ready`), answers nothing by
  // itself (refills are asked synchronously), republishes what a refill asked, then publishes the
  // next records, and applies retention to the source log.
  void ForwarderStep(bool log_ready);
  void ForwarderCrash(const std::string& why);
  bool forwarder_running() const { return forwarder_running_; }

  // ---- the broker ----
  // The broker's own faults between steps: it loses an acknowledged message.
  void BrokerStep();

  // ---- the receiver (inside the remote applier's process) ----
  // Opens the replica (recovering it). False when it cannot (the violation is recorded).
  bool ReceiverStart();
  // Reads what the stream delivers (a few messages, maybe duplicated or reordered) into the
  // replica, made durable at the end; asks for refills. `now_ms`: the world's clock.
  void ReceiverPump(int64_t now_ms);
  void ReceiverCrash();
  // The remote host loses power: unsynced replica writes are lost or torn; the applier dies.
  void RemotePowerLoss();
  // The applier's durable position, sent to the forwarder (resent while the forwarder is away).
  void ReportPosition(uint64_t next_offset, int64_t now_ms);
  // The flow stopped for good on the remote side (a refill answered "gone").
  bool blocked() const { return blocked_; }

  // The offset after the last record the broker acknowledged to the forwarder, durably recorded
  // (consumer "forwarder" of the source log): what source_ack = broker_quorum may confirm up to.
  uint64_t forwarder_progress() const { return forwarder_progress_; }
  // Every offset below `log_end` is in the replica, nothing is missing, nothing waits.
  bool Drained(uint64_t log_end) const;
  // Whether the broker stored a message for this offset (acknowledged, even if lost since).
  bool Stored(uint64_t offset) const;
  // The replica holds, at every offset, exactly the record the source log holds there.
  void CheckReplica();

  uint64_t holes() const { return holes_seen_; }
  uint64_t refills() const { return refills_; }
  uint64_t duplicates() const { return duplicates_; }

 private:
  // One message of the stream, as the product's forwarder publishes it: its deduplication id and
  // headers, and its body — several records packed (core pack.h), or, from a forwarder process
  // playing an older version, one record with its type and commit LSN in headers.
  struct Message {
    std::string id;                            // Nats-Msg-Id
    std::optional<std::string> offset_header;  // Trellara-Offset
    std::optional<std::string> format_header;  // Trellara-Format (packed only)
    std::optional<std::string> count_header;   // Trellara-Count (packed only)
    uint8_t type = 0;                          // Trellara-Type, Trellara-Commit-Lsn (single record only)
    uint64_t commit_lsn = 0;
    std::vector<uint8_t> body;
    bool refill = false;
    bool lost = false;  // the broker lost it after acknowledging it
    // What the forwarder put in it (traces and checks; the receiver reads id, headers and body).
    uint64_t first = 0, count = 1;
    uint64_t end() const { return first + count; }
  };
  enum class Publish { Acked, Refused, AckLost };
  struct Refill {
    uint64_t first = 0, end = 0;  // offsets [first, end) still to republish
    uint64_t refill = 0;          // names the republished messages apart from the lost originals
  };
  Publish PublishBatch(const std::vector<log::LogRecord>& records, std::optional<uint64_t> refill);
  bool ForwarderStart();
  // The last record of the records subject's last message the broker still holds.
  std::optional<broker::RecordName> LastPublished();
  bool harness_failed_ = false;  // LastPublished met a message it could not read
  void AskRefill(const broker::RefillRequest& request);
  std::optional<bool> HeldSame(const log::LogRecord& r);
  void Deliver(const Message& m, int64_t now_ms, bool& appended);
  std::string Name(uint64_t offset) const;

  log::SimulatedDevice& source_;
  std::string source_dir_;
  log::SimulatedDevice& replica_;
  std::mt19937_64& random_;
  HopHooks hooks_;
  std::string flow_;
  std::string identity_;

  // the stream: sequence = index + 1; the broker's duplicate window remembers every id
  std::vector<Message> stream_;
  std::set<std::string> seen_ids_;

  // forwarder
  bool forwarder_running_ = false;
  std::unique_ptr<log::LogReader> forward_reader_;
  uint64_t forward_next_ = 0;      // next offset to publish
  uint64_t acked_end_ = 0;         // below this the broker acknowledged (this process's life)
  uint64_t forwarder_progress_ = 0;  // as durably recorded
  bool expect_last_ = false;        // the next publish expects the stream's last record before it
  std::deque<Refill> refill_queue_;
  uint64_t refill_seq_ = 0;
  std::map<uint64_t, log::LogRecord> truth_;  // every record the forwarder read from the source log
  // This forwarder process's packing (chosen when it starts): records per message, or an older
  // forwarder's single-record messages.
  size_t pack_records_max_ = broker::kPackRecordsMax;
  bool single_record_messages_ = false;

  // receiver
  bool receiver_running_ = false;
  bool blocked_ = false;
  std::unique_ptr<log::LogWriter> replica_writer_;
  uint64_t read_sequence_ = 1;       // where reading the stream goes on
  uint64_t hint_sequence_ = 1;       // kept across restarts: where reading resumes (a hint)
  uint64_t seen_end_ = 0;
  broker::HoleWatch hole_watch_;
  std::optional<uint64_t> position_;
  int64_t position_sent_ms_ = 0;
  uint64_t holes_seen_ = 0, refills_ = 0, duplicates_ = 0;
};

}  // namespace trellara::sim
