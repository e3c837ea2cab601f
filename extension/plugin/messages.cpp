// plugin/messages.cpp — the output plugin's logical messages: DDL records written by the
// extension's event triggers (functions/ddl_capture.cpp), emitted as Ddl changes in order with the
// transaction's DML, and other transactional messages when the `messages` option is on. It must
// never skip a DDL record it cannot decode (an ERROR naming its LSN instead), nor capture a
// non-transactional message (it belongs to no transaction).
#include "plugin/state.h"

namespace trellara::plugin {

namespace {

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
    current_tx.relation_oid = 0;  // not a cache entry's name (dml_changes.cpp formats its own)
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
      current_tx.relation_oid = 0;  // not a cache entry's name (dml_changes.cpp formats its own)
      EmitChange(s, ctx, std::move(c), info, {}, "DDL");
    }
  } catch (...) {
    failure = std::current_exception();
  }
  pg::CallPostgres([relation] { RelationClose(relation); });
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

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

}  // namespace trellara::plugin
