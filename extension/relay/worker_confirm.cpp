// relay/worker_confirm.cpp — the relay worker's acknowledgement path (worker.cpp NOTES): waits
// until appended frames are durable, tracks them for acknowledgement, writes progress markers and
// confirms the slot after each pass. It must never confirm an LSN the log does not hold durably
// (nor, with source_ack = 'broker_quorum', one the broker's quorum has not acknowledged, nor, with
// source_ack = 'applied', one some applier has not committed on its target), and
// never let the slot's confirmed position pass the log_durable_lsn the status board shows.
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
#include "replication/logical.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

#include <algorithm>
#include <span>

#include "pg/guard.h"
#include "relay/relay.h"
#include "relay/worker_internal.h"
#include "trellara/base/fault.h"
#include "trellara/capture/relay_progress.h"
#include "trellara/capture/slot_sync.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/log/retention.h"
#include "trellara/log/writer.h"

namespace trellara::relay::worker {

bool latch_wake_consumed = false;

uint64_t NowUs() { return static_cast<uint64_t>(GetCurrentTimestamp()); }

// Submits what is appended and waits on the latch (and the ring's eventfd) until every offset
// below `target_end` is durable. Returns early only by ERROR or process exit.
void WaitDurable(uint64_t target_end, bool interruptible) {
  if (fault::Hit("relay.after_append_before_fsync") == fault::Action::Error)
    Fail("injected fault", MakeError("relay.after_append_before_fsync"));
  Status s = g_relay->writer->Submit();
  if (!s.ok()) Fail("cannot write to its log", s.error());
  int fd = g_relay->writer->completion_event_fd();
  for (;;) {
    auto durable = g_relay->writer->Poll();
    if (!durable.ok()) Fail("cannot make its log durable", durable.error());
    if (*durable >= target_end) return;
    if (interruptible) StopIfRequested();
    s = g_relay->writer->Submit();
    if (!s.ok()) Fail("cannot write to its log", s.error());
    int events = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;
    if (fd >= 0) events |= WL_SOCKET_READABLE;
    pg::CallPostgres([&] {
      const int rc = WaitLatchOrSocket(MyLatch, events, fd >= 0 ? fd : PGINVALID_SOCKET, fd >= 0 ? 1000 : 1,
                                       PG_WAIT_EXTENSION);
      if (rc & WL_LATCH_SET) latch_wake_consumed = true;
      ResetLatch(MyLatch);
      CHECK_FOR_INTERRUPTS();
    });
  }
}

void TrackAppended(uint64_t offset, uint8_t type, uint64_t commit_lsn) {
  g_relay->ack->Appended(offset, type, commit_lsn);
  if (g_relay->held_ack) g_relay->held_ack->Appended(offset, type, commit_lsn);
}

// source_ack = 'broker_quorum' or 'applied': what may be confirmed given the consumer offset that
// holds the slot — the forwarder's (the next offset it has not yet seen acknowledged by the broker's
// quorum), or core AppliedConsumerOffset (the least next offset of the downstream consumers: what
// every applier committed on its target). Read at most every kHeldReadIntervalUs. No such consumer
// registered yet: nothing past what was confirmed before. An unreadable consumer file keeps the last
// value read (never a larger one).
constexpr uint64_t kHeldReadIntervalUs = 100'000;
uint64_t HeldConfirmable() {
  const uint64_t now = NowUs();
  if (now - g_relay->held_read_us >= kHeldReadIntervalUs) {
    g_relay->held_read_us = now;
    if (source_ack == SourceAck::kBrokerQuorum) {
      auto offsets = log::ReadConsumerOffsets(*g_relay->device, log_directory);
      if (offsets.ok()) {
        auto it = offsets->find(log::kForwarderConsumer);
        if (it != offsets->end()) g_relay->held_end = it->second;
      }
    } else {
      auto states = log::ReadConsumerStates(*g_relay->device, log_directory);
      if (states.ok()) g_relay->held_end = AppliedConsumerOffset(*states);
    }
  }
  return g_relay->held_ack->Durable(std::min(g_relay->held_end, g_relay->writer->durable_end()));
}

void Confirm(uint64_t lsn) {
  if (lsn <= g_relay->confirmed_lsn) return;
  if (fault::Hit("relay.after_fsync_before_confirm") == fault::Action::Error)
    Fail("injected fault", MakeError("relay.after_fsync_before_confirm"));
  pg::CallPostgres([lsn] { LogicalConfirmReceivedLocation(lsn); });
  g_relay->confirmed_lsn = lsn;
}

// Appends a progress marker covering the source through `lsn`, waits until it is durable and
// returns the confirmable LSN.
uint64_t AppendProgressMarker(uint64_t lsn) {
  // The source's clock beside the LSN: the fleet fan-in moves an idle store's time on with it.
  const int64_t now_us = static_cast<int64_t>(GetCurrentTimestamp()) +
                         static_cast<int64_t>(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC;
  const std::vector<uint8_t> payload = EncodeProgressMarker(lsn, now_us);
  auto offset = g_relay->writer->Append(kProgressRecordType, lsn, std::span<const uint8_t>(payload.data(), payload.size()));
  if (!offset.ok()) Fail("cannot append a progress marker", offset.error());
  TrackAppended(*offset, kProgressRecordType, lsn);
  g_relay->records_written++;
  g_relay->payload_bytes_appended += payload.size();
  WaitDurable(*offset + 1);
  return g_relay->ack->Durable(g_relay->writer->durable_end());
}

// What is durable now is acknowledged: reaps the log's completions without waiting (starting the
// next group's fdatasync when one is due), confirms the slot and publishes the board only through
// AckTracker's answer for the writer's durable end. The idle duties — a progress marker, retention
// — run only when every appended frame is durable (no fdatasync in flight for them to delay).
void AcknowledgeDurable(uint64_t decoded_end) {
  auto durable = g_relay->writer->Poll();
  if (!durable.ok()) Fail("cannot make its log durable", durable.error());
  uint64_t confirmable = g_relay->ack->Durable(*durable);
  const bool all_durable = g_relay->ack->all_durable();
  uint64_t now = NowUs();
  g_relay->progress.interval_us = ProgressIntervalUs();
  const uint64_t requested = ProgressRequestedLsn();
  if (ShouldWriteProgress(g_relay->progress, all_durable, confirmable, decoded_end, now, g_relay->last_progress_us,
                          requested)) {
    confirmable = AppendProgressMarker(decoded_end);
    g_relay->last_progress_us = now;
  }
  // source_ack = 'broker_quorum' / 'applied': never past what the broker's quorum acknowledged /
  // what every applier committed on its target.
  if (g_relay->held_ack) confirmable = std::min(confirmable, HeldConfirmable());
  // status() must never show the slot confirmed past log_durable_lsn: publish the durable LSN
  // before the slot can move to it.
  if (confirmable > g_relay->confirmed_lsn) Publish(FlowState::kRunning);
  Confirm(confirmable);
  Publish(FlowState::kRunning);
  if (g_relay->ack->all_durable()) ApplyRetentionWhenDue();
}

// After a pass (group commit pipelining, docs/relay.md "Overlapping decoding with the fdatasync"):
// submits the pass's frames and acknowledges what is already durable, without waiting for the
// pass's own fdatasync — the worker decodes the next pass while it runs.
void EndPass(uint64_t decoded_end) {
  // Retention runs only with everything durable; under a steady load frames are always in
  // flight, so once it is due (at most once a second) this pass waits for its fdatasync as every
  // pass did before, and retention is never starved. One hit of the fault point per pass either way.
  if (RetentionDue() && !g_relay->ack->all_durable()) {
    WaitDurable(g_relay->writer->next_offset());
  } else if (fault::Hit("relay.after_append_before_fsync") == fault::Action::Error) {
    Fail("injected fault", MakeError("relay.after_append_before_fsync"));
  }
  AcknowledgeDurable(decoded_end);
}

// Between passes: waits on the latch for up to `timeout_ms` and, while appended frames are not
// durable, on the ring's eventfd too, acknowledging what each completion made durable. Returns at
// a latch wake (a commit: the next pass starts while an fdatasync may still be in flight), at the
// timeout, or by ERROR / process exit.
void WaitBetweenPasses(long timeout_ms, uint64_t decoded_end) {
  const uint64_t deadline_us = NowUs() + static_cast<uint64_t>(timeout_ms) * 1000;
  const int fd = g_relay->writer->completion_event_fd();
  for (;;) {
    const bool pending = g_relay->writer->durable_end() < g_relay->writer->next_offset();
    const uint64_t now = NowUs();
    long wait_ms = now >= deadline_us ? 0 : static_cast<long>((deadline_us - now + 999) / 1000);
    int events = WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH;
    if (pending && fd >= 0) events |= WL_SOCKET_READABLE;
    if (pending && fd < 0) wait_ms = std::min(wait_ms, 1L);  // a device without an eventfd: poll
    int rc = 0;
    pg::CallPostgres([&] {
      rc = WaitLatchOrSocket(MyLatch, events, (events & WL_SOCKET_READABLE) ? fd : PGINVALID_SOCKET, wait_ms,
                             PG_WAIT_EXTENSION);
      CHECK_FOR_INTERRUPTS();
    });
    if (rc & WL_LATCH_SET) return;  // the caller resets the latch and starts the next pass
    if (pending) AcknowledgeDurable(decoded_end);
    // A progress marker's durability wait (AppendProgressMarker) may have consumed a wake.
    if (latch_wake_consumed || NowUs() >= deadline_us) return;
  }
}

// SIGTERM: makes everything appended durable, then acknowledges it.
void FinishPass(uint64_t decoded_end) {
  WaitDurable(g_relay->writer->next_offset());
  AcknowledgeDurable(decoded_end);
}

}  // namespace trellara::relay::worker
