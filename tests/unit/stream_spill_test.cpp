// stream_spill_test.cpp — the store for streamed transactions: memory threshold and spill files,
// subtransaction and transaction aborts, stale files at open, corrupted spill files, and the
// replay of a streamed transaction, which must log exactly the bytes of a transaction decoded at
// commit.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "samples.h"
#include "trellara/capture/assembler.h"
#include "trellara/record/codec.h"
#include "trellara/capture/stream_spill.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_stream_spill_test {

using namespace trellara;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/trellara-spill-test-XXXXXX";
    char* p = ::mkdtemp(tmpl);
    REQUIRE(p != nullptr);
    path = p;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::span<const uint8_t> Bytes(const std::string& s) {
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

std::unique_ptr<StreamSpill> OpenSpill(const std::string& dir, uint32_t memory_changes,
                                       uint64_t memory_bytes = kDefaultSpillMemoryBytes) {
  auto spill = StreamSpill::Open(SpillOptions{dir, memory_changes, memory_bytes});
  REQUIRE(spill.ok());
  return std::move(*spill);
}

// Commits `top` and returns the records handed out, in order.
std::vector<std::string> CommitAll(StreamSpill& spill, uint32_t top) {
  std::vector<std::string> out;
  Status s = spill.Commit(top, [&out](std::span<const uint8_t> b) -> Status {
    out.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
    return Status::Ok();
  });
  REQUIRE(s.ok());
  return out;
}

std::string Rec(uint32_t xid, int i) { return "xid " + std::to_string(xid) + " record " + std::to_string(i); }

Change Insert(int64_t id) {
  Change c;
  c.op = Op::Insert;
  c.relation_oid = testing::SampleOrders().oid;
  c.new_tuple = {Value::Text(std::to_string(id)), Value::Text("n"), Value::Null(), Value::Null()};
  return c;
}

struct Captured {
  std::vector<Record> records;
  std::vector<std::string> bytes;
};

RecordSink Capture(Captured& c) {
  return [&c](const EmittedRecord& r) -> Status {
    auto decoded = DecodeRecord(r.bytes);
    if (!decoded.ok()) return decoded.error();
    c.records.push_back(*decoded);
    c.bytes.push_back(r.bytes);
    return Status::Ok();
  };
}

}  // namespace

TEST_CASE("records_stay_in_memory_below_the_threshold_and_spill_above_it", "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 4);
  const uint32_t top = 700;
  const std::string file = spill->FileOf(top);
  CHECK(file == dir.path + "/xid-700.spill");
  std::vector<std::string> added;
  for (int i = 0; i < 4; i++) {
    added.push_back(Rec(top, i));
    REQUIRE(spill->Add(top, top, Bytes(added.back())).ok());
  }
  CHECK_FALSE(Exists(file));  // at the threshold, not above it
  CHECK(spill->stats().files_open == 0);
  CHECK(spill->stats().spilled_bytes == 0);
  for (int i = 4; i < 11; i++) {
    added.push_back(Rec(top, i));
    REQUIRE(spill->Add(top, top, Bytes(added.back())).ok());
  }
  CHECK(Exists(file));
  CHECK(spill->stats().files_open == 1);
  CHECK(spill->stats().transactions_open == 1);
  CHECK(spill->stats().spilled_bytes > 0);
  CHECK(spill->stats().memory_bytes > 0);  // the records after the last flush
  CHECK(spill->Has(top));
  CHECK(CommitAll(*spill, top) == added);
  CHECK_FALSE(Exists(file));
  CHECK_FALSE(spill->Has(top));
  CHECK(spill->stats().transactions_open == 0);
  CHECK(spill->stats().memory_bytes == 0);
  CHECK(spill->stats().files_open == 0);
}

TEST_CASE("memory_bytes_threshold_spills_and_frames_larger_than_the_read_buffer_read_back_whole", "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 1000, 64 << 10);
  const uint32_t top = 701;
  std::vector<std::string> added;
  for (int i = 0; i < 5; i++) {
    // 1.5 MiB, larger than the 1 MiB read-back buffer, followed by small ones.
    added.push_back(std::string((3u << 20) / 2, static_cast<char>('a' + i)) + Rec(top, i));
    REQUIRE(spill->Add(top, top, Bytes(added.back())).ok());
    added.push_back(Rec(top, 100 + i));
    REQUIRE(spill->Add(top, top, Bytes(added.back())).ok());
  }
  CHECK(Exists(spill->FileOf(top)));
  CHECK(spill->stats().memory_bytes <= (64u << 10));
  CHECK(CommitAll(*spill, top) == added);
  CHECK_FALSE(Exists(spill->FileOf(top)));
}

TEST_CASE("pgoutput_stream_abort_discards_partial_changes: subtransaction abort discards exactly its records",
          "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 3);
  const uint32_t top = 800, sub1 = 801, sub2 = 802;
  const uint32_t xids[3] = {top, sub1, sub2};
  std::vector<std::pair<uint32_t, std::string>> added;
  // 11 records, top/sub1/sub2 interleaved: the first 8 reach the file (a flush at every 4th), the
  // last 3 stay in memory, so sub1 has records in both places.
  for (int i = 0; i < 11; i++) {
    const uint32_t xid = xids[i % 3];
    added.emplace_back(xid, Rec(xid, i));
    REQUIRE(spill->Add(top, xid, Bytes(added.back().second)).ok());
  }
  REQUIRE(Exists(spill->FileOf(top)));
  REQUIRE(spill->stats().memory_bytes == Rec(sub2, 8).size() + Rec(top, 9).size() + Rec(sub1, 10).size());
  REQUIRE(spill->AbortSubtransaction(top, sub1).ok());
  CHECK(spill->stats().memory_bytes == Rec(sub2, 8).size() + Rec(top, 9).size());
  CHECK(spill->stats().records_discarded == 1);  // the one still in memory, counted now
  // A later change of the top transaction is kept after the abort.
  added.emplace_back(top, Rec(top, 11));
  REQUIRE(spill->Add(top, top, Bytes(added.back().second)).ok());
  std::vector<std::string> expected;
  for (const auto& [xid, rec] : added)
    if (xid != sub1) expected.push_back(rec);
  const auto got = CommitAll(*spill, top);
  CHECK(got == expected);
  CHECK(got.size() == 8);
  CHECK(spill->stats().records_discarded == 4);  // 3 more skipped in the file
  CHECK_FALSE(Exists(spill->FileOf(top)));
}

TEST_CASE("abort_of_a_subtransaction_of_an_unknown_transaction_is_a_no_op", "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 3);
  CHECK(spill->AbortSubtransaction(900, 901).ok());
  CHECK_FALSE(spill->Has(900));
  CHECK(spill->stats().records_discarded == 0);
}

TEST_CASE("transaction_abort_removes_memory_and_file; commit_of_unknown_xid_calls_nothing", "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 2);
  const uint32_t top = 1000;
  for (int i = 0; i < 5; i++) REQUIRE(spill->Add(top, i % 2 ? top + 1 : top, Bytes(Rec(top, i))).ok());
  REQUIRE(Exists(spill->FileOf(top)));
  REQUIRE(spill->AbortTransaction(top).ok());
  CHECK_FALSE(Exists(spill->FileOf(top)));
  CHECK_FALSE(spill->Has(top));
  CHECK(spill->stats().transactions_open == 0);
  CHECK(spill->stats().memory_bytes == 0);
  CHECK(spill->stats().records_discarded == 5);
  int calls = 0;
  auto count = [&calls](std::span<const uint8_t>) -> Status {
    calls++;
    return Status::Ok();
  };
  CHECK(spill->Commit(top, count).ok());
  CHECK(spill->Commit(4242, count).ok());
  CHECK(calls == 0);
  CHECK(spill->AbortTransaction(4242).ok());
  CHECK(std::filesystem::is_empty(dir.path));
}

TEST_CASE("open_removes_leftover_spill_files_and_keeps_other_files", "[stream_spill]") {
  TempDir dir;
  for (const char* name : {"xid-1.spill", "xid-77.spill", "keep.txt", "spill", "xid-2.spill.keep"})
    std::ofstream(dir.path + "/" + name) << "left by a crash";
  std::filesystem::create_directory(dir.path + "/sub.spill");  // not a regular file: left alone
  auto spill = OpenSpill(dir.path, 4);
  CHECK(spill->removed_at_open() == 2);
  CHECK_FALSE(Exists(dir.path + "/xid-1.spill"));
  CHECK_FALSE(Exists(dir.path + "/xid-77.spill"));
  CHECK(Exists(dir.path + "/keep.txt"));
  CHECK(Exists(dir.path + "/spill"));
  CHECK(Exists(dir.path + "/xid-2.spill.keep"));
  CHECK(Exists(dir.path + "/sub.spill"));
}

TEST_CASE("open_creates_missing_directories_with_mode_0700", "[stream_spill]") {
  TempDir dir;
  const std::string nested = dir.path + "/a/b/spill";
  auto spill = OpenSpill(nested, 4);
  struct stat st;
  REQUIRE(::stat(nested.c_str(), &st) == 0);
  CHECK(S_ISDIR(st.st_mode));
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(spill->removed_at_open() == 0);
  CHECK(spill->directory() == nested);
}

TEST_CASE("corrupted_spill_file_fails_commit_naming_the_file_and_removes_it", "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 2);
  const uint32_t top = 1100;
  for (int i = 0; i < 6; i++) REQUIRE(spill->Add(top, top, Bytes(Rec(top, i))).ok());
  const std::string file = spill->FileOf(top);
  REQUIRE(Exists(file));
  const auto size = std::filesystem::file_size(file);
  std::string expect_in_message;
  SECTION("a flipped byte in a frame") {
    const size_t first_len = Rec(top, 0).size();
    const off_t victim = static_cast<off_t>(12 + first_len + 12 + 3);  // inside the second frame's bytes
    int fd = ::open(file.c_str(), O_RDWR | O_CLOEXEC);
    REQUIRE(fd >= 0);
    uint8_t b = 0;
    REQUIRE(::pread(fd, &b, 1, victim) == 1);
    b ^= 0x20;
    REQUIRE(::pwrite(fd, &b, 1, victim) == 1);
    ::close(fd);
    expect_in_message = "offset " + std::to_string(12 + first_len);
  }
  SECTION("a truncated file") {
    REQUIRE(::truncate(file.c_str(), static_cast<off_t>(size - 3)) == 0);
    expect_in_message = std::to_string(size - 3) + " bytes";
  }
  std::vector<std::string> got;
  Status s = spill->Commit(top, [&got](std::span<const uint8_t> b) -> Status {
    got.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
    return Status::Ok();
  });
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.error().message, Catch::Contains(file));
  CHECK_THAT(s.error().message, Catch::Contains("1100"));
  CHECK_THAT(s.error().message, Catch::Contains(expect_in_message));
  CHECK_THAT(s.error().message, Catch::Contains("decodes the transaction again"));
  CHECK(got.size() <= 1);  // nothing after the bad frame
  CHECK_FALSE(Exists(file));
  CHECK_FALSE(spill->Has(top));
}

TEST_CASE("callback_error_stops_commit_and_the_transaction_is_forgotten", "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 2);
  const uint32_t top = 1150;
  for (int i = 0; i < 6; i++) REQUIRE(spill->Add(top, top, Bytes(Rec(top, i))).ok());
  int calls = 0;
  Status s = spill->Commit(top, [&calls](std::span<const uint8_t>) -> Status {
    return ++calls == 2 ? Status(MakeError("disk full")) : Status::Ok();
  });
  REQUIRE_FALSE(s.ok());
  CHECK(s.error().message == "disk full");
  CHECK(calls == 2);
  CHECK_FALSE(Exists(spill->FileOf(top)));
  CHECK_FALSE(spill->Has(top));
}

TEST_CASE("oversized_stream_record_is_refused", "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 2);
  // A span that claims more than the limit; never read because the size is checked first.
  static const uint8_t one = 0;
  std::span<const uint8_t> huge(&one, kMaxStreamRecordBytes + 1);
  Status s = spill->Add(1200, 1201, huge);
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.error().message, Catch::Contains("1201"));
  CHECK_THAT(s.error().message, Catch::Contains("1200"));
  CHECK_FALSE(spill->Has(1200));
}

TEST_CASE("interleaved_transactions_keep_separate_files_and_lists", "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 2);
  std::vector<std::string> a, b;
  for (int i = 0; i < 7; i++) {
    a.push_back(Rec(200, i));
    REQUIRE(spill->Add(200, 200, Bytes(a.back())).ok());
    b.push_back(Rec(300, i));
    REQUIRE(spill->Add(300, 301, Bytes(b.back())).ok());
  }
  CHECK(Exists(spill->FileOf(200)));
  CHECK(Exists(spill->FileOf(300)));
  CHECK(spill->stats().files_open == 2);
  CHECK(spill->stats().transactions_open == 2);
  REQUIRE(spill->AbortSubtransaction(200, 301).ok());  // 301 belongs to 300, not to 200
  CHECK(CommitAll(*spill, 200) == a);
  CHECK_FALSE(Exists(spill->FileOf(200)));
  CHECK(Exists(spill->FileOf(300)));
  CHECK(CommitAll(*spill, 300) == b);
  CHECK_FALSE(Exists(spill->FileOf(300)));
}

TEST_CASE("pgoutput_streamed_transaction_spills_until_commit: replay logs the bytes of a transaction decoded at commit",
          "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 2);
  const RelationInfo orders = testing::SampleOrders();
  const uint32_t top = 1300, sub = 1301;
  std::vector<Change> kept;
  for (int i = 0; i < 10; i++) {
    const uint32_t xid = (i >= 4 && i < 7) ? sub : top;  // the subtransaction's 3 inserts in the middle
    auto record = EncodeStreamRecord("app", xid, Insert(i), &orders, {});
    REQUIRE(record.ok());
    REQUIRE(spill->Add(top, xid, Bytes(*record)).ok());
    if (xid != sub) kept.push_back(Insert(i));
  }
  REQUIRE(Exists(spill->FileOf(top)));
  REQUIRE(spill->AbortSubtransaction(top, sub).ok());

  const StreamedCommit commit{top, 0x1000, 0x9000, 12345};
  TransactionAssembler streamed({"app", 42, 4});
  Captured out;
  REQUIRE(ReplayStreamedTransaction(*spill, commit, streamed, Capture(out)).ok());
  CHECK_FALSE(streamed.in_transaction());
  CHECK_FALSE(spill->Has(top));
  CHECK_FALSE(Exists(spill->FileOf(top)));
  REQUIRE(out.records.size() == 4);  // chunk(4), chunk(3), manifest, commit marker
  CHECK(std::get<Chunk>(out.records[0]).changes.size() == 4);
  CHECK(std::get<Chunk>(out.records[1]).changes.size() == 3);
  CHECK(std::get<Manifest>(out.records[2]).total_changes == 7);
  CHECK(std::get<CommitMarker>(out.records[3]).total_changes == 7);
  CHECK(std::get<CommitMarker>(out.records[3]).tx == TxIdentity{"app", 42, top, 0x9000});
  for (int i = 0; i < 2; i++) CHECK(VerifyRecordChecksum(out.records[i]).ok());

  TransactionAssembler direct({"app", 42, 4});
  Captured want;
  direct.Begin(top, 0x1000, 0x9000, 12345);
  for (const Change& c : kept) REQUIRE(direct.AddChange(c, &orders, {}, Capture(want)).ok());
  REQUIRE(direct.Commit(Capture(want)).ok());
  CHECK(out.bytes == want.bytes);
}

TEST_CASE("truncate_and_message_stream_records_survive_the_round_trip", "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 0);  // everything goes through the file
  const RelationInfo orders = testing::SampleOrders();
  const RelationInfo items = testing::SampleLineItems();
  const uint32_t top = 1400;
  Change t;
  t.op = Op::Truncate;
  t.truncate.relation_oids = {items.oid, orders.oid};
  t.truncate.cascade = true;
  Change m;
  m.op = Op::Message;
  m.message = LogicalMessage{true, "app.audit", std::string("bin\0ary", 7)};
  auto tr = EncodeStreamRecord("app", top, t, nullptr, {&items, &orders, &items});
  REQUIRE(tr.ok());
  auto mr = EncodeStreamRecord("app", top + 1, m, nullptr, {});
  REQUIRE(mr.ok());
  auto ir = EncodeStreamRecord("app", top, Insert(1), &orders, {});
  REQUIRE(ir.ok());
  // The stream record itself: one change, each truncated relation described once.
  auto decoded = DecodeRecord(*tr);
  REQUIRE(decoded.ok());
  CHECK(std::get<Envelope>(*decoded).relations.size() == 2);
  CHECK(std::get<Envelope>(*decoded).tx.commit_lsn == kStreamRecordCommitLsn);
  REQUIRE(spill->Add(top, top, Bytes(*tr)).ok());
  REQUIRE(spill->Add(top, top + 1, Bytes(*mr)).ok());
  REQUIRE(spill->Add(top, top, Bytes(*ir)).ok());
  REQUIRE(Exists(spill->FileOf(top)));

  TransactionAssembler streamed({"app", 42, 100});
  Captured out;
  REQUIRE(ReplayStreamedTransaction(*spill, {top, 0x10, 0x20, 7}, streamed, Capture(out)).ok());
  REQUIRE(out.records.size() == 1);
  const auto& e = std::get<Envelope>(out.records[0]);
  REQUIRE(e.changes.size() == 3);
  CHECK(e.changes[0] == t);
  CHECK(e.changes[1] == m);
  CHECK(e.changes[2] == Insert(1));
  CHECK(VerifyRecordChecksum(out.records[0]).ok());

  TransactionAssembler direct({"app", 42, 100});
  Captured want;
  direct.Begin(top, 0x10, 0x20, 7);
  REQUIRE(direct.AddChange(t, nullptr, {&items, &orders}, Capture(want)).ok());
  REQUIRE(direct.AddChange(m, nullptr, {}, Capture(want)).ok());
  REQUIRE(direct.AddChange(Insert(1), &orders, {}, Capture(want)).ok());
  REQUIRE(direct.Commit(Capture(want)).ok());
  CHECK(out.bytes == want.bytes);
}

TEST_CASE("replay_of_a_corrupted_spill_fails_naming_the_transaction_and_resets_the_assembler", "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 1);
  const RelationInfo orders = testing::SampleOrders();
  const uint32_t top = 1500;
  for (int i = 0; i < 4; i++) {
    auto record = EncodeStreamRecord("app", top, Insert(i), &orders, {});
    REQUIRE(record.ok());
    REQUIRE(spill->Add(top, top, Bytes(*record)).ok());
  }
  const std::string file = spill->FileOf(top);
  REQUIRE(::truncate(file.c_str(), 20) == 0);
  TransactionAssembler a({"app", 42, 2});
  Captured out;
  Status s = ReplayStreamedTransaction(*spill, {top, 0x10, 0x3A1F2B0, 7}, a, Capture(out));
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.error().message, Catch::StartsWith("streamed transaction 1500 (commit 0/3A1F2B0)"));
  CHECK_THAT(s.error().message, Catch::Contains(file));
  CHECK_FALSE(a.in_transaction());
  CHECK(out.records.empty());
  CHECK_FALSE(Exists(file));
}

TEST_CASE("replay_refuses_a_log_record_in_place_of_a_stream_record", "[stream_spill]") {
  TempDir dir;
  auto spill = OpenSpill(dir.path, 10);
  Envelope e = testing::SampleEnvelope();
  e.changes.resize(1);
  REQUIRE(SealEnvelope(e).ok());
  auto bytes = EncodeRecord(Record(e));
  REQUIRE(bytes.ok());
  REQUIRE(spill->Add(1600, 1600, Bytes(*bytes)).ok());
  TransactionAssembler a({"app", 42, 2});
  Captured out;
  Status s = ReplayStreamedTransaction(*spill, {1600, 0x10, 0x20, 7}, a, Capture(out));
  REQUIRE_FALSE(s.ok());
  CHECK_THAT(s.error().message, Catch::Contains("not a stream record"));
  CHECK(out.records.empty());
  CHECK_FALSE(a.in_transaction());
}

}  // namespace unit_stream_spill_test
