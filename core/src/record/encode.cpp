// encode.cpp — records to protobuf bytes (codec.h): protobuf-c structs that point into the model
// (no copies of values), packed once; each distinct relation description packed once and spliced
// into every record that carries it.
#include "trellara/record/codec.h"


#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <set>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "trellara.pb-c.h"
#include "trellara/record/checksum.h"
#include "trellara/base/assert.h"
#include "trellara/base/text.h"

namespace trellara {

namespace {

// ---------------------------------------------------------------------------------------------
// Encoding: an arena of protobuf-c structs pointing into the model being encoded.
// ---------------------------------------------------------------------------------------------
class Encoder {
 public:
  template <typename T>
  T* New(const T& init) {
    auto* p = static_cast<T*>(Alloc(sizeof(T)));
    std::memcpy(static_cast<void*>(p), &init, sizeof(T));
    return p;
  }
  template <typename T>
  T** Array(size_t n) {
    return static_cast<T**>(Alloc(sizeof(T*) * (n == 0 ? 1 : n)));
  }
  char* Str(const std::string& s) {
    if (s.find('\0') != std::string::npos) bad_text_ = true;
    return const_cast<char*>(s.c_str());
  }
  static ProtobufCBinaryData Bin(const std::string& s) {
    return ProtobufCBinaryData{s.size(), reinterpret_cast<uint8_t*>(const_cast<char*>(s.data()))};
  }
  static ProtobufCBinaryData Bin(const Sha256& d) {
    return ProtobufCBinaryData{d.size(), const_cast<uint8_t*>(d.data())};
  }
  bool bad_text() const { return bad_text_; }

  Trellara__TxIdentity* Tx(const TxIdentity& tx) {
    Trellara__TxIdentity m = TRELLARA__TX_IDENTITY__INIT;
    m.flow = Str(tx.flow);
    m.origin_sysid = tx.origin_sysid;
    m.xid = tx.xid;
    m.commit_lsn = tx.commit_lsn;
    return New(m);
  }

  Trellara__Tuple* Tuple(const std::vector<Value>& values) {
    Trellara__Tuple m = TRELLARA__TUPLE__INIT;
    m.n_values = values.size();
    m.values = Array<Trellara__ColumnValue>(values.size());
    for (size_t i = 0; i < values.size(); i++) {
      Trellara__ColumnValue v = TRELLARA__COLUMN_VALUE__INIT;
      switch (values[i].kind) {
        case Value::Kind::Null:
          v.kind_case = TRELLARA__COLUMN_VALUE__KIND_NULL_VALUE;
          v.null_value = 1;
          break;
        case Value::Kind::Text:
          v.kind_case = TRELLARA__COLUMN_VALUE__KIND_TEXT;
          v.text = Str(values[i].data);
          break;
        case Value::Kind::Binary:
          v.kind_case = TRELLARA__COLUMN_VALUE__KIND_BINARY;
          v.binary = Bin(values[i].data);
          break;
        case Value::Kind::UnchangedToast:
          v.kind_case = TRELLARA__COLUMN_VALUE__KIND_UNCHANGED_TOAST;
          v.unchanged_toast = 1;
          break;
      }
      m.values[i] = New(v);
    }
    return New(m);
  }

  Trellara__RelationInfo** Relations(const std::vector<RelationInfo>& rels) {
    auto** out = Array<Trellara__RelationInfo>(rels.size());
    for (size_t i = 0; i < rels.size(); i++) {
      const auto& r = rels[i];
      Trellara__RelationInfo m = TRELLARA__RELATION_INFO__INIT;
      m.oid = r.oid;
      m.schema = Str(r.schema);
      m.name = Str(r.name);
      m.replica_identity = static_cast<Trellara__ReplicaIdentity>(r.replica_identity);
      m.fingerprint = Bin(r.fingerprint);
      m.n_columns = r.columns.size();
      m.columns = Array<Trellara__Column>(r.columns.size());
      for (size_t j = 0; j < r.columns.size(); j++) {
        const auto& c = r.columns[j];
        Trellara__Column col = TRELLARA__COLUMN__INIT;
        col.name = Str(c.name);
        col.type_oid = c.type_oid;
        col.type_name = Str(c.type_name);
        col.typmod = c.typmod;
        col.is_key = c.is_key;
        m.columns[j] = New(col);
      }
      out[i] = New(m);
    }
    return out;
  }

  Trellara__Ddl* DdlMessage(const Ddl& ddl) {
    Trellara__Ddl d = TRELLARA__DDL__INIT;
    d.command_tag = Str(ddl.command_tag);
    d.object_type = Str(ddl.object_type);
    d.schema = Str(ddl.schema);
    d.object_identity = Str(ddl.object_identity);
    d.sql = Str(ddl.sql);
    d.relation_oid = ddl.relation_oid;
    d.relation_schema = Str(ddl.relation_schema);
    d.relation_name = Str(ddl.relation_name);
    d.n_steps = ddl.steps.size();
    d.steps = Array<Trellara__DdlStep>(ddl.steps.size());
    for (size_t i = 0; i < ddl.steps.size(); i++) {
      const DdlStep& st = ddl.steps[i];
      Trellara__DdlStep m = TRELLARA__DDL_STEP__INIT;
      m.kind = static_cast<Trellara__DdlStepKind>(st.kind);
      m.column = Str(st.column);
      m.new_name = Str(st.new_name);
      m.detail = Str(st.detail);
      m.using_expression = st.using_expression;
      m.label = Str(st.label);
      m.before = st.before;
      d.steps[i] = New(m);
    }
    if (ddl.definition) {
      const RelationDefinition& def = *ddl.definition;
      Trellara__RelationDefinition m = TRELLARA__RELATION_DEFINITION__INIT;
      m.oid = def.oid;
      m.schema = Str(def.schema);
      m.name = Str(def.name);
      m.relkind = Str(def.relkind);
      m.is_partition = def.is_partition;
      m.partition_key = Str(def.partition_key);
      m.partition_parent_schema = Str(def.partition_parent_schema);
      m.partition_parent_name = Str(def.partition_parent_name);
      m.partition_bound = Str(def.partition_bound);
      m.n_columns = def.columns.size();
      m.columns = Array<Trellara__DdlColumn>(def.columns.size());
      for (size_t i = 0; i < def.columns.size(); i++) {
        const DdlColumn& c = def.columns[i];
        Trellara__DdlColumn col = TRELLARA__DDL_COLUMN__INIT;
        col.name = Str(c.name);
        col.type_oid = c.type_oid;
        col.type_name = Str(c.type_name);
        col.typmod = c.typmod;
        col.not_null = c.not_null;
        col.default_kind = static_cast<Trellara__DefaultKind>(c.default_kind);
        col.default_expr = Str(c.default_expr);
        col.generated = Str(c.generated);
        col.identity = Str(c.identity);
        col.generation_expr = Str(c.generation_expr);
        col.collation = Str(c.collation);
        m.columns[i] = New(col);
      }
      m.n_primary_key = def.primary_key.size();
      m.primary_key = Array<char>(def.primary_key.size());
      for (size_t i = 0; i < def.primary_key.size(); i++) m.primary_key[i] = Str(def.primary_key[i]);
      m.primary_key_name = Str(def.primary_key_name);
      m.replica_identity = static_cast<Trellara__ReplicaIdentity>(def.replica_identity);
      m.identity_index = Str(def.identity_index);
      d.definition = New(m);
    }
    d.n_publications = ddl.publications.size();
    d.publications = Array<char>(ddl.publications.size());
    for (size_t i = 0; i < ddl.publications.size(); i++) d.publications[i] = Str(ddl.publications[i]);
    d.capture_xid = ddl.capture_xid;
    return New(d);
  }

  Trellara__Change** Changes(const std::vector<Change>& changes) {
    auto** out = Array<Trellara__Change>(changes.size());
    for (size_t i = 0; i < changes.size(); i++) {
      const auto& c = changes[i];
      Trellara__Change m = TRELLARA__CHANGE__INIT;
      m.op = static_cast<Trellara__Op>(c.op);
      m.relation_oid = c.relation_oid;
      m.old_image = static_cast<Trellara__OldImage>(c.old_image);
      if (c.old_image != OldImage::None) m.old_tuple = Tuple(c.old_tuple);
      if (c.op == Op::Insert || c.op == Op::Update) m.new_tuple = Tuple(c.new_tuple);
      if (c.op == Op::Truncate) {
        Trellara__Truncate t = TRELLARA__TRUNCATE__INIT;
        t.n_relation_oids = c.truncate.relation_oids.size();
        t.relation_oids = const_cast<uint32_t*>(c.truncate.relation_oids.data());
        t.cascade = c.truncate.cascade;
        t.restart_identity = c.truncate.restart_identity;
        m.truncate = New(t);
      }
      if (c.op == Op::Message) {
        Trellara__LogicalMessage lm = TRELLARA__LOGICAL_MESSAGE__INIT;
        lm.transactional = c.message.transactional;
        lm.prefix = Str(c.message.prefix);
        lm.content = Bin(c.message.content);
        m.message = New(lm);
      }
      if (c.op == Op::Ddl) m.ddl = DdlMessage(c.ddl);
      out[i] = New(m);
    }
    return out;
  }

  Trellara__RelationCount** Counts(const std::vector<RelationCount>& counts) {
    auto** out = Array<Trellara__RelationCount>(counts.size());
    for (size_t i = 0; i < counts.size(); i++) {
      Trellara__RelationCount m = TRELLARA__RELATION_COUNT__INIT;
      m.relation_oid = counts[i].relation_oid;
      m.inserts = counts[i].inserts;
      m.updates = counts[i].updates;
      m.deletes = counts[i].deletes;
      m.truncates = counts[i].truncates;
      out[i] = New(m);
    }
    return out;
  }

 private:
  // Bump allocation from 16 KiB blocks: one record needs many small structs, all freed together.
  void* Alloc(size_t n) {
    constexpr size_t kAlign = alignof(std::max_align_t);
    constexpr size_t kBlockUnits = 16384 / sizeof(std::max_align_t);
    size_t units = (n + kAlign - 1) / kAlign;
    if (units > kBlockUnits) {
      blocks_.emplace_back(new std::max_align_t[units]);
      return blocks_.back().get();
    }
    if (blocks_.empty() || used_units_ + units > kBlockUnits) {
      blocks_.emplace_back(new std::max_align_t[kBlockUnits]);
      current_ = blocks_.back().get();
      used_units_ = 0;
    }
    void* p = current_ + used_units_;
    used_units_ += units;
    return p;
  }
  std::deque<std::unique_ptr<std::max_align_t[]>> blocks_;
  std::max_align_t* current_ = nullptr;
  size_t used_units_ = 0;
  bool bad_text_ = false;
};

// ---------------------------------------------------------------------------------------------
// Relation descriptions are the bulk of most records and repeat from record to record: each
// distinct RelationInfo is packed once and its bytes are spliced into every record that carries
// it. The result is byte-for-byte what protobuf-c packs (fields stay in field-number order).
// ---------------------------------------------------------------------------------------------
void AppendVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Appends field `field` (wire type 2: length-delimited) holding `bytes`.
void AppendLengthDelimited(std::string& out, uint32_t field, std::string_view bytes) {
  AppendVarint(out, (static_cast<uint64_t>(field) << 3) | 2);
  AppendVarint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

template <typename Message>
void AppendPacked(std::string& out, const Message* m, size_t (*size_fn)(const Message*),
                  size_t (*pack_fn)(const Message*, uint8_t*)) {
  size_t n = size_fn(m);
  size_t at = out.size();
  out.resize(at + n);
  pack_fn(m, reinterpret_cast<uint8_t*>(out.data() + at));
}

// The packed bytes of one relation description, with everything they depend on besides the oid
// (the key of the cache): the fingerprint and the type oids (the fingerprint does not cover them).
struct PackedRelationEntry {
  Sha256 fingerprint{};
  std::vector<uint32_t> type_oids;
  std::string bytes;
};

struct RelationBytesCache {
  // One entry per oid: a relation whose description changed replaces its entry. Looked up for every
  // relation of every record, so the lookup compares in place and allocates nothing.
  std::unordered_map<uint32_t, PackedRelationEntry> by_oid;
};

bool Matches(const PackedRelationEntry& e, const RelationInfo& r) {
  if (e.fingerprint != r.fingerprint || e.type_oids.size() != r.columns.size()) return false;
  for (size_t i = 0; i < r.columns.size(); i++)
    if (e.type_oids[i] != r.columns[i].type_oid) return false;
  return true;
}

const std::string& PackedRelation(const RelationInfo& r, bool& bad_text) {
  // Process-wide, created on first use (no static constructor in the extension), bounded.
  static RelationBytesCache* cache = new RelationBytesCache();
  constexpr size_t kMaxCachedRelations = 4096;
  auto it = cache->by_oid.find(r.oid);
  if (it != cache->by_oid.end() && Matches(it->second, r)) return it->second.bytes;
  Encoder enc;
  // The protobuf-c structs point into `single`: it must outlive the packing below.
  const std::vector<RelationInfo> single{r};
  Trellara__RelationInfo** one = enc.Relations(single);
  if (enc.bad_text()) {
    // Never cached: every record carrying this relation must fail the same way.
    bad_text = true;
    static const std::string* empty = new std::string();
    return *empty;
  }
  PackedRelationEntry entry;
  entry.fingerprint = r.fingerprint;
  for (const auto& c : r.columns) entry.type_oids.push_back(c.type_oid);
  AppendPacked<Trellara__RelationInfo>(entry.bytes, one[0], trellara__relation_info__get_packed_size,
                                       trellara__relation_info__pack);
  if (it != cache->by_oid.end()) {
    it->second = std::move(entry);
    return it->second.bytes;
  }
  if (cache->by_oid.size() >= kMaxCachedRelations) cache->by_oid.clear();
  return cache->by_oid.emplace(r.oid, std::move(entry)).first->second.bytes;
}

size_t VarintBytes(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

// Appends field `record_field` of Record holding a body message made of `before` (fields numbered
// below the relations field), the relations, then `after`: sized first (one sizing pass of each
// part), so the length prefix is written first and every part is packed straight into `out`
// (no intermediate body string and copy). Same bytes as packing the body and then prefixing it.
template <typename Message>
void AppendBodyWithRelations(std::string& out, uint32_t record_field, const Message* before, const Message* after,
                             uint32_t relations_field, const std::vector<RelationInfo>& relations,
                             size_t (*size_fn)(const Message*), size_t (*pack_fn)(const Message*, uint8_t*),
                             bool& bad_text) {
  const size_t before_bytes = size_fn(before);
  const size_t after_bytes = size_fn(after);
  size_t body_bytes = before_bytes + after_bytes;
  // Each relation's bytes are looked up again when appended rather than kept by reference: a
  // lookup may evict other entries of the bounded cache. Packing is deterministic, so both
  // lookups yield the same bytes (the assertion below holds it).
  const size_t relation_tag_bytes = VarintBytes((static_cast<uint64_t>(relations_field) << 3) | 2);
  for (const auto& r : relations) {
    const size_t n = PackedRelation(r, bad_text).size();
    body_bytes += relation_tag_bytes + VarintBytes(n) + n;
  }
  out.reserve(out.size() + 2 * 10 + body_bytes);
  AppendVarint(out, (static_cast<uint64_t>(record_field) << 3) | 2);
  AppendVarint(out, body_bytes);
  const size_t body_at = out.size();
  size_t at = out.size();
  out.resize(at + before_bytes);
  pack_fn(before, reinterpret_cast<uint8_t*>(out.data() + at));
  for (const auto& r : relations) AppendLengthDelimited(out, relations_field, PackedRelation(r, bad_text));
  at = out.size();
  out.resize(at + after_bytes);
  pack_fn(after, reinterpret_cast<uint8_t*>(out.data() + at));
  TRELLARA_ASSERT(out.size() - body_at == body_bytes, "a record body packs to the size it was given");
}

}  // namespace

Result<std::string> EncodeRecord(const Record& record) {
  Encoder enc;
  bool bad_text = false;
  uint32_t record_field = 0;  // Record.body field number
  std::string out;            // the whole Record: body field tag, length, body
  if (const auto* e = std::get_if<Envelope>(&record)) {
    Trellara__Envelope before = TRELLARA__ENVELOPE__INIT;  // fields 1-4
    before.format_version = TRELLARA__FORMAT_VERSION__FORMAT_VERSION_1;
    before.tx = enc.Tx(e->tx);
    before.begin_lsn = e->begin_lsn;
    before.commit_time_us = e->commit_time_us;
    Trellara__Envelope after = TRELLARA__ENVELOPE__INIT;   // fields 6-9
    after.n_changes = e->changes.size();
    after.changes = enc.Changes(e->changes);
    after.n_counts = e->counts.size();
    after.counts = enc.Counts(e->counts);
    after.boundary_mode = static_cast<Trellara__BoundaryMode>(e->boundary_mode);
    after.checksum = Encoder::Bin(e->checksum);
    record_field = 1;
    AppendBodyWithRelations<Trellara__Envelope>(out, record_field, &before, &after, 5, e->relations,
                                          trellara__envelope__get_packed_size, trellara__envelope__pack, bad_text);
  } else if (const auto* c = std::get_if<Chunk>(&record)) {
    Trellara__Chunk before = TRELLARA__CHUNK__INIT;  // fields 1-5
    before.format_version = TRELLARA__FORMAT_VERSION__FORMAT_VERSION_1;
    before.tx = enc.Tx(c->tx);
    before.seq = c->seq;
    before.partition_id = c->partition_id;
    before.event_count = c->event_count;
    Trellara__Chunk after = TRELLARA__CHUNK__INIT;   // fields 7-8
    after.n_changes = c->changes.size();
    after.changes = enc.Changes(c->changes);
    after.checksum = Encoder::Bin(c->checksum);
    after.partition_seq = c->partition_seq;
    after.n_positions = c->positions.size();
    after.positions = const_cast<uint32_t*>(c->positions.data());
    record_field = 2;
    AppendBodyWithRelations<Trellara__Chunk>(out, record_field, &before, &after, 6, c->relations,
                                          trellara__chunk__get_packed_size, trellara__chunk__pack, bad_text);
  } else if (const auto* m = std::get_if<Manifest>(&record)) {
    Trellara__Manifest before = TRELLARA__MANIFEST__INIT;  // fields 1-5
    before.format_version = TRELLARA__FORMAT_VERSION__FORMAT_VERSION_1;
    before.tx = enc.Tx(m->tx);
    before.begin_lsn = m->begin_lsn;
    before.commit_time_us = m->commit_time_us;
    before.n_chunks = m->chunks.size();
    before.chunks = enc.Array<Trellara__ChunkRef>(m->chunks.size());
    for (size_t i = 0; i < m->chunks.size(); i++) {
      Trellara__ChunkRef ref = TRELLARA__CHUNK_REF__INIT;
      ref.seq = m->chunks[i].seq;
      ref.partition_id = m->chunks[i].partition_id;
      ref.event_count = m->chunks[i].event_count;
      ref.checksum = Encoder::Bin(m->chunks[i].checksum);
      ref.partition_seq = m->chunks[i].partition_seq;
      before.chunks[i] = enc.New(ref);
    }
    Trellara__Manifest after = TRELLARA__MANIFEST__INIT;   // fields 7-10
    after.n_counts = m->counts.size();
    after.counts = enc.Counts(m->counts);
    after.total_changes = m->total_changes;
    after.boundary_mode = static_cast<Trellara__BoundaryMode>(m->boundary_mode);
    after.checksum = Encoder::Bin(m->checksum);
    after.map_version = m->map_version;
    after.partitions = m->partitions;
    record_field = 3;
    AppendBodyWithRelations<Trellara__Manifest>(out, record_field, &before, &after, 6, m->relations,
                                          trellara__manifest__get_packed_size, trellara__manifest__pack, bad_text);
  } else {
    const auto& k = std::get<CommitMarker>(record);
    Trellara__CommitMarker marker = TRELLARA__COMMIT_MARKER__INIT;
    marker.format_version = TRELLARA__FORMAT_VERSION__FORMAT_VERSION_1;
    marker.tx = enc.Tx(k.tx);
    marker.manifest_checksum = Encoder::Bin(k.manifest_checksum);
    marker.total_changes = k.total_changes;
    marker.total_chunks = k.total_chunks;
    record_field = 4;
    std::string body;
    AppendPacked<Trellara__CommitMarker>(body, &marker, trellara__commit_marker__get_packed_size,
                                         trellara__commit_marker__pack);
    AppendLengthDelimited(out, record_field, body);
  }
  if (enc.bad_text() || bad_text)
    return MakeError(std::string("cannot encode ") + RecordTypeName(TypeOf(record)) + " of xid " +
                     std::to_string(TxOf(record).xid) +
                     ": a name or text value contains a NUL byte, which a protobuf string cannot carry");
  if (out.size() > kMaxRecordBytes)
    return MakeError(std::string(RecordTypeName(TypeOf(record))) + " of xid " + std::to_string(TxOf(record).xid) +
                     " encodes to " + std::to_string(out.size()) + " bytes, above the " +
                     std::to_string(kMaxRecordBytes) + "-byte record limit");
  return out;
}

Result<std::string> EncodeDdl(const Ddl& ddl) {
  Encoder enc;
  Trellara__Ddl* m = enc.DdlMessage(ddl);
  if (enc.bad_text()) return MakeError("DDL record of " + ddl.object_identity + " holds a NUL byte in a text field");
  std::string out(trellara__ddl__get_packed_size(m), '\0');
  trellara__ddl__pack(m, reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

}  // namespace trellara
