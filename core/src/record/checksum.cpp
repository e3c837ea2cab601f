// checksum.cpp — the canonical byte encoding behind change checksums and relation fingerprints.
//
// Canonical encoding: a domain tag, then for every item a one-byte tag followed by fixed-width
// little-endian integers or (u64 length, bytes) strings. Nothing is hashed that could differ for
// the same content (no protobuf bytes, no OIDs of types, no map iteration order). Changing this
// encoding changes every checksum: it is versioned by its domain tag.
#include "trellara/record/checksum.h"

#include <openssl/evp.h>

#include <cstring>
#include <stdexcept>

namespace trellara {

namespace {

// The SHA-256 implementation, fetched from the provider once per process (an implicit fetch on
// every init takes provider-store locks and dominated small hashes).
const EVP_MD* Sha256Md() {
  static EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

// The canonical encoding is made of many tiny items (one-byte tags, 8-byte lengths): they are
// gathered in a small buffer and handed to the digest in blocks, since each EVP_DigestUpdate call
// costs more than hashing a few bytes. The digest sees exactly the same byte sequence, so every
// checksum is unchanged.
class Sha256Stream {
 public:
  Sha256Stream() : ctx_(EVP_MD_CTX_new()) {
    if (ctx_ == nullptr || Sha256Md() == nullptr || EVP_DigestInit_ex(ctx_, Sha256Md(), nullptr) != 1)
      throw std::bad_alloc();
  }
  ~Sha256Stream() { EVP_MD_CTX_free(ctx_); }
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;

  void Bytes(const void* p, size_t n) {
    if (n == 0) return;
    if (n > kBufferBytes - used_) {
      Drain();
      if (n >= kBufferBytes) {  // large values go to the digest directly
        EVP_DigestUpdate(ctx_, p, n);
        return;
      }
    }
    std::memcpy(buffer_ + used_, p, n);
    used_ += n;
  }
  void U8(uint8_t v) { Bytes(&v, 1); }
  void U32(uint32_t v) {
    uint8_t b[4];
    for (int i = 0; i < 4; i++) b[i] = static_cast<uint8_t>(v >> (8 * i));
    Bytes(b, 4);
  }
  void U64(uint64_t v) {
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = static_cast<uint8_t>(v >> (8 * i));
    Bytes(b, 8);
  }
  void Str(const std::string& s) {
    U64(s.size());
    Bytes(s.data(), s.size());
  }
  Sha256 Finish() {
    Drain();
    Sha256 out{};
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_, out.data(), &len);
    return out;
  }

 private:
  static constexpr size_t kBufferBytes = 1024;
  void Drain() {
    if (used_ > 0) EVP_DigestUpdate(ctx_, buffer_, used_);
    used_ = 0;
  }
  EVP_MD_CTX* ctx_;
  size_t used_ = 0;
  uint8_t buffer_[kBufferBytes];
};

void HashValues(Sha256Stream& h, const std::vector<Value>& values) {
  h.U64(values.size());
  for (const auto& v : values) {
    h.U8(static_cast<uint8_t>(v.kind));
    if (v.kind == Value::Kind::Text || v.kind == Value::Kind::Binary) h.Str(v.data);
  }
}

// Everything a Ddl carries beyond its names (steps, definition, publications), so a record whose
// DDL detail was altered fails its checksum like one whose values were.
void HashDdlDetail(Sha256Stream& h, const Ddl& ddl) {
  h.U32(ddl.relation_oid);
  h.Str(ddl.relation_schema);
  h.Str(ddl.relation_name);
  h.U64(ddl.steps.size());
  for (const DdlStep& st : ddl.steps) {
    h.U8(static_cast<uint8_t>(st.kind));
    h.Str(st.column);
    h.Str(st.new_name);
    h.Str(st.detail);
    h.U8(st.using_expression ? 1 : 0);
    // Only the enum steps have these (so older records keep their checksums).
    if (st.kind == DdlStepKind::EnumAddValue || st.kind == DdlStepKind::EnumRenameValue) {
      h.Str(st.label);
      h.U8(st.before ? 1 : 0);
    }
  }
  h.U8(ddl.definition ? 1 : 0);
  if (ddl.definition) {
    const RelationDefinition& d = *ddl.definition;
    h.U32(d.oid);
    h.Str(d.schema);
    h.Str(d.name);
    h.Str(d.relkind);
    h.U8(d.is_partition ? 1 : 0);
    h.U64(d.columns.size());
    for (const DdlColumn& c : d.columns) {
      h.Str(c.name);
      h.U32(c.type_oid);
      h.Str(c.type_name);
      h.U32(static_cast<uint32_t>(c.typmod));
      h.U8(c.not_null ? 1 : 0);
      h.U8(static_cast<uint8_t>(c.default_kind));
      h.Str(c.default_expr);
      h.Str(c.generated);
      h.Str(c.identity);
      h.Str(c.generation_expr);
      h.Str(c.collation);
    }
    h.U64(d.primary_key.size());
    for (const auto& k : d.primary_key) h.Str(k);
    h.Str(d.primary_key_name);
    h.U8(static_cast<uint8_t>(d.replica_identity));
    h.Str(d.identity_index);
    // Partitioning, only when there is any: a record of a table that is not partitioned hashes as
    // before these fields existed (logs written by earlier releases keep their checksums).
    if (!d.partition_key.empty() || !d.partition_parent_name.empty() || !d.partition_bound.empty()) {
      h.U8(1);
      h.Str(d.partition_key);
      h.Str(d.partition_parent_schema);
      h.Str(d.partition_parent_name);
      h.Str(d.partition_bound);
    }
  }
  h.U64(ddl.publications.size());
  for (const auto& p : ddl.publications) h.Str(p);
}

void HashRelationName(Sha256Stream& h, const RelationInfo* rel) {
  if (rel == nullptr) {
    h.U8(0);
    return;
  }
  h.U8(1);
  h.Str(rel->schema);
  h.Str(rel->name);
  h.Bytes(rel->fingerprint.data(), rel->fingerprint.size());
}

const RelationInfo* Find(const std::vector<RelationInfo>& relations, uint32_t oid) {
  for (const auto& r : relations)
    if (r.oid == oid) return &r;
  return nullptr;
}

}  // namespace

Sha256 ComputeFingerprint(const RelationInfo& relation) {
  Sha256Stream h;
  h.Str("trellara.relation.v1");
  h.Str(relation.schema);
  h.Str(relation.name);
  h.U8(static_cast<uint8_t>(relation.replica_identity));
  h.U64(relation.columns.size());
  for (const auto& c : relation.columns) {
    h.Str(c.name);
    h.Str(c.type_name);
    h.U32(static_cast<uint32_t>(c.typmod));
    h.U8(c.is_key ? 1 : 0);
  }
  return h.Finish();
}

struct ChangeHasher::State {
  Sha256Stream h;
};

ChangeHasher::ChangeHasher() : state_(std::make_unique<State>()) { state_->h.Str("trellara.changes.v1"); }
ChangeHasher::~ChangeHasher() = default;
ChangeHasher::ChangeHasher(ChangeHasher&&) noexcept = default;
ChangeHasher& ChangeHasher::operator=(ChangeHasher&&) noexcept = default;

void ChangeHasher::Add(const Change& change, const RelationInfo* relation,
                       const std::vector<RelationInfo>& relations) {
  auto& h = state_->h;
  count_++;
  h.U8(0xC7);  // change separator
  h.U8(static_cast<uint8_t>(change.op));
  switch (change.op) {
    case Op::Insert:
    case Op::Update:
    case Op::Delete:
      HashRelationName(h, relation);
      h.U8(static_cast<uint8_t>(change.old_image));
      HashValues(h, change.old_tuple);
      HashValues(h, change.new_tuple);
      break;
    case Op::Truncate:
      h.U64(change.truncate.relation_oids.size());
      for (uint32_t oid : change.truncate.relation_oids) HashRelationName(h, Find(relations, oid));
      h.U8(change.truncate.cascade ? 1 : 0);
      h.U8(change.truncate.restart_identity ? 1 : 0);
      break;
    case Op::Message:
      h.U8(change.message.transactional ? 1 : 0);
      h.Str(change.message.prefix);
      h.Str(change.message.content);
      break;
    case Op::Ddl:
      h.Str(change.ddl.command_tag);
      h.Str(change.ddl.object_type);
      h.Str(change.ddl.schema);
      h.Str(change.ddl.object_identity);
      h.Str(change.ddl.sql);
      HashDdlDetail(h, change.ddl);
      break;
  }
}

Sha256 ChangeHasher::Finish() {
  state_->h.U64(count_);
  return state_->h.Finish();
}

Result<Sha256> ComputeChangesChecksum(const std::vector<Change>& changes,
                                      const std::vector<RelationInfo>& relations) {
  ChangeHasher hasher;
  for (size_t i = 0; i < changes.size(); i++) {
    const Change& c = changes[i];
    const RelationInfo* rel = nullptr;
    if (c.op == Op::Insert || c.op == Op::Update || c.op == Op::Delete) {
      rel = Find(relations, c.relation_oid);
      if (rel == nullptr)
        return MakeError("change " + std::to_string(i) + " (" + OpName(c.op) + ") refers to relation oid " +
                         std::to_string(c.relation_oid) + " which the record does not describe");
    }
    if (c.op == Op::Truncate) {
      for (uint32_t oid : c.truncate.relation_oids)
        if (Find(relations, oid) == nullptr)
          return MakeError("change " + std::to_string(i) + " (truncate) refers to relation oid " +
                           std::to_string(oid) + " which the record does not describe");
    }
    hasher.Add(c, rel, relations);
  }
  return hasher.Finish();
}

Sha256 PositionedChecksum(const Sha256& changes_checksum, std::span<const uint32_t> positions) {
  if (positions.empty()) return changes_checksum;
  Sha256Stream h;
  static constexpr char kTag[] = "trellara.positions.v1";
  h.Bytes(reinterpret_cast<const uint8_t*>(kTag), sizeof kTag - 1);
  h.Bytes(changes_checksum.data(), changes_checksum.size());
  for (uint32_t p : positions) {
    const uint8_t le[4] = {static_cast<uint8_t>(p), static_cast<uint8_t>(p >> 8), static_cast<uint8_t>(p >> 16),
                           static_cast<uint8_t>(p >> 24)};
    h.Bytes(le, sizeof le);
  }
  return h.Finish();
}

Sha256 Sha256Of(std::span<const uint8_t> bytes) {
  Sha256Stream h;
  h.Bytes(bytes.data(), bytes.size());
  return h.Finish();
}

}  // namespace trellara
