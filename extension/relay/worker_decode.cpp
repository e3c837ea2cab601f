// relay/worker_decode.cpp — the relay worker's decoding-context callbacks: every record the plugin
// writes is appended to the flow's log and tracked for acknowledgement; a streamed transaction's
// changes go to the spill store and reach the log only at its commit. Must never confirm the slot
// (worker.cpp confirms only what is durable; the Confirm here is a tests-only negative control).
extern "C" {
#include "postgres.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "replication/logical.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
}

#include <span>
#include <string>
#include <variant>

#include "pg/guard.h"
#include "plugin/plugin.h"
#include "relay/worker_internal.h"
#include "trellara/base/fault.h"
#include "trellara/capture/stream_spill.h"
#include "trellara/record/codec.h"
#include "trellara/record/envelope.h"

namespace trellara::relay::worker {

// --- decoding context callbacks -----------------------------------------------------------------

extern "C" void PrepareWrite(LogicalDecodingContext* ctx, XLogRecPtr, TransactionId, bool) {
  resetStringInfo(ctx->out);
}

namespace {

// Above this many appended-but-unacknowledged bytes, decoding pauses until they are durable.
constexpr uint64_t kMaxUnackedBytes = 8ull << 20;

// Appends one record to the log (the plugin's, or one the relay assembled for a streamed
// transaction) and tracks it for acknowledgement. Bounded memory: drains to disk when too much is
// appended and not yet durable.
Status AppendRecord(uint8_t type, uint32_t xid, uint64_t commit_lsn, std::span<const uint8_t> bytes) {
  if (type == static_cast<uint8_t>(RecordType::Manifest) &&
      fault::Hit("relay.after_chunks_before_manifest") == fault::Action::Error) {
    // Negative control (seed partition_commit_marker_ack_ambiguous): the relay confirms the
    // transaction whose manifest and commit marker it never made durable.
    if (fault::Hit("defect.relay_confirm_decoded") == fault::Action::Defect) Confirm(commit_lsn);
    Fail("injected fault", MakeError("relay.after_chunks_before_manifest"));
  }
  if (fault::Hit("relay.before_log_append") == fault::Action::Error) {
    // Negative control (seed relay_before_broker_publish): a relay that confirms what it decoded
    // rather than what its log holds — the slot passes a transaction the log never received.
    if (fault::Hit("defect.relay_confirm_decoded") == fault::Action::Defect) Confirm(commit_lsn);
    Fail("injected fault", MakeError("relay.before_log_append"));
  }
  // A segment roll blocks inside the writer until the old segment is durable: get there first
  // with a wait that sees SIGTERM and postmaster death, so the roll itself only creates files.
  if (g_relay->writer->WouldRollSegment(bytes.size())) WaitDurable(g_relay->writer->next_offset(), true);
  auto offset = g_relay->writer->Append(type, commit_lsn, bytes);
  if (!offset.ok()) Fail("cannot append the record of xid " + std::to_string(xid) + " to its log", offset.error());
  TrackAppended(*offset, type, commit_lsn);
  g_relay->records_written++;
  g_relay->payload_bytes_appended += bytes.size();
  // Bound memory while decoding a large transaction: drain to disk before appending more.
  if (g_relay->writer->unacknowledged_bytes() > kMaxUnackedBytes) {
    WaitDurable(g_relay->writer->next_offset(), true);
    g_relay->ack->Durable(g_relay->writer->durable_end());
    // Fault point (tests): the first records of a large transaction are durable, the rest (its
    // commit marker) not appended yet — an applier may be applying them early (apply_early.cpp).
    fault::Hit("relay.after_drain_mid_transaction");
  }
  return Status::Ok();
}

// The LSN PostgreSQL passes with the record being written (for a streamed change, the change's).
uint64_t g_write_lsn = 0;

// The defect above: the stream record (an envelope of one change, commit LSN kStreamRecordCommitLsn)
// re-sealed with the change's LSN as its commit LSN and appended like a transaction of its own.
void LogStreamedChangeEarly(const plugin::WrittenRecord& info, std::span<const uint8_t> bytes) {
  auto decoded = DecodeRecord(bytes);
  if (!decoded.ok()) Fail("defect.stream_log_before_commit cannot decode a stream record", decoded.error());
  auto* e = std::get_if<Envelope>(&*decoded);
  if (e == nullptr || e->changes.empty()) return;
  e->tx.commit_lsn = g_write_lsn;
  Status sealed = SealEnvelope(*e);
  if (!sealed.ok()) Fail("defect.stream_log_before_commit cannot seal a stream record", sealed.error());
  auto encoded = EncodeRecord(*e);
  if (!encoded.ok()) Fail("defect.stream_log_before_commit cannot encode a stream record", encoded.error());
  Status s = AppendRecord(static_cast<uint8_t>(RecordType::Envelope), info.top_xid, g_write_lsn,
                          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(encoded->data()), encoded->size()));
  if (!s.ok()) Fail("defect.stream_log_before_commit cannot append", s.error());
}

// A stream record (plugin.h): a change goes to the spill store, an abort discards, a commit
// assembles the transaction from the store and appends its records — the first moment anything
// of it reaches the log (seed pgoutput_streamed_transaction_spills_until_commit).
void HandleStreamRecord(const plugin::WrittenRecord& info, std::span<const uint8_t> bytes) {
  StreamSpill& spill = *g_relay->spill;
  switch (info.record_type) {
    case plugin::kStreamChangeRecord: {
      const uint64_t spilled_before = spill.stats().spilled_bytes;
      Status s = spill.Add(info.top_xid, info.xid, bytes);
      if (!s.ok()) Fail("cannot keep a change of streamed transaction " + std::to_string(info.top_xid), s.error());
      // Fault point (tests): the transaction's changes have just been written to its spill file.
      if (spill.stats().spilled_bytes > spilled_before) fault::Hit("relay.stream_after_spill_write");
      // Negative control (seed pgoutput_streamed_transaction_spills_until_commit; tests only,
      // TRELLARA_FAULTS=defect.stream_log_before_commit:1:defect): a relay that also writes each
      // streamed change to the log as it arrives, as an envelope of its own, so records of an
      // in-progress transaction (which may still abort) reach the log before its commit.
      if (fault::Hit("defect.stream_log_before_commit") == fault::Action::Defect) LogStreamedChangeEarly(info, bytes);
      return;
    }
    case plugin::kStreamAbortRecord: {
      Status s = Status::Ok();
      // Negative control (tests only, defect.stream_subxact_abort_kept): an aborted
      // subtransaction's changes stay and are logged with its top transaction.
      if (info.xid == info.top_xid) {
        s = spill.AbortTransaction(info.top_xid);
      } else if (fault::Hit("defect.stream_subxact_abort_kept") != fault::Action::Defect) {
        s = spill.AbortSubtransaction(info.top_xid, info.xid);
      }
      if (!s.ok()) Fail("cannot discard aborted streamed (sub)transaction " + std::to_string(info.xid), s.error());
      return;
    }
    case plugin::kStreamCommitRecord: {
      TransactionAssembler::Options options;
      if (!plugin::CurrentAssemblerOptions(&options))
        Fail("cannot assemble streamed transaction " + std::to_string(info.top_xid),
             MakeError("no decoding session is active"));
      TransactionAssembler assembler(options);
      StreamedCommit commit{info.top_xid, info.begin_lsn, info.commit_lsn, info.commit_time_us};
      bool first = true;
      Status s = ReplayStreamedTransaction(spill, commit, assembler, [&](const EmittedRecord& r) -> Status {
        StopIfRequested();
        Status appended = AppendRecord(static_cast<uint8_t>(r.type), r.tx.xid, r.tx.commit_lsn,
                                       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(r.bytes.data()),
                                                                r.bytes.size()));
        // Fault point (tests): a streamed transaction is half appended at its commit.
        if (first) fault::Hit("relay.stream_commit_after_first_append");
        first = false;
        return appended;
      });
      // A record above trellara.record_bytes_max fails the same way every time: the flow's error
      // state (RecordErrorAndExit), as for a transaction decoded at commit, not a restart loop.
      if (!s.ok() && assembler.uncapturable_failure())
        throw pg::SqlError(ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                           "trellara relay of flow \"" + std::string(flow_name) + "\" cannot log streamed transaction " +
                               std::to_string(info.top_xid) + ": " + s.error().message,
                           {}, "Raise trellara.record_bytes_max (at most 1048576 kB) if the record fits under 1 GiB.");
      if (!s.ok()) Fail("cannot log streamed transaction " + std::to_string(info.top_xid), s.error());
      g_relay->streamed_transactions++;
      return;
    }
    default:
      Fail("received an unknown record", MakeError("type " + std::to_string(info.record_type)));
  }
}

}  // namespace

extern "C" void DoWrite(LogicalDecodingContext* ctx, XLogRecPtr lsn, TransactionId, bool) {
  const char* data = ctx->out->data;
  int len = ctx->out->len;
  g_write_lsn = lsn;
  pg::GuardEntry("trellara relay write", [data, len] {
    StopIfRequested();
    const plugin::WrittenRecord& info = plugin::LastWrittenRecord();
    std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(data), static_cast<size_t>(len));
    if (info.record_type >= plugin::kStreamChangeRecord) {
      HandleStreamRecord(info, bytes);
      return;
    }
    (void)AppendRecord(info.record_type, info.xid, info.commit_lsn, bytes);
  });
}

// Called by the plugin every 100 changes (OutputPluginUpdateProgress), so a long transaction, or
// a long run of unpublished changes, still notices SIGTERM and postmaster death. Plain C frame.
extern "C" void UpdateProgress(LogicalDecodingContext*, XLogRecPtr, TransactionId, bool) {
  if (!PostmasterIsAlive()) proc_exit(1);
  if (got_sigterm)
    ereport(ERROR, (errcode(ERRCODE_ADMIN_SHUTDOWN),
                    errmsg("trellara relay of flow \"%s\" stops on SIGTERM in the middle of a transaction; it is "
                           "decoded again at its next start",
                           flow_name)));
  CHECK_FOR_INTERRUPTS();
}

}  // namespace trellara::relay::worker
