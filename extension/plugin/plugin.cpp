// plugin/plugin.cpp — the `trellara` logical decoding output plugin: Postgres callbacks that turn
// each committed transaction of the published tables into Trellara records (protobuf bytes).
//
// Adapter only: it reads tuples, relation metadata and publication membership from Postgres and
// hands plain values to core's TransactionAssembler, which decides the record shape (whole
// envelope, or chunks + manifest + commit marker). It must never decide record boundaries, never
// hold more than one chunk of changes, never let a C++ exception reach Postgres (GuardEntry at
// every callback) and never let a Postgres ERROR jump over a C++ frame (CallPostgres).
//
// NOTES
// - Identity: commit_lsn is txn->end_lsn, the end of the commit record: the position the slot's
//   confirmed_flush and the target's replication origin advance to, strictly increasing in
//   decoding order.
// - Publication membership follows pgoutput (PG15): FOR ALL TABLES, FOR TABLES IN SCHEMA,
//   FOR TABLE, partitions per publish_via_partition_root, and the publication's actions. Row
//   filters and column lists are refused (ERROR naming the publication and table): applying a
//   filtered stream as if complete would silently diverge.
// - Trellara's own relations are never captured, however they are published (FOR ALL TABLES,
//   TABLES IN SCHEMA trellara, or FOR TABLE trellara.x): every relation in schema `trellara`, the
//   extension's fixed schema, which holds the source catalog (trellara.flows) and, on a server
//   that is also a target, the applier's state tables. Replaying them on a target would at best
//   quarantine ("trellara.flows does not exist") and at worst overwrite the target's own dedup
//   and checkpoint state. create_flow() refuses a publication that names them explicitly and
//   check() warns when one is added later (docs/capture.md).
// - Cache discipline (as pgoutput): invalidation callbacks only mark entries invalid; memory is
//   freed and entries are rebuilt on the next lookup, never inside a callback, which can run in
//   the middle of a lookup that is using that memory. Partition conversion maps are built on
//   copies of the tuple descriptors owned by the entry, never on a relcache entry that is closed
//   right after.
// - Values are text from the type output functions, with DateStyle/IntervalStyle/
//   extra_float_digits/bytea_output/TimeZone (UTC)/search_path (empty) pinned while a transaction
//   is decoded, so the text reads back the same on any target and the same WAL always yields the
//   same bytes. An on-disk TOAST pointer in a new tuple is "unchanged TOAST", never null.
// - Prepared transactions: two-phase decoding is not enabled, so Postgres decodes them at
//   COMMIT PREPARED and never when rolled back. Non-transactional logical messages belong to no
//   transaction and are not captured (documented in docs/capture.md).
//
// This file registers the callbacks and handles startup, shutdown, begin and commit. Row changes
// and TRUNCATE are dml_changes.cpp, logical messages and DDL records messages.cpp, streamed
// transactions streaming.cpp, writing records into ctx->out record_writer.cpp, the settings pinned
// while decoding output_settings.cpp, the relation cache and publication membership relations.cpp,
// the options and GUCs options.cpp; what the files share is state.h.
#include "plugin/state.h"

extern "C" {
PGDLLEXPORT void _PG_output_plugin_init(OutputPluginCallbacks* cb);
}

namespace trellara::plugin {

State* active_state = nullptr;
bool callbacks_registered = false;
DecodingTransaction current_tx{};

int64_t UnixMicros(TimestampTz t) {
  return static_cast<int64_t>(t) +
         static_cast<int64_t>(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC;
}

namespace {

// Deletes the C++ state when the decoding context's memory goes away, on success or ERROR.
extern "C" void FreeState(void* arg) {
  State* s = static_cast<State*>(arg);
  if (active_state == s) active_state = nullptr;
  delete s;
}

// --- callbacks (each one a guarded entry point) ------------------------------------------------
extern "C" void StartupCallback(LogicalDecodingContext* ctx, OutputPluginOptions* opt, bool is_init) {
  pg::GuardEntry("trellara output plugin startup", [&] {
    opt->output_type = OUTPUT_PLUGIN_BINARY_OUTPUT;
    opt->receive_rewrites = false;
    if (is_init) return;  // slot creation: options are not given then
    Options options = ParseOptions(ctx->output_plugin_options);
    TransactionAssembler::Options assembler_options{options.flow, GetSystemIdentifier(), options.chunk_changes};
    assembler_options.chunk_bytes = options.chunk_bytes;
    assembler_options.record_bytes_max = static_cast<uint64_t>(record_kb_max_guc) << 10;
    if (options.partitions > 0) {
      assembler_options.partitioned = true;
      assembler_options.map = partition::PartitionMap{options.map_version, options.partitions};
    }
    auto* s = new State(assembler_options);
    // Stream in-progress transactions only for a consumer that asked (the relay, which spills
    // them); a SQL session decodes every transaction at its commit as before.
    ctx->streaming = ctx->streaming && options.streaming;
    s->options = std::move(options);
    s->ctx = ctx;
    pg::CallPostgres([&] {
      MemoryContextCallback* cb =
          static_cast<MemoryContextCallback*>(MemoryContextAlloc(ctx->context, sizeof(MemoryContextCallback)));
      cb->func = FreeState;
      cb->arg = s;
      MemoryContextRegisterResetCallback(ctx->context, cb);
      s->cache_context = AllocSetContextCreate(ctx->context, "trellara relation cache", ALLOCSET_SMALL_SIZES);
      s->publications_context = AllocSetContextCreate(ctx->context, "trellara publications", ALLOCSET_SMALL_SIZES);
      s->change_context = AllocSetContextCreate(ctx->context, "trellara change", ALLOCSET_DEFAULT_SIZES);
      if (!callbacks_registered) {
        CacheRegisterRelcacheCallback(RelcacheCallback, (Datum)0);
        CacheRegisterSyscacheCallback(PUBLICATIONOID, PublicationCallback, (Datum)0);
        CacheRegisterSyscacheCallback(PUBLICATIONNAMESPACEMAP, PublicationCallback, (Datum)0);
        CacheRegisterSyscacheCallback(PUBLICATIONRELMAP, PublicationCallback, (Datum)0);
        CacheRegisterSyscacheCallback(TYPEOID, TypeCallback, (Datum)0);
        callbacks_registered = true;
      }
    });
    ctx->output_plugin_private = s;
    active_state = s;
  });
}

extern "C" void ShutdownCallback(LogicalDecodingContext* ctx) {
  pg::GuardEntry("trellara output plugin shutdown", [&] {
    State* s = StateOf(ctx);
    if (s != nullptr && active_state == s) active_state = nullptr;
  });
}

extern "C" void BeginCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn) {
  pg::GuardEntry("trellara output plugin begin", [&] {
    State* s = StateOf(ctx);
    s->skipping = txn->end_lsn <= s->options.skip_through_lsn;
    if (s->skipping) return;
    current_tx = DecodingTransaction{true, txn->xid, txn->end_lsn, ""};
    s->assembler.Begin(txn->xid, txn->first_lsn, txn->end_lsn, UnixMicros(txn->xact_time.commit_time));
    PinOutputSettings(s);
  });
}

extern "C" void CommitCallback(LogicalDecodingContext* ctx, ReorderBufferTXN*, XLogRecPtr) {
  pg::GuardEntry("trellara output plugin commit", [&] {
    State* s = StateOf(ctx);
    if (s->skipping) {
      s->skipping = false;
      return;
    }
    UnpinOutputSettings(s);
    CheckAssemblerStatus(s->assembler.Commit(SinkFor(ctx)), s->assembler, "commit");
    current_tx.open = false;
  });
}

extern "C" bool FilterByOriginCallback(LogicalDecodingContext*, RepOriginId) {
  // Changes replayed into this database by other replication are captured like any other: the
  // DBA chooses what to publish. (Loop prevention between two Trellara flows is future work.)
  return false;
}

}  // namespace

bool CurrentAssemblerOptions(TransactionAssembler::Options* out) {
  if (active_state == nullptr) return false;
  *out = active_state->assembler_options;
  return true;
}
const DecodingTransaction& CurrentTransaction() { return current_tx; }

}  // namespace trellara::plugin

extern "C" void _PG_output_plugin_init(OutputPluginCallbacks* cb) {
  using namespace trellara::plugin;
  static_assert(std::is_same_v<decltype(&_PG_output_plugin_init), LogicalOutputPluginInit>);
  cb->startup_cb = StartupCallback;
  cb->begin_cb = BeginCallback;
  cb->change_cb = ChangeCallback;
  cb->truncate_cb = TruncateCallback;
  cb->commit_cb = CommitCallback;
  cb->message_cb = MessageCallback;
  cb->filter_by_origin_cb = FilterByOriginCallback;
  cb->shutdown_cb = ShutdownCallback;
  cb->stream_start_cb = StreamStartCallback;
  cb->stream_stop_cb = StreamStopCallback;
  cb->stream_abort_cb = StreamAbortCallback;
  cb->stream_commit_cb = StreamCommitCallback;
  cb->stream_change_cb = StreamChangeCallback;
  cb->stream_message_cb = StreamMessageCallback;
  cb->stream_truncate_cb = StreamTruncateCallback;
}
