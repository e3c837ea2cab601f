// decode.cpp — untrusted bytes to records (codec.h): protobuf-c unpacks into an arena (it rejects
// malformed wire data without crashing), then the structure is validated before the model is
// built, so an invalid record never gets past DecodeRecord. It never judges whether a record may
// be applied; the barrier and the applier do.
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
#include "trellara/base/text.h"

namespace trellara {

namespace {

// ---------------------------------------------------------------------------------------------
// Decoding: validate protobuf-c structs, then copy into the model.
// ---------------------------------------------------------------------------------------------
// protobuf-c's unpack allocates every sub-message, repeated-field array and string on its own;
// for the small records a relay replays by the million (one stream record per change) malloc and
// free were a fifth of DecodeRecord. This arena hands unpack memory from 64 KiB blocks reused
// across calls on the same thread; the whole unpacked record is dropped at once when the arena is
// reset after it was copied into the model (free_unpacked is not needed). Requests above a quarter
// block get their own malloc, released at the reset, and at most kRetainBlocks blocks (1 MiB) are
// kept between records, so one large chunk does not keep its memory. Allocation failure returns
// NULL to protobuf-c, which then fails the unpack (reported as undecodable, as before).
class UnpackArena {
 public:
  UnpackArena() = default;
  UnpackArena(const UnpackArena&) = delete;
  UnpackArena& operator=(const UnpackArena&) = delete;
  ~UnpackArena() {
    Reset();
    for (void* b : blocks_) std::free(b);
  }
  ProtobufCAllocator allocator() { return ProtobufCAllocator{&UnpackArena::Alloc, &UnpackArena::Free, this}; }
  void Reset() noexcept {
    for (void* p : large_) std::free(p);
    large_.clear();
    while (blocks_.size() > kRetainBlocks) {
      std::free(blocks_.back());
      blocks_.pop_back();
    }
    current_ = 0;
    used_ = 0;
  }

 private:
  static constexpr size_t kBlockBytes = 64u << 10;
  static constexpr size_t kRetainBlocks = 16;
  static void* Alloc(void* self, size_t n) { return static_cast<UnpackArena*>(self)->Take(n); }
  static void Free(void*, void*) {}  // everything goes at Reset()
  void* Take(size_t n) noexcept {
    n = (n + 15) & ~size_t{15};  // malloc's alignment, enough for every protobuf-c struct
    try {
      if (n > kBlockBytes / 4) {
        large_.reserve(large_.size() + 1);
        void* p = std::malloc(n);
        if (p != nullptr) large_.push_back(p);
        return p;
      }
      if (blocks_.empty() || used_ + n > kBlockBytes) {
        const size_t next = blocks_.empty() ? 0 : current_ + 1;
        if (next == blocks_.size()) {
          blocks_.reserve(blocks_.size() + 1);
          void* b = std::malloc(kBlockBytes);
          if (b == nullptr) return nullptr;
          blocks_.push_back(b);
        }
        current_ = next;
        used_ = 0;
      }
    } catch (...) {  // a vector's growth failed: protobuf-c is C and must see NULL, not an exception
      return nullptr;
    }
    void* p = static_cast<char*>(blocks_[current_]) + used_;
    used_ += n;
    return p;
  }
  std::vector<void*> blocks_;  // blocks_[0..current_] in use by the record being unpacked
  std::vector<void*> large_;
  size_t current_ = 0;
  size_t used_ = 0;
};

// The calling thread's arena, rewound when the record that used it has been decoded.
class UnpackScope {
 public:
  UnpackScope() : allocator_(Arena().allocator()) {}
  ~UnpackScope() { Arena().Reset(); }
  UnpackScope(const UnpackScope&) = delete;
  UnpackScope& operator=(const UnpackScope&) = delete;
  ProtobufCAllocator* allocator() { return &allocator_; }

 private:
  static UnpackArena& Arena() {
    thread_local UnpackArena arena;
    return arena;
  }
  ProtobufCAllocator allocator_;
};

class Decoder {
 public:
  // Every validation failure sets the first error; later checks are skipped.
  bool failed() const { return !error_.empty(); }
  Error error() const { return MakeError(EscapeInvalidUtf8(error_)); }
  void Fail(const std::string& what) {
    if (error_.empty()) error_ = what;
  }

  void Version(Trellara__FormatVersion v, const char* type) {
    if (static_cast<uint32_t>(v) != kFormatVersion)
      Fail(std::string(type) + " has format version " + std::to_string(static_cast<int>(v)) +
           " but this build reads version " + std::to_string(kFormatVersion) +
           "; use a trellara build that supports it");
  }

  static std::string S(const char* s) { return s == nullptr ? std::string() : std::string(s); }
  static std::string B(const ProtobufCBinaryData& b) {
    return b.len == 0 ? std::string() : std::string(reinterpret_cast<const char*>(b.data), b.len);
  }

  // `what` names the field for the error: a string, or a callable that builds it (only on error).
  template <typename What>
  void Digest(const ProtobufCBinaryData& b, Sha256& out, const What& what) {
    if (b.len != out.size()) {
      std::string name;
      if constexpr (std::is_invocable_v<const What&>) name = what();
      else name = what;
      Fail(name + " is " + std::to_string(b.len) + " bytes, expected a 32-byte SHA-256");
      return;
    }
    std::memcpy(out.data(), b.data, out.size());
  }

  TxIdentity Tx(const Trellara__TxIdentity* m, const char* type) {
    TxIdentity tx;
    if (m == nullptr) {
      Fail(std::string(type) + " has no transaction identity (tx)");
      return tx;
    }
    tx.flow = S(m->flow);
    tx.origin_sysid = m->origin_sysid;
    tx.xid = m->xid;
    tx.commit_lsn = m->commit_lsn;
    if (tx.commit_lsn == 0) Fail(std::string(type) + " has commit LSN 0/0, which no committed transaction has");
    return tx;
  }

  std::vector<RelationInfo> Relations(Trellara__RelationInfo** rels, size_t n) {
    std::vector<RelationInfo> out;
    out.reserve(n);
    std::set<uint32_t> seen;
    for (size_t i = 0; i < n && !failed(); i++) {
      const auto* m = rels[i];
      RelationInfo r;
      r.oid = m->oid;
      r.schema = S(m->schema);
      r.name = S(m->name);
      // Messages are built only on failure: this runs for every record the applier reads.
      const auto label = [&] { return "relation " + std::to_string(i) + " (" + r.schema + "." + r.name + ")"; };
      if (r.oid == 0) Fail(label() + " has oid 0");
      if (!seen.insert(r.oid).second) Fail(label() + " duplicates relation oid " + std::to_string(r.oid));
      if (r.name.empty()) Fail(label() + " has an empty name");
      int ri = static_cast<int>(m->replica_identity);
      if (ri < 1 || ri > 4) Fail(label() + " has unknown replica identity " + std::to_string(ri));
      r.replica_identity = static_cast<ReplicaIdentity>(ri);
      Digest(m->fingerprint, r.fingerprint, [&] { return label() + " fingerprint"; });
      r.columns.reserve(m->n_columns);
      for (size_t j = 0; j < m->n_columns; j++) {
        const auto* c = m->columns[j];
        Column col{S(c->name), c->type_oid, S(c->type_name), c->typmod, c->is_key != 0};
        if (col.name.empty()) Fail(label() + " column " + std::to_string(j) + " has an empty name");
        r.columns.push_back(std::move(col));
      }
      out.push_back(std::move(r));
    }
    return out;
  }

  // `label` builds the tuple's name for an error message (called only on failure).
  template <typename Label>
  std::vector<Value> Values(const Trellara__Tuple* t, const Label& label, bool toast_allowed) {
    std::vector<Value> out;
    if (t == nullptr) return out;
    out.reserve(t->n_values);
    for (size_t i = 0; i < t->n_values && !failed(); i++) {
      const auto* v = t->values[i];
      switch (v->kind_case) {
        case TRELLARA__COLUMN_VALUE__KIND_NULL_VALUE: out.push_back(Value::Null()); break;
        case TRELLARA__COLUMN_VALUE__KIND_TEXT: out.push_back(Value::Text(S(v->text))); break;
        case TRELLARA__COLUMN_VALUE__KIND_BINARY: out.push_back(Value::Binary(B(v->binary))); break;
        case TRELLARA__COLUMN_VALUE__KIND_UNCHANGED_TOAST:
          if (!toast_allowed)
            Fail(label() + " value " + std::to_string(i) +
                 " is marked unchanged-TOAST, which only an UPDATE's new tuple may carry");
          out.push_back(Value::UnchangedToast());
          break;
        default:
          Fail(label() + " value " + std::to_string(i) + " has no kind (null, text, binary or unchanged_toast)");
      }
    }
    return out;
  }

  Ddl DdlModel(const Trellara__Ddl* m, const std::string& label) {
    Ddl d;
    d.command_tag = S(m->command_tag);
    d.object_type = S(m->object_type);
    d.schema = S(m->schema);
    d.object_identity = S(m->object_identity);
    d.sql = S(m->sql);
    d.relation_oid = m->relation_oid;
    d.relation_schema = S(m->relation_schema);
    d.relation_name = S(m->relation_name);
    for (size_t i = 0; i < m->n_steps; i++) {
      const Trellara__DdlStep* st = m->steps[i];
      int kind = static_cast<int>(st->kind);
      if (kind < 1 || kind > static_cast<int>(kLastDdlStepKind)) {
        Fail(label + " DDL step " + std::to_string(i) + " has unknown kind " + std::to_string(kind));
        return d;
      }
      d.steps.push_back(DdlStep{static_cast<DdlStepKind>(kind), S(st->column), S(st->new_name), S(st->detail),
                                st->using_expression != 0, S(st->label), st->before != 0});
    }
    if (m->definition != nullptr) {
      const Trellara__RelationDefinition* def = m->definition;
      RelationDefinition r;
      r.oid = def->oid;
      r.schema = S(def->schema);
      r.name = S(def->name);
      r.relkind = S(def->relkind);
      r.is_partition = def->is_partition != 0;
      r.partition_key = S(def->partition_key);
      r.partition_parent_schema = S(def->partition_parent_schema);
      r.partition_parent_name = S(def->partition_parent_name);
      r.partition_bound = S(def->partition_bound);
      if (r.oid == 0 || r.name.empty()) Fail(label + " DDL definition has no relation oid or name");
      int ri = static_cast<int>(def->replica_identity);
      if (ri < 1 || ri > 4) Fail(label + " DDL definition has unknown replica identity " + std::to_string(ri));
      r.replica_identity = static_cast<ReplicaIdentity>(ri < 1 || ri > 4 ? 1 : ri);
      for (size_t i = 0; i < def->n_columns; i++) {
        const Trellara__DdlColumn* c = def->columns[i];
        DdlColumn col;
        col.name = S(c->name);
        col.type_oid = c->type_oid;
        col.type_name = S(c->type_name);
        col.typmod = c->typmod;
        col.not_null = c->not_null != 0;
        int dk = static_cast<int>(c->default_kind);
        if (dk < 0 || dk > 2) Fail(label + " DDL column " + col.name + " has unknown default kind " + std::to_string(dk));
        col.default_kind = static_cast<DefaultKind>(dk < 0 || dk > 2 ? 0 : dk);
        col.default_expr = S(c->default_expr);
        col.generated = S(c->generated);
        col.identity = S(c->identity);
        col.generation_expr = S(c->generation_expr);
        col.collation = S(c->collation);
        if (col.name.empty() || col.type_name.empty()) Fail(label + " DDL definition has a column without name or type");
        r.columns.push_back(std::move(col));
      }
      for (size_t i = 0; i < def->n_primary_key; i++) r.primary_key.push_back(S(def->primary_key[i]));
      r.primary_key_name = S(def->primary_key_name);
      r.identity_index = S(def->identity_index);
      d.definition = std::move(r);
    }
    for (size_t i = 0; i < m->n_publications; i++) d.publications.push_back(S(m->publications[i]));
    d.capture_xid = m->capture_xid;
    return d;
  }

  std::vector<Change> Changes(Trellara__Change** changes, size_t n, const std::vector<RelationInfo>& rels) {
    std::vector<Change> out;
    out.reserve(n);
    auto find = [&rels](uint32_t oid) -> const RelationInfo* {
      for (const auto& r : rels)
        if (r.oid == oid) return &r;
      return nullptr;
    };
    for (size_t i = 0; i < n && !failed(); i++) {
      const auto* m = changes[i];
      Change c;
      int op = static_cast<int>(m->op);
      // "change 3 (update) on public.orders", as far as known; built only for an error message.
      bool op_known = false;
      const RelationInfo* named = nullptr;
      const auto label = [&] {
        std::string l = "change " + std::to_string(i);
        if (op_known) l += " (" + std::string(OpName(c.op)) + ")";
        if (named != nullptr) l += " on " + named->schema + "." + named->name;
        return l;
      };
      if (op < 1 || op > 6) {
        Fail(label() + " has unknown op " + std::to_string(op));
        break;
      }
      c.op = static_cast<Op>(op);
      op_known = true;
      c.relation_oid = m->relation_oid;
      int old_image = static_cast<int>(m->old_image);
      if (old_image < 0 || old_image > 2) {
        Fail(label() + " has unknown old image kind " + std::to_string(old_image));
        break;
      }
      c.old_image = static_cast<OldImage>(old_image);
      switch (c.op) {
        case Op::Insert:
        case Op::Update:
        case Op::Delete: {
          const RelationInfo* rel = find(c.relation_oid);
          if (rel == nullptr) {
            Fail(label() + " refers to relation oid " + std::to_string(c.relation_oid) +
                 " but the record carries no RelationInfo for it; refusing to guess its columns");
            break;
          }
          named = rel;
          c.old_tuple = Values(m->old_tuple, [&] { return label() + " old tuple"; }, false);
          c.new_tuple = Values(m->new_tuple, [&] { return label() + " new tuple"; }, c.op == Op::Update);
          size_t want_old = c.old_image == OldImage::Key    ? rel->KeyColumnCount()
                            : c.old_image == OldImage::Full ? rel->columns.size()
                                                            : 0;
          if (c.op == Op::Insert && c.old_image != OldImage::None) Fail(label() + " carries an old image");
          if (c.old_tuple.size() != want_old)
            Fail(label() + " old tuple has " + std::to_string(c.old_tuple.size()) + " values, expected " +
                 std::to_string(want_old) + " for old image '" + OldImageName(c.old_image) + "'");
          size_t want_new = c.op == Op::Delete ? 0 : rel->columns.size();
          if (c.new_tuple.size() != want_new)
            Fail(label() + " new tuple has " + std::to_string(c.new_tuple.size()) + " values, expected " +
                 std::to_string(want_new));
          break;
        }
        case Op::Truncate:
          if (m->truncate == nullptr || m->truncate->n_relation_oids == 0) {
            Fail(label() + " names no relations");
            break;
          }
          for (size_t k = 0; k < m->truncate->n_relation_oids; k++) {
            uint32_t oid = m->truncate->relation_oids[k];
            if (find(oid) == nullptr)
              Fail(label() + " truncates relation oid " + std::to_string(oid) +
                   " but the record carries no RelationInfo for it");
            c.truncate.relation_oids.push_back(oid);
          }
          c.truncate.cascade = m->truncate->cascade != 0;
          c.truncate.restart_identity = m->truncate->restart_identity != 0;
          break;
        case Op::Message:
          if (m->message == nullptr) {
            Fail(label() + " has no message body");
            break;
          }
          c.message.transactional = m->message->transactional != 0;
          c.message.prefix = S(m->message->prefix);
          c.message.content = B(m->message->content);
          break;
        case Op::Ddl:
          if (m->ddl == nullptr) {
            Fail(label() + " has no DDL body");
            break;
          }
          c.ddl = DdlModel(m->ddl, label());
          if (c.relation_oid != 0) {
            const RelationInfo* rel = find(c.relation_oid);
            if (rel == nullptr)
              Fail(label() + " refers to relation oid " + std::to_string(c.relation_oid) +
                   " but the record carries no RelationInfo for it");
            else if (!c.ddl.definition)
              Fail(label() + " refers to relation " + rel->schema + "." + rel->name + " but carries no definition");
            else if (c.ddl.definition->oid != c.relation_oid)
              Fail(label() + " refers to relation oid " + std::to_string(c.relation_oid) + " but its definition is of oid " +
                   std::to_string(c.ddl.definition->oid));
          }
          break;
      }
      if ((c.op == Op::Truncate || c.op == Op::Message || c.op == Op::Ddl) &&
          (c.old_image != OldImage::None || m->old_tuple != nullptr || m->new_tuple != nullptr))
        Fail(label() + " carries tuples, which only insert/update/delete may");
      out.push_back(std::move(c));
    }
    return out;
  }

  std::vector<RelationCount> Counts(Trellara__RelationCount** counts, size_t n) {
    std::vector<RelationCount> out;
    out.reserve(n);
    for (size_t i = 0; i < n; i++)
      out.push_back(RelationCount{counts[i]->relation_oid, counts[i]->inserts, counts[i]->updates,
                                  counts[i]->deletes, counts[i]->truncates});
    return out;
  }

  BoundaryMode Mode(Trellara__BoundaryMode m, const char* type) {
    int v = static_cast<int>(m);
    if (v < 1 || v > 3) {
      Fail(std::string(type) + " has unknown boundary mode " + std::to_string(v));
      return BoundaryMode::Whole;
    }
    return static_cast<BoundaryMode>(v);
  }

 private:
  std::string error_;
};

}  // namespace

Result<Record> DecodeRecord(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return MakeError("record is empty (0 bytes); expected an encoded trellara Record");
  if (bytes.size() > kMaxRecordBytes)
    return MakeError("record is " + std::to_string(bytes.size()) + " bytes, above the " +
                     std::to_string(kMaxRecordBytes) + "-byte limit; refusing to decode it");
  UnpackScope scope;  // the unpacked structs live until the model is built, then go at once
  const Trellara__Record* rec = trellara__record__unpack(scope.allocator(), bytes.size(), bytes.data());
  if (!rec)
    return MakeError("record of " + std::to_string(bytes.size()) +
                     " bytes is not a valid trellara Record (protobuf decoding failed: truncated or "
                     "corrupt bytes)");

  Decoder d;
  switch (rec->body_case) {
    case TRELLARA__RECORD__BODY_ENVELOPE: {
      const auto* m = rec->envelope;
      d.Version(m->format_version, "envelope");
      Envelope e;
      e.tx = d.Tx(m->tx, "envelope");
      e.begin_lsn = m->begin_lsn;
      e.commit_time_us = m->commit_time_us;
      if (!d.failed()) e.relations = d.Relations(m->relations, m->n_relations);
      if (!d.failed()) e.changes = d.Changes(m->changes, m->n_changes, e.relations);
      e.counts = d.Counts(m->counts, m->n_counts);
      e.boundary_mode = d.Mode(m->boundary_mode, "envelope");
      if (!d.failed() && e.boundary_mode != BoundaryMode::Whole)
        d.Fail(std::string("envelope has boundary mode ") + BoundaryModeName(e.boundary_mode) + ", expected whole");
      d.Digest(m->checksum, e.checksum, "envelope checksum");
      if (d.failed()) return d.error();
      return Record(std::move(e));
    }
    case TRELLARA__RECORD__BODY_CHUNK: {
      const auto* m = rec->chunk;
      d.Version(m->format_version, "chunk");
      Chunk c;
      c.tx = d.Tx(m->tx, "chunk");
      c.seq = m->seq;
      c.partition_id = m->partition_id;
      c.event_count = m->event_count;
      if (!d.failed()) c.relations = d.Relations(m->relations, m->n_relations);
      if (!d.failed()) c.changes = d.Changes(m->changes, m->n_changes, c.relations);
      if (!d.failed() && c.event_count != c.changes.size())
        d.Fail("chunk " + std::to_string(c.seq) + " declares " + std::to_string(c.event_count) +
               " events but carries " + std::to_string(c.changes.size()));
      d.Digest(m->checksum, c.checksum, "chunk checksum");
      c.partition_seq = m->partition_seq;
      if (m->n_positions > 0) {
        c.positions.assign(m->positions, m->positions + m->n_positions);
        if (!d.failed() && c.positions.size() != c.changes.size())
          d.Fail("chunk " + std::to_string(c.seq) + " carries " + std::to_string(c.positions.size()) +
                 " positions for " + std::to_string(c.changes.size()) + " changes");
        for (size_t i = 1; i < c.positions.size() && !d.failed(); i++)
          if (c.positions[i] <= c.positions[i - 1])
            d.Fail("chunk " + std::to_string(c.seq) + " positions are not ascending at change " + std::to_string(i));
      }
      if (d.failed()) return d.error();
      return Record(std::move(c));
    }
    case TRELLARA__RECORD__BODY_MANIFEST: {
      const auto* m = rec->manifest;
      d.Version(m->format_version, "manifest");
      Manifest mf;
      mf.tx = d.Tx(m->tx, "manifest");
      mf.begin_lsn = m->begin_lsn;
      mf.commit_time_us = m->commit_time_us;
      uint64_t sum = 0;
      for (size_t i = 0; i < m->n_chunks && !d.failed(); i++) {
        ChunkRef ref{m->chunks[i]->seq, m->chunks[i]->partition_id, m->chunks[i]->event_count, {},
                     m->chunks[i]->partition_seq};
        d.Digest(m->chunks[i]->checksum, ref.checksum, ("manifest chunk " + std::to_string(i) + " checksum").c_str());
        sum += ref.event_count;
        mf.chunks.push_back(ref);
      }
      if (!d.failed()) mf.relations = d.Relations(m->relations, m->n_relations);
      mf.counts = d.Counts(m->counts, m->n_counts);
      mf.total_changes = m->total_changes;
      mf.boundary_mode = d.Mode(m->boundary_mode, "manifest");
      if (!d.failed() && mf.boundary_mode == BoundaryMode::Whole)
        d.Fail("manifest has boundary mode whole, expected strict_chunk or partitioned");
      if (!d.failed() && sum != mf.total_changes)
        d.Fail("manifest declares " + std::to_string(mf.total_changes) + " changes but its chunks list " +
               std::to_string(sum));
      d.Digest(m->checksum, mf.checksum, "manifest checksum");
      mf.map_version = m->map_version;
      mf.partitions = m->partitions;
      if (!d.failed() && mf.boundary_mode == BoundaryMode::Partitioned && (mf.map_version == 0 || mf.partitions == 0))
        d.Fail("partitioned manifest names no partition map (map version " + std::to_string(mf.map_version) +
               ", " + std::to_string(mf.partitions) + " partitions)");
      if (!d.failed() && mf.boundary_mode != BoundaryMode::Partitioned && (mf.map_version != 0 || mf.partitions != 0))
        d.Fail("strict manifest names a partition map");
      if (d.failed()) return d.error();
      return Record(std::move(mf));
    }
    case TRELLARA__RECORD__BODY_COMMIT_MARKER: {
      const auto* m = rec->commit_marker;
      d.Version(m->format_version, "commit marker");
      CommitMarker k;
      k.tx = d.Tx(m->tx, "commit marker");
      k.total_changes = m->total_changes;
      k.total_chunks = m->total_chunks;
      d.Digest(m->manifest_checksum, k.manifest_checksum, "commit marker manifest checksum");
      if (d.failed()) return d.error();
      return Record(std::move(k));
    }
    default:
      return MakeError("record of " + std::to_string(bytes.size()) +
                       " bytes carries no body (envelope, chunk, manifest or commit marker)");
  }
}

Result<Ddl> DecodeDdl(std::string_view bytes) {
  Trellara__Ddl* m =
      trellara__ddl__unpack(nullptr, bytes.size(), reinterpret_cast<const uint8_t*>(bytes.data()));
  if (m == nullptr) return MakeError("DDL record of " + std::to_string(bytes.size()) + " bytes is not a valid protobuf Ddl");
  Decoder dec;
  Ddl d = dec.DdlModel(m, "DDL record");
  trellara__ddl__free_unpacked(m, nullptr);
  if (dec.failed()) return dec.error();
  return d;
}

}  // namespace trellara
