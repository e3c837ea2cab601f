// lake_views_test.cpp — the current-state and SCD2 history views' rules
// (core/include/trellara/lake/views.h): versions per (source, key), key changes, deletes,
// truncate, unchanged TOASTed values, changes inside one transaction, and refused inputs.
#include <catch2/catch.hpp>

#include "trellara/lake/views.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_lake_views_test {

using namespace trellara::lake;

namespace {

const std::vector<std::string> kColumns = {"id", "note", "amount"};

ViewChange Change(const std::string& source, uint64_t lsn, uint32_t position, ViewOp op, ViewCells values) {
  ViewChange c;
  c.source = source;
  c.commit_lsn = lsn;
  c.xid = static_cast<uint32_t>(lsn);  // one transaction per LSN in these tests
  c.position = position;
  c.commit_time_us = lsn * 1000;
  c.op = op;
  c.columns = kColumns;
  c.values = std::move(values);
  c.key_columns = {"id"};
  return c;
}
ViewChange Insert(const std::string& s, uint64_t lsn, const std::string& id, const std::string& note, uint32_t pos = 0) {
  return Change(s, lsn, pos, ViewOp::kInsert, {id, note, "1.00"});
}
ViewChange Update(const std::string& s, uint64_t lsn, const std::string& id, const std::string& note, uint32_t pos = 0) {
  return Change(s, lsn, pos, ViewOp::kUpdate, {id, note, "2.00"});
}
ViewChange Delete(const std::string& s, uint64_t lsn, const std::string& id, uint32_t pos = 0) {
  return Change(s, lsn, pos, ViewOp::kDelete, {id, std::nullopt, std::nullopt});
}
ViewChange Truncate(const std::string& s, uint64_t lsn) {
  ViewChange c = Change(s, lsn, 0, ViewOp::kTruncate, {std::nullopt, std::nullopt, std::nullopt});
  return c;
}

TableViews Build(std::vector<ViewChange> changes) {
  auto v = BuildTableViews("public__items", kColumns, std::move(changes));
  REQUIRE(v.ok());
  return std::move(v.value());
}

std::string Id(const ViewVersion& v) { return v.key.at(0).value_or("NULL"); }

}  // namespace

TEST_CASE("views: insert, update and delete give one current row per key and its versions", "[lake]") {
  const TableViews v = Build({Insert("s1", 10, "1", "a"), Insert("s1", 10, "2", "b", 1), Update("s1", 20, "1", "a2"),
                              Delete("s1", 30, "2")});
  const auto current = v.Current();
  REQUIRE(current.size() == 1);
  CHECK(Id(current[0]) == "1");
  CHECK(current[0].values[1] == "a2");
  CHECK(current[0].valid_from_lsn == 20);
  REQUIRE(v.history.size() == 3);
  // (s1, 1) from 10 to 20, (s1, 1) from 20, (s1, 2) from 10 to 30.
  CHECK((Id(v.history[0]) == "1" && v.history[0].valid_from_lsn == 10 && v.history[0].valid_to_lsn == 20u &&
         v.history[0].valid_to_time_us == 20000u && v.history[0].values[1] == "a"));
  CHECK((Id(v.history[1]) == "1" && v.history[1].is_current()));
  CHECK((Id(v.history[2]) == "2" && v.history[2].valid_to_lsn == 30u && !v.history[2].is_current()));
  CHECK(v.unmatched == 0);
  CHECK(v.key_columns == std::vector<std::string>{"id"});
}

TEST_CASE("views: changes are applied in (source, LSN, xid, position) order whatever order they come in", "[lake]") {
  const TableViews a = Build({Insert("s1", 10, "1", "a"), Update("s1", 20, "1", "b"), Update("s1", 30, "1", "c")});
  const TableViews b = Build({Update("s1", 30, "1", "c"), Insert("s1", 10, "1", "a"), Update("s1", 20, "1", "b")});
  CHECK(a.history == b.history);
  REQUIRE(a.Current().size() == 1);
  CHECK(a.Current()[0].values[1] == "c");
}

TEST_CASE("views: stores never share rows: the same key of two sources is two rows", "[lake]") {
  const TableViews v = Build({Insert("s2", 10, "1", "two"), Insert("s1", 50, "1", "one"), Delete("s2", 60, "1")});
  const auto current = v.Current();
  REQUIRE(current.size() == 1);
  CHECK(current[0].source == "s1");
  REQUIRE(v.history.size() == 2);
  CHECK(v.history[0].source == "s1");
  CHECK((v.history[1].source == "s2" && v.history[1].valid_to_lsn == 60u));
}

TEST_CASE("views: an update that changes the key ends the old key's version and begins the new key's", "[lake]") {
  ViewChange moved = Update("s1", 20, "7", "moved");
  moved.old_key = ViewCells{"1"};
  const TableViews v = Build({Insert("s1", 10, "1", "a"), moved});
  const auto current = v.Current();
  REQUIRE(current.size() == 1);
  CHECK(Id(current[0]) == "7");
  REQUIRE(v.history.size() == 2);
  CHECK((Id(v.history[0]) == "1" && v.history[0].valid_to_lsn == 20u));
  CHECK((Id(v.history[1]) == "7" && v.history[1].valid_from_lsn == 20 && v.history[1].is_current()));
  CHECK(v.unmatched == 0);
}

TEST_CASE("views: an old key equal to the new one is an ordinary update", "[lake]") {
  ViewChange same = Update("s1", 20, "1", "b");
  same.old_key = ViewCells{"1"};
  const TableViews v = Build({Insert("s1", 10, "1", "a"), same});
  REQUIRE(v.history.size() == 2);
  CHECK(v.Current().size() == 1);
}

TEST_CASE("views: truncate ends every version of its source only", "[lake]") {
  const TableViews v = Build({Insert("s1", 10, "1", "a"), Insert("s1", 10, "2", "b", 1), Insert("s2", 10, "1", "c"),
                              Truncate("s1", 40), Insert("s1", 50, "1", "again")});
  const auto current = v.Current();
  REQUIRE(current.size() == 2);
  CHECK((current[0].source == "s1" && current[0].values[1] == "again"));
  CHECK(current[1].source == "s2");
  int ended_by_truncate = 0;
  for (const auto& h : v.history)
    if (h.valid_to_lsn == 40u) ended_by_truncate++;
  CHECK(ended_by_truncate == 2);
}

TEST_CASE("views: unchanged TOASTed columns keep the previous version's value", "[lake]") {
  ViewChange toast = Change("s1", 20, 0, ViewOp::kUpdate, {"1", std::nullopt, "9.00"});
  toast.unchanged = {"note"};
  const TableViews v = Build({Insert("s1", 10, "1", "long text"), toast});
  const auto current = v.Current();
  REQUIRE(current.size() == 1);
  CHECK(current[0].values[1] == "long text");
  CHECK(current[0].values[2] == "9.00");
  CHECK(v.unknown_unchanged == 0);
  SECTION("across a key change, from the old key's version") {
    ViewChange moved = Change("s1", 20, 0, ViewOp::kUpdate, {"2", std::nullopt, "9.00"});
    moved.unchanged = {"note"};
    moved.old_key = ViewCells{"1"};
    const TableViews w = Build({Insert("s1", 10, "1", "long text"), moved});
    REQUIRE(w.Current().size() == 1);
    CHECK(w.Current()[0].values[1] == "long text");
  }
  SECTION("with no previous version: null, and counted") {
    const TableViews w = Build({toast});
    CHECK(w.Current()[0].values[1] == std::nullopt);
    CHECK(w.unknown_unchanged == 1);
    CHECK(w.unmatched == 1);
  }
}

TEST_CASE("views: changes inside one transaction make one version", "[lake]") {
  SECTION("insert then update: one version with the last values") {
    const TableViews v = Build({Insert("s1", 10, "1", "a", 0), Update("s1", 10, "1", "b", 1)});
    REQUIRE(v.history.size() == 1);
    CHECK(v.history[0].values[1] == "b");
  }
  SECTION("insert then delete: no version at all") {
    const TableViews v = Build({Insert("s1", 10, "1", "a", 0), Delete("s1", 10, "1", 1)});
    CHECK(v.history.empty());
    CHECK(v.Current().empty());
  }
  SECTION("delete then insert of an older row: the old version ends, a new one begins") {
    const TableViews v = Build({Insert("s1", 5, "1", "a"), Delete("s1", 10, "1", 0), Insert("s1", 10, "1", "b", 1)});
    REQUIRE(v.history.size() == 2);
    CHECK((v.history[0].valid_to_lsn == 10u && v.history[0].values[1] == "a"));
    CHECK((v.history[1].is_current() && v.history[1].values[1] == "b"));
  }
}

TEST_CASE("views: updates and deletes of rows the lake never saw inserted are counted, not guessed", "[lake]") {
  const TableViews v = Build({Update("s1", 10, "1", "seen first by an update"), Delete("s1", 20, "2")});
  CHECK(v.unmatched == 2);
  REQUIRE(v.Current().size() == 1);
  CHECK(v.Current()[0].values[1] == "seen first by an update");
}

TEST_CASE("views: no key, other columns or another key are refused naming the table", "[lake]") {
  ViewChange keyless = Insert("s1", 10, "1", "a");
  keyless.key_columns.clear();
  auto a = BuildTableViews("public__items", kColumns, {keyless});
  REQUIRE(!a.ok());
  CHECK(a.error().message.find("public__items") != std::string::npos);
  CHECK(a.error().message.find("no key column") != std::string::npos);
  ViewChange wider = Insert("s1", 10, "1", "a");
  wider.columns.push_back("extra");
  wider.values.push_back("x");
  CHECK(!BuildTableViews("public__items", kColumns, {wider}).ok());
  ViewChange rekeyed = Insert("s1", 20, "2", "b");
  rekeyed.key_columns = {"note"};
  CHECK(!BuildTableViews("public__items", kColumns, {Insert("s1", 10, "1", "a"), rekeyed}).ok());
  CHECK(!ParseViewOp("upsert").ok());
  CHECK(ParseViewOp("truncate").value() == ViewOp::kTruncate);
}

}  // namespace unit_lake_views_test
