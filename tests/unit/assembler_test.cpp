// assembler_test.cpp — record shapes chosen for a transaction: whole envelope vs chunks +
// manifest + commit marker, bounded memory, schema change mid-transaction, empty transactions.
#include <catch2/catch.hpp>

#include "samples.h"
#include "trellara/capture/assembler.h"
#include "trellara/record/checksum.h"
#include "trellara/record/codec.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_assembler_test {

using namespace trellara;

namespace {

struct Captured {
  std::vector<Record> records;
  std::vector<std::string> bytes;
  std::vector<bool> completes;
};

RecordSink Capture(Captured& c) {
  return [&c](const EmittedRecord& r) -> Status {
    auto decoded = DecodeRecord(r.bytes);
    if (!decoded.ok()) return decoded.error();
    REQUIRE(TypeOf(*decoded) == r.type);
    c.records.push_back(*decoded);
    c.bytes.push_back(r.bytes);
    c.completes.push_back(r.completes_transaction);
    return Status::Ok();
  };
}

Change Insert(int64_t id) {
  Change c;
  c.op = Op::Insert;
  c.relation_oid = 16384;
  c.new_tuple = {Value::Text(std::to_string(id)), Value::Text("n"), Value::Null(), Value::Null()};
  return c;
}

}  // namespace

TEST_CASE("small_transaction_is_one_whole_envelope", "[assembler]") {
  TransactionAssembler a({"app", 42, 4});
  RelationInfo orders = testing::SampleOrders();
  Captured out;
  a.Begin(100, 0x1000, 0x2000, 5);
  for (int i = 0; i < 4; i++) REQUIRE(a.AddChange(Insert(i), &orders, {}, Capture(out)).ok());
  CHECK(out.records.empty());  // nothing leaves before commit for a small transaction
  REQUIRE(a.Commit(Capture(out)).ok());
  REQUIRE(out.records.size() == 1);
  const auto& e = std::get<Envelope>(out.records[0]);
  CHECK(e.tx == TxIdentity{"app", 42, 100, 0x2000});
  CHECK(e.changes.size() == 4);
  CHECK(e.counts.size() == 1);
  CHECK(e.counts[0].inserts == 4);
  CHECK(out.completes[0]);
  CHECK(VerifyRecordChecksum(out.records[0]).ok());
}

TEST_CASE("large_transaction_is_chunked_with_manifest_and_commit_marker", "[assembler]") {
  const uint32_t chunk = 10;
  TransactionAssembler a({"app", 42, chunk});
  RelationInfo orders = testing::SampleOrders();
  Captured out;
  a.Begin(101, 0x1000, 0x9000, 5);
  std::vector<Change> all;
  for (int i = 0; i < 35; i++) {
    all.push_back(Insert(i));
    REQUIRE(a.AddChange(Insert(i), &orders, {}, Capture(out)).ok());
    // Chunks leave while the transaction is still being decoded: memory stays bounded.
    CHECK(static_cast<size_t>(i + 1) - out.records.size() * chunk <= chunk);
  }
  REQUIRE(a.Commit(Capture(out)).ok());
  REQUIRE(out.records.size() == 4 + 2);  // 10+10+10+5, manifest, marker
  for (size_t i = 0; i < 4; i++) {
    const auto& c = std::get<Chunk>(out.records[i]);
    CHECK(c.seq == i);
    CHECK(c.tx.commit_lsn == 0x9000);
    CHECK(VerifyRecordChecksum(out.records[i]).ok());
    CHECK_FALSE(out.completes[i]);
  }
  const auto& m = std::get<Manifest>(out.records[4]);
  CHECK(m.total_changes == 35);
  CHECK(m.chunks.size() == 4);
  CHECK(m.boundary_mode == BoundaryMode::StrictChunk);
  auto whole = ComputeChangesChecksum(all, {orders});
  REQUIRE(whole.ok());
  CHECK(m.checksum == *whole);  // same transaction, same checksum, whatever its shape
  const auto& k = std::get<CommitMarker>(out.records[5]);
  CHECK(out.completes[5]);
  CHECK(k.total_changes == 35);
  CHECK(k.total_chunks == 4);
  const std::string& mb = out.bytes[4];
  CHECK(k.manifest_checksum == Sha256Of(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(mb.data()), mb.size())));
}

TEST_CASE("exactly_chunk_changes_stays_one_envelope", "[assembler]") {
  TransactionAssembler a({"app", 1, 3});
  RelationInfo orders = testing::SampleOrders();
  Captured out;
  a.Begin(7, 1, 2, 3);
  for (int i = 0; i < 3; i++) REQUIRE(a.AddChange(Insert(i), &orders, {}, Capture(out)).ok());
  REQUIRE(a.Commit(Capture(out)).ok());
  REQUIRE(out.records.size() == 1);
  CHECK(std::holds_alternative<Envelope>(out.records[0]));
}

TEST_CASE("schema_change_mid_transaction_closes_the_record", "[assembler]") {
  TransactionAssembler a({"app", 1, 100});
  RelationInfo v1 = testing::SampleOrders();
  RelationInfo v2 = v1;
  v2.columns.push_back(Column{"added", 23, "integer", -1, false});
  v2.fingerprint = ComputeFingerprint(v2);
  Captured out;
  a.Begin(8, 1, 2, 3);
  REQUIRE(a.AddChange(Insert(1), &v1, {}, Capture(out)).ok());
  Change c2 = Insert(2);
  c2.new_tuple.push_back(Value::Text("5"));
  REQUIRE(a.AddChange(c2, &v2, {}, Capture(out)).ok());
  REQUIRE(a.Commit(Capture(out)).ok());
  REQUIRE(out.records.size() == 4);  // chunk(v1), chunk(v2), manifest, marker
  CHECK(std::get<Chunk>(out.records[0]).relations[0].fingerprint == v1.fingerprint);
  CHECK(std::get<Chunk>(out.records[1]).relations[0].fingerprint == v2.fingerprint);
  CHECK(std::get<Manifest>(out.records[2]).relations[0].fingerprint == v2.fingerprint);
}

TEST_CASE("transaction_without_changes_emits_nothing", "[assembler]") {
  TransactionAssembler a({"app", 1, 100});
  Captured out;
  a.Begin(9, 1, 2, 3);
  REQUIRE(a.Commit(Capture(out)).ok());
  CHECK(out.records.empty());
  CHECK_FALSE(a.in_transaction());
}

TEST_CASE("truncate_resolves_every_named_relation_in_its_record", "[assembler]") {
  TransactionAssembler a({"app", 1, 100});
  RelationInfo orders = testing::SampleOrders();
  RelationInfo items = testing::SampleLineItems();
  Captured out;
  a.Begin(10, 1, 2, 3);
  Change t;
  t.op = Op::Truncate;
  t.truncate.relation_oids = {items.oid, orders.oid};
  REQUIRE(a.AddChange(t, nullptr, {&items, &orders}, Capture(out)).ok());
  REQUIRE(a.Commit(Capture(out)).ok());
  REQUIRE(out.records.size() == 1);
  const auto& e = std::get<Envelope>(out.records[0]);
  CHECK(e.relations.size() == 2);
  CHECK(e.counts.size() == 2);
}

TEST_CASE("sink_failure_stops_the_transaction_with_its_error", "[assembler]") {
  TransactionAssembler a({"app", 1, 2});
  RelationInfo orders = testing::SampleOrders();
  RecordSink failing = [](const EmittedRecord&) -> Status { return MakeError("disk full"); };
  a.Begin(11, 1, 2, 3);
  REQUIRE(a.AddChange(Insert(1), &orders, {}, failing).ok());
  REQUIRE(a.AddChange(Insert(2), &orders, {}, failing).ok());
  Status s = a.AddChange(Insert(3), &orders, {}, failing);
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().message == "disk full");
}

namespace {
Change WideInsert(int64_t id, size_t value_bytes) {
  Change c = Insert(id);
  c.new_tuple[1] = Value::Text(std::string(value_bytes, 'x'));
  return c;
}
}  // namespace

TEST_CASE("chunks_are_bounded_by_bytes_as_well_as_changes", "[assembler][chunk_bytes]") {
  TransactionAssembler::Options o{"app", 42, 1024};
  o.chunk_bytes = 256 << 10;  // 256 KiB; rows of 100 KiB: two per chunk
  TransactionAssembler a(o);
  RelationInfo orders = testing::SampleOrders();
  Captured out;
  a.Begin(100, 0x1000, 0x2000, 5);
  for (int i = 0; i < 7; i++) REQUIRE(a.AddChange(WideInsert(i, 100 << 10), &orders, {}, Capture(out)).ok());
  REQUIRE(a.Commit(Capture(out)).ok());
  // 7 rows -> chunks of 2, 2, 2, 1, then manifest and marker.
  REQUIRE(out.records.size() == 6);
  for (int i = 0; i < 4; i++) {
    const auto& c = std::get<Chunk>(out.records[i]);
    CHECK(c.changes.size() == (i < 3 ? 2u : 1u));
    CHECK(out.bytes[i].size() < (256u << 10) + 4096);
  }
  CHECK(std::get<Manifest>(out.records[4]).total_changes == 7);
  CHECK(std::get<CommitMarker>(out.records[5]).total_chunks == 4);
}

TEST_CASE("change_larger_than_chunk_bytes_travels_alone_in_its_chunk", "[assembler][chunk_bytes]") {
  TransactionAssembler::Options o{"app", 42, 1024};
  o.chunk_bytes = kMinChunkBytes;
  TransactionAssembler a(o);
  RelationInfo orders = testing::SampleOrders();
  Captured out;
  a.Begin(100, 0x1000, 0x2000, 5);
  REQUIRE(a.AddChange(Insert(1), &orders, {}, Capture(out)).ok());
  REQUIRE(a.AddChange(WideInsert(2, 1 << 20), &orders, {}, Capture(out)).ok());  // 1 MiB > 64 KiB
  REQUIRE(a.AddChange(Insert(3), &orders, {}, Capture(out)).ok());
  REQUIRE(a.Commit(Capture(out)).ok());
  REQUIRE(out.records.size() == 5);
  CHECK(std::get<Chunk>(out.records[0]).changes.size() == 1);
  CHECK(std::get<Chunk>(out.records[1]).changes.size() == 1);
  CHECK(std::get<Chunk>(out.records[1]).changes[0].new_tuple[1].data.size() == (1u << 20));
  CHECK(std::get<Chunk>(out.records[2]).changes.size() == 1);

  // A one-change transaction with a value above chunk_bytes is one whole envelope.
  Captured single;
  a.Begin(101, 0x3000, 0x4000, 6);
  REQUIRE(a.AddChange(WideInsert(4, 1 << 20), &orders, {}, Capture(single)).ok());
  REQUIRE(a.Commit(Capture(single)).ok());
  REQUIRE(single.records.size() == 1);
  CHECK(std::holds_alternative<Envelope>(single.records[0]));
}

TEST_CASE("record_above_the_limit_is_uncapturable_and_names_transaction_and_relation", "[assembler][chunk_bytes]") {
  TransactionAssembler::Options o{"app", 42, 1024};
  o.chunk_bytes = kMinChunkBytes;
  o.record_bytes_max = 512 << 10;
  TransactionAssembler a(o);
  RelationInfo orders = testing::SampleOrders();
  Captured out;
  a.Begin(777, 0x1000, 0x2A000, 5);
  REQUIRE(a.AddChange(WideInsert(1, 1 << 20), &orders, {}, Capture(out)).ok());
  Status s = a.Commit(Capture(out));
  REQUIRE_FALSE(s.ok());
  CHECK(a.uncapturable_failure());
  CHECK(s.error().message.find("transaction 777 (commit LSN 0/2A000) cannot be captured") != std::string::npos);
  CHECK(s.error().message.find("relation " + orders.schema + "." + orders.name) != std::string::npos);
  CHECK(out.records.empty());
  a.Begin(778, 0x3000, 0x4000, 6);
  CHECK_FALSE(a.uncapturable_failure());
}

TEST_CASE("consecutive_transactions_reusing_descriptions_emit_what_a_fresh_assembler_emits", "[assembler][reuse]") {
  // The assembler keeps the relation descriptions and buffers of an emitted envelope for the next
  // transaction; the next records must be byte for byte what a fresh assembler emits, including
  // when a relation's description changed between transactions (same oid, new column).
  RelationInfo orders = testing::SampleOrders();
  RelationInfo items = testing::SampleLineItems();
  RelationInfo orders_v2 = orders;
  orders_v2.columns.push_back(Column{"added", 25, "text", -1, false});
  orders_v2.fingerprint = ComputeFingerprint(orders_v2);
  REQUIRE(orders_v2.fingerprint != orders.fingerprint);
  struct Tx {
    uint32_t xid;
    std::vector<const RelationInfo*> relations;
  };
  const std::vector<Tx> txs = {{200, {&orders, &items}}, {201, {&items, &orders}}, {202, {&orders_v2}},
                               {203, {&orders, &orders}}, {204, {&items}}};
  TransactionAssembler reused({"app", 42, 100});
  Captured reused_out;
  for (const Tx& tx : txs) {
    TransactionAssembler fresh({"app", 42, 100});
    Captured fresh_out;
    reused.Begin(tx.xid, 0x1000, 0x2000 + tx.xid, 5);
    fresh.Begin(tx.xid, 0x1000, 0x2000 + tx.xid, 5);
    int64_t id = 0;
    for (const RelationInfo* r : tx.relations) {
      Change c = Insert(id++);
      c.relation_oid = r->oid;
      c.new_tuple.resize(r->columns.size(), Value::Text("v"));
      REQUIRE(reused.AddChange(c, r, {}, Capture(reused_out)).ok());
      REQUIRE(fresh.AddChange(c, r, {}, Capture(fresh_out)).ok());
    }
    REQUIRE(reused.Commit(Capture(reused_out)).ok());
    REQUIRE(fresh.Commit(Capture(fresh_out)).ok());
    REQUIRE(fresh_out.bytes.size() == 1);
    CHECK(reused_out.bytes.back() == fresh_out.bytes[0]);
    const auto& e = std::get<Envelope>(reused_out.records.back());
    CHECK(VerifyRecordChecksum(reused_out.records.back()).ok());
    for (const RelationInfo* r : tx.relations) {
      bool described = false;
      for (const RelationInfo& d : e.relations) described |= d == *r;
      CHECK(described);  // the description the caller passed, never a stale reused one
    }
  }
  CHECK(reused_out.bytes.size() == txs.size());
}

}  // namespace unit_assembler_test
