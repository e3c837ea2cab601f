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
// The relation cache and publication membership are relations.cpp, the options and settings
// options.cpp; what the files share is state.h.
#include "plugin/state.h"

extern "C" {
PGDLLEXPORT void _PG_output_plugin_init(OutputPluginCallbacks* cb);
}

namespace trellara::plugin {

State* active_state = nullptr;
bool callbacks_registered = false;

namespace {

// --- GUC ---------------------------------------------------------------------------------------
DecodingTransaction current_tx{};

// --- facts for the relay's write callback ------------------------------------------------------
WrittenRecord last_written{};

// --- values ------------------------------------------------------------------------------------
// Reads the values of `tuple` (a row of `entry`'s published relation, already converted) for
// every described column, or only the key columns when `key_only`. The Postgres part runs in one
// guarded call over plain data (palloc'd in the per-change context); C++ values are built after.
enum RawKind : char { kRawNull = 'n', kRawText = 't', kRawToast = 'u' };

std::vector<Value> ReadValues(const CachedRelation& entry, TupleDesc desc, HeapTuple tuple, bool key_only) {
  const size_t ncols = entry.info.columns.size();
  const int* attnums = entry.attnums.data();
  const Oid* outputs = entry.output_functions.data();
  std::vector<char> include(ncols), varlena(ncols);
  for (size_t i = 0; i < ncols; i++) {
    include[i] = !key_only || entry.info.columns[i].is_key;
    varlena[i] = entry.varlena[i];
  }
  const char* include_p = include.data();
  const char* varlena_p = varlena.data();
  char* kinds = nullptr;
  char** texts = nullptr;
  pg::CallPostgres([&] {
    kinds = static_cast<char*>(palloc0(ncols + 1));
    texts = static_cast<char**>(palloc0((ncols + 1) * sizeof(char*)));
    for (size_t i = 0; i < ncols; i++) {
      if (!include_p[i]) continue;
      bool isnull = false;
      Datum d = heap_getattr(tuple, attnums[i], desc, &isnull);
      if (isnull) {
        kinds[i] = kRawNull;
      } else if (varlena_p[i] && VARATT_IS_EXTERNAL_ONDISK(DatumGetPointer(d))) {
        kinds[i] = kRawToast;
      } else {
        kinds[i] = kRawText;
        texts[i] = OidOutputFunctionCall(outputs[i], d);
      }
    }
  });
  std::vector<Value> out;
  out.reserve(ncols);
  for (size_t i = 0; i < ncols; i++) {
    if (!include[i]) continue;
    switch (kinds[i]) {
      case kRawNull: out.push_back(Value::Null()); break;
      case kRawToast: out.push_back(Value::UnchangedToast()); break;
      default: out.push_back(Value::Text(texts[i])); break;
    }
  }
  return out;
}

// Refuses an image that must be complete (insert, old images) but holds an unchanged-TOAST value.
void RequireComplete(const std::vector<Value>& values, const CachedRelation& entry, const char* image) {
  for (const auto& v : values)
    if (v.kind == Value::Kind::UnchangedToast)
      throw pg::SqlError(ERRCODE_DATA_CORRUPTED, std::string("the ") + image + " of a change to \"" +
                                                     entry.info.schema + "." + entry.info.name +
                                                     "\" holds an on-disk TOAST pointer, which only an UPDATE's "
                                                     "new tuple may; refusing to emit an incomplete row");
}

// --- writing -----------------------------------------------------------------------------------
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

State* StateOf(LogicalDecodingContext* ctx) { return static_cast<State*>(ctx->output_plugin_private); }

RecordSink SinkFor(LogicalDecodingContext* ctx) {
  return [ctx](const EmittedRecord& r) { return WriteRecord(ctx, r); };
}

int64_t UnixMicros(TimestampTz t) {
  return static_cast<int64_t>(t) +
         static_cast<int64_t>(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC;
}

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

// Pins the settings that shape type output and type names for the duration of one transaction's
// decoding, so the same WAL yields the same bytes (and checksums) whoever decodes it: TimeZone
// for timestamptz/tstzrange text, an empty search_path so user types, regclass values and the
// like are schema-qualified the same way in every session.
bool settings_pinned_by_process = false;

void PinOutputSettings(State* s) {
  if (settings_pinned_by_process) return;  // the relay worker pinned them for its whole life
  pg::CallPostgres([&] {
    s->guc_nest_level = NewGUCNestLevel();
    (void)set_config_option("datestyle", "ISO, YMD", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    (void)set_config_option("intervalstyle", "postgres", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    (void)set_config_option("extra_float_digits", "3", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    (void)set_config_option("bytea_output", "hex", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    (void)set_config_option("timezone", "UTC", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
    (void)set_config_option("search_path", "", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
  });
}

void UnpinOutputSettings(State* s) {
  if (s->guc_nest_level == 0) return;
  int level = s->guc_nest_level;
  s->guc_nest_level = 0;
  pg::CallPostgres([level] { AtEOXact_GUC(false, level); });
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

// Writes one stream record (never a log record): the relay routes it to its spill store.
void WriteStreamRecord(LogicalDecodingContext* ctx, uint8_t type, uint32_t top_xid, uint32_t xid,
                       const std::string& bytes, uint64_t commit_lsn = 0, uint64_t begin_lsn = 0,
                       int64_t commit_time_us = 0) {
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

// Builds and adds one INSERT/UPDATE/DELETE. Runs in the per-change memory context.
void AddRowChange(State* s, LogicalDecodingContext* ctx, Relation relation, ReorderBufferChange* change) {
  CachedRelation& entry = Lookup(s, relation);
  Change c;
  switch (change->action) {
    case REORDER_BUFFER_CHANGE_INSERT:
      if (!entry.publish_insert) return;
      c.op = Op::Insert;
      break;
    case REORDER_BUFFER_CHANGE_UPDATE:
      if (!entry.publish_update) return;
      c.op = Op::Update;
      break;
    case REORDER_BUFFER_CHANGE_DELETE:
      if (!entry.publish_delete) return;
      c.op = Op::Delete;
      break;
    default:
      Assert(false);
      return;
  }
  c.relation_oid = entry.info.oid;
  snprintf(current_tx.relation, sizeof current_tx.relation, "%s.%s", entry.info.schema.c_str(),
           entry.info.name.c_str());
  TupleDesc desc = RelationGetDescr(relation);
  HeapTuple old_tuple = change->data.tp.oldtuple ? &change->data.tp.oldtuple->tuple : nullptr;
  HeapTuple new_tuple = change->data.tp.newtuple ? &change->data.tp.newtuple->tuple : nullptr;
  if (entry.to_root != nullptr) {
    // The row is published as a row of the partition root: convert it to the root's rowtype.
    TupleConversionMap* map = entry.to_root;
    desc = map->outdesc;
    if (old_tuple) old_tuple = PGCALL(execute_attr_map_tuple(old_tuple, map));
    if (new_tuple) new_tuple = PGCALL(execute_attr_map_tuple(new_tuple, map));
  }
  if (new_tuple != nullptr && c.op != Op::Delete) {
    c.new_tuple = ReadValues(entry, desc, new_tuple, false);
    if (c.op == Op::Insert) RequireComplete(c.new_tuple, entry, "new tuple");
  }
  if (old_tuple != nullptr) {
    bool full = entry.info.replica_identity == ReplicaIdentity::Full;
    c.old_image = full ? OldImage::Full : OldImage::Key;
    c.old_tuple = ReadValues(entry, desc, old_tuple, !full);
    RequireComplete(c.old_tuple, entry, "old tuple");
  }
  if (c.op == Op::Insert && new_tuple == nullptr)
    throw pg::SqlError(ERRCODE_DATA_CORRUPTED, "INSERT into \"" + entry.info.schema + "." + entry.info.name +
                                                   "\" decoded without a new tuple");
  EmitChange(s, ctx, std::move(c), &entry.info, {}, "change");
}

extern "C" void ChangeCallback(LogicalDecodingContext* ctx, ReorderBufferTXN*, Relation relation,
                               ReorderBufferChange* change) {
  // As pgoutput does in PostgreSQL 15: report progress every 100 changes, so the process driving
  // decoding (the relay worker) can notice SIGTERM and postmaster death inside a long transaction.
  static int changes_since_progress = 0;
  if (++changes_since_progress >= 100) {
    changes_since_progress = 0;
    OutputPluginUpdateProgress(ctx, false);
  }
  State* s = StateOf(ctx);
  if (s->skipping) return;
  MemoryContext old = MemoryContextSwitchTo(s->change_context);
  pg::GuardEntry("trellara output plugin change", [&] { AddRowChange(s, ctx, relation, change); });
  MemoryContextSwitchTo(old);
  MemoryContextReset(s->change_context);
}

extern "C" void TruncateCallback(LogicalDecodingContext* ctx, ReorderBufferTXN*, int nrelations, Relation relations[],
                                 ReorderBufferChange* change) {
  State* s = StateOf(ctx);
  if (s->skipping) return;
  MemoryContext old = MemoryContextSwitchTo(s->change_context);
  pg::GuardEntry("trellara output plugin truncate", [&] {
    Change c;
    c.op = Op::Truncate;
    c.truncate.cascade = change->data.truncate.cascade;
    c.truncate.restart_identity = change->data.truncate.restart_seqs;
    std::vector<const RelationInfo*> infos;
    std::deque<CachedRelation> own;  // partitions truncated alone, described as themselves
    for (int i = 0; i < nrelations; i++) {
      CachedRelation& entry = Lookup(s, relations[i]);
      if (!entry.publish_truncate) continue;
      // A partition published via its root is truncated on the target only through its root
      // when the root itself was truncated: naming the root for a TRUNCATE of some partitions
      // would empty every partition there. A TRUNCATE of the partition alone is captured as a
      // TRUNCATE of that partition, described as itself: a target with the same partitioning
      // applies it; a target without that table fails closed (quarantine) instead of silently
      // keeping rows the source removed (pgoutput drops such a TRUNCATE).
      if (entry.publish_as_relid != RelationGetRelid(relations[i])) {
        bool root_truncated = false;
        for (int j = 0; j < nrelations; j++) root_truncated |= RelationGetRelid(relations[j]) == entry.publish_as_relid;
        if (root_truncated) continue;
        own.emplace_back();
        Describe(relations[i], own.back());
        c.truncate.relation_oids.push_back(own.back().info.oid);
        infos.push_back(&own.back().info);
        continue;
      }
      bool seen = false;
      for (uint32_t oid : c.truncate.relation_oids) seen |= oid == entry.info.oid;
      if (seen) continue;
      c.truncate.relation_oids.push_back(entry.info.oid);
      infos.push_back(&entry.info);
    }
    if (infos.empty()) return;
    EmitChange(s, ctx, std::move(c), nullptr, infos, "truncate");
  });
  MemoryContextSwitchTo(old);
  MemoryContextReset(s->change_context);
}

// A DDL record written by the extension's event triggers (functions/ddl_capture.cpp): emitted as a
// Ddl change in order with the transaction's DML when this session publishes the relation, whatever
// the `messages` option says. A record that does not decode is an ERROR naming its LSN: skipping
// it would let the applier run the transaction's DML against the old definition.
void AddDdlChange(State* s, LogicalDecodingContext* ctx, XLogRecPtr lsn, Size sz, const char* message) {
  Result<Ddl> decoded = DecodeDdl(std::string_view(message, sz));
  if (!decoded.ok())
    throw pg::SqlError(ERRCODE_DATA_CORRUPTED,
                       "trellara output plugin could not decode the DDL record (logical message \"" +
                           std::string(kDdlMessagePrefix) + "\") at " + FormatLsn(lsn) + ": " + decoded.error().message,
                       {},
                       "The record was written by trellara's event trigger; a different trellara version may have "
                       "written it. Decoding cannot continue past it: install the matching trellara version.");
  Change c;
  c.op = Op::Ddl;
  c.ddl = std::move(*decoded);
  // Capture metadata only: in a streamed transaction the record belongs to the subtransaction that
  // ran the command (its abort discards it); never logged.
  if (s->in_stream && c.ddl.capture_xid != 0) s->stream_xid = c.ddl.capture_xid;
  c.ddl.capture_xid = 0;
  // The record names every publication that contained the table when the command ran (the
  // position of this message). None of this session's: nothing to emit, and no Lookup, which would
  // fail on a session publication that did not exist yet at this position.
  bool in_session_publication = false;
  for (const auto& pub : c.ddl.publications)
    for (const auto& mine : s->options.publication_names) in_session_publication |= pub == mine;
  if (!in_session_publication) return;
  if (!c.ddl.definition) {
    // DROP TABLE: the relation is gone; published because it was in one of this session's publications.
    c.relation_oid = 0;
    snprintf(current_tx.relation, sizeof current_tx.relation, "%s.%s", c.ddl.relation_schema.c_str(),
             c.ddl.relation_name.c_str());
    EmitChange(s, ctx, std::move(c), nullptr, {}, "DDL");
    return;
  }
  const Oid relid = c.ddl.definition->oid;
  // The historic snapshot sees the catalog as of this message: the relation after the command.
  Relation relation = PGCALL(RelationIdGetRelation(relid));
  if (!RelationIsValid(relation))
    throw pg::SqlError(ERRCODE_UNDEFINED_TABLE, "trellara output plugin could not open relation " +
                                                    std::to_string(relid) + " (" + c.ddl.definition->schema + "." +
                                                    c.ddl.definition->name + ") named by the DDL record at " +
                                                    FormatLsn(lsn));
  // Closed on every path, outside any catch block (no Postgres call in a handler).
  std::exception_ptr failure;
  try {
    CachedRelation& entry = Lookup(s, relation);
    bool emit = IsPublished(entry);
    CachedRelation own;  // a partition published via its root: the record describes the partition
    const RelationInfo* info = &entry.info;
    if (emit && entry.publish_as_relid != relid) {
      const Oid root_oid = entry.publish_as_relid;
      std::string root = pg::CallPostgres([root_oid] {
        return quote_qualified_identifier(get_namespace_name(get_rel_namespace(root_oid)), get_rel_name(root_oid));
      });
      if (c.ddl.object_type == "table" && c.ddl.object_identity == root) {
        // A statement on the root that recursed to this partition: the root's own record carries
        // it for this session, which publishes the partition's rows as the root's.
        emit = false;
      } else {
        c.ddl.steps.push_back(DdlStep{DdlStepKind::Unsupported, {}, {},
                                      "DDL on partition " + c.ddl.definition->schema + "." + c.ddl.definition->name +
                                          ", which is published via its root " + root});
        Describe(relation, own);
        info = &own.info;
      }
    }
    if (emit) {
      c.relation_oid = relid;
      snprintf(current_tx.relation, sizeof current_tx.relation, "%s.%s", info->schema.c_str(), info->name.c_str());
      EmitChange(s, ctx, std::move(c), info, {}, "DDL");
    }
  } catch (...) {
    failure = std::current_exception();
  }
  pg::CallPostgres([relation] { RelationClose(relation); });
  if (failure) std::rethrow_exception(failure);
}

extern "C" void MessageCallback(LogicalDecodingContext* ctx, ReorderBufferTXN*, XLogRecPtr lsn, bool transactional,
                                const char* prefix, Size sz, const char* message) {
  State* s = StateOf(ctx);
  // A non-transactional message belongs to no transaction: there is no boundary to apply it at.
  if (s->skipping || !transactional) return;
  if (std::strcmp(prefix, kDdlMessagePrefix) == 0) {
    MemoryContext old = MemoryContextSwitchTo(s->change_context);
    pg::GuardEntry("trellara output plugin DDL message", [&] { AddDdlChange(s, ctx, lsn, sz, message); });
    MemoryContextSwitchTo(old);
    MemoryContextReset(s->change_context);
    return;
  }
  if (!s->options.messages) return;
  pg::GuardEntry("trellara output plugin message", [&] {
    Change c;
    c.op = Op::Message;
    c.message = LogicalMessage{true, prefix, std::string(message, sz)};
    EmitChange(s, ctx, std::move(c), nullptr, {}, "message");
  });
}

// --- streaming (in-progress transactions larger than logical_decoding_work_mem) -----------------
// PostgreSQL streams the largest transaction in segments once the reorder buffer is full: each
// segment is stream_start, changes, stream_stop; then stream_abort (of the whole transaction or of
// one of its subtransactions) or stream_commit. Every change becomes a stream record (EmitChange);
// the relay keeps them in its spill store and assembles the transaction's log records at
// stream_commit only. Two-phase decoding is not enabled, so stream_prepare never runs.

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

extern "C" bool FilterByOriginCallback(LogicalDecodingContext*, RepOriginId) {
  // Changes replayed into this database by other replication are captured like any other: the
  // DBA chooses what to publish. (Loop prevention between two Trellara flows is future work.)
  return false;
}

}  // namespace

const WrittenRecord& LastWrittenRecord() { return last_written; }

bool CurrentAssemblerOptions(TransactionAssembler::Options* out) {
  if (active_state == nullptr) return false;
  *out = active_state->assembler_options;
  return true;
}
const DecodingTransaction& CurrentTransaction() { return current_tx; }

void PinOutputSettingsForProcess() {
  static const char* const kSettings[][2] = {{"datestyle", "ISO, YMD"}, {"intervalstyle", "postgres"},
                                             {"extra_float_digits", "3"}, {"bytea_output", "hex"},
                                             {"timezone", "UTC"},         {"search_path", ""}};
  for (const auto& setting : kSettings) SetConfigOption(setting[0], setting[1], PGC_SUSET, PGC_S_OVERRIDE);
  settings_pinned_by_process = true;
}

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
