// assembler.cpp — record-shape decisions for one source transaction (see assembler.h).
// Holds at most chunk_changes changes; never reorders, drops or merges changes.
#include "trellara/capture/assembler.h"

#include <algorithm>
#include <cstdio>

#include "trellara/record/codec.h"

namespace trellara {

namespace {
RelationInfo* FindRelation(std::vector<RelationInfo>& rels, uint32_t oid) {
  for (auto& r : rels)
    if (r.oid == oid) return &r;
  return nullptr;
}

uint64_t ValuesBytes(const std::vector<Value>& values) {
  uint64_t n = 0;
  for (const auto& v : values) n += v.data.size() + 8;
  return n;
}
}  // namespace

uint64_t ChangeBytes(const Change& change) {
  return 32 + ValuesBytes(change.new_tuple) + ValuesBytes(change.old_tuple) + change.message.prefix.size() +
         change.message.content.size() + 8 * change.truncate.relation_oids.size();
}

TransactionAssembler::TransactionAssembler(Options options) : options_(std::move(options)) {
  options_.chunk_changes = std::clamp<uint32_t>(options_.chunk_changes, 1, kMaxChunkChanges);
  options_.chunk_bytes = std::clamp<uint64_t>(options_.chunk_bytes, kMinChunkBytes, kMaxChunkBytes);
  options_.record_bytes_max = std::clamp<uint64_t>(options_.record_bytes_max, 1, kMaxChunkBytes);
  // An invalid map is refused where the flow's setting is read (the plugin's options); here it
  // must not index out of range.
  if (options_.partitioned)
    options_.map.partitions = std::clamp<uint32_t>(options_.map.partitions, 1, partition::kMaxPartitions);
}

void TransactionAssembler::Reset() {
  open_ = false;
  pending_.clear();
  pending_relations_.clear();
  all_relations_.clear();
  counts_.clear();
  chunk_refs_.clear();
  total_hasher_.reset();
  total_changes_ = 0;
  pending_bytes_ = 0;
  lanes_.clear();
}

void TransactionAssembler::Begin(uint32_t xid, uint64_t begin_lsn, uint64_t commit_lsn, int64_t commit_time_us) {
  Reset();
  uncapturable_failure_ = false;
  open_ = true;
  tx_ = TxIdentity{options_.flow, options_.origin_sysid, xid, commit_lsn};
  begin_lsn_ = begin_lsn;
  commit_time_us_ = commit_time_us;
  total_hasher_ = std::make_unique<ChangeHasher>();
  if (options_.partitioned) lanes_.resize(options_.map.partitions);
}

Status TransactionAssembler::Emit(const Record& record, bool completes, const RecordSink& sink,
                                  std::string* bytes_out) {
  auto bytes = EncodeRecord(record);
  if (!bytes.ok()) {
    // Encoding is a pure function of the decoded changes: the same WAL fails the same way again.
    uncapturable_failure_ = true;
    return bytes.error();
  }
  if (bytes->size() > options_.record_bytes_max) {
    // Name the transaction and the relations of this record: with chunk_bytes below the limit,
    // a record this large holds one change, so this is the relation of that change.
    const std::vector<RelationInfo>* relations = nullptr;
    if (const auto* c = std::get_if<Chunk>(&record)) relations = &c->relations;
    if (const auto* e = std::get_if<Envelope>(&record)) relations = &e->relations;
    std::string names;
    if (relations != nullptr)
      for (const auto& r : *relations) names += (names.empty() ? "" : ", ") + r.schema + "." + r.name;
    char lsn[32];
    std::snprintf(lsn, sizeof lsn, "%X/%X", static_cast<unsigned>(tx_.commit_lsn >> 32),
                  static_cast<unsigned>(tx_.commit_lsn));
    uncapturable_failure_ = true;
    return MakeError("transaction " + std::to_string(tx_.xid) + " (commit LSN " + lsn + ") cannot be captured: " +
                     RecordTypeName(TypeOf(record)) + " " + std::to_string(bytes->size()) + " bytes" +
                     (names.empty() ? "" : " (relation " + names + ")") + " is above the record limit of " +
                     std::to_string(options_.record_bytes_max) + " bytes");
  }
  TRELLARA_TRY(sink(EmittedRecord{TypeOf(record), tx_, completes, *bytes}));
  if (bytes_out != nullptr) *bytes_out = std::move(*bytes);
  return Status::Ok();
}

void TransactionAssembler::RememberRelation(const RelationInfo& relation) {
  if (FindRelation(pending_relations_, relation.oid) != nullptr) return;
  // A description equal to one a previous record carried is moved back in rather than copied (a
  // copy allocates every column's name and type name). Equal means equal in every field, so the
  // record is the same either way.
  for (size_t i = 0; i < spare_relations_.size(); i++) {
    if (spare_relations_[i] == relation) {
      pending_relations_.push_back(std::move(spare_relations_[i]));
      if (i + 1 != spare_relations_.size()) spare_relations_[i] = std::move(spare_relations_.back());
      spare_relations_.pop_back();
      return;
    }
  }
  pending_relations_.push_back(relation);
}

void TransactionAssembler::KeepSpareRelations(std::vector<RelationInfo>& relations) {
  if (spare_relations_.size() + relations.size() > kSpareRelationsMax) spare_relations_.clear();
  for (auto& r : relations) spare_relations_.push_back(std::move(r));
}

// Every relation of a chunked transaction, for its Manifest (latest version of each).
void TransactionAssembler::MergeIntoAllRelations(const std::vector<RelationInfo>& relations) {
  for (const auto& relation : relations) {
    if (RelationInfo* all = FindRelation(all_relations_, relation.oid))
      *all = relation;
    else
      all_relations_.push_back(relation);
  }
}

Status TransactionAssembler::AddChange(Change change, const RelationInfo* relation,
                                       const std::vector<const RelationInfo*>& truncated, const RecordSink& sink) {
  if (!open_) return MakeError("internal: change added outside a transaction");
  if (options_.partitioned) return AddPartitioned(std::move(change), relation, truncated, sink);
  // A relation whose schema changed since the pending changes referred to it closes the record,
  // so that every record describes each relation exactly once.
  bool schema_changed = false;
  auto check = [&](const RelationInfo& r) {
    const RelationInfo* known = FindRelation(pending_relations_, r.oid);
    if (known != nullptr && known->fingerprint != r.fingerprint) schema_changed = true;
  };
  if (relation != nullptr) check(*relation);
  for (const RelationInfo* t : truncated) check(*t);
  const uint64_t change_bytes = ChangeBytes(change);
  const bool bytes_full = !pending_.empty() && pending_bytes_ + change_bytes > options_.chunk_bytes;
  if (schema_changed || pending_.size() >= options_.chunk_changes || bytes_full) TRELLARA_TRY(FlushChunk(sink));
  if (relation != nullptr) RememberRelation(*relation);
  for (const RelationInfo* t : truncated) RememberRelation(*t);
  const RelationInfo* rel = relation != nullptr ? FindRelation(pending_relations_, relation->oid) : nullptr;
  total_hasher_->Add(change, rel, pending_relations_);
  CountChange(change, counts_);
  total_changes_++;
  pending_bytes_ += change_bytes;
  pending_.push_back(std::move(change));
  return Status::Ok();
}

Status TransactionAssembler::FlushChunk(const RecordSink& sink) {
  if (pending_.empty()) {
    pending_relations_.clear();
    return Status::Ok();
  }
  // Built in place in the Record it is emitted as: a chunk holds up to chunk_changes changes, and
  // copying it into a Record was a measurable share of a streamed transaction's replay.
  Record record{std::in_place_type<Chunk>};
  Chunk& chunk = std::get<Chunk>(record);
  chunk.tx = tx_;
  chunk.seq = static_cast<uint32_t>(chunk_refs_.size());
  chunk.partition_id = 0;
  chunk.relations = std::move(pending_relations_);
  MergeIntoAllRelations(chunk.relations);
  chunk.changes = std::move(pending_);
  pending_ = {};
  pending_relations_ = {};
  pending_bytes_ = 0;
  TRELLARA_TRY(SealChunk(chunk));
  TRELLARA_TRY(Emit(record, false, sink));
  chunk_refs_.push_back(ChunkRef{chunk.seq, chunk.partition_id, chunk.event_count, chunk.checksum});
  pending_.reserve(options_.chunk_changes);
  return Status::Ok();
}

Status TransactionAssembler::Commit(const RecordSink& sink) {
  if (!open_) return MakeError("internal: commit outside a transaction");
  if (total_changes_ == 0) {
    Reset();
    return Status::Ok();
  }
  if (options_.partitioned) {
    for (uint32_t p = 0; p < lanes_.size(); p++) TRELLARA_TRY(FlushLane(p, sink));
    return EmitManifestAndMarker(sink);
  }
  if (chunk_refs_.empty()) {
    // Built in place in the Record it is emitted as, then its vectors are taken back: the next
    // transaction reuses their capacity and the relation descriptions (see RememberRelation)
    // instead of allocating and copying them again.
    Record record{std::in_place_type<Envelope>};
    Envelope& e = std::get<Envelope>(record);
    e.tx = tx_;
    e.begin_lsn = begin_lsn_;
    e.commit_time_us = commit_time_us_;
    e.relations = std::move(pending_relations_);
    e.changes = std::move(pending_);
    e.counts = std::move(counts_);
    e.boundary_mode = BoundaryMode::Whole;
    // Same canonical checksum SealEnvelope would compute: the hasher saw exactly these changes.
    e.checksum = total_hasher_->Finish();
    Status s = Emit(record, true, sink);
    Reset();
    pending_ = std::move(e.changes);
    pending_.clear();
    counts_ = std::move(e.counts);
    counts_.clear();
    KeepSpareRelations(e.relations);
    pending_relations_ = std::move(e.relations);
    pending_relations_.clear();
    return s;
  }
  TRELLARA_TRY(FlushChunk(sink));
  return EmitManifestAndMarker(sink);
}

Status TransactionAssembler::EmitManifestAndMarker(const RecordSink& sink) {
  Manifest m;
  m.tx = tx_;
  m.begin_lsn = begin_lsn_;
  m.commit_time_us = commit_time_us_;
  m.chunks = chunk_refs_;
  m.relations = all_relations_;
  m.counts = counts_;
  m.total_changes = total_changes_;
  m.boundary_mode = options_.partitioned ? BoundaryMode::Partitioned : BoundaryMode::StrictChunk;
  if (options_.partitioned) {
    m.map_version = options_.map.version;
    m.partitions = options_.map.partitions;
  }
  m.checksum = total_hasher_->Finish();
  std::string manifest_bytes;
  TRELLARA_TRY(Emit(Record(m), false, sink, &manifest_bytes));
  CommitMarker k;
  k.tx = tx_;
  k.manifest_checksum =
      Sha256Of(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(manifest_bytes.data()), manifest_bytes.size()));
  k.total_changes = total_changes_;
  k.total_chunks = static_cast<uint32_t>(chunk_refs_.size());
  Status s = Emit(Record(k), true, sink);
  Reset();
  return s;
}

// Partitioned: the change goes to its partition's open chunk, which closes first when it is full
// or describes the change's relation with another schema. The change's position is its index in
// the source transaction; the total checksum and the per-relation counts are taken when a chunk is
// emitted, in chunk seq order (the order the barrier recomputes them in).
Status TransactionAssembler::AddPartitioned(Change change, const RelationInfo* relation,
                                            const std::vector<const RelationInfo*>& truncated, const RecordSink& sink) {
  static const RelationInfo kNoRelation{};
  const partition::Route route =
      partition::RouteChange(options_.map, relation != nullptr ? *relation : kNoRelation, change);
  const uint32_t p = route.serial ? 0 : route.partition;
  Lane& lane = lanes_[p];
  bool schema_changed = false;
  auto check = [&](const RelationInfo& r) {
    const RelationInfo* known = FindRelation(lane.relations, r.oid);
    if (known != nullptr && known->fingerprint != r.fingerprint) schema_changed = true;
  };
  if (relation != nullptr) check(*relation);
  for (const RelationInfo* t : truncated) check(*t);
  const uint64_t change_bytes = ChangeBytes(change);
  const bool bytes_full = !lane.changes.empty() && lane.bytes + change_bytes > options_.chunk_bytes;
  if (schema_changed || lane.changes.size() >= options_.chunk_changes || bytes_full) TRELLARA_TRY(FlushLane(p, sink));
  auto remember = [&lane](const RelationInfo& r) {
    if (FindRelation(lane.relations, r.oid) == nullptr) lane.relations.push_back(r);
  };
  if (relation != nullptr) remember(*relation);
  for (const RelationInfo* t : truncated) remember(*t);
  if (total_changes_ >= UINT32_MAX)
    return MakeError("transaction " + std::to_string(tx_.xid) + " has more than " + std::to_string(UINT32_MAX) +
                     " changes, the most a partitioned transaction can position");
  lane.positions.push_back(static_cast<uint32_t>(total_changes_));
  total_changes_++;
  lane.bytes += change_bytes;
  lane.changes.push_back(std::move(change));
  return Status::Ok();
}

Status TransactionAssembler::FlushLane(uint32_t partition, const RecordSink& sink) {
  Lane& lane = lanes_[partition];
  if (lane.changes.empty()) {
    lane.relations.clear();
    return Status::Ok();
  }
  Record record{std::in_place_type<Chunk>};
  Chunk& chunk = std::get<Chunk>(record);
  chunk.tx = tx_;
  chunk.seq = static_cast<uint32_t>(chunk_refs_.size());
  chunk.partition_id = partition;
  chunk.partition_seq = lane.next_partition_seq++;
  chunk.relations = std::move(lane.relations);
  MergeIntoAllRelations(chunk.relations);
  chunk.changes = std::move(lane.changes);
  chunk.positions = std::move(lane.positions);
  lane.changes = {};
  lane.positions = {};
  lane.relations = {};
  lane.bytes = 0;
  for (const Change& c : chunk.changes) {
    const bool row = c.op == Op::Insert || c.op == Op::Update || c.op == Op::Delete;
    total_hasher_->Add(c, row ? FindRelation(chunk.relations, c.relation_oid) : nullptr, chunk.relations);
    CountChange(c, counts_);  // in chunk seq order, as the barrier counts them
  }
  TRELLARA_TRY(SealChunk(chunk));
  TRELLARA_TRY(Emit(record, false, sink));
  chunk_refs_.push_back(ChunkRef{chunk.seq, chunk.partition_id, chunk.event_count, chunk.checksum, chunk.partition_seq});
  return Status::Ok();
}

}  // namespace trellara
