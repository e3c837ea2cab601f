// cadence.h — every poll interval, idle backoff and retry wait of the relay, the applier and the
// operator commands, named in one place. A loop that waits uses one of these; a number of
// milliseconds written in a loop is a review finding.
//
// None of these decides correctness: each wait only bounds how soon a change is noticed (latency)
// and how much an idle process costs (polls per second). Retries of failed target statements use
// apply/apply_retry.h's BackoffPolicy (exponential, jittered, bounded), not these.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace trellara::cadence {

using std::chrono::milliseconds;

// An idle backoff: the first wait after work was found is `min`; each wait that found nothing
// doubles it, up to `max`. While work keeps arriving it is noticed within `min`; an idle loop polls
// 1/`max` times a second.
struct IdleBackoff {
  milliseconds min;
  milliseconds max;
  constexpr milliseconds After(milliseconds previous, bool found_work) const {
    return found_work ? min : std::clamp(previous * 2, min, max);
  }
};

// ---- relay (extension/relay) ----
// Between decoding passes: 5 ms after a pass that read a transaction, doubling to 100 ms idle.
inline constexpr IdleBackoff kRelayPass{milliseconds(5), milliseconds(100)};
// The launcher rescans the flow catalog every second; after a change to it, every 20 ms for 50
// rescans (a flow created or stopped is picked up within about 20 ms).
inline constexpr milliseconds kLauncherRescan{1000};
inline constexpr milliseconds kLauncherFastRescan{20};
inline constexpr int kLauncherFastRescans = 50;

// ---- applier (applier/engine) ----
// At the end of the log: 2 ms after a record arrived, doubling to 200 ms while none arrive. The
// caught-up bookkeeping (offset write, registry poll and holds, status and state files,
// quarantine read) runs at most once per kApplierTail.max; it forces the offset write only when no
// record arrived since it last ran (docs/apply.md "The consumer offset at the log's end").
inline constexpr IdleBackoff kApplierTail{milliseconds(2), milliseconds(200)};
// The consumer offset is written at least this often while applying (and every 512 transactions).
inline constexpr milliseconds kApplierOffsetWrite{1000};
// The metrics snapshot is handed to the endpoint at most this often while applying.
inline constexpr milliseconds kApplierMetricsPublish{100};
// Waiting for the flow's log directory to appear, and between checks while a retry backs off or a
// stop is requested.
inline constexpr milliseconds kApplierStopCheck{50};
// A flow halted at a quarantined transaction looks for "replay-ready" this often.
inline constexpr milliseconds kReplayReadyPoll{1000};
// A hold's lock (verify, reseed --where) is tried this often while the applier waits for it.
inline constexpr milliseconds kHoldLockPoll{50};
// The progress line of `trellara apply` (every 5 s) and a terminal's redraw (every second).
inline constexpr milliseconds kApplyProgressLine{5000};
inline constexpr milliseconds kTerminalRedraw{1000};

// ---- partition appliers (trellara apply --partition K, docs/partitioned.md) ----
// A partition applier stages several source transactions' parts in one target transaction and
// commits it with the checkpoint of the last one: after kPartitionBatchTransactions transactions
// or kPartitionBatchAge since the batch opened, whichever comes first (and at the log's end, on a
// stop, before a refusal is recorded). The age bounds how long the publisher waits for evidence.
inline constexpr uint64_t kPartitionBatchTransactions = 256;
inline constexpr milliseconds kPartitionBatchAge{20};
// ... or once the chunks it holds in memory (hex) reach this many bytes.
inline constexpr uint64_t kPartitionBatchBytes = 16u << 20;

// ---- forwarder (trellara forward, docs/broker.md) ----
// A publish the broker did not acknowledge (no quorum, unreachable) is tried again after 100 ms,
// doubling to 5 s while it keeps failing: a broker that returns is used within 5 s, one that is
// down costs one attempt per 5 s.
inline constexpr IdleBackoff kBrokerRetry{milliseconds(100), milliseconds(5000)};

// ---- operator commands ----
// verify / reseed --where: how often the hold is polled, and how long an applier that just started
// may take to hold its lock before it is reported "not running".
inline constexpr milliseconds kHoldPoll{100};
inline constexpr milliseconds kHoldNotRunningGrace{5000};
// snapshot: the wait between attempts at a chunk's source snapshot.
inline constexpr milliseconds kSnapshotRetryWait{100};

}  // namespace trellara::cadence
