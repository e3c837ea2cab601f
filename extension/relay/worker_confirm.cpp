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

// After a pass: make everything durable, maybe mark progress, confirm what is safe.
void FinishPass(uint64_t decoded_end) {
  WaitDurable(g_relay->writer->next_offset());
  uint64_t confirmable = g_relay->ack->Durable(g_relay->writer->durable_end());
  uint64_t now = NowUs();
  g_relay->progress.interval_us = ProgressIntervalUs();
  const uint64_t requested = ProgressRequestedLsn();
  if (ShouldWriteProgress(g_relay->progress, g_relay->ack->all_durable(), confirmable, decoded_end, now,
                          g_relay->last_progress_us, requested)) {
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
  ApplyRetentionWhenDue();
}

}  // namespace trellara::relay::worker
