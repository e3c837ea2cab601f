// codec.cpp — converts records between the core model and protobuf-c bytes, validating
// everything that comes in.
//
// Encoding builds protobuf-c structs that point into the model (no copies of values) and packs
// them once. Decoding unpacks with protobuf-c (which rejects malformed wire data without
// crashing), then validates structure before building the model: an invalid record never gets
// past DecodeRecord. This file never judges whether a record may be applied; the barrier and the
// applier do.
#include "trellara/codec.h"

#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <set>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "trellara.pb-c.h"
#include "trellara/checksum.h"
#include "trellara/text.h"

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

struct RelationBytesCache {
  std::unordered_map<std::string, std::string> by_key;
};

// Key: everything the packed RelationInfo depends on.
std::string RelationKey(const RelationInfo& r) {
  std::string key(reinterpret_cast<const char*>(r.fingerprint.data()), r.fingerprint.size());
  auto put32 = [&key](uint32_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put32(r.oid);
  for (const auto& c : r.columns) put32(c.type_oid);
  return key;
}

const std::string& PackedRelation(const RelationInfo& r, bool& bad_text) {
  // Process-wide, created on first use (no static constructor in the extension), bounded.
  static RelationBytesCache* cache = new RelationBytesCache();
  constexpr size_t kMaxCachedRelations = 4096;
  std::string key = RelationKey(r);
  auto it = cache->by_key.find(key);
  if (it != cache->by_key.end()) return it->second;
  if (cache->by_key.size() >= kMaxCachedRelations) cache->by_key.clear();
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
  std::string bytes;
  AppendPacked<Trellara__RelationInfo>(bytes, one[0], trellara__relation_info__get_packed_size,
                                       trellara__relation_info__pack);
  return cache->by_key.emplace(std::move(key), std::move(bytes)).first->second;
}

// Packs `before` (fields numbered below the relations field), the relations, then `after`.
template <typename Message>
std::string PackWithRelations(const Message* before, const Message* after, uint32_t relations_field,
                              const std::vector<RelationInfo>& relations, size_t (*size_fn)(const Message*),
                              size_t (*pack_fn)(const Message*, uint8_t*), bool& bad_text) {
  std::string body;
  AppendPacked<Message>(body, before, size_fn, pack_fn);
  for (const auto& r : relations) AppendLengthDelimited(body, relations_field, PackedRelation(r, bad_text));
  AppendPacked<Message>(body, after, size_fn, pack_fn);
  return body;
}

}  // namespace

Result<std::string> EncodeRecord(const Record& record) {
  Encoder enc;
  bool bad_text = false;
  uint32_t record_field = 0;  // Record.body field number
  std::string body;           // the encoded body message
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
    body = PackWithRelations<Trellara__Envelope>(&before, &after, 5, e->relations, trellara__envelope__get_packed_size,
                                                 trellara__envelope__pack, bad_text);
    record_field = 1;
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
    body = PackWithRelations<Trellara__Chunk>(&before, &after, 6, c->relations, trellara__chunk__get_packed_size,
                                              trellara__chunk__pack, bad_text);
    record_field = 2;
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
      before.chunks[i] = enc.New(ref);
    }
    Trellara__Manifest after = TRELLARA__MANIFEST__INIT;   // fields 7-10
    after.n_counts = m->counts.size();
    after.counts = enc.Counts(m->counts);
    after.total_changes = m->total_changes;
    after.boundary_mode = static_cast<Trellara__BoundaryMode>(m->boundary_mode);
    after.checksum = Encoder::Bin(m->checksum);
    body = PackWithRelations<Trellara__Manifest>(&before, &after, 6, m->relations, trellara__manifest__get_packed_size,
                                                 trellara__manifest__pack, bad_text);
    record_field = 3;
  } else {
    const auto& k = std::get<CommitMarker>(record);
    Trellara__CommitMarker marker = TRELLARA__COMMIT_MARKER__INIT;
    marker.format_version = TRELLARA__FORMAT_VERSION__FORMAT_VERSION_1;
    marker.tx = enc.Tx(k.tx);
    marker.manifest_checksum = Encoder::Bin(k.manifest_checksum);
    marker.total_changes = k.total_changes;
    marker.total_chunks = k.total_chunks;
    AppendPacked<Trellara__CommitMarker>(body, &marker, trellara__commit_marker__get_packed_size,
                                         trellara__commit_marker__pack);
    record_field = 4;
  }
  if (enc.bad_text() || bad_text)
    return MakeError(std::string("cannot encode ") + RecordTypeName(TypeOf(record)) + " of xid " +
                     std::to_string(TxOf(record).xid) +
                     ": a name or text value contains a NUL byte, which a protobuf string cannot carry");
  std::string out;
  out.reserve(body.size() + 11);
  AppendLengthDelimited(out, record_field, body);
  if (out.size() > kMaxRecordBytes)
    return MakeError(std::string(RecordTypeName(TypeOf(record))) + " of xid " + std::to_string(TxOf(record).xid) +
                     " encodes to " + std::to_string(out.size()) + " bytes, above the " +
                     std::to_string(kMaxRecordBytes) + "-byte record limit");
  return out;
}

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
        ChunkRef ref{m->chunks[i]->seq, m->chunks[i]->partition_id, m->chunks[i]->event_count, {}};
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

bool VerifiedRelations::Matches(const RelationInfo& relation) {
  auto found = verified_.find(relation.fingerprint);
  if (found != verified_.end() && found->second == relation) return true;
  computed_++;
  if (ComputeFingerprint(relation) != relation.fingerprint) return false;
  if (verified_.size() >= kMaxRelations) verified_.clear();
  verified_.insert_or_assign(relation.fingerprint, relation);
  return true;
}

namespace {
Status VerifyRecordChecksumRaw(const Record& record, VerifiedRelations* verified) {
  const auto matches = [verified](const RelationInfo& r) {
    return verified != nullptr ? verified->Matches(r) : ComputeFingerprint(r) == r.fingerprint;
  };
  auto check = [&matches](const std::vector<Change>& changes, const std::vector<RelationInfo>& rels,
                  const Sha256& recorded, const std::string& what) -> Status {
    for (const auto& r : rels) {
      if (!matches(r))
        return MakeError(what + ": fingerprint of relation " + r.schema + "." + r.name +
                         " does not match its columns (recorded " + HexEncode(r.fingerprint) + ")");
    }
    auto computed = ComputeChangesChecksum(changes, rels);
    if (!computed.ok()) return MakeError(what + ": " + computed.error().message);
    if (*computed != recorded)
      return MakeError(what + ": checksum mismatch: recorded " + HexEncode(recorded) + ", computed " +
                       HexEncode(*computed) + "; the record was altered after it was sealed");
    return Status::Ok();
  };
  if (const auto* e = std::get_if<Envelope>(&record))
    return check(e->changes, e->relations, e->checksum,
                 "envelope of xid " + std::to_string(e->tx.xid) + " commit " + FormatLsn(e->tx.commit_lsn));
  if (const auto* c = std::get_if<Chunk>(&record))
    return check(c->changes, c->relations, c->checksum,
                 "chunk " + std::to_string(c->seq) + " of xid " + std::to_string(c->tx.xid) + " commit " +
                     FormatLsn(c->tx.commit_lsn));
  if (const auto* m = std::get_if<Manifest>(&record)) {
    for (const auto& r : m->relations)
      if (!matches(r))
        return MakeError("manifest of xid " + std::to_string(m->tx.xid) + ": fingerprint of relation " + r.schema +
                         "." + r.name + " does not match its columns");
  }
  return Status::Ok();
}
}  // namespace

Status VerifyRecordChecksum(const Record& record, VerifiedRelations& verified) {
  Status s = VerifyRecordChecksumRaw(record, &verified);
  if (s.ok()) return s;
  return MakeError(EscapeInvalidUtf8(s.error().message));
}

Status VerifyRecordChecksum(const Record& record) {
  Status s = VerifyRecordChecksumRaw(record, nullptr);
  if (s.ok()) return s;
  return MakeError(EscapeInvalidUtf8(s.error().message));
}

Status SealEnvelope(Envelope& envelope) {
  for (auto& r : envelope.relations) r.fingerprint = ComputeFingerprint(r);
  envelope.counts.clear();
  for (const auto& c : envelope.changes) CountChange(c, envelope.counts);
  envelope.boundary_mode = BoundaryMode::Whole;
  envelope.checksum = Sha256{};
  auto sum = ComputeChangesChecksum(envelope.changes, envelope.relations);
  if (!sum.ok())
    return MakeError("cannot seal envelope of xid " + std::to_string(envelope.tx.xid) + ": " + sum.error().message);
  envelope.checksum = *sum;
  return Status::Ok();
}

Result<std::string> EncodeDdl(const Ddl& ddl) {
  Encoder enc;
  Trellara__Ddl* m = enc.DdlMessage(ddl);
  if (enc.bad_text()) return MakeError("DDL record of " + ddl.object_identity + " holds a NUL byte in a text field");
  std::string out(trellara__ddl__get_packed_size(m), '\0');
  trellara__ddl__pack(m, reinterpret_cast<uint8_t*>(out.data()));
  return out;
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

Status SealChunk(Chunk& chunk) {
  for (auto& r : chunk.relations) r.fingerprint = ComputeFingerprint(r);
  chunk.event_count = static_cast<uint32_t>(chunk.changes.size());
  chunk.checksum = Sha256{};
  auto sum = ComputeChangesChecksum(chunk.changes, chunk.relations);
  if (!sum.ok())
    return MakeError("cannot seal chunk " + std::to_string(chunk.seq) + " of xid " + std::to_string(chunk.tx.xid) +
                     ": " + sum.error().message);
  chunk.checksum = *sum;
  return Status::Ok();
}

}  // namespace trellara
