// plugin/dml_changes.cpp — the output plugin's row changes (INSERT, UPDATE, DELETE) and TRUNCATE:
// reads each published row's values as text (converted to the partition root's rowtype when
// published via the root) and hands them to EmitChange, in the per-change memory context, reset
// after every change. It must never emit an incomplete row (an unchanged-TOAST value outside an
// UPDATE's new tuple) nor a TRUNCATE that would empty more on the target than on the source.
#include "plugin/state.h"

namespace trellara::plugin {

namespace {

// --- values ------------------------------------------------------------------------------------
// Reads the values of `tuple` (a row of `entry`'s published relation, already converted) for
// every described column, or only the key columns when `key_only`. The Postgres part runs in one
// guarded call over plain data (palloc'd in the per-change context); C++ values are built after.
enum RawKind : char { kRawNull = 'n', kRawText = 't', kRawToast = 'u' };

std::vector<Value> ReadValues(const CachedRelation& entry, TupleDesc desc, HeapTuple tuple, bool key_only) {
  const size_t ncols = entry.info.columns.size();
  const int* attnums = entry.attnums.data();
  const Oid* outputs = entry.output_functions.data();
  // Which columns are read and which may be TOASTed, as plain bytes for the guarded call
  // (precomputed per cache entry by Describe: no allocation per tuple).
  const char* include_p = key_only ? entry.key_columns.data() : entry.all_columns.data();
  const char* varlena_p = entry.varlena_bytes.data();
  char* kinds = nullptr;
  char** texts = nullptr;
  size_t included = 0;
  pg::CallPostgres([&] {
    kinds = static_cast<char*>(palloc0(ncols + 1));
    texts = static_cast<char**>(palloc0((ncols + 1) * sizeof(char*)));
    for (size_t i = 0; i < ncols; i++) {
      if (!include_p[i]) continue;
      included++;
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
  out.reserve(included);
  for (size_t i = 0; i < ncols; i++) {
    if (!include_p[i]) continue;
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
  if (current_tx.relation_oid != entry.info.oid || current_tx.relation_invalidations != entry.invalidations) {
    snprintf(current_tx.relation, sizeof current_tx.relation, "%s.%s", entry.info.schema.c_str(),
             entry.info.name.c_str());
    current_tx.relation_oid = entry.info.oid;
    current_tx.relation_invalidations = entry.invalidations;
  }
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

}  // namespace

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

}  // namespace trellara::plugin
