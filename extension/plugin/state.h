// plugin/state.h — what the files of the output plugin share (internal to extension/plugin/): the
// state of one decoding context, its relation cache entries, the plugin's options and settings,
// and the functions one file of the plugin calls in another. plugin.h is what the relay sees.
#pragma once

extern "C" {
#include "postgres.h"

#include "access/detoast.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/tupconvert.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/partition.h"
#include "catalog/pg_publication.h"
#include "catalog/pg_publication_rel.h"
#include "commands/defrem.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "access/xlog.h"
#include "replication/logical.h"
#include "replication/output_plugin.h"
#include "replication/reorderbuffer.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/syscache.h"
#include "nodes/pg_list.h"
#include "nodes/bitmapset.h"
#include "utils/varlena.h"

}

#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <type_traits>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pg/guard.h"
#include "plugin/plugin.h"
#include "trellara/capture/assembler.h"
#include "trellara/record/checksum.h"
#include "trellara/record/codec.h"
#include "trellara/capture/stream_spill.h"

// Every ERROR-capable Postgres call made from a frame that holds C++ objects goes through here.
#define PGCALL(expr) ::trellara::pg::CallPostgres([&]() -> decltype(auto) { return (expr); })

namespace trellara::plugin {

// --- settings (options.cpp) ----------------------------------------------------------------------
extern int chunk_changes_guc;
extern int chunk_kb_guc;
extern int record_kb_max_guc;

// --- per-decoding-context state ----------------------------------------------------------------
struct CachedRelation {
  bool valid = false;
  uint64_t invalidations = 0;          // bumped by every invalidation: a rebuild that saw one is not valid
  bool own = false;                    // a Trellara relation (schema trellara): never captured
  bool publish_insert = false, publish_update = false, publish_delete = false, publish_truncate = false;
  Oid publish_as_relid = InvalidOid;
  RelationInfo info;                   // of publish_as_relid
  std::vector<int> attnums;            // attribute numbers of info.columns in publish_as_relid
  std::vector<Oid> output_functions;   // type output function of each column
  std::vector<bool> varlena;           // whether each column's type is varlena (may be TOASTed)
  // The same facts as bytes for the per-tuple read (dml_changes.cpp ReadValues): varlena, every
  // column (all 1), key columns only.
  std::vector<char> varlena_bytes, all_columns, key_columns;
  // TYPEOID syscache hash of each column's type: a renamed type (ALTER TYPE / ALTER DOMAIN ...
  // RENAME TO) changes the type name the entry carries without invalidating the relation.
  std::vector<uint32> type_hashes;
  TupleConversionMap* to_root = nullptr;  // partition -> root rowtype (publish_via_partition_root)
  MemoryContext context = nullptr;        // owns to_root and its copied descriptors (partitions
                                          // published via the root only); freed on rebuild
};

// Schema holding every Trellara relation (trellara.control: schema = trellara, not relocatable;
// the applier creates its target state tables there too).
constexpr char kOwnSchema[] = "trellara";

struct Options {
  std::vector<std::string> publication_names;
  uint32_t chunk_changes = kDefaultChunkChanges;
  uint64_t chunk_bytes = kDefaultChunkBytes;
  std::string flow;
  uint64_t skip_through_lsn = 0;
  bool messages = true;
  bool streaming = false;  // stream in-progress transactions (the relay); SQL sessions decode at commit
  uint32_t partitions = 0;   // > 0: partitioned mode with this many partitions (docs/partitioned.md)
  uint32_t map_version = 1;  // the partition map's version
};

struct State {
  explicit State(TransactionAssembler::Options a) : assembler_options(a), assembler(std::move(a)) {}
  Options options;
  TransactionAssembler::Options assembler_options;
  TransactionAssembler assembler;
  std::unordered_map<Oid, CachedRelation> relations;
  bool publications_valid = false;
  List* publications = nullptr;  // of Publication*, in publications_context
  MemoryContext cache_context = nullptr;         // parent of the per-relation contexts
  MemoryContext publications_context = nullptr;  // publications; reset by the next LoadPublications
  MemoryContext change_context = nullptr;  // reset after every change
  bool skipping = false;                   // current transaction is already in the log
  int guc_nest_level = 0;
  LogicalDecodingContext* ctx = nullptr;
  // Streaming (between stream_start and stream_stop, and in stream abort/commit): changes go to the
  // relay's spill store as stream records tagged with `stream_top_xid` and the (sub)transaction of
  // the change (`stream_xid`), never to the assembler.
  bool in_stream = false;
  uint32_t stream_top_xid = 0;
  uint32_t stream_xid = 0;
};

// The state of the decoding context currently running in this process (invalidation callbacks
// have no argument to find it by). One decoding context per process at a time.
extern State* active_state;
extern bool callbacks_registered;

// --- relation cache and publication membership (relations.cpp) ----------------------------------
void InvalidateAllRelations(State* s);
extern "C" void RelcacheCallback(Datum, Oid relid);
extern "C" void TypeCallback(Datum, int, uint32 hashvalue);
extern "C" void PublicationCallback(Datum, int, uint32);
// The cache entry of `relation`, (re)built when invalid: whether and how this session publishes
// it, its description and the conversion to its published root.
CachedRelation& Lookup(State* s, Relation relation);
// Describes `relation` (columns in attribute order, dropped and generated columns excluded).
void Describe(Relation relation, CachedRelation& out);
bool IsPublished(const CachedRelation& entry);

// --- options (options.cpp) -------------------------------------------------------------------------
Options ParseOptions(List* option_list);

// --- the decoding session (plugin.cpp) ---------------------------------------------------------------
// The source transaction being decoded (plugin.h CurrentTransaction): opened by begin (or a stream
// start or commit), its relation set by each change, closed at commit.
extern DecodingTransaction current_tx;
inline State* StateOf(LogicalDecodingContext* ctx) { return static_cast<State*>(ctx->output_plugin_private); }
// A Postgres timestamp as microseconds since the Unix epoch.
int64_t UnixMicros(TimestampTz t);

// --- settings pinned while a transaction is decoded (output_settings.cpp) -----------------------------
void PinOutputSettings(State* s);
void UnpinOutputSettings(State* s);

// --- writing records (record_writer.cpp) -------------------------------------------------------------
// Raises the assembler's failure as an ERROR (program_limit_exceeded when it cannot be captured).
void CheckAssemblerStatus(const Status& s, const TransactionAssembler& assembler, const char* during);
// Where the assembler's records go: ctx->out, one OutputPluginWrite per record.
RecordSink SinkFor(LogicalDecodingContext* ctx);
// Writes one stream record (never a log record): the relay routes it to its spill store.
void WriteStreamRecord(LogicalDecodingContext* ctx, uint8_t type, uint32_t top_xid, uint32_t xid,
                       const std::string& bytes, uint64_t commit_lsn = 0, uint64_t begin_lsn = 0,
                       int64_t commit_time_us = 0);
// Every captured change goes through here: to the assembler, or as a stream record when streamed.
void EmitChange(State* s, LogicalDecodingContext* ctx, Change c, const RelationInfo* relation,
                const std::vector<const RelationInfo*>& truncated, const char* during);

// --- row changes and TRUNCATE (dml_changes.cpp) -------------------------------------------------------
extern "C" void ChangeCallback(LogicalDecodingContext* ctx, ReorderBufferTXN*, Relation relation,
                               ReorderBufferChange* change);
extern "C" void TruncateCallback(LogicalDecodingContext* ctx, ReorderBufferTXN*, int nrelations, Relation relations[],
                                 ReorderBufferChange* change);

// --- logical messages and DDL records (messages.cpp) --------------------------------------------------
extern "C" void MessageCallback(LogicalDecodingContext* ctx, ReorderBufferTXN*, XLogRecPtr lsn, bool transactional,
                                const char* prefix, Size sz, const char* message);

// --- streamed transactions (streaming.cpp) ------------------------------------------------------------
extern "C" void StreamStartCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn);
extern "C" void StreamStopCallback(LogicalDecodingContext* ctx, ReorderBufferTXN*);
extern "C" void StreamAbortCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn, XLogRecPtr);
extern "C" void StreamCommitCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn, XLogRecPtr);
extern "C" void StreamChangeCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn, Relation relation,
                                     ReorderBufferChange* change);
extern "C" void StreamTruncateCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn, int nrelations,
                                       Relation relations[], ReorderBufferChange* change);
extern "C" void StreamMessageCallback(LogicalDecodingContext* ctx, ReorderBufferTXN* txn, XLogRecPtr lsn,
                                      bool transactional, const char* prefix, Size sz, const char* message);

}  // namespace trellara::plugin
