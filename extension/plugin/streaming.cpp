// plugin/streaming.cpp — the output plugin's streamed transactions (in progress, larger than
// logical_decoding_work_mem): every change becomes a stream record tagged with its
// (sub)transaction, and abort and commit become stream records the relay acts on. It must never
// hand a streamed change to the assembler (the relay assembles the transaction at stream commit).
#include "plugin/state.h"

namespace trellara::plugin {

// PostgreSQL streams the largest transaction in segments once the reorder buffer is full: each
// segment is stream_start, changes, stream_stop; then stream_abort (of the whole transaction or of
// one of its subtransactions) or stream_commit. Every change becomes a stream record (EmitChange);
// the relay keeps them in its spill store and assembles the transaction's log records at
// stream_commit only. Two-phase decoding is not enabled, so stream_prepare never runs.

namespace {

// The (sub)transaction a streamed logical message belongs to: the callback is given the top
// transaction, but a subtransaction's abort must discard its messages. Found among the changes of
// the segment being streamed (DDL records carry their own xid instead: capture_xid).
uint32_t StreamedMessageXid(ReorderBufferTXN* top, XLogRecPtr lsn) {
  // dlist_foreach/dlist_container use C builtins C++ lacks: the same walk, spelled out.
  for (dlist_node* n = top->subtxns.head.next; n != nullptr && n != &top->subtxns.head; n = n->next) {
    auto* sub = reinterpret_cast<ReorderBufferTXN*>(reinterpret_cast<char*>(n) - offsetof(ReorderBufferTXN, node));
    for (dlist_node* c = sub->changes.head.next; c != nullptr && c != &sub->changes.head; c = c->next) {
      auto* change =
          reinterpret_cast<ReorderBufferChange*>(reinterpret_cast<char*>(c) - offsetof(ReorderBufferChange, node));
      if (change->lsn == lsn && change->action == REORDER_BUFFER_CHANGE_MESSAGE) return sub->xid;
    }
  }
  return top->xid;
}

uint32_t TopXid(ReorderBufferTXN* txn) { return txn->toptxn != nullptr ? txn->toptxn->xid : txn->xid; }

}  // namespace

extern "C" void StreamStartCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn) {
  pg::GuardEntry("trellara output plugin stream start", [&] {
    State* s = StateOf(ctx);
    s->skipping = false;  // known only at stream commit (the commit LSN)
    s->in_stream = true;
    s->stream_top_xid = TopXid(txn);
    s->stream_xid = s->stream_top_xid;
    current_tx = DecodingTransaction{true, s->stream_top_xid, 0, ""};
    PinOutputSettings(s);
  });
}

extern "C" void StreamStopCallback(LogicalDecodingContext* ctx, ReorderBufferTXN*) {
  pg::GuardEntry("trellara output plugin stream stop", [&] {
    State* s = StateOf(ctx);
    UnpinOutputSettings(s);
    s->in_stream = false;
    current_tx.open = false;
  });
}

extern "C" void StreamAbortCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn, XLogRecPtr) {
  pg::GuardEntry("trellara output plugin stream abort", [&] {
    WriteStreamRecord(ctx, kStreamAbortRecord, TopXid(txn), txn->xid, std::string());
  });
}

extern "C" void StreamCommitCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn, XLogRecPtr) {
  pg::GuardEntry("trellara output plugin stream commit", [&] {
    State* s = StateOf(ctx);
    // Identity as for a transaction decoded at commit (BeginCallback): the end of the commit record.
    if (txn->end_lsn <= s->options.skip_through_lsn) {
      // Already in the log (a restart decodes from before it): its spilled changes are dropped.
      WriteStreamRecord(ctx, kStreamAbortRecord, txn->xid, txn->xid, std::string());
      return;
    }
    // The relay assembles and logs the transaction inside this write: an error there names it.
    current_tx = DecodingTransaction{true, txn->xid, txn->end_lsn, ""};
    WriteStreamRecord(ctx, kStreamCommitRecord, txn->xid, txn->xid, std::string(), txn->end_lsn, txn->first_lsn,
                      UnixMicros(txn->xact_time.commit_time));
    current_tx.open = false;
  });
}

extern "C" void StreamChangeCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn, Relation relation,
                                     ReorderBufferChange* change) {
  State* s = StateOf(ctx);
  s->stream_xid = change->txn != nullptr ? change->txn->xid : txn->xid;
  ChangeCallback(ctx, txn, relation, change);
}

extern "C" void StreamTruncateCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn, int nrelations,
                                       Relation relations[], ReorderBufferChange* change) {
  State* s = StateOf(ctx);
  s->stream_xid = change->txn != nullptr ? change->txn->xid : txn->xid;
  TruncateCallback(ctx, txn, nrelations, relations, change);
}

extern "C" void StreamMessageCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn, XLogRecPtr lsn,
                                      bool transactional, const char* prefix, Size sz, const char* message) {
  State* s = StateOf(ctx);
  s->stream_xid = transactional ? StreamedMessageXid(txn, lsn) : txn->xid;
  MessageCallback(ctx, txn, lsn, transactional, prefix, sz, message);
}

}  // namespace trellara::plugin
