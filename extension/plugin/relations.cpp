// plugin/relations.cpp — the output plugin's relation cache and publication membership.
//
// Membership follows pgoutput (PG15): FOR ALL TABLES, FOR TABLES IN SCHEMA, FOR TABLE, partitions
// per publish_via_partition_root, and the publication's actions; row filters and column lists are
// refused; Trellara's own relations are never captured (plugin.cpp NOTES). Invalidation callbacks
// only mark entries; memory is freed and entries rebuilt on the next lookup, never inside a
// callback.
#include "plugin/state.h"

namespace trellara::plugin {

// Callbacks only mark: they may run inside Lookup (any catalog access processes invalidations)
// while it iterates s->publications or uses an entry's conversion map, so they free nothing and
// never insert into or erase from s->relations (references into it stay valid).
void MarkInvalid(CachedRelation& rel) {
  rel.valid = false;
  rel.invalidations += 1;
}

void InvalidateAllRelations(State* s) {
  for (auto& [oid, rel] : s->relations) MarkInvalid(rel);
  s->publications_valid = false;
}

extern "C" void RelcacheCallback(Datum, Oid relid) {
  State* s = active_state;
  if (s == nullptr) return;
  if (relid == InvalidOid) {
    InvalidateAllRelations(s);
    return;
  }
  auto it = s->relations.find(relid);
  if (it != s->relations.end()) MarkInvalid(it->second);
  // A partition's root may be published in its place: its change invalidates the partitions.
  for (auto& [oid, rel] : s->relations)
    if (rel.publish_as_relid == relid) MarkInvalid(rel);
}

extern "C" void TypeCallback(Datum, int, uint32 hashvalue) {
  State* s = active_state;
  if (s == nullptr) return;
  for (auto& [oid, rel] : s->relations)
    if (hashvalue == 0 || std::find(rel.type_hashes.begin(), rel.type_hashes.end(), hashvalue) != rel.type_hashes.end())
      MarkInvalid(rel);
}

extern "C" void PublicationCallback(Datum, int, uint32) {
  if (active_state != nullptr) InvalidateAllRelations(active_state);
}

// --- publications and relations ----------------------------------------------------------------
// Rebuilds the publication list when invalid, freeing the previous one here (at lookup time,
// never in a callback). Called only at the start of Lookup, before anything iterates the list.
void LoadPublications(State* s) {
  if (s->publications_valid) return;
  s->publications = nullptr;
  MemoryContextReset(s->publications_context);
  s->publications_valid = true;  // an invalidation while loading below clears it again
  MemoryContext old = MemoryContextSwitchTo(s->publications_context);
  List* pubs = nullptr;
  for (const auto& name : s->options.publication_names) {
    const char* cname = name.c_str();
    Publication* pub = pg::CallPostgres([cname] { return GetPublicationByName(cname, false); });
    pubs = PGCALL(lappend(pubs, pub));
  }
  MemoryContextSwitchTo(old);
  s->publications = pubs;
}

// Refuses row filters and column lists: a filtered stream applied as complete would diverge.
void RefuseRowFilterOrColumnList(Publication* pub, Oid relid, Relation relation) {
  bool qual_null = true, attrs_null = true;
  pg::CallPostgres([&] {
    HeapTuple tup = SearchSysCache2(PUBLICATIONRELMAP, ObjectIdGetDatum(relid), ObjectIdGetDatum(pub->oid));
    if (!HeapTupleIsValid(tup)) return;
    (void)SysCacheGetAttr(PUBLICATIONRELMAP, tup, Anum_pg_publication_rel_prqual, &qual_null);
    (void)SysCacheGetAttr(PUBLICATIONRELMAP, tup, Anum_pg_publication_rel_prattrs, &attrs_null);
    ReleaseSysCache(tup);
  });
  if (!qual_null || !attrs_null) {
    std::string what = !qual_null ? "a row filter (WHERE)" : "a column list";
    throw pg::SqlError(ERRCODE_FEATURE_NOT_SUPPORTED,
                       std::string("publication \"") + pub->name + "\" has " + what + " on table \"" +
                           PGCALL(get_namespace_name(RelationGetNamespace(relation))) + "." +
                           RelationGetRelationName(relation) + "\", which trellara does not support",
                       {},
                       "Trellara replicates whole tables so the target can be verified against the source; "
                       "remove the filter with ALTER PUBLICATION ... SET TABLE, or use a separate table.");
  }
}

ReplicaIdentity IdentityOf(char relreplident) {
  switch (relreplident) {
    case REPLICA_IDENTITY_NOTHING: return ReplicaIdentity::Nothing;
    case REPLICA_IDENTITY_FULL: return ReplicaIdentity::Full;
    case REPLICA_IDENTITY_INDEX: return ReplicaIdentity::Index;
    default: return ReplicaIdentity::Default;
  }
}

// Describes `relation` (columns in attribute order, dropped and generated columns excluded).
void Describe(Relation relation, CachedRelation& out) {
  TupleDesc desc = RelationGetDescr(relation);
  Bitmapset* key = PGCALL(RelationGetIdentityKeyBitmap(relation));
  out.info = RelationInfo{};
  out.attnums.clear();
  out.output_functions.clear();
  out.varlena.clear();
  out.info.oid = RelationGetRelid(relation);
  out.info.schema = PGCALL(get_namespace_name(RelationGetNamespace(relation)));
  out.info.name = RelationGetRelationName(relation);
  out.info.replica_identity = IdentityOf(relation->rd_rel->relreplident);
  for (int i = 0; i < desc->natts; i++) {
    Form_pg_attribute att = TupleDescAttr(desc, i);
    if (att->attisdropped || att->attgenerated) continue;
    Column c;
    c.name = NameStr(att->attname);
    c.type_oid = att->atttypid;
    c.type_name = PGCALL(format_type_with_typemod(att->atttypid, att->atttypmod));
    c.typmod = att->atttypmod;
    c.is_key = bms_is_member(att->attnum - FirstLowInvalidHeapAttributeNumber, key);
    out.info.columns.push_back(std::move(c));
    out.attnums.push_back(att->attnum);
    Oid typoutput = InvalidOid;
    bool is_varlena = false;
    pg::CallPostgres([&] { getTypeOutputInfo(att->atttypid, &typoutput, &is_varlena); });
    out.output_functions.push_back(typoutput);
    out.varlena.push_back(is_varlena);
  }
  out.info.fingerprint = ComputeFingerprint(out.info);
  out.varlena_bytes.assign(out.varlena.begin(), out.varlena.end());
  out.all_columns.assign(out.info.columns.size(), 1);
  out.key_columns.clear();
  for (const Column& c : out.info.columns) out.key_columns.push_back(c.is_key ? 1 : 0);
}

// Whether `relation` is one of Trellara's own (see NOTES): never captured.
bool IsOwnRelation(Relation relation) {
  Oid nsp = RelationGetNamespace(relation);
  char* name = PGCALL(get_namespace_name(nsp));
  return name != nullptr && std::strcmp(name, kOwnSchema) == 0;
}

// Returns the valid cache entry of `relation`, rebuilding it (and freeing what the previous
// version owned) when an invalidation marked it.
CachedRelation& Lookup(State* s, Relation relation) {
  Oid relid = RelationGetRelid(relation);
  CachedRelation& entry = s->relations[relid];
  if (entry.valid) return entry;
  LoadPublications(s);
  const uint64_t invalidations_seen = entry.invalidations;
  MemoryContext old_context = entry.context;
  entry = CachedRelation{};
  entry.invalidations = invalidations_seen;
  if (old_context != nullptr) MemoryContextDelete(old_context);
  if (IsOwnRelation(relation)) {
    entry.own = true;
    entry.publish_as_relid = relid;
    entry.valid = entry.invalidations == invalidations_seen;
    return entry;
  }
  List* pubids = PGCALL(GetRelationPublications(relid));
  List* schema_pubids = PGCALL(GetSchemaPublications(RelationGetNamespace(relation)));
  bool am_partition = relation->rd_rel->relispartition;
  List* ancestors = am_partition ? PGCALL(get_partition_ancestors(relid)) : nullptr;
  Oid publish_as = relid;
  ListCell* lc;
  foreach (lc, s->publications) {
    Publication* pub = static_cast<Publication*>(lfirst(lc));
    bool publish = false;
    Oid pub_relid = relid;
    if (pub->alltables) {
      publish = true;
      if (pub->pubviaroot && am_partition) pub_relid = llast_oid(ancestors);
    } else {
      if (am_partition) {
        int level = 0;
        Oid ancestor = PGCALL(GetTopMostAncestorInPublication(pub->oid, ancestors, &level));
        if (ancestor != InvalidOid) {
          publish = true;
          if (pub->pubviaroot) pub_relid = ancestor;
        }
      }
      if (list_member_oid(pubids, pub->oid) || list_member_oid(schema_pubids, pub->oid)) publish = true;
    }
    if (!publish) continue;
    if (!pub->alltables) RefuseRowFilterOrColumnList(pub, pub_relid, relation);
    // Like pgoutput: the topmost published ancestor wins when publishing via the root.
    if (pub_relid != relid) publish_as = pub_relid;
    entry.publish_insert |= pub->pubactions.pubinsert;
    entry.publish_update |= pub->pubactions.pubupdate;
    entry.publish_delete |= pub->pubactions.pubdelete;
    entry.publish_truncate |= pub->pubactions.pubtruncate;
  }
  entry.publish_as_relid = publish_as;
  if (publish_as == relid) {
    Describe(relation, entry);
  } else {
    Relation root = PGCALL(RelationIdGetRelation(publish_as));
    if (!RelationIsValid(root))
      throw pg::SqlError(ERRCODE_UNDEFINED_TABLE, "could not open partition root " + std::to_string(publish_as) +
                                                      " of \"" + RelationGetRelationName(relation) + "\"");
    // The map and its descriptors are the entry's own copies (CreateTupleDescCopyConstr, in the
    // entry's context): the root's relcache entry is closed below and may be rebuilt any time.
    // The root is closed on every path, outside any catch block (no Postgres call in a handler).
    std::exception_ptr failure;
    try {
      Describe(root, entry);
      MemoryContext parent = s->cache_context;
      entry.context = PGCALL(AllocSetContextCreate(parent, "trellara partition map", ALLOCSET_SMALL_SIZES));
      MemoryContext cxt = entry.context;
      entry.to_root = pg::CallPostgres([&] {
        MemoryContext old = MemoryContextSwitchTo(cxt);
        TupleDesc indesc = CreateTupleDescCopyConstr(RelationGetDescr(relation));
        TupleDesc outdesc = CreateTupleDescCopyConstr(RelationGetDescr(root));
        TupleConversionMap* map = convert_tuples_by_name(indesc, outdesc);
        MemoryContextSwitchTo(old);
        return map;
      });
    } catch (...) {
      failure = std::current_exception();
    }
    pg::CallPostgres([root] { RelationClose(root); });
    if (failure) std::rethrow_exception(failure);
  }
  entry.type_hashes.clear();
  for (const Column& c : entry.info.columns)
    entry.type_hashes.push_back(PGCALL(GetSysCacheHashValue1(TYPEOID, ObjectIdGetDatum(c.type_oid))));
  // An invalidation processed while this entry was being built may have been missed by it.
  entry.valid = entry.invalidations == invalidations_seen;
  return entry;
}

// Whether `entry` is published by this decoding session (any action), as its DML would be.
bool IsPublished(const CachedRelation& entry) {
  return !entry.own && (entry.publish_insert || entry.publish_update || entry.publish_delete || entry.publish_truncate);
}

}  // namespace trellara::plugin
