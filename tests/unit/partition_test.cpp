// partition_test.cpp — partitioned scale mode's rules: routing by relation and key, a partition
// applier's chunk checks, and the global watermark (core/include/trellara/partition/partition.h).
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "trellara/base/fault.h"
#include "trellara/capture/assembler.h"
#include "trellara/log/barrier.h"
#include "trellara/partition/partition.h"
#include "trellara/record/checksum.h"
#include "trellara/record/codec.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_partition_test {

using namespace trellara;
using namespace trellara::partition;

namespace {

RelationInfo Accounts() {
  RelationInfo r;
  r.oid = 16400;
  r.schema = "public";
  r.name = "accounts";
  r.columns = {{"id", 20, "bigint", -1, true}, {"balance", 1700, "numeric", -1, false}};
  return r;
}

Change Insert(const std::string& id, const std::string& balance) {
  Change c;
  c.op = Op::Insert;
  c.relation_oid = 16400;
  c.new_tuple = {Value::Text(id), Value::Text(balance)};
  return c;
}

ChunkRef Ref(uint32_t seq, uint32_t partition, uint32_t events, uint8_t tag) {
  ChunkRef ref;
  ref.seq = seq;
  ref.partition_id = partition;
  ref.event_count = events;
  ref.checksum.fill(tag);
  return ref;
}

}  // namespace

TEST_CASE("a_partition_map_names_what_is_wrong_with_it", "[partition]") {
  CHECK(ValidateMap({1, 4}).ok());
  CHECK(ValidateMap({1, kMaxPartitions}).ok());
  CHECK(ValidateMap({0, 4}).error().message.find("version 0") != std::string::npos);
  CHECK(ValidateMap({1, 0}).error().message.find("at least one partition") != std::string::npos);
  CHECK(ValidateMap({1, kMaxPartitions + 1}).error().message.find("65") != std::string::npos);
}

TEST_CASE("every_change_of_one_row_goes_to_one_partition_whatever_its_op", "[partition]") {
  const PartitionMap map{1, 8};
  const RelationInfo accounts = Accounts();
  const Route inserted = RouteChange(map, accounts, Insert("42", "10.00"));
  REQUIRE_FALSE(inserted.serial);
  // An update without a key change carries no old image: routed by the new row's key.
  Change update = Insert("42", "11.00");
  update.op = Op::Update;
  CHECK(RouteChange(map, accounts, update) == inserted);
  // A delete carries the old key.
  Change remove;
  remove.op = Op::Delete;
  remove.old_image = OldImage::Key;
  remove.old_tuple = {Value::Text("42")};
  CHECK(RouteChange(map, accounts, remove) == inserted);
  // An update that moves the row to another key is routed by its old key.
  Change moved = Insert("4242", "11.00");
  moved.op = Op::Update;
  moved.old_image = OldImage::Key;
  moved.old_tuple = {Value::Text("42")};
  CHECK(RouteChange(map, accounts, moved) == inserted);
  // REPLICA IDENTITY FULL's old image: the key columns are picked out of it.
  Change full = remove;
  full.old_image = OldImage::Full;
  full.old_tuple = {Value::Text("42"), Value::Text("10.00")};
  CHECK(RouteChange(map, accounts, full) == inserted);
}

TEST_CASE("routing_is_by_relation_name_and_key_not_by_oid_and_spreads_rows", "[partition]") {
  const PartitionMap map{1, 4};
  RelationInfo accounts = Accounts();
  RelationInfo restored = accounts;
  restored.oid = 99999;  // the same table on a restored source
  std::vector<int> per_partition(4, 0);
  for (int i = 0; i < 4000; i++) {
    const Change c = Insert(std::to_string(i), "1");
    const Route route = RouteChange(map, accounts, c);
    REQUIRE_FALSE(route.serial);
    REQUIRE(route.partition < 4);
    CHECK(RouteChange(map, restored, c) == route);
    per_partition[route.partition]++;
  }
  for (int n : per_partition) CHECK((n > 800 && n < 1200));  // CRC32C spreads sequential keys
  // The same key in another table may land elsewhere: the relation is part of the route.
  RelationInfo other = accounts;
  other.name = "ledger";
  int differs = 0;
  for (int i = 0; i < 100; i++)
    differs += RouteChange(map, other, Insert(std::to_string(i), "1")) != RouteChange(map, accounts, Insert(std::to_string(i), "1"));
  CHECK(differs > 0);
  // Pinned values (computed independently: CRC32C over the length-prefixed fields, mod N): a
  // change of the hash would move rows of live flows between partitions.
  auto of = [](uint32_t n, const char* key) {
    return PartitionOfRow({1, n}, "public", "accounts", std::vector<Value>{Value::Text(key)});
  };
  CHECK(of(4, "42") == 0);
  CHECK(of(4, "1") == 3);
  CHECK(of(4, "2") == 3);
  CHECK(of(4, "3") == 0);
  CHECK(of(1, "1") == 0);
}

TEST_CASE("changes_that_name_no_single_row_are_serial", "[partition]") {
  const PartitionMap map{1, 4};
  RelationInfo accounts = Accounts();
  Change truncate;
  truncate.op = Op::Truncate;
  CHECK(RouteChange(map, accounts, truncate).serial);
  Change ddl;
  ddl.op = Op::Ddl;
  CHECK(RouteChange(map, accounts, ddl).serial);
  Change message;
  message.op = Op::Message;
  CHECK(RouteChange(map, accounts, message).serial);
  // An unchanged TOASTed key is not in the change: its partition cannot be named.
  Change toasted = Insert("x", "1");
  toasted.op = Op::Update;
  toasted.new_tuple[0] = Value::UnchangedToast();
  CHECK(RouteChange(map, accounts, toasted).serial);
  // A delete without its old key, or a tuple that does not match the relation.
  Change bare;
  bare.op = Op::Delete;
  CHECK(RouteChange(map, accounts, bare).serial);
  Change short_row = Insert("1", "1");
  short_row.new_tuple.pop_back();
  CHECK(RouteChange(map, accounts, short_row).serial);
}

TEST_CASE("a_relation_without_key_keeps_all_its_rows_in_one_partition", "[partition]") {
  const PartitionMap map{1, 8};
  RelationInfo events = Accounts();
  events.name = "events";
  for (auto& c : events.columns) c.is_key = false;
  events.replica_identity = ReplicaIdentity::Full;
  const Route first = RouteChange(map, events, Insert("1", "a"));
  for (int i = 2; i < 50; i++) CHECK(RouteChange(map, events, Insert(std::to_string(i), "b")) == first);
}

TEST_CASE("a_partition_applier_accepts_only_listed_chunks_of_its_own_partition", "[partition]") {
  const std::vector<ChunkRef> manifest = {Ref(0, 0, 10, 1), Ref(1, 1, 5, 2), Ref(2, 0, 7, 3), Ref(3, 2, 1, 4)};
  std::map<uint32_t, ChunkRef> accepted;
  CHECK(CheckChunk(0, Ref(0, 0, 10, 1), manifest, accepted) == ChunkVerdict::Accept);
  accepted[0] = Ref(0, 0, 10, 1);
  // The same chunk again (a relay that re-emitted it): counted, not an error.
  CHECK(CheckChunk(0, Ref(0, 0, 10, 1), manifest, accepted) == ChunkVerdict::Duplicate);
  // The routing header names another partition than this applier's.
  CHECK(CheckChunk(0, Ref(1, 1, 5, 2), manifest, accepted) == ChunkVerdict::RoutingMismatch);
  // A seq the manifest does not list.
  CHECK(CheckChunk(0, Ref(9, 0, 1, 9), manifest, accepted) == ChunkVerdict::Unlisted);
  // Listed, but for another partition than the header says (the header was rewritten).
  CHECK(CheckChunk(0, Ref(1, 0, 5, 2), manifest, accepted) == ChunkVerdict::ListedElsewhere);
  // Listed with another count or checksum.
  CHECK(CheckChunk(0, Ref(2, 0, 8, 3), manifest, accepted) == ChunkVerdict::Conflicting);
  CHECK(CheckChunk(0, Ref(2, 0, 7, 9), manifest, accepted) == ChunkVerdict::Conflicting);
  for (auto v : {ChunkVerdict::RoutingMismatch, ChunkVerdict::Unlisted, ChunkVerdict::ListedElsewhere,
                 ChunkVerdict::Conflicting})
    CHECK(Refused(v));
  CHECK_FALSE(Refused(ChunkVerdict::Accept));
  CHECK_FALSE(Refused(ChunkVerdict::Duplicate));
  CHECK(std::string(ChunkVerdictName(ChunkVerdict::RoutingMismatch)) == "routing_mismatch");
  // At the marker: partition 0 still lacks seq 2; partition 1 lacks its only chunk.
  CHECK(MissingChunks(0, manifest, accepted) == std::vector<uint32_t>{2});
  accepted[2] = Ref(2, 0, 7, 3);
  CHECK(MissingChunks(0, manifest, accepted).empty());
  CHECK(MissingChunks(1, manifest, {}) == std::vector<uint32_t>{1});
  CHECK(ListedPartitions(manifest) == std::vector<uint32_t>{0, 1, 2});
}

TEST_CASE("the_watermark_passes_a_transaction_only_when_every_listed_partition_holds_evidence", "[partition]") {
  const std::vector<PendingTransaction> pending = {{100, {0, 1}}, {200, {1}}, {300, {0, 2}}, {400, {}}};
  // Nothing committed anywhere: held at the first transaction, by both of its partitions.
  auto w = GlobalWatermark(50, pending, {});
  REQUIRE(w.ok());
  CHECK(*w == Watermark{50, 100, {0, 1}});
  // Partition 1 far ahead does not help: partition 0 has no evidence for 100.
  w = GlobalWatermark(50, pending, {{1, 200}});
  CHECK(*w == Watermark{50, 100, {0}});
  // 0 and 1 past 200: the watermark reaches 200 and waits at 300 for partition 2.
  w = GlobalWatermark(50, pending, {{0, 100}, {1, 200}});
  CHECK(*w == Watermark{200, 300, {0, 2}});
  w = GlobalWatermark(50, pending, {{0, 300}, {1, 200}, {2, 300}});
  // 400 lists no partition (serial changes only): it passes with the one before it.
  CHECK(*w == Watermark{400, std::nullopt, {}});
  // A partition's checkpoint past a transaction it is not listed in is no evidence for another.
  w = GlobalWatermark(50, pending, {{0, 999}, {2, 999}});
  CHECK(*w == Watermark{50, 100, {1}});
}

TEST_CASE("the_watermark_refuses_pending_transactions_out_of_order", "[partition]") {
  const std::vector<PendingTransaction> unordered = {{200, {0}}, {100, {0}}};
  CHECK_FALSE(GlobalWatermark(0, unordered, {}).ok());
  const std::vector<PendingTransaction> below = {{40, {0}}};
  auto w = GlobalWatermark(50, below, {});
  REQUIRE_FALSE(w.ok());
  CHECK(w.error().message.find("0/32") != std::string::npos);
}

TEST_CASE("the_publisher_publishes_waits_or_quarantines_from_evidence_and_blockers", "[partition]") {
  const std::vector<uint32_t> listed = {0, 2};
  // Every listed partition at or past the transaction: publish (a blocker elsewhere does not matter).
  auto d = DecidePublication(50, 100, listed, {{0, 100}, {2, 150}}, {{1, {100, "routing_mismatch"}}});
  REQUIRE(d.ok());
  CHECK(d->action == PublishAction::Publish);
  // Partition 2 without evidence and no blocker: wait for it, naming it.
  d = DecidePublication(50, 100, listed, {{0, 100}}, {});
  CHECK(*d == PublishDecision{PublishAction::Wait, {2}, 0, ""});
  // Partition 2 refused this very transaction: quarantine, naming the partition and its reason.
  d = DecidePublication(50, 100, listed, {{0, 100}}, {{2, {100, "missing_chunk"}}});
  CHECK(*d == PublishDecision{PublishAction::Quarantine, {}, 2, "missing_chunk"});
  // A blocker for another transaction (a later one) does not refuse this one: wait.
  d = DecidePublication(50, 100, listed, {{0, 100}}, {{2, {300, "missing_chunk"}}});
  CHECK(d->action == PublishAction::Wait);
  // A blocker of a partition that holds evidence (it refused, was repaired and moved on) is stale.
  d = DecidePublication(50, 100, listed, {{0, 100}, {2, 100}}, {{2, {100, "missing_chunk"}}});
  CHECK(d->action == PublishAction::Publish);
  // A transaction listing no partition (serial changes only) publishes at once.
  d = DecidePublication(50, 100, std::vector<uint32_t>{}, {}, {});
  CHECK(d->action == PublishAction::Publish);
  // At or below what was published already: an error, never a publish.
  CHECK_FALSE(DecidePublication(100, 100, listed, {{0, 100}, {2, 100}}, {}).ok());
}

TEST_CASE("the_watermark_never_passes_a_transaction_some_partition_lacks_randomized", "[partition]") {
  std::mt19937_64 rng(20261206);
  for (int round = 0; round < 200; round++) {
    std::vector<PendingTransaction> pending;
    uint64_t lsn = 1000;
    for (int i = 0; i < 20; i++) {
      lsn += 1 + rng() % 50;
      PendingTransaction tx{lsn, {}};
      for (uint32_t p = 0; p < 4; p++)
        if (rng() % 2) tx.partitions.push_back(p);
      pending.push_back(tx);
    }
    std::map<uint32_t, uint64_t> checkpoints;
    for (uint32_t p = 0; p < 4; p++)
      if (rng() % 4) checkpoints[p] = 1000 + rng() % (lsn - 999);
    auto w = GlobalWatermark(1000, pending, checkpoints);
    REQUIRE(w.ok());
    for (const auto& tx : pending) {
      bool covered = true;
      for (uint32_t p : tx.partitions) covered = covered && checkpoints.count(p) && checkpoints[p] >= tx.commit_lsn;
      if (tx.commit_lsn <= w->commit_lsn) {
        CHECK(covered);  // never visible before every listed partition committed its part
      } else {
        CHECK(w->held_at.has_value());
        if (tx.commit_lsn == *w->held_at) CHECK_FALSE(covered);  // and held exactly where one lacks it
      }
    }
  }
}

// ---- capture, barrier and the publisher's merge -------------------------------------------------
namespace {

struct CapturedTx {
  std::vector<Record> records;
  std::vector<std::string> bytes;
};

RelationInfo Ledger() {
  RelationInfo r;
  r.oid = 16500;
  r.schema = "public";
  r.name = "ledger";
  r.columns = {{"id", 20, "bigint", -1, true}, {"amount", 23, "integer", -1, false}};
  r.fingerprint = ComputeFingerprint(r);
  return r;
}

// `changes` of Accounts (and serial ones) captured by an assembler with `options`.
CapturedTx CaptureTx(const TransactionAssembler::Options& options, const std::vector<Change>& changes) {
  const RelationInfo accounts = [] {
    RelationInfo r = Accounts();
    r.fingerprint = ComputeFingerprint(r);
    return r;
  }();
  const RelationInfo ledger = Ledger();
  TransactionAssembler a(options);
  CapturedTx out;
  const RecordSink sink = [&out](const EmittedRecord& r) -> Status {
    auto decoded = DecodeRecord(r.bytes);
    if (!decoded.ok()) return decoded.error();
    out.records.push_back(*decoded);
    out.bytes.push_back(r.bytes);
    return Status::Ok();
  };
  a.Begin(700, 0x1000, 0x2000, 5);
  for (const Change& c : changes) {
    const bool row = c.op == Op::Insert || c.op == Op::Update || c.op == Op::Delete;
    std::vector<const RelationInfo*> truncated;
    if (c.op == Op::Truncate) truncated.push_back(&accounts);
    const RelationInfo* relation = !row ? nullptr : c.relation_oid == ledger.oid ? &ledger : &accounts;
    REQUIRE(a.AddChange(c, relation, truncated, sink).ok());
  }
  REQUIRE(a.Commit(sink).ok());
  return out;
}

std::vector<Change> RandomChanges(std::mt19937_64& rng, size_t n) {
  std::vector<Change> out;
  for (size_t i = 0; i < n; i++) {
    if (rng() % 4 == 0) {  // a second relation: per-relation counts must not depend on routing
      Change l;
      l.op = Op::Insert;
      l.relation_oid = 16500;
      l.new_tuple = {Value::Text(std::to_string(i)), Value::Text(std::to_string(rng() % 100))};
      out.push_back(l);
      continue;
    }
    const std::string id = std::to_string(rng() % 40);
    const uint64_t kind = rng() % 20;
    if (kind == 0) {
      Change t;
      t.op = Op::Truncate;
      t.truncate.relation_oids = {16400};
      out.push_back(t);
    } else if (kind == 1) {
      Change m;
      m.op = Op::Message;
      m.message.transactional = true;
      m.message.prefix = "app";
      m.message.content = "m" + std::to_string(i);
      out.push_back(m);
    } else if (kind < 8) {
      Change u;
      u.op = Op::Update;
      u.relation_oid = 16400;
      u.new_tuple = {Value::Text(id), Value::Text(std::to_string(i))};
      out.push_back(u);
    } else {
      out.push_back(Insert(id, std::to_string(i)));
    }
  }
  return out;
}

// The log frames of a capture, fed through the barrier: the one ready transaction.
ReadyTransaction ThroughBarrier(const CapturedTx& tx) {
  TransactionBarrier barrier;
  std::optional<ReadyTransaction> ready;
  for (size_t i = 0; i < tx.bytes.size(); i++) {
    const auto* data = reinterpret_cast<const uint8_t*>(tx.bytes[i].data());
    auto fed = barrier.Feed(LogFrame{100 + i, static_cast<uint8_t>(TypeOf(tx.records[i])), 0x2000,
                                     std::span<const uint8_t>(data, tx.bytes[i].size())});
    if (!fed.ok()) FAIL(fed.error().message);
    if (fed->has_value()) ready = std::move(**fed);
  }
  REQUIRE(ready.has_value());
  return *ready;
}

std::vector<Change> Merge(const CapturedTx& tx, const Manifest& manifest, Status* status = nullptr) {
  std::vector<Change> merged;
  Status s = MergeByPosition(
      manifest.chunks, manifest.total_changes,
      [&](const ChunkRef& ref) -> Result<Chunk> {
        for (const Record& r : tx.records)
          if (const auto* c = std::get_if<Chunk>(&r); c != nullptr && c->seq == ref.seq) return *c;
        return MakeError("no chunk " + std::to_string(ref.seq));
      },
      [&](const Chunk& chunk, size_t i) {
        merged.push_back(chunk.changes[i]);
        return Status::Ok();
      });
  if (status != nullptr) *status = s;
  else REQUIRE(s.ok());
  return merged;
}

}  // namespace

TEST_CASE("a_partitioned_transaction_reconstructs_its_source_order_property", "[partition][property]") {
  // Property: whatever the partition count, chunk size and mix of row and serial changes, the
  // relay's partitioned records pass the barrier, every chunk holds only its partition's rows, and
  // merging the chunks by position gives back exactly the source transaction (same changes, same
  // order, same canonical checksum as the strict envelope of the same transaction).
  std::mt19937_64 rng(20261206);
  for (int round = 0; round < 200; round++) {
    const uint32_t partitions = 1 + static_cast<uint32_t>(rng() % 8);
    const auto changes = RandomChanges(rng, 1 + rng() % 60);
    TransactionAssembler::Options options{"app", 42, 1 + static_cast<uint32_t>(rng() % 7)};
    options.partitioned = true;
    options.map = PartitionMap{3, partitions};
    const CapturedTx tx = CaptureTx(options, changes);
    const ReadyTransaction ready = ThroughBarrier(tx);
    REQUIRE(ready.partitioned());
    CHECK(ready.manifest->map_version == 3);
    CHECK(ready.manifest->partitions == partitions);
    for (const Record& r : tx.records)
      if (const auto* c = std::get_if<Chunk>(&r))
        for (const Change& change : c->changes) {
          const Route route = RouteChange(options.map, change.relation_oid == 16500 ? Ledger() : Accounts(), change);
          CHECK(c->partition_id == (route.serial ? 0u : route.partition));
        }
    const std::vector<Change> merged = Merge(tx, *ready.manifest);
    CHECK(merged == changes);
    TransactionAssembler::Options strict{"app", 42, 100000};
    const CapturedTx whole = CaptureTx(strict, changes);
    REQUIRE(whole.records.size() == 1);
    RelationInfo accounts = Accounts();
    accounts.fingerprint = ComputeFingerprint(accounts);
    CHECK(ComputeChangesChecksum(merged, {accounts, Ledger()}).value() == std::get<Envelope>(whole.records[0]).checksum);
  }
}

TEST_CASE("positions_that_do_not_reconstruct_the_transaction_are_refused", "[partition]") {
  std::mt19937_64 rng(7);
  const auto changes = RandomChanges(rng, 30);
  TransactionAssembler::Options options{"app", 42, 4};
  options.partitioned = true;
  options.map = PartitionMap{1, 4};
  CapturedTx tx = CaptureTx(options, changes);
  const ReadyTransaction ready = ThroughBarrier(tx);
  Manifest manifest = *ready.manifest;
  REQUIRE(manifest.chunks.size() >= 2);
  SECTION("a chunk left out: its positions are missing") {
    manifest.chunks.erase(manifest.chunks.begin());
    Status s;
    Merge(tx, manifest, &s);
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.error().message, Catch::Contains("no partition holds change position"));
  }
  SECTION("a position repeated across partitions") {
    auto& first = std::get<Chunk>(tx.records[0]);
    for (Record& r : tx.records)
      if (auto* c = std::get_if<Chunk>(&r); c != nullptr && c->partition_id != first.partition_id) {
        c->positions[0] = first.positions[0];
        break;
      }
    Status s;
    Merge(tx, manifest, &s);
    CHECK_FALSE(s.ok());
  }
  SECTION("a changed position no longer matches the chunk's sealed checksum") {
    auto& c = std::get<Chunk>(tx.records[0]);
    if (c.positions.size() >= 2) std::swap(c.positions[0], c.positions[1]);
    else c.positions[0] += 1000;
    CHECK_FALSE(VerifyRecordChecksum(tx.records[0]).ok());
  }
}

TEST_CASE("the_barrier_refuses_partition_headers_a_strict_transaction_cannot_have", "[partition][barrier]") {
  std::mt19937_64 rng(11);
  const auto changes = RandomChanges(rng, 12);
  TransactionAssembler::Options options{"app", 42, 3};
  options.partitioned = true;
  options.map = PartitionMap{1, 3};
  CapturedTx tx = CaptureTx(options, changes);
  // A manifest whose chunk claims a partition outside its map.
  for (size_t i = 0; i < tx.records.size(); i++)
    if (auto* m = std::get_if<Manifest>(&tx.records[i])) {
      m->partitions = 1;
      tx.bytes[i] = EncodeRecord(tx.records[i]).value();
    }
  TransactionBarrier barrier;
  std::string failure;
  for (size_t i = 0; i < tx.bytes.size() && failure.empty(); i++) {
    const auto* data = reinterpret_cast<const uint8_t*>(tx.bytes[i].data());
    auto fed = barrier.Feed(LogFrame{100 + i, static_cast<uint8_t>(TypeOf(tx.records[i])), 0x2000,
                                     std::span<const uint8_t>(data, tx.bytes[i].size())});
    if (!fed.ok()) failure = fed.error().message;
  }
  const bool has_other_partition = std::any_of(tx.records.begin(), tx.records.end(), [](const Record& r) {
    const auto* c = std::get_if<Chunk>(&r);
    return c != nullptr && c->partition_id != 0;
  });
  REQUIRE(has_other_partition);
  CHECK_THAT(failure, Catch::Contains("has 1 partitions"));
}

// ---- the partition rows of seed 000, at the barrier and the partition applier's checks ----------
namespace {

// Feeds a capture's records (as they are now, re-encoded) through a fresh barrier: the error, or "".
std::string BarrierError(CapturedTx& tx) {
  TransactionBarrier barrier;
  for (size_t i = 0; i < tx.records.size(); i++) {
    tx.bytes[i] = EncodeRecord(tx.records[i]).value();
    const auto* data = reinterpret_cast<const uint8_t*>(tx.bytes[i].data());
    auto fed = barrier.Feed(LogFrame{100 + i, static_cast<uint8_t>(TypeOf(tx.records[i])), 0x2000,
                                     std::span<const uint8_t>(data, tx.bytes[i].size())});
    if (!fed.ok()) return fed.error().message;
  }
  return "";
}

CapturedTx PartitionedCapture(uint64_t seed, uint32_t partitions = 3) {
  std::mt19937_64 rng(seed);
  TransactionAssembler::Options options{"app", 42, 2};
  options.partitioned = true;
  options.map = PartitionMap{1, partitions};
  return CaptureTx(options, RandomChanges(rng, 24));
}

size_t IndexOf(const CapturedTx& tx, RecordType type, size_t nth = 0) {
  for (size_t i = 0; i < tx.records.size(); i++)
    if (TypeOf(tx.records[i]) == type && nth-- == 0) return i;
  FAIL("no such record");
  return 0;
}

// Re-seals the manifest after a change and binds the marker to it again (a well-formed lie).
void ResealManifest(CapturedTx& tx) {
  const size_t m = IndexOf(tx, RecordType::Manifest);
  const size_t k = IndexOf(tx, RecordType::CommitMarker);
  const std::string bytes = EncodeRecord(tx.records[m]).value();
  auto& marker = std::get<CommitMarker>(tx.records[k]);
  marker.manifest_checksum = Sha256Of(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  marker.total_chunks = static_cast<uint32_t>(std::get<Manifest>(tx.records[m]).chunks.size());
}

}  // namespace

TEST_CASE("a_partitioned_transaction_missing_a_chunk_is_refused_before_apply", "[partition][barrier]") {
  CapturedTx tx = PartitionedCapture(101);
  REQUIRE(BarrierError(tx).empty());
  SECTION("a chunk of one partition never arrives") {
    const size_t c = IndexOf(tx, RecordType::Chunk, 1);
    tx.records.erase(tx.records.begin() + static_cast<long>(c));
    tx.bytes.erase(tx.bytes.begin() + static_cast<long>(c));
    const std::string error = BarrierError(tx);
    CHECK_FALSE(error.empty());
  }
  SECTION("the manifest lists one partition's sequence twice") {
    auto& m = std::get<Manifest>(tx.records[IndexOf(tx, RecordType::Manifest)]);
    REQUIRE(m.chunks.size() >= 2);
    for (size_t i = 1; i < m.chunks.size(); i++)
      if (m.chunks[i].partition_id == m.chunks[0].partition_id) m.chunks[i].partition_seq = 0;
    ResealManifest(tx);
    const bool repeats = std::count_if(m.chunks.begin(), m.chunks.end(), [&](const ChunkRef& r) {
                           return r.partition_id == m.chunks[0].partition_id;
                         }) > 1;
    REQUIRE(repeats);
    CHECK_THAT(BarrierError(tx), Catch::Contains("expected 1"));
  }
  SECTION("a chunk repeated under another partition sequence") {
    const size_t c = IndexOf(tx, RecordType::Chunk, 0);
    auto& chunk = std::get<Chunk>(tx.records[c]);
    chunk.partition_seq += 7;
    REQUIRE(SealChunk(chunk).ok());
    CHECK_FALSE(BarrierError(tx).empty());
  }
}

TEST_CASE("a_partitioned_commit_marker_that_disagrees_with_its_manifest_is_refused", "[partition][barrier]") {
  CapturedTx tx = PartitionedCapture(202);
  SECTION("it binds another manifest") {
    std::get<CommitMarker>(tx.records[IndexOf(tx, RecordType::CommitMarker)]).manifest_checksum.fill(7);
    CHECK_THAT(BarrierError(tx), Catch::Contains("binds manifest checksum"));
  }
  SECTION("its totals differ from the manifest's") {
    std::get<CommitMarker>(tx.records[IndexOf(tx, RecordType::CommitMarker)]).total_changes += 1;
    CHECK_THAT(BarrierError(tx), Catch::Contains("declares"));
  }
  SECTION("the manifest names another partition map than its chunks were routed with") {
    auto& m = std::get<Manifest>(tx.records[IndexOf(tx, RecordType::Manifest)]);
    m.partitions = 2;
    ResealManifest(tx);
    const bool beyond = std::any_of(m.chunks.begin(), m.chunks.end(), [](const ChunkRef& r) { return r.partition_id >= 2; });
    REQUIRE(beyond);
    CHECK_THAT(BarrierError(tx), Catch::Contains("has 2 partitions"));
  }
}

// The paired defect of partition_commit_marker_manifest_mismatch: a barrier that does not check
// that the commit marker binds the manifest it received lets the transaction through.
TEST_CASE("a_commit_marker_of_another_manifest_passes_an_unbinding_barrier_negative_control", "[partition][barrier]") {
  CapturedTx tx = PartitionedCapture(202);
  std::get<CommitMarker>(tx.records[IndexOf(tx, RecordType::CommitMarker)]).manifest_checksum.fill(7);
  fault::AllowDefects(true, "unit test");
  REQUIRE(fault::Configure("defect.barrier_marker_unbound:1:defect").ok());
  const std::string error = BarrierError(tx);
  const int fired = fault::FiredCount("defect.barrier_marker_unbound");
  fault::Clear();
  fault::AllowDefects(false, "");
  CHECK(fired >= 1);
  CHECK(error.empty());  // the clean test's CHECK_THAT(..., "binds manifest checksum") fails: the defect is caught
}

TEST_CASE("a_chunk_whose_rows_route_elsewhere_than_its_header_is_refused", "[partition]") {
  CapturedTx tx = PartitionedCapture(303);
  const PartitionMap map{1, 3};
  bool checked = false;
  for (Record& r : tx.records)
    if (auto* c = std::get_if<Chunk>(&r)) {
      CHECK_FALSE(CheckRowsRoute(map, *c, c->partition_id).has_value());  // as captured: consistent
      if (c->partition_id == 0) continue;
      Chunk lying = *c;
      lying.partition_id = (c->partition_id + 1) % 3;  // the header names a partition its rows do not route to
      const auto mismatch = CheckRowsRoute(map, lying, lying.partition_id);
      REQUIRE(mismatch.has_value());
      CHECK_THAT(*mismatch, Catch::Contains("routing_mismatch"));
      checked = true;
    }
  CHECK(checked);
}

// The paired defect of partition_chunk_routing_header_mismatch: a partition applier that trusts the
// routing header stages a chunk whose rows belong to another partition.
TEST_CASE("a_chunk_whose_rows_route_elsewhere_passes_an_unchecked_router_negative_control", "[partition]") {
  CapturedTx tx = PartitionedCapture(303);
  const PartitionMap map{1, 3};
  fault::AllowDefects(true, "unit test");
  REQUIRE(fault::Configure("defect.partition_routing_unchecked:1:defect").ok());
  bool passed_a_lie = false;
  for (Record& r : tx.records)
    if (auto* c = std::get_if<Chunk>(&r); c != nullptr && c->partition_id != 0) {
      Chunk lying = *c;
      lying.partition_id = (c->partition_id + 1) % 3;
      passed_a_lie = passed_a_lie || !CheckRowsRoute(map, lying, lying.partition_id).has_value();
    }
  const int fired = fault::FiredCount("defect.partition_routing_unchecked");
  fault::Clear();
  fault::AllowDefects(false, "");
  CHECK(fired >= 1);
  CHECK(passed_a_lie);  // the clean test's REQUIRE(mismatch.has_value()) fails: the defect is caught
}

}  // namespace unit_partition_test
