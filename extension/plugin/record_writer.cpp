// plugin/record_writer.cpp — every byte the output plugin hands to Postgres: the records core's
// assembler emits (OutputPluginPrepareWrite/OutputPluginWrite into ctx->out) and, for a streamed
// transaction, stream records; it records the facts the relay's write callback needs
// (LastWrittenRecord) just before each write. It must never decide record boundaries (the
// assembler does) nor let a Postgres ERROR jump over a C++ frame (CallPostgres).
#include "plugin/state.h"

namespace trellara::plugin {

namespace {

// --- facts for the relay's write callback ------------------------------------------------------
WrittenRecord last_written{};

Status WriteRecord(LogicalDecodingContext* ctx, const EmittedRecord& r) {
  last_written = WrittenRecord{static_cast<uint8_t>(r.type), r.completes_transaction, r.tx.xid, r.tx.commit_lsn, 0, 0, 0};
  const std::string& bytes = r.bytes;
  bool last = r.completes_transaction;
  pg::CallPostgres([&] {
    OutputPluginPrepareWrite(ctx, last);
    appendBinaryStringInfo(ctx->out, bytes.data(), static_cast<int>(bytes.size()));
    OutputPluginWrite(ctx, last);
  });
  return Status::Ok();
}

[[noreturn]] void RaiseCoreError(const Error& error, const char* during) {
  throw pg::SqlError(ERRCODE_INTERNAL_ERROR, std::string("trellara output plugin failed during ") + during + ": " +
                                                 error.message);
}

}  // namespace

// A record the assembler refused for good (above trellara.record_bytes_max, or not encodable):
// program_limit_exceeded, which the relay turns into a flow error instead of a restart loop.
void CheckAssemblerStatus(const Status& s, const TransactionAssembler& assembler, const char* during) {
  if (s.ok()) return;
  if (assembler.uncapturable_failure())
    throw pg::SqlError(ERRCODE_PROGRAM_LIMIT_EXCEEDED, "trellara output plugin failed during " + std::string(during) +
                                                           ": " + s.error().message,
                       {}, "Raise trellara.record_bytes_max (at most 1048576 kB) if the record fits under 1 GiB.");
  RaiseCoreError(s.error(), during);
}

RecordSink SinkFor(LogicalDecodingContext* ctx) {
  return [ctx](const EmittedRecord& r) { return WriteRecord(ctx, r); };
}

// Writes one stream record (never a log record): the relay routes it to its spill store.
void WriteStreamRecord(LogicalDecodingContext* ctx, uint8_t type, uint32_t top_xid, uint32_t xid,
                       const std::string& bytes, uint64_t commit_lsn, uint64_t begin_lsn, int64_t commit_time_us) {
  last_written = WrittenRecord{type, false, xid, commit_lsn, top_xid, begin_lsn, commit_time_us};
  pg::CallPostgres([&] {
    OutputPluginPrepareWrite(ctx, true);
    if (!bytes.empty()) appendBinaryStringInfo(ctx->out, bytes.data(), static_cast<int>(bytes.size()));
    OutputPluginWrite(ctx, true);
  });
}

// Every captured change goes through here: to the assembler when the transaction is decoded at
// commit, as a stream record when it is streamed (the relay assembles it at stream commit, the
// same assembler over the same changes, so the log holds the same bytes either way).
void EmitChange(State* s, LogicalDecodingContext* ctx, Change c, const RelationInfo* relation,
                const std::vector<const RelationInfo*>& truncated, const char* during) {
  if (!s->in_stream) {
    CheckAssemblerStatus(s->assembler.AddChange(std::move(c), relation, truncated, SinkFor(ctx)), s->assembler, during);
    return;
  }
  // Each stream record describes the relations its change refers to, so it decodes and verifies
  // on its own (DecodeRecord refuses a change of an undescribed relation) and a subtransaction
  // abort can never discard a description a later change needs.
  Result<std::string> bytes = EncodeStreamRecord(s->options.flow, s->stream_xid, std::move(c), relation, truncated);
  if (!bytes.ok()) RaiseCoreError(bytes.error(), during);
  WriteStreamRecord(ctx, kStreamChangeRecord, s->stream_top_xid, s->stream_xid, *bytes);
}

const WrittenRecord& LastWrittenRecord() { return last_written; }

}  // namespace trellara::plugin
