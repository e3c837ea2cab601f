// barrier_test.cpp — barrier reassembly: envelopes yield at once; chunked transactions yield only
// at a CommitMarker that binds a complete, verified chunk set; re-emitted identical chunks are
// tolerated; every missing, extra, conflicting, tampered, reordered or orphaned shape fails closed
// with nothing yielded. Property tests are seeded (TRELLARA_SEED overrides) and print their seed.
// These tests must never rely on wall-clock time or on files.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>

#include "samples.h"
#include "trellara/capture/assembler.h"
#include "trellara/log/barrier.h"
#include "trellara/base/fault.h"
#include "trellara/record/checksum.h"
#include "trellara/record/codec.h"
#include "trellara/capture/relay_progress.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_barrier_test {

using namespace trellara;

namespace {

struct Frame {
  uint8_t type = 0;
  uint64_t lsn = 0;
  std::string bytes;
};

RelationInfo Items() {
  RelationInfo r;
  r.oid = 16500;
  r.schema = "Sales";
  r.name = "line \"items\"";
  r.replica_identity = ReplicaIdentity::Default;
  r.columns = {{"order_id", 20, "bigint", -1, true}, {"line", 23, "integer", -1, true}, {"qty", 23, "integer", -1, false}};
  r.fingerprint = ComputeFingerprint(r);
  return r;
}

std::string RandomText(std::mt19937_64& rng) {
  static const char* pieces[] = {"a", "ü", "\"", "'", "\\", "\n", ";", " ", "x", "NaN"};
  std::string s;
  size_t n = rng() % 6;
  for (size_t i = 0; i < n; i++) s += pieces[rng() % 10];
  return s;
}

// A random change on orders (oid 16384) or items (16500).
Change RandomChange(std::mt19937_64& rng) {
  Change c;
  uint64_t pick = rng() % 10;
  bool items = rng() % 3 == 0;
  c.relation_oid = items ? 16500 : 16384;
  auto row = [&]() -> std::vector<Value> {
    if (items) return {Value::Text(std::to_string(rng() % 50)), Value::Text(std::to_string(rng() % 9)),
                       rng() % 4 == 0 ? Value::Null() : Value::Text(std::to_string(rng() % 100))};
    return {Value::Text(std::to_string(rng() % 1000)), Value::Text(RandomText(rng)), Value::Text("1.50"),
            rng() % 3 == 0 ? Value::UnchangedToast() : Value::Text(RandomText(rng))};
  };
  if (pick < 4) {
    c.op = Op::Insert;
    c.new_tuple = row();
    if (!items) c.new_tuple[3] = Value::Text("doc");
  } else if (pick < 6) {
    c.op = Op::Update;
    c.new_tuple = row();
    if (rng() % 2 == 0) {
      c.old_image = OldImage::Key;
      c.old_tuple = items ? std::vector<Value>{Value::Text("1"), Value::Text("2")} : std::vector<Value>{Value::Text("7")};
    }
  } else if (pick < 8) {
    c.op = Op::Delete;
    c.old_image = OldImage::Key;
    c.old_tuple = items ? std::vector<Value>{Value::Text("1"), Value::Text("2")} : std::vector<Value>{Value::Text("7")};
  } else if (pick < 9) {
    c.op = Op::Truncate;
    c.relation_oid = 0;
    c.truncate = TruncateInfo{{16500, 16384}, rng() % 2 == 0, rng() % 2 == 0};
  } else {
    c.op = Op::Message;
    c.relation_oid = 0;
    c.message = LogicalMessage{true, "app", RandomText(rng)};
  }
  return c;
}

struct Produced {
  std::vector<Frame> frames;  // as the relay writes them
  std::vector<Change> changes;
  std::vector<RelationInfo> relations;
  TxIdentity tx;
};

Produced Produce(std::mt19937_64& rng, uint32_t xid, uint64_t commit_lsn, size_t n_changes, uint32_t chunk_changes) {
  static const RelationInfo orders = testing::SampleOrders();
  static const RelationInfo items = Items();
  Produced p;
  p.relations = {orders, items};
  TransactionAssembler a({"app", 42, chunk_changes});
  a.Begin(xid, commit_lsn - 0x100, commit_lsn, 1000);
  RecordSink sink = [&p, commit_lsn](const EmittedRecord& r) -> Status {
    p.frames.push_back(Frame{static_cast<uint8_t>(r.type), commit_lsn, r.bytes});
    return Status::Ok();
  };
  for (size_t i = 0; i < n_changes; i++) {
    Change c = RandomChange(rng);
    const RelationInfo* rel = nullptr;
    std::vector<const RelationInfo*> truncated;
    if (c.op == Op::Insert || c.op == Op::Update || c.op == Op::Delete) rel = c.relation_oid == 16384 ? &orders : &items;
    if (c.op == Op::Truncate) truncated = {&items, &orders};
    p.changes.push_back(c);
    REQUIRE(a.AddChange(c, rel, truncated, sink).ok());
  }
  REQUIRE(a.Commit(sink).ok());
  p.tx = TxIdentity{"app", 42, xid, commit_lsn};
  return p;
}

// Feeds frames with consecutive offsets; collects what is yielded; stops at the first failure.
struct Run {
  std::vector<ReadyTransaction> ready;
  std::map<uint64_t, std::string> by_offset;
  bool failed = false;
  std::string error;
};

Run FeedAll(TransactionBarrier& b, const std::vector<Frame>& frames, uint64_t first_offset = 100, bool final = true) {
  Run run;
  uint64_t offset = first_offset;
  for (const Frame& f : frames) {
    run.by_offset[offset] = f.bytes;
    auto r = b.Feed(LogFrame{offset, f.type, f.lsn,
                             std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(f.bytes.data()), f.bytes.size())});
    offset++;
    if (!r.ok()) {
      run.failed = true;
      run.error = r.error().message;
      return run;
    }
    if (r->has_value()) run.ready.push_back(std::move(**r));
  }
  if (final) {
    Status s = b.FinishFinalInput();
    if (!s.ok()) {
      run.failed = true;
      run.error = s.error().message;
    }
  }
  return run;
}

ReadFramePayload Reader(const Run& run) {
  return [&run](uint64_t offset) -> Result<std::vector<uint8_t>> {
    auto it = run.by_offset.find(offset);
    if (it == run.by_offset.end()) return MakeError("no frame at offset " + std::to_string(offset));
    return std::vector<uint8_t>(it->second.begin(), it->second.end());
  };
}

// All changes of a ready transaction, re-read from the log through the barrier's locations.
std::vector<Change> Reassemble(const ReadyTransaction& t, const Run& run) {
  if (t.envelope) return t.envelope->changes;
  std::vector<Change> out;
  Status s = ForEachVerifiedChunk(t, Reader(run), [&out](const Chunk& c) -> Status {
    out.insert(out.end(), c.changes.begin(), c.changes.end());
    return Status::Ok();
  });
  REQUIRE(s.ok());
  return out;
}

Sha256 ExpectedChecksum(const Produced& p) {
  auto sum = ComputeChangesChecksum(p.changes, p.relations);
  REQUIRE(sum.ok());
  return *sum;
}

std::vector<size_t> IndexesOf(const Produced& p, RecordType type) {
  std::vector<size_t> out;
  for (size_t i = 0; i < p.frames.size(); i++)
    if (p.frames[i].type == static_cast<uint8_t>(type)) out.push_back(i);
  return out;
}

Frame Reencode(const Frame& f, const std::function<void(Record&)>& mutate) {
  auto rec = DecodeRecord(f.bytes);
  REQUIRE(rec.ok());
  mutate(*rec);
  auto bytes = EncodeRecord(*rec);
  REQUIRE(bytes.ok());
  return Frame{f.type, f.lsn, *bytes};
}

Frame ProgressFrame(uint64_t lsn) {
  std::string payload(8, '\0');
  for (int i = 0; i < 8; i++) payload[i] = static_cast<char>((lsn >> (8 * i)) & 0xff);
  return Frame{kProgressRecordType, lsn, payload};
}

uint64_t SeedFor(const char* test) {
  uint64_t seed = 20261012;
  if (const char* env = std::getenv("TRELLARA_SEED")) seed = std::strtoull(env, nullptr, 10);
  std::printf("%s: seed %llu (reproduce with TRELLARA_SEED=%llu)\n", test, static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  return seed;
}

// A chunked transaction of 4 chunks (16 changes, 4 per chunk), deterministic.
Produced FourChunks(uint64_t seed = 7) {
  std::mt19937_64 rng(seed);
  Produced p = Produce(rng, 9001, 0x5000, 16, 4);
  REQUIRE(IndexesOf(p, RecordType::Chunk).size() == 4);
  return p;
}

}  // namespace

TEST_CASE("envelope_yields_at_once_after_verification", "[barrier]") {
  std::mt19937_64 rng(1);
  Produced p = Produce(rng, 7421, 0x3A1F2B0, 5, 1024);
  REQUIRE(p.frames.size() == 1);
  TransactionBarrier b;
  Run run = FeedAll(b, p.frames);
  REQUIRE_FALSE(run.failed);
  REQUIRE(run.ready.size() == 1);
  const ReadyTransaction& t = run.ready[0];
  CHECK(t.tx == p.tx);
  CHECK_FALSE(t.chunked());
  CHECK(t.checksum == ExpectedChecksum(p));
  CHECK(t.total_changes == 5);
  CHECK(t.first_offset == 100);
  CHECK(t.end_offset == 101);
  CHECK(Reassemble(t, run) == p.changes);
  CHECK_FALSE(b.RetainFromOffset().has_value());
}

TEST_CASE("tampered_envelope_fails_closed", "[barrier]") {
  std::mt19937_64 rng(2);
  Produced p = Produce(rng, 7421, 0x3A1F2B0, 5, 1024);
  p.frames[0] = Reencode(p.frames[0], [](Record& r) {
    Change extra;
    extra.op = Op::Message;
    extra.message = LogicalMessage{true, "evil", "x"};
    std::get<Envelope>(r).changes.push_back(extra);  // not re-sealed
  });
  TransactionBarrier b;
  Run run = FeedAll(b, p.frames);
  CHECK(run.failed);
  CHECK(run.ready.empty());
  CHECK_THAT(run.error, Catch::Contains("checksum mismatch"));
  REQUIRE(b.failure().has_value());
  CHECK(b.failure()->tx == p.tx);
  CHECK(b.failure()->offset == 100);
}

TEST_CASE("chunked_transaction_yields_only_at_its_commit_marker", "[barrier]") {
  Produced p = FourChunks();
  TransactionBarrier b;
  std::vector<Frame> all_but_marker(p.frames.begin(), p.frames.end() - 1);
  Run partial = FeedAll(b, all_but_marker, 100, /*final=*/false);
  REQUIRE_FALSE(partial.failed);
  CHECK(partial.ready.empty());
  REQUIRE(b.RetainFromOffset() == std::optional<uint64_t>(100));
  REQUIRE(b.OpenTransactions().size() == 1);
  CHECK(b.OpenTransactions()[0].chunks_received == 4);
  CHECK(b.OpenTransactions()[0].manifest_received);

  Run rest = FeedAll(b, {p.frames.back()}, 100 + all_but_marker.size());
  REQUIRE_FALSE(rest.failed);
  REQUIRE(rest.ready.size() == 1);
  const ReadyTransaction& t = rest.ready[0];
  CHECK(t.chunked());
  CHECK(t.tx == p.tx);
  CHECK(t.checksum == ExpectedChecksum(p));  // same checksum the transaction would have as one envelope
  CHECK(t.total_changes == 16);
  CHECK(t.chunks.size() == 4);
  CHECK(t.first_offset == 100);
  CHECK(t.end_offset == 100 + p.frames.size());
  for (size_t i = 0; i < t.chunks.size(); i++) CHECK(t.chunks[i].seq == i);
  partial.by_offset.insert(rest.by_offset.begin(), rest.by_offset.end());
  CHECK(Reassemble(t, partial) == p.changes);
  CHECK_FALSE(b.RetainFromOffset().has_value());
  CHECK(b.stats().chunked_transactions == 1);
}

TEST_CASE("strict_chunk_relay_crash_after_chunks_before_manifest", "[barrier][seed000]") {
  // The relay wrote chunks 0..3, crashed before the manifest, then re-emitted the whole transaction.
  Produced p = FourChunks();
  std::vector<Frame> log;
  for (size_t i : IndexesOf(p, RecordType::Chunk)) log.push_back(p.frames[i]);
  log.insert(log.end(), p.frames.begin(), p.frames.end());
  TransactionBarrier b;
  Run run = FeedAll(b, log);
  REQUIRE_FALSE(run.failed);
  REQUIRE(run.ready.size() == 1);  // applied once
  CHECK(run.ready[0].duplicate_chunks == 4);
  CHECK(b.stats().duplicate_chunks == 4);
  CHECK(run.ready[0].checksum == ExpectedChecksum(p));
  CHECK(Reassemble(run.ready[0], run) == p.changes);
}

TEST_CASE("strict_chunk_relay_crash_after_manifest_before_marker_is_applied_once", "[barrier]") {
  Produced p = FourChunks();
  std::vector<Frame> log(p.frames.begin(), p.frames.end() - 1);  // chunks + manifest, no marker
  log.push_back(p.frames[0]);                                     // a second attempt that crashed after chunk 0
  log.insert(log.end(), p.frames.begin(), p.frames.end());        // the attempt that completed
  TransactionBarrier b;
  Run run = FeedAll(b, log);
  REQUIRE_FALSE(run.failed);
  REQUIRE(run.ready.size() == 1);
  CHECK(run.ready[0].duplicate_chunks == 5);
  CHECK(b.stats().duplicate_manifests == 1);
}

TEST_CASE("strict_chunk_manifest_arrives_with_missing_chunk", "[barrier][seed000]") {
  Produced p = FourChunks();
  SECTION("last chunk missing: the commit marker fails closed") {
    std::vector<Frame> log = p.frames;
    log.erase(log.begin() + IndexesOf(p, RecordType::Chunk).back());
    TransactionBarrier b;
    Run run = FeedAll(b, log);
    CHECK(run.failed);
    CHECK(run.ready.empty());
    CHECK_THAT(run.error, Catch::Contains("missing chunk(s) 3 of 4"));
    CHECK(b.failure()->tx == p.tx);
  }
  SECTION("middle chunk missing: the next chunk reveals the gap") {
    std::vector<Frame> log = p.frames;
    log.erase(log.begin() + IndexesOf(p, RecordType::Chunk)[1]);
    TransactionBarrier b;
    Run run = FeedAll(b, log);
    CHECK(run.failed);
    CHECK(run.ready.empty());
    CHECK_THAT(run.error, Catch::Contains("chunk 2 of xid 9001") && Catch::Contains("arrived before chunk 1"));
  }
}

TEST_CASE("strict_chunk_manifest_arrives_before_chunks", "[barrier][seed000]") {
  // Decision (docs/apply-core.md): the manifest is only a claim until the commit marker, so it may
  // arrive before the chunks; the commit marker is the barrier and needs every chunk by then.
  Produced p = FourChunks();
  const size_t m = IndexesOf(p, RecordType::Manifest)[0];
  SECTION("manifest, chunks, marker: applied once") {
    std::vector<Frame> log = {p.frames[m]};
    for (size_t i : IndexesOf(p, RecordType::Chunk)) log.push_back(p.frames[i]);
    log.push_back(p.frames.back());
    TransactionBarrier b;
    Run run = FeedAll(b, log);
    REQUIRE_FALSE(run.failed);
    REQUIRE(run.ready.size() == 1);
    CHECK(run.ready[0].checksum == ExpectedChecksum(p));
    CHECK(run.ready[0].first_offset == 100);  // the manifest's offset: retained from there
  }
  SECTION("manifest and marker before the chunks: fails closed at the marker") {
    std::vector<Frame> log = {p.frames[m], p.frames.back()};
    for (size_t i : IndexesOf(p, RecordType::Chunk)) log.push_back(p.frames[i]);
    TransactionBarrier b;
    Run run = FeedAll(b, log);
    CHECK(run.failed);
    CHECK(run.ready.empty());
    CHECK_THAT(run.error, Catch::Contains("missing chunk(s) 0, 1, 2, 3 of 4"));
  }
}

namespace {

// Four chunks with a second copy of chunk 1 right after it: same transaction and seq, different
// (self-consistent, re-sealed) content.
std::vector<Frame> WithConflictingCopyOfChunk1(const Produced& p) {
  const size_t c1 = IndexesOf(p, RecordType::Chunk)[1];
  Frame other = Reencode(p.frames[c1], [](Record& r) {
    Chunk& c = std::get<Chunk>(r);
    Change extra;
    extra.op = Op::Message;
    extra.message = LogicalMessage{true, "conflict", "x"};
    c.changes.push_back(extra);
    REQUIRE(SealChunk(c).ok());
  });
  std::vector<Frame> log = p.frames;
  log.insert(log.begin() + static_cast<long>(c1) + 1, other);
  return log;
}

}  // namespace

TEST_CASE("conflicting_duplicate_chunk_fails_closed", "[barrier]") {
  Produced p = FourChunks();
  std::vector<Frame> log = WithConflictingCopyOfChunk1(p);
  TransactionBarrier b;
  Run run = FeedAll(b, log);
  CHECK(run.failed);
  CHECK(run.ready.empty());
  CHECK_THAT(run.error, Catch::Contains("conflicting duplicate: chunk 1"));
  // Fail closed means stopped: the next frame gets the same failure, nothing more is yielded.
  auto again = b.Feed(LogFrame{1000, 1, p.frames.back().lsn, {}});
  CHECK_FALSE(again.ok());
}

// The paired defect of barrier_conflicting_duplicate_messages (docs/correctness.md): a barrier that
// recognises a duplicate by (transaction, seq) alone keeps the first copy and lets the conflicting
// second one through — the log of the test above then yields the transaction as ready.
TEST_CASE("conflicting_duplicate_chunk_passes_a_barrier_matching_by_seq_negative_control", "[barrier]") {
  Produced p = FourChunks();
  std::vector<Frame> log = WithConflictingCopyOfChunk1(p);
  fault::AllowDefects(true, "unit test");
  REQUIRE(fault::Configure("defect.barrier_duplicate_by_seq:1:defect").ok());
  TransactionBarrier b;
  Run run = FeedAll(b, log);
  const int fired = fault::FiredCount("defect.barrier_duplicate_by_seq");
  fault::Clear();
  fault::AllowDefects(false, "");
  CHECK(fired >= 1);              // the defect's decision was reached
  CHECK_FALSE(run.failed);        // the clean test's CHECK(run.failed) fails: the defect is caught
  CHECK(run.ready.size() == 1);
}

TEST_CASE("tampered_chunk_fails_closed", "[barrier]") {
  Produced p = FourChunks();
  const size_t c2 = IndexesOf(p, RecordType::Chunk)[2];
  SECTION("altered after sealing: its own checksum fails") {
    std::vector<Frame> log = p.frames;
    log[c2] = Reencode(log[c2], [](Record& r) {
      Change extra;
      extra.op = Op::Message;
      extra.message = LogicalMessage{true, "tamper", "y"};
      std::get<Chunk>(r).changes.front() = extra;  // not re-sealed
    });
    TransactionBarrier b;
    Run run = FeedAll(b, log);
    CHECK(run.failed);
    CHECK(run.ready.empty());
  }
  SECTION("altered and re-sealed: the manifest's chunk checksum fails") {
    std::vector<Frame> log = p.frames;
    log[c2] = Reencode(log[c2], [](Record& r) {
      Chunk& c = std::get<Chunk>(r);
      c.changes.pop_back();
      REQUIRE(SealChunk(c).ok());
    });
    TransactionBarrier b;
    Run run = FeedAll(b, log);
    CHECK(run.failed);
    CHECK(run.ready.empty());
    CHECK_THAT(run.error, Catch::Contains("does not match the manifest"));
  }
}

// The paired defect of strict_chunk_checksum_tampering (docs/correctness.md): a barrier that trusts
// the manifest instead of checking each chunk against it lets the tampered, re-sealed chunk of the
// test above through as a ready transaction — exactly what tampered_chunk_fails_closed refuses.
TEST_CASE("tampered_chunk_passes_a_barrier_that_trusts_the_manifest_negative_control", "[barrier]") {
  Produced p = FourChunks();
  const size_t c2 = IndexesOf(p, RecordType::Chunk)[2];
  std::vector<Frame> log = p.frames;
  log[c2] = Reencode(log[c2], [](Record& r) {
    Chunk& c = std::get<Chunk>(r);
    c.changes.pop_back();
    REQUIRE(SealChunk(c).ok());
  });
  fault::AllowDefects(true, "unit test");  // defects need the explicit test-only switch (fault.h)
  REQUIRE(fault::Configure("defect.barrier_trust_manifest:1:defect").ok());
  TransactionBarrier b;
  Run run = FeedAll(b, log);
  fault::Clear();
  fault::AllowDefects(false, "");
  CHECK_FALSE(run.failed);        // the clean test's CHECK(run.failed) fails: the defect is caught
  CHECK(run.ready.size() == 1);   // the damaged transaction would be applied
}

TEST_CASE("extra_chunk_not_in_manifest_fails_closed", "[barrier]") {
  Produced p = FourChunks();
  const size_t c3 = IndexesOf(p, RecordType::Chunk)[3];
  Frame extra = Reencode(p.frames[c3], [](Record& r) {
    Chunk& c = std::get<Chunk>(r);
    c.seq = 4;
    REQUIRE(SealChunk(c).ok());
  });
  SECTION("before the manifest") {
    std::vector<Frame> log = p.frames;
    log.insert(log.begin() + c3 + 1, extra);
    TransactionBarrier b;
    Run run = FeedAll(b, log);
    CHECK(run.failed);
    CHECK(run.ready.empty());
    CHECK_THAT(run.error, Catch::Contains("extra chunk"));
  }
  SECTION("after the manifest") {
    std::vector<Frame> log = p.frames;
    log.insert(log.end() - 1, extra);
    TransactionBarrier b;
    Run run = FeedAll(b, log);
    CHECK(run.failed);
    CHECK(run.ready.empty());
    CHECK_THAT(run.error, Catch::Contains("extra chunk"));
  }
}

TEST_CASE("manifest_without_commit_marker_fails_at_end_of_final_input", "[barrier]") {
  Produced p = FourChunks();
  std::vector<Frame> log(p.frames.begin(), p.frames.end() - 1);
  TransactionBarrier b;
  Run run = FeedAll(b, log, 100, /*final=*/false);
  REQUIRE_FALSE(run.failed);  // at a live tail this is just a transaction still being written
  CHECK(b.RetainFromOffset() == std::optional<uint64_t>(100));
  Status s = b.FinishFinalInput();
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.error().message, Catch::Contains("log ends without its commit marker"));
  CHECK(b.failure()->tx == p.tx);
}

TEST_CASE("mismatched_totals_and_checksums_fail_closed", "[barrier]") {
  Produced p = FourChunks();
  const size_t m = IndexesOf(p, RecordType::Manifest)[0];
  const size_t k = p.frames.size() - 1;
  auto rebind = [&](std::vector<Frame>& log) {  // a marker that binds the (altered) manifest bytes
    log[k] = Reencode(log[k], [&](Record& r) {
      std::get<CommitMarker>(r).manifest_checksum = Sha256Of(
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(log[m].bytes.data()), log[m].bytes.size()));
    });
  };
  std::vector<Frame> log = p.frames;
  std::string expect;
  SECTION("manifest altered, marker not rebound") {
    log[m] = Reencode(log[m], [](Record& r) { std::get<Manifest>(r).commit_time_us++; });
    expect = "binds manifest checksum";
  }
  SECTION("manifest total checksum altered, marker rebound") {
    log[m] = Reencode(log[m], [](Record& r) { std::get<Manifest>(r).checksum[0] ^= 1; });
    rebind(log);
    expect = "recomputed over the chunks' changes";
  }
  SECTION("manifest counts altered, marker rebound") {
    log[m] = Reencode(log[m], [](Record& r) { std::get<Manifest>(r).counts[0].inserts += 1; });
    rebind(log);
    expect = "per-relation counts";
  }
  SECTION("marker totals altered") {
    log[k] = Reencode(log[k], [](Record& r) { std::get<CommitMarker>(r).total_changes += 1; });
    expect = "declares 4 chunks and 17 changes";
  }
  SECTION("manifest total changes altered, marker rebound") {
    log[m] = Reencode(log[m], [](Record& r) { std::get<Manifest>(r).total_changes += 1; });
    rebind(log);
    expect = "declares 17 changes but its chunks list 16";
  }
  SECTION("manifest chunk checksum altered, marker rebound") {
    log[m] = Reencode(log[m], [](Record& r) { std::get<Manifest>(r).chunks[2].checksum[5] ^= 0x80; });
    rebind(log);
    expect = "chunk 2 of xid 9001";
  }
  TransactionBarrier b;
  Run run = FeedAll(b, log);
  CHECK(run.failed);
  CHECK(run.ready.empty());
  CHECK_THAT(run.error, Catch::Contains(expect));
}

TEST_CASE("commit_marker_without_manifest_fails_closed", "[barrier]") {
  Produced p = FourChunks();
  std::vector<Frame> log = p.frames;
  log.erase(log.begin() + IndexesOf(p, RecordType::Manifest)[0]);
  TransactionBarrier b;
  Run run = FeedAll(b, log);
  CHECK(run.failed);
  CHECK(run.ready.empty());
  CHECK_THAT(run.error, Catch::Contains("before the transaction's manifest"));
}

TEST_CASE("incomplete_transaction_orphaned_by_a_later_commit_fails_closed", "[barrier]") {
  Produced p = FourChunks();
  std::mt19937_64 rng(3);
  Produced later = Produce(rng, 9002, 0x6000, 3, 1024);
  std::vector<Frame> log(p.frames.begin(), p.frames.end() - 1);  // no marker: A can never complete
  SECTION("a later envelope") { log.push_back(later.frames[0]); }
  SECTION("a progress marker covering its commit LSN") { log.push_back(ProgressFrame(0x5000)); }
  TransactionBarrier b;
  Run run = FeedAll(b, log, 100, /*final=*/false);
  CHECK(run.failed);
  CHECK(run.ready.empty());  // the later transaction is not applied either
  CHECK_THAT(run.error, Catch::Contains("xid 9001") && Catch::Contains("can never complete"));
  CHECK(b.failure()->tx == p.tx);
}

TEST_CASE("progress_markers_below_open_transactions_are_ignored", "[barrier]") {
  Produced p = FourChunks();
  std::vector<Frame> log = {ProgressFrame(0x1000), p.frames[0], ProgressFrame(0x4fff)};
  log.insert(log.end(), p.frames.begin() + 1, p.frames.end());
  TransactionBarrier b;
  Run run = FeedAll(b, log);
  REQUIRE_FALSE(run.failed);
  CHECK(run.ready.size() == 1);
  CHECK(b.stats().progress_markers == 2);
}

TEST_CASE("envelope_sharing_an_open_chunked_identity_fails_closed", "[barrier]") {
  Produced p = FourChunks();
  std::mt19937_64 rng(4);
  Produced whole = Produce(rng, 9001, 0x5000, 3, 1024);  // same identity, whole shape
  std::vector<Frame> log = {p.frames[0], whole.frames[0]};
  TransactionBarrier b;
  Run run = FeedAll(b, log);
  CHECK(run.failed);
  CHECK(run.ready.empty());
  CHECK_THAT(run.error, Catch::Contains("either whole or chunked"));
}

TEST_CASE("frame_lsn_type_and_order_are_checked", "[barrier]") {
  std::mt19937_64 rng(5);
  Produced p = Produce(rng, 7421, 0x3A1F2B0, 2, 1024);
  SECTION("frame commit LSN differs from the record's") {
    p.frames[0].lsn = 0x3A1F2B1;
    TransactionBarrier b;
    CHECK(FeedAll(b, p.frames).failed);
  }
  SECTION("frame type differs from the record's") {
    p.frames[0].type = 2;
    TransactionBarrier b;
    CHECK(FeedAll(b, p.frames).failed);
  }
  SECTION("unknown frame type") {
    p.frames[0].type = 9;
    TransactionBarrier b;
    CHECK(FeedAll(b, p.frames).failed);
    CHECK_FALSE(b.failure()->tx.has_value());
  }
  SECTION("garbage payload") {
    p.frames[0].bytes = "\xff\xff\xff";
    TransactionBarrier b;
    CHECK(FeedAll(b, p.frames).failed);
  }
  SECTION("offsets going backwards") {
    TransactionBarrier b;
    auto bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(p.frames[0].bytes.data()), p.frames[0].bytes.size());
    REQUIRE(b.Feed(LogFrame{5, 1, 0x3A1F2B0, bytes}).ok());
    CHECK_FALSE(b.Feed(LogFrame{5, 1, 0x3A1F2B0, bytes}).ok());
  }
}

TEST_CASE("re_read_chunks_must_be_the_verified_ones", "[barrier]") {
  Produced p = FourChunks();
  TransactionBarrier b;
  Run run = FeedAll(b, p.frames);
  REQUIRE(run.ready.size() == 1);
  const ReadyTransaction& t = run.ready[0];
  Run swapped = run;
  std::swap(swapped.by_offset[t.chunks[1].offset], swapped.by_offset[t.chunks[2].offset]);
  int visited = 0;
  Status s = ForEachVerifiedChunk(t, Reader(swapped), [&visited](const Chunk&) -> Status {
    visited++;
    return Status::Ok();
  });
  CHECK_FALSE(s.ok());
  CHECK(visited == 1);  // chunk 0 only: the mismatch is caught before chunk "1" is visited
  CHECK_THAT(s.error().message, Catch::Contains("not the chunk the barrier verified"));
}

TEST_CASE("verified_chunks_kept_by_the_barrier_are_applied_without_being_read_again", "[barrier]") {
  Produced p = FourChunks();
  // Reference: the pass without a cache re-reads every chunk.
  TransactionBarrier plain;
  Run run = FeedAll(plain, p.frames);
  REQUIRE(run.ready.size() == 1);
  const std::vector<Change> expected = Reassemble(run.ready[0], run);

  const auto pass = [&](VerifiedChunkCache& cache, std::vector<uint64_t>& reads, std::vector<Change>& out) {
    TransactionBarrier b;
    b.SetChunkSink([&cache](uint64_t offset, Chunk&& chunk) { cache.Offer(offset, std::move(chunk)); });
    Run fed = FeedAll(b, p.frames);
    REQUIRE(fed.ready.size() == 1);
    ReadFramePayload read = [&fed, &reads](uint64_t offset) -> Result<std::vector<uint8_t>> {
      reads.push_back(offset);
      return Reader(fed)(offset);
    };
    return std::make_pair(fed.ready[0], ForEachVerifiedChunk(fed.ready[0], read, [&out](const Chunk& c) -> Status {
      out.insert(out.end(), c.changes.begin(), c.changes.end());
      return Status::Ok();
    }, &cache));
  };
  SECTION("every chunk kept: nothing is read, the same changes in the same order") {
    VerifiedChunkCache cache(64u << 20);
    std::vector<uint64_t> reads;
    std::vector<Change> out;
    auto [ready, walked] = pass(cache, reads, out);
    REQUIRE(walked.ok());
    CHECK(reads.empty());
    CHECK(out == expected);
    CHECK(cache.refused() == 0);
  }
  SECTION("a bound that holds one chunk: the rest is re-read and the total checksum still checked") {
    TransactionBarrier b;
    Run fed = FeedAll(b, p.frames);
    auto first = DecodeRecord(fed.by_offset[fed.ready[0].chunks[0].offset]);
    REQUIRE(first.ok());
    VerifiedChunkCache cache(EstimatedBytes(std::get<Chunk>(*first)));
    std::vector<uint64_t> reads;
    std::vector<Change> out;
    auto [ready, walked] = pass(cache, reads, out);
    REQUIRE(walked.ok());
    CHECK(reads == std::vector<uint64_t>{ready.chunks[1].offset, ready.chunks[2].offset, ready.chunks[3].offset});
    CHECK(out == expected);
    CHECK(cache.refused() == 3);
  }
  SECTION("a cached chunk that is not the one at its location is refused before it is visited") {
    VerifiedChunkCache cache(64u << 20);
    TransactionBarrier b;
    Run fed = FeedAll(b, p.frames);
    const ReadyTransaction& ready = fed.ready[0];
    // Chunk 2's object offered under chunk 1's offset (a cache keyed wrongly).
    for (size_t i : {0u, 2u, 3u}) {
      auto decoded = DecodeRecord(fed.by_offset[ready.chunks[i].offset]);
      REQUIRE(decoded.ok());
      REQUIRE(cache.Offer(i == 2 ? ready.chunks[1].offset : ready.chunks[i].offset, std::get<Chunk>(std::move(*decoded))));
    }
    int visited = 0;
    Status walked = ForEachVerifiedChunk(ready, Reader(fed), [&visited](const Chunk&) -> Status {
      visited++;
      return Status::Ok();
    }, &cache);
    CHECK_FALSE(walked.ok());
    CHECK(visited == 1);
    CHECK_THAT(walked.error().message, Catch::Contains("cached chunk 1") && Catch::Contains("not the chunk the barrier verified"));
  }
  SECTION("duplicates are not handed to the sink; Clear empties it") {
    VerifiedChunkCache cache(64u << 20);
    TransactionBarrier b;
    std::vector<uint64_t> handed;
    b.SetChunkSink([&](uint64_t offset, Chunk&& chunk) {
      handed.push_back(offset);
      cache.Offer(offset, std::move(chunk));
    });
    // A re-emitted prefix: chunks 0 and 1, then the whole transaction again.
    std::vector<Frame> frames = {p.frames[0], p.frames[1]};
    frames.insert(frames.end(), p.frames.begin(), p.frames.end());
    Run fed = FeedAll(b, frames);
    REQUIRE(fed.ready.size() == 1);
    CHECK(handed.size() == 4);
    CHECK(cache.bytes() > 0);
    cache.Clear();
    CHECK(cache.bytes() == 0);
    CHECK(cache.Find(handed[0]) == nullptr);
  }
}

// ---- property tests ------------------------------------------------------------------------

namespace {

enum class Shape {
  Clean, Reemitted, ManifestEarly, DropChunk, ConflictingDuplicate, TamperUnsealed, TamperResealed,
  ExtraChunk, DropMarker, DropManifest, Permuted, kCount
};

const char* ShapeName(Shape s) {
  static const char* names[] = {"clean", "reemitted", "manifest_early", "drop_chunk", "conflicting_duplicate",
                                "tamper_unsealed", "tamper_resealed", "extra_chunk", "drop_marker",
                                "drop_manifest", "permuted"};
  return names[static_cast<int>(s)];
}

}  // namespace

namespace {

// One run of the barrier property: `iterations` generated logs (a transaction in one of the shapes
// above between two plain ones), each fed to a fresh barrier and compared with the oracle. Returns
// every disagreement as text (empty = the property holds) and counts the shapes seen; the clean test
// requires none, the negative control below requires some under a defect.
std::vector<std::string> BarrierPropertyViolations(uint64_t seed, int iterations, std::map<std::string, int>& seen) {
  std::vector<std::string> violations;
  std::mt19937_64 rng(seed);
  for (int iteration = 0; iteration < iterations; iteration++) {
    const Shape shape = static_cast<Shape>(rng() % static_cast<int>(Shape::kCount));
    const uint32_t chunk_changes = 1 + static_cast<uint32_t>(rng() % 5);
    const size_t n = chunk_changes * 2 + rng() % 12;  // always chunked (more than chunk_changes)
    Produced before = Produce(rng, 100, 0x1000, 1 + rng() % 3, 1024);
    Produced tx = Produce(rng, 101, 0x2000, n, chunk_changes);
    Produced after = Produce(rng, 102, 0x3000, 1 + rng() % 3, 1024);
    std::vector<size_t> chunk_idx = IndexesOf(tx, RecordType::Chunk);
    REQUIRE(chunk_idx.size() >= 2);
    std::vector<Frame> chunks;
    for (size_t i : chunk_idx) chunks.push_back(tx.frames[i]);
    const Frame manifest = tx.frames[IndexesOf(tx, RecordType::Manifest)[0]];
    const Frame marker = tx.frames.back();
    const size_t k = chunks.size();

    std::vector<Frame> body;  // the transaction's frames as this iteration's log holds them
    bool valid = true;
    uint32_t expect_duplicates = 0;
    switch (shape) {
      case Shape::Clean: body = tx.frames; break;
      case Shape::Reemitted: {
        for (int attempt = 0, attempts = 1 + static_cast<int>(rng() % 3); attempt < attempts; attempt++) {
          size_t prefix = rng() % (k + 2);  // 0..k chunks, k+1 = chunks and manifest
          for (size_t i = 0; i < std::min(prefix, k); i++) body.push_back(chunks[i]);
          expect_duplicates += static_cast<uint32_t>(std::min(prefix, k));
          if (prefix == k + 1) body.push_back(manifest);
        }
        body.insert(body.end(), tx.frames.begin(), tx.frames.end());
        break;
      }
      case Shape::ManifestEarly: {
        body = chunks;
        body.insert(body.begin() + static_cast<long>(rng() % (k + 1)), manifest);
        body.push_back(marker);
        break;
      }
      case Shape::DropChunk: {
        body = tx.frames;
        body.erase(body.begin() + static_cast<long>(chunk_idx[rng() % k]));
        valid = false;
        break;
      }
      case Shape::ConflictingDuplicate: {
        size_t victim = rng() % k;
        Frame other = Reencode(chunks[victim], [](Record& r) {
          Chunk& c = std::get<Chunk>(r);
          Change extra;
          extra.op = Op::Message;
          extra.message = LogicalMessage{true, "conflict", "x"};
          c.changes.push_back(extra);
          REQUIRE(SealChunk(c).ok());
        });
        body = tx.frames;
        // the conflicting copy comes after the original, anywhere before the marker
        size_t at = chunk_idx[victim] + 1 + rng() % (body.size() - 1 - chunk_idx[victim]);
        body.insert(body.begin() + static_cast<long>(at), other);
        valid = false;
        break;
      }
      case Shape::TamperUnsealed:
      case Shape::TamperResealed: {
        body = tx.frames;
        size_t victim = chunk_idx[rng() % k];
        const bool reseal = shape == Shape::TamperResealed;
        body[victim] = Reencode(body[victim], [reseal](Record& r) {
          Chunk& c = std::get<Chunk>(r);
          Change extra;
          extra.op = Op::Message;
          extra.message = LogicalMessage{true, "tamper", "y"};
          c.changes.front() = extra;
          if (reseal) REQUIRE(SealChunk(c).ok());
        });
        valid = false;
        break;
      }
      case Shape::ExtraChunk: {
        Frame extra = Reencode(chunks.back(), [k](Record& r) {
          Chunk& c = std::get<Chunk>(r);
          c.seq = static_cast<uint32_t>(k);
          REQUIRE(SealChunk(c).ok());
        });
        body = tx.frames;
        body.insert(body.begin() + static_cast<long>(chunk_idx.back() + 1 + rng() % 2), extra);
        valid = false;
        break;
      }
      case Shape::DropMarker: body.assign(tx.frames.begin(), tx.frames.end() - 1); valid = false; break;
      case Shape::DropManifest: {
        body = tx.frames;
        body.erase(body.begin() + static_cast<long>(IndexesOf(tx, RecordType::Manifest)[0]));
        valid = false;
        break;
      }
      case Shape::Permuted: {
        std::vector<size_t> order(tx.frames.size());
        for (size_t i = 0; i < order.size(); i++) order[i] = i;
        std::shuffle(order.begin(), order.end(), rng);
        for (size_t i : order) body.push_back(tx.frames[i]);
        // Oracle: chunks in seq order and the marker last; the manifest may be anywhere before it.
        bool in_order = true;
        size_t last_chunk_pos = 0;
        for (size_t pos = 0, expect_seq = 0; pos < order.size(); pos++) {
          if (tx.frames[order[pos]].type != static_cast<uint8_t>(RecordType::Chunk)) continue;
          if (order[pos] != chunk_idx[expect_seq]) in_order = false;
          expect_seq++;
          last_chunk_pos = pos;
        }
        valid = in_order && order.back() == tx.frames.size() - 1 && last_chunk_pos < order.size() - 1;
        break;
      }
      case Shape::kCount: break;
    }
    seen[ShapeName(shape)]++;

    std::vector<Frame> log = before.frames;
    log.insert(log.end(), body.begin(), body.end());
    log.insert(log.end(), after.frames.begin(), after.frames.end());
    TransactionBarrier b;
    Run run = FeedAll(b, log);
    const std::string where = "seed " + std::to_string(seed) + " iteration " + std::to_string(iteration) + " shape " +
                              ShapeName(shape) + " chunks " + std::to_string(k) + " error: " + run.error + ": ";
    auto expect = [&](bool ok, const char* what) {
      if (!ok) violations.push_back(where + what);
      return ok;
    };
    if (!expect(!run.ready.empty(), "nothing was yielded")) continue;
    expect(run.ready[0].tx == before.tx, "what precedes the transaction was held back");
    if (valid) {
      if (!expect(!run.failed, "a valid log failed") || !expect(run.ready.size() == 3, "not 3 transactions yielded"))
        continue;
      const ReadyTransaction& t = run.ready[1];
      expect(t.tx == tx.tx, "wrong transaction yielded");
      expect(t.checksum == ExpectedChecksum(tx), "transaction checksum differs");
      expect(t.duplicate_chunks == expect_duplicates, "duplicate chunk count differs");
      expect(Reassemble(t, run) == tx.changes, "reassembled changes differ");
      expect(run.ready[2].tx == after.tx, "the following transaction differs");
    } else {
      expect(run.failed, "an invalid log did not fail closed");
      expect(run.ready.size() == 1, "the bad transaction or one after it was yielded");
      if (expect(b.failure().has_value(), "no failure recorded") && b.failure()->tx)
        expect(b.failure()->tx == tx.tx, "the failure names another transaction");
    }
  }
  return violations;
}

}  // namespace

TEST_CASE("barrier_property_generated_logs_yield_exactly_the_valid_transactions", "[barrier][property]") {
  const uint64_t seed = SeedFor("barrier_property_generated_logs_yield_exactly_the_valid_transactions");
  std::map<std::string, int> seen;
  const std::vector<std::string> violations = BarrierPropertyViolations(seed, 400, seen);
  for (const std::string& v : violations) FAIL_CHECK(v);
  CHECK(violations.empty());
  for (int s = 0; s < static_cast<int>(Shape::kCount); s++) CHECK(seen[ShapeName(static_cast<Shape>(s))] > 0);
}

// The paired defect of protocol_property_chunk_manifest_reconstruction (docs/correctness.md): with
// defect.barrier_trust_manifest the same generated logs, same seed, must violate the property — the
// tamper_resealed shape yields a transaction whose chunk no longer matches its manifest.
TEST_CASE("barrier_property_with_a_barrier_that_trusts_the_manifest_negative_control", "[barrier][property]") {
  const uint64_t seed = SeedFor("barrier_property_generated_logs_yield_exactly_the_valid_transactions");
  std::map<std::string, int> seen;
  fault::AllowDefects(true, "unit test");  // defects need the explicit test-only switch (fault.h)
  REQUIRE(fault::Configure("defect.barrier_trust_manifest:1:defect").ok());
  const std::vector<std::string> violations = BarrierPropertyViolations(seed, 400, seen);
  fault::Clear();
  fault::AllowDefects(false, "");
  REQUIRE(seen["tamper_resealed"] > 0);
  CHECK_FALSE(violations.empty());  // the clean property test's CHECK(violations.empty()) fails: caught
  bool tamper_caught = false;
  for (const std::string& v : violations) tamper_caught |= v.find("shape tamper_resealed") != std::string::npos;
  CHECK(tamper_caught);
}

}  // namespace unit_barrier_test
