// snapshot_apply_test.cpp — the applier's side of the handoff, pure (core snapshot_apply.h): the
// chunk key of each side of a change (old key image, full old image, new tuple, an UPDATE without
// an old image), the halves of a key-moving UPDATE (the DELETE of the old row, the INSERT of the
// new row refused when a value was not sent), the range DELETE of a TRUNCATE per chunk, and when
// the applier stops at a hold. Never needs a database.
#include <catch2/catch.hpp>

#include "trellara/record/checksum.h"
#include "trellara/apply/snapshot_apply.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_snapshot_apply_test {

using namespace trellara;

namespace {

Value T(std::string s) { return Value::Text(std::move(s)); }

// public.items (tenant int, id bigint, note text): replica identity key (tenant, id); chunked on
// `id`, which is the second key column (so the old key image holds it at position 1).
RelationInfo Items() {
  RelationInfo r;
  r.oid = 30001;
  r.schema = "public";
  r.name = "items";
  r.columns = {{"tenant", 23, "integer", -1, true}, {"note", 25, "text", -1, false}, {"id", 20, "bigint", -1, true}};
  r.fingerprint = ComputeFingerprint(r);
  return r;
}

Change Update(std::vector<Value> new_tuple, OldImage image = OldImage::None, std::vector<Value> old_tuple = {}) {
  Change c;
  c.op = Op::Update;
  c.relation_oid = 30001;
  c.new_tuple = std::move(new_tuple);
  c.old_image = image;
  c.old_tuple = std::move(old_tuple);
  return c;
}

int64_t MustKey(const Change& c, RowSide side) {
  auto index = KeyColumnIndex(Items(), "id");
  REQUIRE(index.ok());
  auto key = ChunkKeyOf(c, Items(), *index, side);
  INFO((key.ok() ? std::string() : key.error().message));
  REQUIRE(key.ok());
  return *key;
}

std::string KeyError(const Change& c, RowSide side) {
  auto key = ChunkKeyOf(c, Items(), 2, side);
  REQUIRE_FALSE(key.ok());
  return key.error().message;
}

}  // namespace

TEST_CASE("chunk_key_column_is_found_by_name_or_named_missing", "[snapshot_apply]") {
  CHECK(KeyColumnIndex(Items(), "id").value() == 2);
  auto missing = KeyColumnIndex(Items(), "item_id");
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.error().message, Catch::Contains("public.items has no column item_id"));
  CHECK_THAT(missing.error().message, Catch::Contains("reseed"));
}

TEST_CASE("chunk_key_of_insert_is_the_new_tuple_value", "[snapshot_apply]") {
  Change insert;
  insert.op = Op::Insert;
  insert.relation_oid = 30001;
  insert.new_tuple = {T("7"), T("n"), T("-9223372036854775808")};
  CHECK(MustKey(insert, RowSide::New) == INT64_MIN);
  CHECK_THAT(KeyError(insert, RowSide::Old), Catch::Contains("has no old row"));
}

TEST_CASE("chunk_key_of_old_row_comes_from_the_key_image_position_among_key_columns", "[snapshot_apply]") {
  // The old key image holds the key columns in column order: (tenant, id) -> id is at position 1.
  const Change moved = Update({T("7"), T("n"), T("200")}, OldImage::Key, {T("7"), T("100")});
  CHECK(MustKey(moved, RowSide::Old) == 100);
  CHECK(MustKey(moved, RowSide::New) == 200);
}

TEST_CASE("chunk_key_of_old_row_from_full_image_and_from_new_tuple_without_image", "[snapshot_apply]") {
  const Change full = Update({T("7"), T("n"), T("200")}, OldImage::Full, {T("7"), T("o"), T("100")});
  CHECK(MustKey(full, RowSide::Old) == 100);
  // No old image: the key did not change, the old key is the new one.
  const Change same = Update({T("7"), T("n"), T("200")});
  CHECK(MustKey(same, RowSide::Old) == 200);
  Change del;
  del.op = Op::Delete;
  del.relation_oid = 30001;
  del.old_image = OldImage::Key;
  del.old_tuple = {T("7"), T("55")};
  CHECK(MustKey(del, RowSide::Old) == 55);
  del.old_image = OldImage::None;
  del.old_tuple.clear();
  CHECK_THAT(KeyError(del, RowSide::Old), Catch::Contains("no old row image"));
}

TEST_CASE("chunk_key_that_is_not_an_integer_is_an_error_naming_column_and_value", "[snapshot_apply]") {
  CHECK_THAT(KeyError(Update({T("7"), T("n"), T("12abc")}), RowSide::New),
             Catch::Contains("new value of chunk key column id is \"12abc\", not a 64-bit integer"));
  CHECK_THAT(KeyError(Update({T("7"), T("n"), T("99999999999999999999")}), RowSide::New),
             Catch::Contains("not a 64-bit integer"));
  CHECK_THAT(KeyError(Update({T("7"), T("n"), Value::Null()}), RowSide::New), Catch::Contains("is NULL"));
  CHECK_THAT(KeyError(Update({T("7"), T("n"), T("")}), RowSide::New), Catch::Contains("is empty"));
  CHECK_THAT(KeyError(Update({T("7"), T("n"), Value::UnchangedToast()}), RowSide::New),
             Catch::Contains("unchanged-TOAST"));
  CHECK_THAT(KeyError(Update({T("7"), T("n")}), RowSide::New), Catch::Contains("2 values for 3 columns"));
}

TEST_CASE("chunk_key_not_in_the_replica_identity_cannot_be_read_from_an_old_key_image", "[snapshot_apply]") {
  RelationInfo r = Items();
  auto index = KeyColumnIndex(r, "note");
  REQUIRE(index.ok());
  const Change moved = Update({T("7"), T("5"), T("200")}, OldImage::Key, {T("7"), T("100")});
  auto key = ChunkKeyOf(moved, r, *index, RowSide::Old);
  REQUIRE_FALSE(key.ok());
  CHECK_THAT(key.error().message, Catch::Contains("not a replica identity column"));
}

TEST_CASE("old_row_delete_of_a_key_moving_update_uses_its_old_image", "[snapshot_apply]") {
  const Change moved = Update({T("7"), T("n"), T("200")}, OldImage::Key, {T("7"), T("100")});
  auto del = OldRowDelete(moved, Items());
  REQUIRE(del.ok());
  CHECK(del->op == Op::Delete);
  CHECK(del->relation_oid == 30001);
  CHECK(del->old_image == OldImage::Key);
  CHECK(del->old_tuple == std::vector<Value>{T("7"), T("100")});
  auto plan = PlanChange(*del, {Items()});
  REQUIRE(plan.ok());
  CHECK(plan->sql == "DELETE FROM ONLY \"public\".\"items\" WHERE \"tenant\" = $1 AND \"id\" = $2");
  CHECK(plan->params == std::vector<std::optional<std::string>>{"7", "100"});

  // Without an old image the key columns of the new tuple are the old key.
  auto same = OldRowDelete(Update({T("7"), T("n"), T("200")}), Items());
  REQUIRE(same.ok());
  CHECK(same->old_image == OldImage::Key);
  CHECK(same->old_tuple == std::vector<Value>{T("7"), T("200")});
}

TEST_CASE("new_row_insert_of_a_key_moving_update_needs_every_value", "[snapshot_apply]") {
  const Change moved = Update({T("7"), T("n"), T("200")}, OldImage::Key, {T("7"), T("100")});
  auto insert = NewRowInsert(moved, Items());
  REQUIRE(insert.ok());
  CHECK(insert->op == Op::Insert);
  CHECK(insert->new_tuple == moved.new_tuple);
  CHECK(insert->old_image == OldImage::None);

  const Change toasted = Update({T("7"), Value::UnchangedToast(), T("200")}, OldImage::Key, {T("7"), T("100")});
  auto refused = NewRowInsert(toasted, Items());
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("column note is an unchanged TOASTed value"));
  CHECK_THAT(refused.error().message, Catch::Contains("public.items"));

  Change del;
  del.op = Op::Delete;
  CHECK_FALSE(NewRowInsert(del, Items()).ok());
  CHECK_FALSE(OldRowDelete(del, Items()).ok());
}

TEST_CASE("range_delete_of_a_chunk_binds_its_bounds_and_leaves_out_unbounded_sides", "[snapshot_apply]") {
  auto middle = PlanRangeDelete(Items(), "id", ChunkRange{3, 100, 200});
  REQUIRE(middle.ok());
  CHECK(middle->sql == "DELETE FROM ONLY \"public\".\"items\" WHERE \"id\" >= $1 AND \"id\" < $2");
  CHECK(middle->params == std::vector<std::optional<std::string>>{"100", "200"});
  CHECK(middle->expect == RowExpectation::Any);
  CHECK(middle->kind == PlanKind::Delete);
  CHECK(RowCheckedSql(*middle) == middle->sql);  // any number of rows

  auto first = PlanRangeDelete(Items(), "id", ChunkRange{0, std::nullopt, 100});
  REQUIRE(first.ok());
  CHECK(first->sql == "DELETE FROM ONLY \"public\".\"items\" WHERE \"id\" < $1");
  auto last = PlanRangeDelete(Items(), "id", ChunkRange{9, 900, std::nullopt});
  REQUIRE(last.ok());
  CHECK(last->sql == "DELETE FROM ONLY \"public\".\"items\" WHERE \"id\" >= $1");
  auto whole = PlanRangeDelete(Items(), "", ChunkRange{0, std::nullopt, std::nullopt});
  REQUIRE(whole.ok());
  CHECK(whole->sql == "DELETE FROM ONLY \"public\".\"items\"");
  CHECK(whole->params.empty());

  // Same shape, same statement key (prepared once); different shapes differ.
  CHECK(PlanRangeDelete(Items(), "id", ChunkRange{4, 200, 300})->statement_key == middle->statement_key);
  CHECK(first->statement_key != middle->statement_key);
  CHECK(last->statement_key != first->statement_key);
  // A hostile key column name is quoted, never spliced.
  auto hostile = PlanRangeDelete(Items(), "id\" OR 1=1 --", ChunkRange{0, 1, 2});
  REQUIRE(hostile.ok());
  CHECK(hostile->sql == "DELETE FROM ONLY \"public\".\"items\" WHERE \"id\"\" OR 1=1 --\" >= $1 AND \"id\"\" OR 1=1 --\" < $2");
}

TEST_CASE("hold_is_reached_before_the_first_transaction_after_its_lsn", "[snapshot_apply][hold]") {
  HoldFacts f;
  f.hold_lsn = 0x500;
  f.applied_lsn = 0x400;
  f.drained = true;
  f.next_commit_lsn = 0x500;
  CHECK(DecideHold(f) == HoldStep::NotYet);  // commit LSN == hold LSN: in the hold's snapshot, apply it
  f.next_commit_lsn = 0x501;
  CHECK(DecideHold(f) == HoldStep::Reach);
  f.drained = false;  // something before it is still in flight
  CHECK(DecideHold(f) == HoldStep::NotYet);
}

TEST_CASE("hold_is_reached_by_an_idle_applier_once_the_log_covers_its_lsn", "[snapshot_apply][hold]") {
  HoldFacts f;
  f.hold_lsn = 0x500;
  f.applied_lsn = 0x300;
  f.drained = true;
  f.covered_lsn = 0x4FF;
  CHECK(DecideHold(f) == HoldStep::NotYet);
  f.covered_lsn = 0x500;  // a progress marker (or a transaction end) at the hold's LSN
  CHECK(DecideHold(f) == HoldStep::Reach);
  f.covered_lsn = 0x9000;
  CHECK(DecideHold(f) == HoldStep::Reach);
}

TEST_CASE("hold_is_passed_when_the_target_already_holds_a_later_transaction", "[snapshot_apply][hold]") {
  HoldFacts f;
  f.hold_lsn = 0x500;
  f.applied_lsn = 0x501;
  f.drained = false;
  CHECK(DecideHold(f) == HoldStep::Passed);
  f.applied_lsn = 0x500;  // exactly at the hold: not passed
  f.drained = true;
  f.next_commit_lsn = 0x600;
  CHECK(DecideHold(f) == HoldStep::Reach);
}

// A TRUNCATE naming a partitioned table whose partitions are under snapshot (the divergence
// fuzzer's seed 29: a TRUNCATE of the root before the copy emptied the copied partitions).
TEST_CASE("truncate_of_a_partitioned_table_keeps_the_partition_copies_that_hold_it", "[snapshot_apply]") {
  using H = HalfDecision;
  CHECK(DecideRootTruncate({H::Apply, H::Apply}) == RootTruncate::TruncateWhole);
  CHECK(DecideRootTruncate({H::InCopy, H::Skip, H::InCopy}) == RootTruncate::DeleteOutsideCopied);
  CHECK(DecideRootTruncate({H::InCopy, H::Apply}) == RootTruncate::Mixed);
  RelationInfo root = Items();
  root.schema = "app";
  root.name = "parts";
  auto plan = PlanDeleteOutsidePartitions(root, {"app.parts_p0", "Odd \"s\".p 1"});
  REQUIRE(plan.ok());
  CHECK(plan->sql == "DELETE FROM \"app\".\"parts\" WHERE tableoid <> ALL ($1::pg_catalog.regclass[])");
  CHECK(plan->params == std::vector<std::optional<std::string>>{
                            "{\"\\\"app\\\".\\\"parts_p0\\\"\",\"\\\"Odd \\\"\\\"s\\\"\\\"\\\".\\\"p 1\\\"\"}"});
  CHECK(plan->expect == RowExpectation::Any);
  CHECK_FALSE(PlanDeleteOutsidePartitions(root, {}).ok());
}

}  // namespace unit_snapshot_apply_test
