// relation_drift_test.cpp — the drift verdict of one relation, one change and a whole transaction
// (relation_drift.h): Known, FirstSight and Drift; the transaction's DDL moving what the flow knows;
// replay-ready; the fast path's ShapesKnown.
#include <catch2/catch.hpp>

#include <map>

#include "trellara/apply/relation_drift.h"
#include "trellara/record/checksum.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_relation_drift_test {

using namespace trellara;

namespace {

struct Col {
  std::string name;
  std::string type;
  bool key = false;
};

RelationInfo Captured(uint32_t oid, const std::string& name, const std::vector<Col>& cols) {
  RelationInfo r;
  r.oid = oid;
  r.schema = "public";
  r.name = name;
  for (const auto& c : cols) r.columns.push_back(Column{c.name, 0, c.type, -1, c.key});
  r.fingerprint = ComputeFingerprint(r);
  return r;
}
RelationInfo Captured(const std::string& schema, const std::string& name, const std::vector<Col>& cols) {
  RelationInfo r = Captured(16384, name, cols);
  r.schema = schema;
  r.fingerprint = ComputeFingerprint(r);
  return r;
}

KnownRelation KnownAs(const RelationInfo& r) { return KnownRelation{r.oid, r.schema, r.name, r.fingerprint}; }

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

Change Row(Op op, uint32_t oid) {
  Change c;
  c.op = op;
  c.relation_oid = oid;
  return c;
}

Change DdlOf(uint32_t relation_after, uint32_t ddl_oid) {
  Change c;
  c.op = Op::Ddl;
  c.relation_oid = relation_after;
  c.ddl.relation_oid = ddl_oid;
  return c;
}

// What the flow knows, as a map the test fills.
KnownLookup Flow(const std::map<uint32_t, KnownRelation>& rows) {
  return [rows](uint32_t oid) -> std::optional<KnownRelation> {
    auto found = rows.find(oid);
    if (found == rows.end()) return std::nullopt;
    return found->second;
  };
}

}  // namespace

TEST_CASE("drift_verdicts_known_first_sight_drift_and_replay_ready", "[ddl]") {
  RelationInfo now = Captured("public", "orders", {{"id", "bigint", true}, {"note", "text"}});
  RelationInfo before = Captured("public", "orders", {{"id", "bigint", true}});
  KnownRelation known{now.oid, "public", "orders", now.fingerprint};
  CHECK(CheckKnownRelation(known, now, false) == RelationVerdict::Known);
  CHECK(CheckKnownRelation(std::nullopt, now, false) == RelationVerdict::FirstSight);
  KnownRelation stale{now.oid, "public", "orders", before.fingerprint};
  CHECK(CheckKnownRelation(stale, now, false) == RelationVerdict::Drift);
  CHECK(CheckKnownRelation(stale, now, true) == RelationVerdict::FirstSight);

  QuarantineCause cause = DriftCause(stale, now);
  CHECK(cause.reason == QuarantineReason::SchemaDrift);
  CHECK(cause.relation == "public.orders");
  CHECK(Contains(cause.detail, HexEncode(now.fingerprint).substr(0, 12)));
  CHECK(Contains(cause.detail, HexEncode(before.fingerprint).substr(0, 12)));
  CHECK_FALSE(Contains(cause.detail, HexEncode(now.fingerprint).substr(0, 13)));
  CHECK(Contains(cause.detail, "DDL ran while trellara's event trigger was disabled"));
  CHECK(Contains(cause.detail, "trellara repair-plan --config <flow.toml>"));
}

TEST_CASE("a_change_names_its_relation_and_a_truncate_every_truncated_one", "[drift]") {
  CHECK(NamedRelations(Row(Op::Insert, 7)) == std::vector<uint32_t>{7});
  CHECK(NamedRelations(Row(Op::Delete, 7)) == std::vector<uint32_t>{7});
  Change truncate;
  truncate.op = Op::Truncate;
  truncate.truncate.relation_oids = {7, 8};
  CHECK(NamedRelations(truncate) == std::vector<uint32_t>{7, 8});
  CHECK(NamedRelations(DdlOf(7, 7)).empty());
  const std::vector<RelationInfo> relations{Captured(7, "a", {{"id", "int", true}})};
  CHECK(RelationOf(relations, 7) == &relations[0]);
  CHECK(RelationOf(relations, 8) == nullptr);
}

TEST_CASE("a_change_reports_drift_first_and_otherwise_the_first_sights_in_order", "[drift]") {
  RelationInfo a = Captured(7, "a", {{"id", "int", true}});
  RelationInfo b = Captured(8, "b", {{"id", "int", true}});
  RelationInfo b_before = Captured(8, "b", {{"id", "int", true}, {"gone", "text"}});
  const std::vector<RelationInfo> relations{a, b};
  Change truncate;
  truncate.op = Op::Truncate;
  truncate.truncate.relation_oids = {7, 8, 9};  // 9: not described by the record (the planner names it)

  ChangeDrift none_known = DriftOfChange(truncate, relations, Flow({}), false);
  CHECK_FALSE(none_known.cause);
  REQUIRE(none_known.first_sights.size() == 2);
  CHECK(none_known.first_sights[0]->oid == 7);
  CHECK(none_known.first_sights[1]->oid == 8);

  ChangeDrift known = DriftOfChange(truncate, relations, Flow({{7, KnownAs(a)}, {8, KnownAs(b)}}), false);
  CHECK_FALSE(known.cause);
  CHECK(known.first_sights.empty());

  // b drifted: the change is refused whatever else it names, and nothing is to be recorded.
  ChangeDrift drifted = DriftOfChange(truncate, relations, Flow({{8, KnownAs(b_before)}}), false);
  REQUIRE(drifted.cause);
  CHECK(drifted.cause->reason == QuarantineReason::SchemaDrift);
  CHECK(drifted.cause->relation == "public.b");
  CHECK(drifted.cause->operation == OpName(Op::Truncate));
  CHECK(drifted.first_sights.empty());

  // Replayed after the operator's review: a difference is a first sight (the catalog decides).
  ChangeDrift replayed = DriftOfChange(truncate, relations, Flow({{8, KnownAs(b_before)}}), true);
  CHECK_FALSE(replayed.cause);
  CHECK(replayed.first_sights.size() == 2);
}

TEST_CASE("a_transaction_is_checked_whole_with_its_ddl_moving_what_the_flow_knows", "[drift]") {
  RelationInfo before = Captured(7, "orders", {{"id", "int", true}});
  RelationInfo after = Captured(7, "orders", {{"id", "int", true}, {"note", "text"}});
  const auto flow = Flow({{7, KnownAs(before)}});
  Change insert = Row(Op::Insert, 7);
  Change alter = DdlOf(7, 7);

  // The record carries the definition after the ALTER: the insert before it drifts, after it not.
  const std::vector<RelationInfo> relations{after};
  const std::vector<const Change*> alter_then_insert{&alter, &insert};
  CHECK_FALSE(DriftInTransaction(alter_then_insert, relations, flow, false));
  const std::vector<const Change*> insert_alone{&insert};
  auto cause = DriftInTransaction(insert_alone, relations, flow, false);
  REQUIRE(cause);
  CHECK(cause->reason == QuarantineReason::SchemaDrift);
  CHECK(cause->operation == OpName(Op::Insert));
  CHECK_FALSE(DriftInTransaction(insert_alone, relations, flow, true));  // replay-ready

  // DROP TABLE (no captured definition after it) forgets the relation: a later row is a first
  // sight, not a match of the old definition.
  Change drop = DdlOf(0, 7);
  const std::vector<RelationInfo> old_only{before};
  const std::vector<const Change*> drop_then_insert{&drop, &insert};
  CHECK_FALSE(DriftInTransaction(drop_then_insert, old_only, Flow({{7, KnownAs(after)}}), false));
  // ... where without the DROP the same row drifts.
  CHECK(DriftInTransaction(insert_alone, old_only, Flow({{7, KnownAs(after)}}), false));
}

TEST_CASE("only_described_known_row_changes_take_the_fast_path", "[drift]") {
  RelationInfo a = Captured(7, "a", {{"id", "int", true}});
  RelationInfo a_other = Captured(7, "a", {{"id", "bigint", true}});
  const std::vector<RelationInfo> relations{a};
  CHECK(ShapesKnown(Row(Op::Update, 7), relations, Flow({{7, KnownAs(a)}})));
  CHECK_FALSE(ShapesKnown(Row(Op::Update, 7), relations, Flow({})));                    // first sight
  CHECK_FALSE(ShapesKnown(Row(Op::Update, 7), relations, Flow({{7, KnownAs(a_other)}})));  // drift
  CHECK_FALSE(ShapesKnown(Row(Op::Update, 8), relations, Flow({{7, KnownAs(a)}})));     // not described
  CHECK_FALSE(ShapesKnown(DdlOf(7, 7), relations, Flow({{7, KnownAs(a)}})));            // DDL goes alone
}

}  // namespace unit_relation_drift_test
