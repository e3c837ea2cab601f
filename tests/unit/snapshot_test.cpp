// snapshot_test.cpp — core snapshot.h: snapshots and visibility, chunk ranges, states, and a
// property test of the handoff protocol (docs/snapshot.md) over a small model of MVCC source
// transactions, the log, the applier's rule and chunk copies, interleaved at random: the target
// must end equal to the source with nothing applied twice or lost, and each paired defect (apply
// what the copy holds / skip what it does not) must be caught.
#include <catch2/catch.hpp>

#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "trellara/apply/snapshot.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_snapshot_test {

using namespace trellara;

TEST_CASE("snapshot_text_parses_and_visibility_follows_mvcc", "[snapshot]") {
  auto s = ParseSourceSnapshot("100:105:101,103");
  REQUIRE(s.ok());
  CHECK(s->xmin == 100);
  CHECK(s->xmax == 105);
  CHECK(s->xip == std::vector<uint64_t>{101, 103});
  CHECK(FormatSourceSnapshot(*s) == "100:105:101,103");
  CHECK(VisibleIn(*s, 99));
  CHECK(VisibleIn(*s, 100));
  CHECK_FALSE(VisibleIn(*s, 101));
  CHECK(VisibleIn(*s, 102));
  CHECK_FALSE(VisibleIn(*s, 103));
  CHECK(VisibleIn(*s, 104));
  CHECK_FALSE(VisibleIn(*s, 105));
  CHECK_FALSE(VisibleIn(*s, 200000));
  CHECK(ParseSourceSnapshot("7:7:").ok());
  CHECK_FALSE(ParseSourceSnapshot("7:5:").ok());
  CHECK_FALSE(ParseSourceSnapshot("1:5:9").ok());
  CHECK_FALSE(ParseSourceSnapshot("garbage").ok());
  CHECK_FALSE(ParseSourceSnapshot("1:x:").ok());
}

TEST_CASE("visibility_of_32_bit_xids_across_an_epoch", "[snapshot]") {
  // xmax just past an epoch boundary: xid 0xFFFFFFF0 belongs to the previous epoch.
  const uint64_t epoch1 = uint64_t{1} << 32;
  SourceSnapshot s{epoch1 + 5, epoch1 + 10, {epoch1 + 7}};
  CHECK(VisibleIn(s, 0xFFFFFFF0u));  // (epoch 0) long before xmin
  CHECK(VisibleIn(s, 6));
  CHECK_FALSE(VisibleIn(s, 7));
  CHECK_FALSE(VisibleIn(s, 12));
  SourceSnapshot before{epoch1 - 20, epoch1 - 10, {epoch1 - 15}};
  CHECK_FALSE(VisibleIn(before, 3));  // epoch 1, after xmax
  CHECK_FALSE(VisibleIn(before, static_cast<uint32_t>(epoch1 - 15)));
  CHECK(VisibleIn(before, static_cast<uint32_t>(epoch1 - 16)));
}

TEST_CASE("chunk_ranges_partition_every_key", "[snapshot]") {
  auto one = PlanChunkRanges(std::nullopt, std::nullopt, 0, 1000);
  REQUIRE(one.size() == 1);
  CHECK_FALSE(one[0].lo);
  CHECK_FALSE(one[0].hi);
  auto r = PlanChunkRanges(1, 1'000'000, 1'000'000, 100'000);
  REQUIRE(r.size() == 10);
  CHECK_FALSE(r.front().lo);
  CHECK_FALSE(r.back().hi);
  for (size_t i = 0; i + 1 < r.size(); i++) CHECK(r[i].hi == r[i + 1].lo);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; i++) {
    const int64_t k = static_cast<int64_t>(rng());
    auto c = ChunkOf(r, k);
    REQUIRE(c);
    const ChunkRange& range = r[static_cast<size_t>(*c)];
    CHECK((!range.lo || k >= *range.lo));
    CHECK((!range.hi || k < *range.hi));
  }
  // Extreme keys and a span smaller than the chunk count.
  auto wide = PlanChunkRanges(INT64_MIN, INT64_MAX, 1'000'000, 1000);
  CHECK(ChunkOf(wide, INT64_MIN));
  CHECK(ChunkOf(wide, INT64_MAX));
  auto narrow = PlanChunkRanges(5, 7, 1'000'000, 10);
  CHECK(narrow.size() == 3);
  CHECK(SplittableKeyType("int8"));
  CHECK_FALSE(SplittableKeyType("text"));
  CHECK_FALSE(SplittableKeyType("numeric"));
}

TEST_CASE("snapshot_states_move_forward_only_unless_forced", "[snapshot]") {
  using S = SnapshotState;
  CHECK(CheckSnapshotTransition(S::Pending, S::Copying, false, "t").ok());
  CHECK(CheckSnapshotTransition(S::Copying, S::Copied, false, "t").ok());
  CHECK(CheckSnapshotTransition(S::Copied, S::HandoffReady, false, "t").ok());
  CHECK(CheckSnapshotTransition(S::Pending, S::HandoffReady, false, "t").ok());
  CHECK(CheckSnapshotTransition(S::Copying, S::FailedRecoverable, false, "t").ok());
  CHECK(CheckSnapshotTransition(S::FailedRecoverable, S::Copying, false, "t").ok());
  CHECK(CheckSnapshotTransition(S::HandoffReady, S::HandoffReady, false, "t").ok());
  auto back = CheckSnapshotTransition(S::HandoffReady, S::Pending, false, "table public.a");
  REQUIRE_FALSE(back.ok());
  CHECK(back.error().message.find("--force") != std::string::npos);
  CHECK(back.error().message.find("public.a") != std::string::npos);
  CHECK_FALSE(CheckSnapshotTransition(S::Copied, S::Copying, false, "t").ok());
  CHECK_FALSE(CheckSnapshotTransition(S::HandoffReady, S::FailedRecoverable, false, "t").ok());
  CHECK_FALSE(CheckSnapshotTransition(S::FailedRecoverable, S::Pending, false, "t").ok());
  CHECK(CheckSnapshotTransition(S::HandoffReady, S::Pending, true, "t").ok());
  for (auto s : {S::Pending, S::Copying, S::Copied, S::HandoffReady, S::FailedRecoverable})
    CHECK(*ParseSnapshotState(SnapshotStateName(s)) == s);
  CHECK_FALSE(ParseSnapshotState("done").ok());
}

TEST_CASE("key_changing_updates_split_into_halves", "[snapshot]") {
  SourceSnapshot s{100, 110, {105}};
  ChunkView copied{ChunkView::Kind::Copied, s};
  ChunkView pending{ChunkView::Kind::Pending, {}};
  ChunkView unknown{};
  // xid 120 is not in the copy, 99 is.
  CHECK(DecideSnapshotChange(Op::Update, 120, 0, copied, copied).action == RowAction::Apply);
  CHECK(DecideSnapshotChange(Op::Update, 99, 0, copied, copied).action == RowAction::Drop);
  CHECK(DecideSnapshotChange(Op::Update, 105, 0, copied, copied).action == RowAction::Apply);  // in xip
  auto d = DecideSnapshotChange(Op::Update, 120, 0, copied, pending);
  CHECK(d.action == RowAction::DeleteOldOnly);
  CHECK(d.skip_new);
  d = DecideSnapshotChange(Op::Update, 120, 0, pending, copied);
  CHECK(d.action == RowAction::InsertNewOnly);
  CHECK(d.skip_old);
  d = DecideSnapshotChange(Op::Update, 120, 0, unknown, copied);
  CHECK(d.action == RowAction::NeedState);
  CHECK(d.need_old);
  CHECK_FALSE(d.need_new);
  CHECK(DecideSnapshotChange(Op::Insert, 99, 0, std::nullopt, pending).skip_new);
  CHECK(DecideSnapshotChange(Op::Delete, 120, 0, copied, std::nullopt).action == RowAction::Apply);
  CHECK(DecideSnapshotChange(Op::Insert, 1, 0, std::nullopt, std::nullopt).action == RowAction::Apply);
}

TEST_CASE("a_commit_past_the_snapshot_lsn_is_never_in_the_copy", "[snapshot]") {
  // xmax 110 in epoch 0; a chunk copied at WAL position 5000.
  SourceSnapshot s{100, 110, {105}};
  ChunkView copied{ChunkView::Kind::Copied, s, 5000};
  CHECK(DecideHalf(copied, 99, 4000) == HalfDecision::InCopy);
  CHECK(DecideHalf(copied, 105, 4000) == HalfDecision::Apply);  // committed before, invisible (xip)
  CHECK(DecideHalf(copied, 120, 5001) == HalfDecision::Apply);
  // 2^31 transactions later the 32-bit xid 99 comes round again: compared by xid alone it reads as
  // long committed (in the copy) and the change would be dropped; its commit LSN says otherwise.
  CHECK(VisibleIn(s, 99));
  CHECK(DecideHalf(copied, 99, 900000000) == HalfDecision::Apply);
  // Without a recorded snapshot_lsn (a chunk copied by an earlier release) the xid rule stands.
  ChunkView legacy{ChunkView::Kind::Copied, s, std::nullopt};
  CHECK(DecideHalf(legacy, 99, 900000000) == HalfDecision::InCopy);
  CHECK(DecideSnapshotChange(Op::Update, 99, 900000000, copied, copied).action == RowAction::Apply);
}

TEST_CASE("a_table_retires_from_its_last_chunk_snapshot_lsn", "[snapshot]") {
  SourceSnapshot s{100, 110, {}};
  ChunkView a{ChunkView::Kind::Copied, s, 5000}, b{ChunkView::Kind::Copied, s, 7000};
  CHECK(RetiredFrom({a, b}) == std::optional<uint64_t>(7000));
  CHECK_FALSE(RetiredFrom({a, ChunkView{ChunkView::Kind::Pending, {}, std::nullopt}}));
  CHECK_FALSE(RetiredFrom({a, ChunkView{}}));
  CHECK_FALSE(RetiredFrom({a, ChunkView{ChunkView::Kind::Copied, s, std::nullopt}}));
  CHECK_FALSE(RetiredFrom({}));
}

TEST_CASE("backend_xids_widen_to_the_epoch_of_the_snapshot", "[snapshot]") {
  // Epoch 1: xmax = 2^32 + 110.
  const uint64_t e = 1ull << 32;
  SourceSnapshot s{e + 100, e + 110, {e + 100, e + 105}};
  CHECK(WidenXid(s, 105) == e + 105);
  CHECK(WidenXid(s, 110) == e + 110);  // a commit waiting for a standby is often at xmax: not in xip
  CHECK(WidenXid(s, 90) == e + 90);
  // Across the 32-bit wrap: xmax just below 2^32 in epoch 0, a backend xid 3 is epoch 1's.
  SourceSnapshot w{0xFFFFFFF0ull, 0xFFFFFFF8ull, {}};
  CHECK(WidenXid(w, 3) == e + 3);
  CHECK(WidenXid(w, 0xFFFFFFF5u) == 0xFFFFFFF5ull);
  SourceSnapshot first{3, 10, {}};
  CHECK(WidenXid(first, 0xFFFFFFF0u) == 0xFFFFFFF0ull);  // before the first epoch: as it is
  CHECK(VisibleIn64(s, e + 99));
  CHECK_FALSE(VisibleIn64(s, e + 105));
  CHECK(VisibleIn64(s, e + 106));
  CHECK_FALSE(VisibleIn64(s, e + 110));
}

TEST_CASE("narrowing_splits_a_range_until_it_holds_at_most_max_rows", "[snapshot]") {
  CHECK(SplitForNarrowing(ChunkRange{0, 0, 1000}, 900, 1000, 0, 999).empty());
  auto parts = SplitForNarrowing(ChunkRange{0, std::nullopt, std::nullopt}, 100000, 1000, 1, 100000);
  REQUIRE(parts.size() == 16);
  CHECK_FALSE(parts.front().lo);
  CHECK_FALSE(parts.back().hi);
  for (size_t i = 0; i + 1 < parts.size(); i++) CHECK(parts[i].hi == parts[i + 1].lo);
  CHECK(SplitForNarrowing(ChunkRange{0, 5, 6}, 5000, 1000, 5, 5).empty());  // one key
}

// ---- the protocol, modelled ------------------------------------------------------------------

namespace {

struct Version {
  uint32_t xid;
  std::optional<int> value;  // nullopt: deleted
};

enum class Defect { None, ApplyInCopy, SkipAfterCopy, NoSkipCheck, NoUnfinishedCheck };

struct Op1 {
  Op op;
  std::optional<int64_t> old_key, new_key;
  int value = 0;
};

struct Model {
  explicit Model(uint64_t seed, Defect defect) : rng(seed), defect(defect) {
    ranges = PlanChunkRanges(0, kKeys - 1, kKeys, kKeys / 4);
    chunks.assign(ranges.size(), ChunkState{});
    // Rows written before the flow existed: visible to everyone, never in the log.
    for (int64_t k = 0; k < kKeys; k += 2) history[k].push_back(Version{3, static_cast<int>(k)});
  }
  static constexpr int64_t kKeys = 40;

  std::mt19937_64 rng;
  Defect defect;
  uint32_t next_xid = 10;
  std::set<uint32_t> running;              // started, not visible
  std::set<uint32_t> committed_invisible;  // commit logged, not yet visible
  // Of those, the ones whose commit record is flushed (and decodable) but not yet in the commit
  // log: pg_xact_status still says "in progress" (a window of microseconds in a real server).
  std::set<uint32_t> not_in_clog;
  std::map<uint32_t, std::set<int64_t>> locks;  // keys a running transaction wrote
  std::map<int64_t, std::vector<Version>> history;
  struct LoggedTx {
    uint32_t xid;
    uint64_t commit_lsn;  // the end of its commit record
    std::vector<Op1> ops;
  };
  uint64_t wal_lsn = 1000;  // the source's WAL insert position
  // The table enters the registry (its chunks pending) at a random moment: before it, the applier
  // applies every change as captured (rows that the copy of each chunk then replaces).
  bool registered = false;
  std::vector<LoggedTx> log;
  std::map<uint32_t, std::vector<Op1>> pending_ops;
  size_t applied = 0;
  std::vector<ChunkRange> ranges;
  struct ChunkState {
    bool copied = false;
    SourceSnapshot snapshot;
    uint64_t snapshot_lsn = 0;
    std::set<uint32_t> skips;
  };
  std::vector<ChunkState> chunks;
  std::vector<ChunkView> cache{};  // the applier's cache
  std::map<int64_t, int> target;
  std::string violation;

  bool Visible(uint32_t xid) const { return !running.count(xid) && !committed_invisible.count(xid); }
  std::optional<int> Current(int64_t k) const {  // the newest committed version (row locks serialise writers)
    auto it = history.find(k);
    if (it == history.end() || it->second.empty()) return std::nullopt;
    return it->second.back().value;
  }
  bool Locked(int64_t k) const {
    for (auto& [x, ks] : locks)
      if (ks.count(k)) return true;
    auto it = history.find(k);
    // A writer whose commit is not visible yet still holds the row (its lock is released after).
    return it != history.end() && !it->second.empty() && !Visible(it->second.back().xid);
  }
  SourceSnapshot TakeSnapshot() const {
    SourceSnapshot s;
    s.xmax = next_xid;
    std::set<uint32_t> inprog = running;
    inprog.insert(committed_invisible.begin(), committed_invisible.end());
    s.xmin = inprog.empty() ? next_xid : *inprog.begin();
    for (uint32_t x : inprog) s.xip.push_back(x);
    return s;
  }
  std::optional<int> ReadIn(const SourceSnapshot& s, int64_t k) const {
    auto it = history.find(k);
    if (it == history.end()) return std::nullopt;
    for (auto v = it->second.rbegin(); v != it->second.rend(); ++v)
      if (VisibleIn(s, v->xid)) return v->value;
    return std::nullopt;
  }
  int32_t ChunkNo(int64_t k) const { return *ChunkOf(ranges, k); }

  void StartTx() {
    const uint32_t xid = next_xid++;
    running.insert(xid);
    // Its writes happen now, under row locks: only unlocked rows.
    std::vector<Op1> ops;
    std::map<int64_t, std::optional<int>> mine;
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < n; i++) {
      const int64_t k = static_cast<int64_t>(rng() % kKeys);
      if (Locked(k) || mine.count(k)) continue;
      const std::optional<int> cur = Current(k);
      const int value = static_cast<int>(rng() % 1000);
      if (!cur) {
        ops.push_back(Op1{Op::Insert, std::nullopt, k, value});
        mine[k] = value;
      } else if (rng() % 4 == 0) {
        ops.push_back(Op1{Op::Delete, k, std::nullopt, 0});
        mine[k] = std::nullopt;
      } else if (rng() % 3 == 0) {
        const int64_t k2 = static_cast<int64_t>(rng() % kKeys);
        if (k2 == k || Locked(k2) || mine.count(k2) || Current(k2)) continue;
        ops.push_back(Op1{Op::Update, k, k2, value});
        mine[k] = std::nullopt;
        mine[k2] = value;
      } else {
        ops.push_back(Op1{Op::Update, k, k, value});
        mine[k] = value;
      }
    }
    for (auto& [k, v] : mine) locks[xid].insert(k);
    pending_ops[xid] = ops;
    // Stash the intended versions; they are installed at commit.
    pending_versions[xid] = mine;
  }
  std::map<uint32_t, std::map<int64_t, std::optional<int>>> pending_versions;

  void CommitTx() {  // commit record logged; visibility comes later
    if (running.empty()) return;
    auto it = running.begin();
    std::advance(it, static_cast<long>(rng() % running.size()));
    const uint32_t xid = *it;
    running.erase(it);
    for (auto& [k, v] : pending_versions[xid]) history[k].push_back(Version{xid, v});
    locks.erase(xid);
    committed_invisible.insert(xid);
    if (rng() % 5 == 0) {  // aborted instead: nothing logged, versions dropped
      for (auto& [k, v] : pending_versions[xid]) history[k].pop_back();
      committed_invisible.erase(xid);
      return;
    }
    if (rng() % 2 == 0) not_in_clog.insert(xid);
    if (!pending_ops[xid].empty()) log.push_back(LoggedTx{xid, ++wal_lsn, pending_ops[xid]});
  }
  void MakeVisible() {  // the commit log first, then visibility
    if (!not_in_clog.empty() && rng() % 2 == 0) {
      auto it = not_in_clog.begin();
      std::advance(it, static_cast<long>(rng() % not_in_clog.size()));
      not_in_clog.erase(it);
      return;
    }
    std::vector<uint32_t> ready;
    for (uint32_t x : committed_invisible)
      if (!not_in_clog.count(x)) ready.push_back(x);
    if (ready.empty()) return;
    committed_invisible.erase(ready[rng() % ready.size()]);
  }

  // What the applier knows of chunk c in the transaction at hand: a copied chunk is cached for
  // good (its state never changes); a pending one only for the transaction that read it (the
  // chunk row stays locked FOR SHARE until that transaction ends).
  std::map<int32_t, ChunkView> read_in_tx;
  ChunkView View(int32_t c) {
    if (cache.size() < chunks.size()) cache.assign(chunks.size(), ChunkView{});
    if (cache[static_cast<size_t>(c)].kind == ChunkView::Kind::Copied) return cache[static_cast<size_t>(c)];
    auto it = read_in_tx.find(c);
    return it == read_in_tx.end() ? ChunkView{} : it->second;
  }
  // The applier's FOR SHARE read of a chunk row.
  void ReadState(int32_t c) {
    const ChunkState& st = chunks[static_cast<size_t>(c)];
    if (st.copied) cache[static_cast<size_t>(c)] = ChunkView{ChunkView::Kind::Copied, st.snapshot, st.snapshot_lsn};
    else read_in_tx[c] = ChunkView{ChunkView::Kind::Pending, {}};
  }

  void Fail(const std::string& what) {
    if (violation.empty()) violation = what;
  }

  // One logged transaction, atomically (it and a chunk copy exclude each other: the chunk row lock).
  void ApplyNext() {
    if (applied == log.size()) return;
    const LoggedTx& tx = log[applied++];
    read_in_tx.clear();
    for (const Op1& op : tx.ops) {
      if (!registered) {  // not under snapshot yet: as captured, onto whatever the target holds
        if (op.old_key) target.erase(*op.old_key);
        if (op.new_key) target[*op.new_key] = op.value;
        continue;
      }
      std::optional<ChunkView> o, n;
      RowDecision d;
      for (;;) {
        o = op.old_key ? std::optional(View(ChunkNo(*op.old_key))) : std::nullopt;
        n = op.new_key ? std::optional(View(ChunkNo(*op.new_key))) : std::nullopt;
        d = DecideSnapshotChange(op.op, tx.xid, tx.commit_lsn, o, n);
        if (d.action != RowAction::NeedState) break;
        if (d.need_old) ReadState(ChunkNo(*op.old_key));
        if (d.need_new) ReadState(ChunkNo(*op.new_key));
      }
      // Paired defects: flip one copied-chunk decision.
      const bool in_copy_somewhere = (o && o->kind == ChunkView::Kind::Copied && VisibleIn(o->snapshot, tx.xid)) ||
                                     (n && n->kind == ChunkView::Kind::Copied && VisibleIn(n->snapshot, tx.xid));
      if (defect == Defect::ApplyInCopy && in_copy_somewhere && d.action == RowAction::Drop) d.action = RowAction::Apply;
      if (defect == Defect::SkipAfterCopy && d.action == RowAction::Apply &&
          ((o && o->kind == ChunkView::Kind::Copied) || (n && n->kind == ChunkView::Kind::Copied)))
        d.action = RowAction::Drop;
      if (d.skip_old) chunks[static_cast<size_t>(ChunkNo(*op.old_key))].skips.insert(tx.xid);
      if (d.skip_new) chunks[static_cast<size_t>(ChunkNo(*op.new_key))].skips.insert(tx.xid);
      auto del = [&](int64_t k) {
        if (!target.erase(k)) Fail("delete of a missing row " + std::to_string(k) + " by xid " + std::to_string(tx.xid));
      };
      auto ins = [&](int64_t k, int v) {
        if (!target.emplace(k, v).second)
          Fail("insert of an existing row " + std::to_string(k) + " by xid " + std::to_string(tx.xid));
      };
      switch (d.action) {
        case RowAction::Apply:
          if (op.op == Op::Insert) ins(*op.new_key, op.value);
          if (op.op == Op::Delete) del(*op.old_key);
          if (op.op == Op::Update) {
            del(*op.old_key);
            ins(*op.new_key, op.value);
          }
          break;
        case RowAction::DeleteOldOnly: del(*op.old_key); break;
        case RowAction::InsertNewOnly: ins(*op.new_key, op.value); break;
        case RowAction::Drop:
        case RowAction::NeedState: break;
      }
    }
  }

  // The copy of one pending chunk, atomically; refused when its snapshot misses a skipped xid.
  void CopyChunk() {
    std::vector<int32_t> pending;
    for (size_t c = 0; c < chunks.size(); c++)
      if (!chunks[c].copied) pending.push_back(static_cast<int32_t>(c));
    if (pending.empty()) return;
    const int32_t c = pending[rng() % pending.size()];
    ChunkState& st = chunks[static_cast<size_t>(c)];
    // Step 2: transactions committed on the source but not yet visible, asked before the snapshot
    // is taken (here at the same instant): the snapshot must see them, for the stream may have
    // applied one before the table was registered and step 4 deletes what it wrote.
    if (defect != Defect::NoUnfinishedCheck)
      for (uint32_t x : committed_invisible)
        if (!not_in_clog.count(x)) return;  // pg_xact_status: committed, and not visible: later
    const SourceSnapshot s = TakeSnapshot();
    for (uint32_t x : st.skips)
      if (!VisibleIn(s, x) && defect != Defect::NoSkipCheck) return;  // too old for a transaction the applier left out: later
    const ChunkRange& r = ranges[static_cast<size_t>(c)];
    for (auto it = target.begin(); it != target.end();) {
      const bool in = (!r.lo || it->first >= *r.lo) && (!r.hi || it->first < *r.hi);
      it = in ? target.erase(it) : std::next(it);
    }
    for (int64_t k = 0; k < kKeys; k++)
      if (ChunkNo(k) == c)
        if (auto v = ReadIn(s, k)) target[k] = *v;
    st.copied = true;
    st.snapshot = s;
    st.snapshot_lsn = wal_lsn;  // pg_current_wal_insert_lsn() right after the snapshot
    st.skips.clear();
  }

  void Run() {
    for (int step = 0; step < 400 && violation.empty(); step++) {
      switch (rng() % 6) {
        case 0: StartTx(); break;
        case 1: CommitTx(); break;
        case 2: MakeVisible(); break;
        case 3:
        case 4: ApplyNext(); break;
        case 5:
          if (!registered && rng() % 6 == 0) {
            registered = true;
            // The copy starts a second after the registration: by then every commit the stream
            // could have applied is in the commit log (snapshot_command.cpp kCommitLogMargin).
            if (defect != Defect::NoUnfinishedCheck) not_in_clog.clear();
          } else if (registered && rng() % 4 == 0) {
            CopyChunk();
          }
          break;
      }
    }
    // Drain: everything commits and becomes visible, every chunk is copied, the log is applied.
    registered = true;
    while (!running.empty()) CommitTx();
    while (!committed_invisible.empty()) MakeVisible();
    for (int guard = 0; guard < 1000 && violation.empty(); guard++) {
      bool any = false;
      for (auto& st : chunks) any |= !st.copied;
      if (!any && applied == log.size()) break;
      CopyChunk();
      ApplyNext();
    }
    if (!violation.empty()) return;
    std::map<int64_t, int> source;
    for (auto& [k, vs] : history)
      if (!vs.empty() && vs.back().value) source[k] = *vs.back().value;
    if (source != target) {
      std::string what = "target differs from source at the end:";
      for (int64_t k = 0; k < kKeys; k++) {
        auto a = source.find(k);
        auto b = target.find(k);
        const std::string sv = a == source.end() ? "-" : std::to_string(a->second);
        const std::string tv = b == target.end() ? "-" : std::to_string(b->second);
        if (sv == tv) continue;
        what += " key " + std::to_string(k) + " (chunk " + std::to_string(ChunkNo(k)) + ", source " + sv + ", target " + tv + ", history";
        for (auto& v : history[k]) what += " " + std::to_string(v.xid) + "=" + (v.value ? std::to_string(*v.value) : "del");
        what += ")";
      }
      Fail(what);
    }
  }
};

}  // namespace

TEST_CASE("handoff_protocol_converges_exactly_under_random_interleavings", "[snapshot][property]") {
  for (uint64_t seed = 1; seed <= 3000; seed++) {
    Model m(seed, Defect::None);
    m.Run();
    INFO("seed " << seed << ": " << m.violation);
    REQUIRE(m.violation.empty());
  }
}

TEST_CASE("handoff_protocol_property_catches_both_paired_defects", "[snapshot][property]") {
  // NoSkipCheck: a copy that does not check its snapshot against the applier's skips loses a
  // transaction whose commit was logged (and skipped) before it became visible.
  // NoUnfinishedCheck: a copy that does not wait for transactions committed but not yet visible
  // deletes and never restores a row the stream applied before the table was registered (a
  // commit waiting for an absent synchronous standby).
  for (Defect defect : {Defect::ApplyInCopy, Defect::SkipAfterCopy, Defect::NoSkipCheck, Defect::NoUnfinishedCheck}) {
    int caught = 0;
    for (uint64_t seed = 1; seed <= 500; seed++) {
      Model m(seed, defect);
      m.Run();
      caught += !m.violation.empty();
    }
    INFO("defect " << static_cast<int>(defect));
    CHECK(caught > 0);
  }
}

TEST_CASE("a_table_is_registered_resumed_skipped_or_copied_again_only_when_allowed", "[snapshot]") {
  const RegistrationRequest run{"r2", false, false, "app", "/etc/app.toml"};
  const auto decide = [](const std::optional<RegisteredTable>& row, const RegistrationRequest& request) {
    return DecideRegistration("public.t", row, request);
  };
  CHECK(*decide(std::nullopt, run) == SnapshotRegistration::New);
  // The same run: resume what is unfinished; a finished table is skipped unless --force.
  CHECK(*decide(RegisteredTable{"r2", SnapshotState::Copying}, run) == SnapshotRegistration::Resume);
  CHECK(*decide(RegisteredTable{"r2", SnapshotState::FailedRecoverable}, run) == SnapshotRegistration::Resume);
  CHECK(*decide(RegisteredTable{"r2", SnapshotState::HandoffReady}, run) == SnapshotRegistration::Skip);
  RegistrationRequest forced = run;
  forced.force = true;
  CHECK(*decide(RegisteredTable{"r2", SnapshotState::HandoffReady}, forced) == SnapshotRegistration::Reregister);
  // Finished by an earlier run: skipped by a new run, refused under a named run without --force.
  CHECK(*decide(RegisteredTable{"r1", SnapshotState::HandoffReady}, run) == SnapshotRegistration::Skip);
  RegistrationRequest named = run;
  named.run_id_named = true;
  auto refused = decide(RegisteredTable{"r1", SnapshotState::HandoffReady}, named);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("rerun with --force") != std::string::npos);
  CHECK(*decide(RegisteredTable{"r1", SnapshotState::HandoffReady}, forced) == SnapshotRegistration::Reregister);
  // Another run's unfinished copy: resume that run, or --force.
  auto other = decide(RegisteredTable{"r1", SnapshotState::Copying}, run);
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().message.find("trellara snapshot --config /etc/app.toml --run-id r1") != std::string::npos);
  CHECK(*decide(RegisteredTable{"r1", SnapshotState::Copying}, forced) == SnapshotRegistration::Reregister);
  // Withheld by a DDL: only a forced copy under the new schema.
  auto withheld = decide(RegisteredTable{"ddl@0/16B3748", SnapshotState::FailedRecoverable}, run);
  REQUIRE_FALSE(withheld.ok());
  CHECK(withheld.error().message.find("withheld from its handoff by the DDL at commit 0/16B3748") != std::string::npos);
  CHECK(withheld.error().message.find("--table public.t --force") != std::string::npos);
  CHECK(*decide(RegisteredTable{"ddl@0/16B3748", SnapshotState::FailedRecoverable}, forced) ==
        SnapshotRegistration::Reregister);
}

}  // namespace unit_snapshot_test
