// apply_plan_test.cpp — the planner: SQL text with $n placeholders and bound values for every
// op, key predicates from the old key image, unchanged-TOAST columns omitted, REPLICA IDENTITY
// FULL matching, identity errors with their remedy, hostile identifiers and values, and statement
// keys that are equal exactly when the SQL text is. Never needs a database.
#include <catch2/catch.hpp>

#include <algorithm>

#include "samples.h"
#include "trellara/apply/apply_plan.h"
#include "trellara/record/checksum.h"
#include "trellara/base/fault.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_apply_plan_test {

using namespace trellara;

namespace {

using Params = std::vector<std::optional<std::string>>;

RelationInfo Orders() { return testing::SampleOrders(); }  // id bigint key, note, amount, doc

RelationInfo Rel(std::string schema, std::string name, std::vector<Column> columns,
                 ReplicaIdentity ri = ReplicaIdentity::Default) {
  RelationInfo r;
  r.oid = 20000;
  r.schema = std::move(schema);
  r.name = std::move(name);
  r.columns = std::move(columns);
  r.replica_identity = ri;
  r.fingerprint = ComputeFingerprint(r);
  return r;
}

Change Row(Op op, uint32_t oid, std::vector<Value> new_tuple, OldImage image = OldImage::None,
           std::vector<Value> old_tuple = {}) {
  Change c;
  c.op = op;
  c.relation_oid = oid;
  c.new_tuple = std::move(new_tuple);
  c.old_image = image;
  c.old_tuple = std::move(old_tuple);
  return c;
}

Value T(std::string s) { return Value::Text(std::move(s)); }

// One PlanCache across every test of this file: each plan is also made through it, cold and warm,
// and must be identical to the plan made without it.
PlanCache& SharedCache() {
  static PlanCache cache;
  return cache;
}

void CheckSamePlan(const ChangePlan& a, const ChangePlan& b) {
  CHECK(a.kind == b.kind);
  CHECK(a.statement_key == b.statement_key);
  CHECK(a.sql == b.sql);
  CHECK(a.params == b.params);
  CHECK(a.param_columns == b.param_columns);
  CHECK(a.expect == b.expect);
  CHECK(a.match == b.match);
  CHECK(a.match_description == b.match_description);
  CHECK(a.relation_display == b.relation_display);
  CHECK(a.not_applied_reason == b.not_applied_reason);
  CHECK(a.target_relation == b.target_relation);
  CHECK(a.row_key == b.row_key);
}

ChangePlan MustPlan(const Change& c, const std::vector<RelationInfo>& rels) {
  auto plan = PlanChange(c, rels);
  INFO((plan.ok() ? std::string() : plan.error().message));
  REQUIRE(plan.ok());
  for (int pass = 0; pass < 2; pass++) {
    auto cached = PlanChange(c, rels, SharedCache());
    REQUIRE(cached.ok());
    CheckSamePlan(*plan, *cached);
  }
  return *plan;
}

std::string MustFail(const Change& c, const std::vector<RelationInfo>& rels) {
  auto plan = PlanChange(c, rels);
  REQUIRE_FALSE(plan.ok());
  for (int pass = 0; pass < 2; pass++) {
    auto cached = PlanChange(c, rels, SharedCache());
    REQUIRE_FALSE(cached.ok());
    CHECK(cached.error().message == plan.error().message);
  }
  return plan.error().message;
}

}  // namespace

TEST_CASE("plans_insert_listing_every_column_with_bound_values", "[plan]") {
  auto p = MustPlan(Row(Op::Insert, 16384, {T("42"), T("it's; DROP TABLE x --"), T("NaN"), Value::Null()}), {Orders()});
  CHECK(p.kind == PlanKind::Insert);
  CHECK(p.sql ==
        "INSERT INTO \"public\".\"orders\" (\"id\", \"note\", \"amount\", \"doc\") OVERRIDING SYSTEM VALUE "
        "VALUES ($1, $2, $3, $4)");
  CHECK(p.params == Params{"42", "it's; DROP TABLE x --", "NaN", std::nullopt});
  CHECK(p.param_columns == std::vector<std::string>{"id", "note", "amount", "doc"});
  CHECK(p.expect == RowExpectation::ExactlyOne);
  CHECK(p.match_description == "(id)=(42)");
  CHECK(p.sql.find("DROP") == std::string::npos);  // values never reach the SQL text
}

TEST_CASE("plans_update_with_key_predicate", "[plan][seed000]") {
  // No old image: the key did not change; the row is matched by the new tuple's key.
  auto p = MustPlan(Row(Op::Update, 16384, {T("42"), T("changed"), T("1.50"), T("doc")}), {Orders()});
  CHECK(p.kind == PlanKind::Update);
  CHECK(p.sql == "UPDATE ONLY \"public\".\"orders\" SET \"note\" = $1, \"amount\" = $2, \"doc\" = $3 WHERE \"id\" = $4");
  CHECK(p.params == Params{"changed", "1.50", "doc", "42"});
  CHECK(p.match == MatchMode::Key);
  CHECK(p.expect == RowExpectation::ExactlyOne);
  CHECK(p.match_description == "(id)=(42)");
}

TEST_CASE("key_changing_update_sets_new_key_and_matches_old_key", "[plan][seed000]") {
  auto p = MustPlan(Row(Op::Update, 16384, {T("44"), T(""), T("1.50"), Value::Null()}, OldImage::Key, {T("43")}),
                    {Orders()});
  CHECK(p.sql ==
        "UPDATE ONLY \"public\".\"orders\" SET \"id\" = $1, \"note\" = $2, \"amount\" = $3, \"doc\" = $4 WHERE \"id\" = $5");
  CHECK(p.params == Params{"44", "", "1.50", std::nullopt, "43"});
  CHECK(p.match_description == "(id)=(43)");
  SECTION("composite key: only one part changes, both are set and both old parts match") {
    RelationInfo r = Rel("Sales", "line \"items\"", {{"order_id", 20, "bigint", -1, true},
                                                     {"line", 23, "integer", -1, true},
                                                     {"qty", 23, "integer", -1, false}});
    auto q = MustPlan(Row(Op::Update, 20000, {T("1"), T("3"), T("9")}, OldImage::Key, {T("1"), T("2")}), {r});
    CHECK(q.sql == "UPDATE ONLY \"Sales\".\"line \"\"items\"\"\" SET \"order_id\" = $1, \"line\" = $2, \"qty\" = $3 "
                   "WHERE \"order_id\" = $4 AND \"line\" = $5");
    CHECK(q.params == Params{"1", "3", "9", "1", "2"});
    CHECK(q.match_description == "(order_id, line)=(1, 2)");
  }
  SECTION("an old key image equal to the new key does not set the key") {
    auto q = MustPlan(Row(Op::Update, 16384, {T("43"), T("n"), T("1"), T("d")}, OldImage::Key, {T("43")}), {Orders()});
    CHECK(q.sql == "UPDATE ONLY \"public\".\"orders\" SET \"note\" = $1, \"amount\" = $2, \"doc\" = $3 WHERE \"id\" = $4");
  }
}

TEST_CASE("update_omits_absent_non_key_columns_for_unchanged_toast", "[plan][seed000]") {
  // The sample envelope's UPDATE: doc was not logged (unchanged TOAST) and must not be touched.
  auto p = MustPlan(Row(Op::Update, 16384, {T("42"), T("changed"), T("Infinity"), Value::UnchangedToast()}), {Orders()});
  CHECK(p.sql == "UPDATE ONLY \"public\".\"orders\" SET \"note\" = $1, \"amount\" = $2 WHERE \"id\" = $3");
  CHECK(p.params == Params{"changed", "Infinity", "42"});
  CHECK(p.sql.find("\"doc\"") == std::string::npos);
}

TEST_CASE("update_checks_instead_of_writing_a_column_generated_always_as_identity_on_the_target", "[plan]") {
  // A target restored with pg_dump --schema-only keeps `seq bigint GENERATED ALWAYS AS IDENTITY`;
  // the server refuses UPDATE ... SET seq = <value> (SQLSTATE 428C9). The UPDATE leaves it out of
  // SET and requires the row to hold the new value already; such a plan is never merged (no row_key).
  RelationInfo r = Rel("public", "tickets", {{"id", 23, "integer", -1, true},
                                             {"seq", 20, "bigint", -1, false},
                                             {"note", 25, "text", -1, false}});
  const AlwaysIdentityOnTarget always = [](const RelationInfo& rel, const std::string& column) {
    return rel.name == "tickets" && column == "seq";
  };
  const Change update = Row(Op::Update, 20000, {T("7"), T("3"), T("hello")});
  auto plan = PlanChange(update, {r}, {}, always);
  INFO((plan.ok() ? std::string() : plan.error().message));
  REQUIRE(plan.ok());
  CHECK(plan->sql == "UPDATE ONLY \"public\".\"tickets\" SET \"note\" = $1 WHERE \"id\" = $3 AND \"seq\" = $2");
  CHECK(plan->params == Params{"hello", "3", "7"});
  CHECK(plan->param_columns == std::vector<std::string>{"note", "seq", "id"});
  CHECK(plan->match_params == 1);
  CHECK(plan->row_key.empty());
  CHECK_THAT(plan->match_description, Catch::StartsWith("(id)=(7) holding seq = 3") &&
                                          Catch::Contains("GENERATED BY DEFAULT"));
  // The same change through the cache plans alike; without the target's fact it is written as before.
  auto cached = PlanChange(update, {r}, SharedCache(), {}, always);
  REQUIRE(cached.ok());
  CheckSamePlan(*plan, *cached);
  auto plain = MustPlan(update, {r});
  CHECK(plain.sql == "UPDATE ONLY \"public\".\"tickets\" SET \"seq\" = $1, \"note\" = $2 WHERE \"id\" = $3");
  CHECK_FALSE(plain.row_key.empty());
  CHECK(plain.statement_key != plan->statement_key);
  SECTION("a key column generated always is matched as before (only non-key columns are checked)") {
    const AlwaysIdentityOnTarget key_always = [](const RelationInfo&, const std::string& column) {
      return column == "id";
    };
    auto keyed = PlanChange(update, {r}, {}, key_always);
    REQUIRE(keyed.ok());
    CHECK(keyed->sql == plain.sql);
  }
  SECTION("the only non-key column is the identity: the row is still required to exist") {
    RelationInfo narrow = Rel("public", "tickets", {{"id", 23, "integer", -1, true}, {"seq", 20, "bigint", -1, false}});
    auto only = PlanChange(Row(Op::Update, 20000, {T("7"), T("3")}), {narrow}, {}, always);
    REQUIRE(only.ok());
    CHECK(only->sql == "UPDATE ONLY \"public\".\"tickets\" SET \"id\" = $1 WHERE \"id\" = $3 AND \"seq\" = $2");
  }
}

TEST_CASE("update_omits_explicit_unchanged_toast_marker", "[plan][seed000]") {
  // Unchanged TOAST is not NULL: a NULL is set, the marker is omitted, and the two shapes differ.
  auto toast = MustPlan(Row(Op::Update, 16384, {T("42"), Value::UnchangedToast(), T("1"), Value::UnchangedToast()}),
                        {Orders()});
  auto null = MustPlan(Row(Op::Update, 16384, {T("42"), Value::Null(), T("1"), Value::Null()}), {Orders()});
  CHECK(toast.sql == "UPDATE ONLY \"public\".\"orders\" SET \"amount\" = $1 WHERE \"id\" = $2");
  CHECK(toast.params == Params{"1", "42"});
  CHECK(null.sql == "UPDATE ONLY \"public\".\"orders\" SET \"note\" = $1, \"amount\" = $2, \"doc\" = $3 WHERE \"id\" = $4");
  CHECK(null.params == Params{std::nullopt, "1", std::nullopt, "42"});
  CHECK(toast.statement_key != null.statement_key);
  SECTION("every non-key column unchanged: the row must still be matched") {
    auto only = MustPlan(Row(Op::Update, 16384, {T("42"), Value::UnchangedToast(), Value::UnchangedToast(),
                                                 Value::UnchangedToast()}),
                         {Orders()});
    CHECK(only.sql == "UPDATE ONLY \"public\".\"orders\" SET \"id\" = $1 WHERE \"id\" = $2");
    CHECK(only.params == Params{"42", "42"});
    CHECK(only.expect == RowExpectation::ExactlyOne);
  }
}

TEST_CASE("update_with_unchanged_toast_key_is_an_error", "[plan]") {
  std::string e = MustFail(Row(Op::Update, 16384, {Value::UnchangedToast(), T("n"), T("1"), T("d")}), {Orders()});
  CHECK_THAT(e, Catch::Contains("UPDATE on public.orders") && Catch::Contains("key column id") &&
                    Catch::Contains("unchanged-TOAST"));
  std::string old = MustFail(
      Row(Op::Update, 16384, {T("1"), T("n"), T("1"), T("d")}, OldImage::Key, {Value::UnchangedToast()}), {Orders()});
  CHECK_THAT(old, Catch::Contains("unchanged-TOAST"));
}

TEST_CASE("statements_that_find_rows_name_a_plain_table_with_only_and_a_partitioned_one_without", "[plan]") {
  // A plain target table: ONLY, so its inheritance children's rows are never reached.
  auto u = MustPlan(Row(Op::Update, 16384, {T("1"), T("n"), T("2"), T("d")}), {Orders()});
  CHECK(u.sql.rfind("UPDATE ONLY \"public\".\"orders\" SET", 0) == 0);
  CHECK(u.rows_target == "ONLY \"public\".\"orders\"");
  CHECK(u.target_relation == "\"public\".\"orders\"");
  // Partitioned on the target: without ONLY, so its partitions' rows are reached; another statement.
  const PartitionedOnTarget partitioned = [](const RelationInfo& r) { return r.name == "orders"; };
  auto pu = PlanChange(Row(Op::Update, 16384, {T("1"), T("n"), T("2"), T("d")}), {Orders()}, partitioned);
  REQUIRE(pu.ok());
  CHECK(pu->sql.rfind("UPDATE \"public\".\"orders\" SET", 0) == 0);
  CHECK(pu->statement_key != u.statement_key);
  auto pd = PlanChange(Row(Op::Delete, 16384, {}, OldImage::Key, {T("44")}), {Orders()}, partitioned);
  REQUIRE(pd.ok());
  CHECK(pd->sql == "DELETE FROM \"public\".\"orders\" WHERE \"id\" = $1");
  // INSERT names the table as it is either way.
  auto pi = PlanChange(Row(Op::Insert, 16384, {T("1"), T("n"), T("2"), T("d")}), {Orders()}, partitioned);
  REQUIRE(pi.ok());
  CHECK(pi->sql.rfind("INSERT INTO \"public\".\"orders\" (", 0) == 0);
  // TRUNCATE: each relation by its own storage.
  RelationInfo b = Rel("Sales", "line \"items\"", {{"id", 23, "integer", -1, true}});
  Change t;
  t.op = Op::Truncate;
  t.truncate = TruncateInfo{{20000, 16384}, false, false};
  auto pt = PlanChange(t, {Orders(), b}, partitioned);
  REQUIRE(pt.ok());
  CHECK(pt->sql == "TRUNCATE TABLE ONLY \"Sales\".\"line \"\"items\"\"\", \"public\".\"orders\" CONTINUE IDENTITY RESTRICT");
  // The cached planner follows the same rule.
  PlanCache cache;
  auto cu = PlanChange(Row(Op::Update, 16384, {T("1"), T("n"), T("2"), T("d")}), {Orders()}, cache, partitioned);
  REQUIRE(cu.ok());
  CHECK(cu->sql == pu->sql);
  CHECK(RowsTarget("\"s\".\"t\"", false) == "ONLY \"s\".\"t\"");
  CHECK(RowsTarget("\"s\".\"t\"", true) == "\"s\".\"t\"");
}

TEST_CASE("insert_with_unchanged_toast_is_an_error", "[plan]") {
  std::string e = MustFail(Row(Op::Insert, 16384, {T("1"), T("n"), T("1"), Value::UnchangedToast()}), {Orders()});
  CHECK_THAT(e, Catch::Contains("INSERT on public.orders") && Catch::Contains("column doc"));
}

TEST_CASE("plans_delete_by_old_key_image", "[plan]") {
  auto p = MustPlan(Row(Op::Delete, 16384, {}, OldImage::Key, {T("44")}), {Orders()});
  CHECK(p.sql == "DELETE FROM ONLY \"public\".\"orders\" WHERE \"id\" = $1");
  CHECK(p.params == Params{"44"});
  CHECK(p.expect == RowExpectation::ExactlyOne);
  CHECK(p.match_description == "(id)=(44)");
  std::string e = MustFail(Row(Op::Delete, 16384, {}), {Orders()});
  CHECK_THAT(e, Catch::Contains("DELETE on public.orders") && Catch::Contains("no old row image"));
  std::string null_key = MustFail(Row(Op::Delete, 16384, {}, OldImage::Key, {Value::Null()}), {Orders()});
  CHECK_THAT(null_key, Catch::Contains("key column id is NULL"));
}

TEST_CASE("replica_identity_full_matches_one_row_on_every_column", "[plan]") {
  RelationInfo r = Rel("public", "events", {{"at", 1184, "timestamp with time zone", -1, false},
                                            {"what", 25, "text", -1, false},
                                            {"n", 23, "integer", -1, false}},
                       ReplicaIdentity::Full);
  auto d = MustPlan(Row(Op::Delete, 20000, {}, OldImage::Full, {T("2026-01-01 00:00:00+00"), Value::Null(), T("3")}), {r});
  CHECK(d.match == MatchMode::FullRow);
  CHECK(d.sql ==
        "DELETE FROM ONLY \"public\".\"events\" WHERE (tableoid, ctid) = (SELECT tableoid, ctid FROM ONLY \"public\".\"events\" "
        "WHERE \"at\" IS NOT DISTINCT FROM $1::timestamp with time zone AND \"what\" IS NOT DISTINCT FROM $2::text "
        "COLLATE \"C\" AND "
        "\"n\" IS NOT DISTINCT FROM $3::integer LIMIT 1)");
  CHECK(d.params == Params{"2026-01-01 00:00:00+00", std::nullopt, "3"});
  CHECK(d.match_description == "(at, what, n)=(2026-01-01 00:00:00+00, NULL, 3)");
  auto u = MustPlan(Row(Op::Update, 20000, {T("2026-01-01 00:00:00+00"), T("x"), T("4")}, OldImage::Full,
                        {T("2026-01-01 00:00:00+00"), Value::Null(), T("3")}),
                    {r});
  CHECK(u.sql ==
        "UPDATE ONLY \"public\".\"events\" SET \"at\" = $1, \"what\" = $2, \"n\" = $3 WHERE (tableoid, ctid) = (SELECT "
        "tableoid, ctid FROM ONLY \"public\".\"events\" WHERE \"at\" IS NOT DISTINCT FROM $4::timestamp with time zone AND "
        "\"what\" IS NOT DISTINCT FROM $5::text COLLATE \"C\" AND \"n\" IS NOT DISTINCT FROM $6::integer LIMIT 1)");
  CHECK(u.params == Params{"2026-01-01 00:00:00+00", "x", "4", "2026-01-01 00:00:00+00", std::nullopt, "3"});
  SECTION("a full image of a keyed relation matches by the key") {
    auto k = MustPlan(Row(Op::Delete, 16384, {}, OldImage::Full, {T("42"), T("n"), T("1"), T("d")}), {Orders()});
    CHECK(k.sql == "DELETE FROM ONLY \"public\".\"orders\" WHERE \"id\" = $1");
    CHECK(k.params == Params{"42"});
  }
}

TEST_CASE("replica_identity_full_matches_types_without_exact_equality_by_their_text", "[plan]") {
  // json has no `=`, numeric's `=` takes 1.0 for 1.00: both compare their text output (value_types.h).
  for (std::string type : {"json", "point", "json[]", "pg_catalog.xml", "box", "numeric", "interval", "public.mood"}) {
    RelationInfo r = Rel("public", "docs", {{"body", 114, type, -1, false}, {"n", 23, "integer", -1, false}},
                         ReplicaIdentity::Full);
    auto p = MustPlan(Row(Op::Delete, 20000, {}, OldImage::Full, {T("{}"), T("1")}), {r});
    INFO(p.sql);
    CHECK(p.sql == "DELETE FROM ONLY \"public\".\"docs\" WHERE (tableoid, ctid) = (SELECT tableoid, ctid FROM ONLY "
                   "\"public\".\"docs\" WHERE \"body\"::text IS NOT DISTINCT FROM ($1::" + type +
                       ")::text COLLATE \"C\" AND \"n\" IS NOT DISTINCT FROM $2::integer LIMIT 1)");
  }
}

TEST_CASE("relation_without_key_or_full_image_is_a_plan_error_naming_the_remedy", "[plan]") {
  RelationInfo r = Rel("public", "log", {{"line", 25, "text", -1, false}}, ReplicaIdentity::Nothing);
  std::string u = MustFail(Row(Op::Update, 20000, {T("x")}), {r});
  CHECK_THAT(u, Catch::Contains("UPDATE on public.log") && Catch::Contains("no replica identity key") &&
                    Catch::Contains("REPLICA IDENTITY NOTHING") && Catch::Contains("add a primary key"));
  std::string d = MustFail(Row(Op::Delete, 20000, {}), {r});
  CHECK_THAT(d, Catch::Contains("DELETE on public.log") && Catch::Contains("add a primary key"));
  // Inserts need no identity.
  CHECK(MustPlan(Row(Op::Insert, 20000, {T("x")}), {r}).kind == PlanKind::Insert);
}

TEST_CASE("plans_truncate_in_source_order", "[plan]") {
  RelationInfo a = Orders();
  RelationInfo b = Rel("Sales", "line \"items\"", {{"id", 23, "integer", -1, true}});
  Change t;
  t.op = Op::Truncate;
  t.truncate = TruncateInfo{{20000, 16384}, /*cascade=*/true, /*restart_identity=*/true};
  auto p = MustPlan(t, {a, b});
  CHECK(p.kind == PlanKind::Truncate);
  CHECK(p.sql == "TRUNCATE TABLE ONLY \"Sales\".\"line \"\"items\"\"\", ONLY \"public\".\"orders\" RESTART IDENTITY RESTRICT");
  CHECK(p.params.empty());
  CHECK(p.expect == RowExpectation::Any);
  CHECK(p.relation_display == "Sales.line \"items\", public.orders");
  t.truncate.restart_identity = false;
  auto q = MustPlan(t, {a, b});
  CHECK(q.sql == "TRUNCATE TABLE ONLY \"Sales\".\"line \"\"items\"\"\", ONLY \"public\".\"orders\" CONTINUE IDENTITY RESTRICT");
  CHECK(q.statement_key != p.statement_key);
  t.truncate.relation_oids = {16384, 20000};
  CHECK(MustPlan(t, {a, b}).sql.find("ONLY \"public\".\"orders\", ONLY \"Sales\"") != std::string::npos);
  t.truncate.relation_oids = {99};
  CHECK_THAT(MustFail(t, {a, b}), Catch::Contains("oid 99"));
}

TEST_CASE("messages_and_ddl_produce_no_statement", "[plan]") {
  Change m;
  m.op = Op::Message;
  m.message = LogicalMessage{true, "app", "hello"};
  auto p = MustPlan(m, {});
  CHECK(p.kind == PlanKind::NotApplied);
  CHECK(p.sql.empty());
  CHECK_THAT(p.not_applied_reason, Catch::Contains("recorded in the log but not applied"));
  Change d;
  d.op = Op::Ddl;
  d.ddl = Ddl{"ALTER TABLE", "table", "public", "public.orders", "ALTER TABLE public.orders ADD c int"};
  auto q = MustPlan(d, {});
  CHECK(q.kind == PlanKind::NotApplied);
  CHECK_THAT(q.not_applied_reason, Catch::Contains("ALTER TABLE public.orders"));
}

TEST_CASE("hostile_identifiers_are_always_quoted", "[plan]") {
  const std::string name63(63, 'n');
  const std::string unicode = "Zeilen-Übersicht ✓";  // non-ASCII, 21 bytes
  RelationInfo r = Rel("we\"ird;schema", "Mixed Case\"; DROP TABLE x; --",
                       {{"\"", 23, "integer", -1, true}, {name63, 25, "text", -1, false}, {unicode, 25, "text", -1, false},
                        {"select", 25, "text", -1, false}});
  auto p = MustPlan(Row(Op::Update, 20000, {T("1"), T("a"), T("b"), T("c")}, OldImage::Key, {T("0")}), {r});
  CHECK(p.sql == "UPDATE ONLY \"we\"\"ird;schema\".\"Mixed Case\"\"; DROP TABLE x; --\" SET \"\"\"\" = $1, \"" + name63 +
                     "\" = $2, \"" + unicode + "\" = $3, \"select\" = $4 WHERE \"\"\"\" = $5");
  CHECK(QuoteIdentifier("a\"b").value() == "\"a\"\"b\"");
  SECTION("a name Postgres would truncate is refused") {
    RelationInfo long_name = Rel("public", std::string(64, 'x'), {{"id", 23, "integer", -1, true}});
    CHECK_THAT(MustFail(Row(Op::Insert, 20000, {T("1")}), {long_name}), Catch::Contains("64 bytes"));
    RelationInfo long_col = Rel("public", "t", {{std::string(64, 'c'), 23, "integer", -1, true}});
    CHECK_THAT(MustFail(Row(Op::Insert, 20000, {T("1")}), {long_col}), Catch::Contains("64 bytes"));
  }
  SECTION("empty names and NUL bytes are refused") {
    CHECK_FALSE(QuoteIdentifier("").ok());
    CHECK_FALSE(QuoteIdentifier(std::string("a\0b", 3)).ok());
  }
}

TEST_CASE("hostile_values_are_bound_verbatim", "[plan]") {
  const std::string huge(1 << 20, 'x');
  for (std::string v : {std::string("back\\slash"), std::string("new\nline\r\n"), std::string("NaN"),
                        std::string("-Infinity"), std::string("-0"), std::string("'); DROP TABLE t; --"),
                        std::string("$1"), huge}) {
    auto p = MustPlan(Row(Op::Insert, 16384, {T("1"), T(v), T("1"), Value::Null()}), {Orders()});
    CHECK(p.params[1] == std::optional<std::string>(v));
    CHECK(p.sql.size() < 200);
  }
  std::string nul = MustFail(Row(Op::Insert, 16384, {T("1"), T(std::string("a\0b", 3)), T("1"), Value::Null()}), {Orders()});
  CHECK_THAT(nul, Catch::Contains("column note") && Catch::Contains("NUL byte"));
  std::string bin = MustFail(Row(Op::Insert, 16384, {T("1"), Value::Binary("\x01"), T("1"), Value::Null()}), {Orders()});
  CHECK_THAT(bin, Catch::Contains("binary"));
  // A huge key value is shortened in the message, never in the parameter.
  auto d = MustPlan(Row(Op::Delete, 16384, {}, OldImage::Key, {T(huge)}), {Orders()});
  CHECK(d.params[0]->size() == huge.size());
  CHECK(d.match_description.size() < 100);
}

TEST_CASE("statement_keys_are_equal_exactly_when_sql_is", "[plan]") {
  std::vector<Change> changes = {
      Row(Op::Insert, 16384, {T("1"), T("a"), T("1"), T("d")}),
      Row(Op::Insert, 16384, {T("2"), Value::Null(), T("1"), Value::Null()}),
      Row(Op::Update, 16384, {T("1"), T("a"), T("1"), T("d")}),
      Row(Op::Update, 16384, {T("2"), T("b"), T("2"), T("e")}),
      Row(Op::Update, 16384, {T("1"), T("a"), T("1"), Value::UnchangedToast()}),
      Row(Op::Update, 16384, {T("1"), Value::UnchangedToast(), T("1"), T("d")}),
      Row(Op::Update, 16384, {T("3"), T("a"), T("1"), T("d")}, OldImage::Key, {T("1")}),
      Row(Op::Update, 16384, {T("1"), Value::UnchangedToast(), Value::UnchangedToast(), Value::UnchangedToast()}),
      Row(Op::Delete, 16384, {}, OldImage::Key, {T("1")}),
      Row(Op::Delete, 16384, {}, OldImage::Key, {T("2")}),
  };
  std::vector<ChangePlan> plans;
  for (const auto& c : changes) plans.push_back(MustPlan(c, {Orders()}));
  for (size_t i = 0; i < plans.size(); i++)
    for (size_t j = 0; j < plans.size(); j++) {
      INFO(i << " vs " << j << ": " << plans[i].sql << " | " << plans[j].sql);
      CHECK((plans[i].statement_key == plans[j].statement_key) == (plans[i].sql == plans[j].sql));
    }
  // A schema change (new fingerprint) is a new statement even with the same SQL shape.
  RelationInfo changed = Orders();
  changed.columns[1].type_name = "character varying(10)";
  changed.fingerprint = ComputeFingerprint(changed);
  CHECK(MustPlan(changes[0], {changed}).statement_key != plans[0].statement_key);
}

TEST_CASE("change_on_an_undescribed_relation_is_an_error", "[plan]") {
  CHECK_THAT(MustFail(Row(Op::Insert, 777, {T("1")}), {Orders()}), Catch::Contains("oid 777"));
  CHECK_THAT(MustFail(Row(Op::Insert, 16384, {T("1")}), {Orders()}), Catch::Contains("1 values for 4 columns"));
}

TEST_CASE("row_expectation_is_checked_by_the_target_inside_the_statement", "[plan]") {
  // In a pipeline the COMMIT is queued behind the statement, so a change that touches no row (or
  // several) must abort the transaction on the server: the executed SQL wraps the DML.
  auto del = MustPlan(Row(Op::Delete, 16384, {}, OldImage::Key, {T("44")}), {Orders()});
  CHECK(RowCheckedSql(del) ==
        "WITH trellara_rows AS (DELETE FROM ONLY \"public\".\"orders\" WHERE \"id\" = $1 RETURNING 1) "
        "SELECT CASE WHEN count(*) = 1 THEN NULL ELSE trellara.require_one_row(count(*)) END FROM trellara_rows");
  auto ins = MustPlan(Row(Op::Insert, 16384, {T("1"), T("n"), T("2"), T("d")}), {Orders()});
  CHECK(RowCheckedSql(ins).rfind("WITH trellara_rows AS (INSERT INTO \"public\".\"orders\"", 0) == 0);
  // The parameters are the plan's, unchanged: the wrapper adds none.
  CHECK(RowCheckedSql(ins).find("$5") == std::string::npos);
  Change t;
  t.op = Op::Truncate;
  t.truncate.relation_oids = {16384};
  auto trunc = MustPlan(t, {Orders()});
  CHECK(trunc.expect == RowExpectation::Any);
  CHECK(RowCheckedSql(trunc) == trunc.sql);
}

// ---- runs of INSERTs of a chunked transaction: COPY FROM STDIN ----

TEST_CASE("copy_of_an_insert_run_lists_every_column_quoted", "[plan][copy]") {
  RelationInfo r = Rel("Sales", "line \"items\"", {{"order_id", 20, "bigint", -1, true}, {"Note", 25, "text", -1, false}});
  auto sql = CopyInsertSql(r);
  REQUIRE(sql.ok());
  CHECK(*sql == "COPY \"Sales\".\"line \"\"items\"\"\" (\"order_id\", \"Note\") FROM STDIN");
  RelationInfo empty = Rel("public", "nothing", {});
  CHECK_FALSE(CopyInsertSql(empty).ok());  // INSERT ... DEFAULT VALUES has no COPY form
}

TEST_CASE("copy_row_carries_exactly_the_insert_plans_bound_values_escaped", "[plan][copy]") {
  RelationInfo r = Rel("public", "t", {{"id", 20, "bigint", -1, true}, {"a", 25, "text", -1, false},
                                        {"b", 25, "text", -1, false}});
  Change c = Row(Op::Insert, r.oid, {Value::Text("1"), Value::Text("tab\there\nnl\rcr back\\slash \\N"), Value::Null()});
  auto plan = PlanChange(c, {r});
  REQUIRE(plan.ok());
  std::string out;
  REQUIRE(AppendCopyRow(*plan, out).ok());
  CHECK(out == "1\ttab\\there\\nnl\\rcr back\\\\slash \\\\N\t\\N\n");
  // Rows append: a run is one buffer of lines.
  REQUIRE(AppendCopyRow(*plan, out).ok());
  CHECK(std::count(out.begin(), out.end(), '\n') == 2);
}

TEST_CASE("copy_row_is_refused_for_anything_but_an_insert_with_columns", "[plan][copy]") {
  RelationInfo r = Orders();
  Change del = Row(Op::Delete, r.oid, {}, OldImage::Key, {Value::Text("7")});
  auto plan = PlanChange(del, {r});
  REQUIRE(plan.ok());
  std::string out;
  CHECK_FALSE(AppendCopyRow(*plan, out).ok());
  CHECK(out.empty());
}

TEST_CASE("copy_insert_runs_share_the_insert_statement_key", "[plan][copy]") {
  // The applier groups a run by statement_key: equal for two INSERTs of one relation shape,
  // different for another relation (or another definition of it).
  RelationInfo a = Rel("public", "t", {{"id", 20, "bigint", -1, true}});
  RelationInfo b = Rel("public", "u", {{"id", 20, "bigint", -1, true}});
  b.oid = 20001;
  auto p1 = PlanChange(Row(Op::Insert, a.oid, {Value::Text("1")}), {a, b});
  auto p2 = PlanChange(Row(Op::Insert, a.oid, {Value::Text("2")}), {a, b});
  auto p3 = PlanChange(Row(Op::Insert, b.oid, {Value::Text("3")}), {a, b});
  REQUIRE((p1.ok() && p2.ok() && p3.ok()));
  CHECK(p1->statement_key == p2->statement_key);
  CHECK(p1->statement_key != p3->statement_key);
}

TEST_CASE("copy_error_context_names_the_failing_row", "[plan][copy]") {
  CHECK(CopyLineOf("COPY orders, line 42") == std::optional<uint64_t>(42));
  CHECK(CopyLineOf("COPY orders, line 7, column id: \"x\"") == std::optional<uint64_t>(7));
  CHECK(CopyLineOf("PL/pgSQL function f() line 3 at RAISE\nCOPY t, line 12") == std::optional<uint64_t>(12));
  CHECK_FALSE(CopyLineOf("SQL statement \"SELECT 1\"").has_value());
  CHECK_FALSE(CopyLineOf("").has_value());
}

TEST_CASE("copy_row_straight_from_the_change_equals_the_planned_rows_and_refuses_what_the_planner_refuses",
          "[plan][copy]") {
  RelationInfo r = Rel("public", "t", {{"id", 20, "bigint", -1, true}, {"a", 25, "text", -1, false},
                                        {"b", 25, "text", -1, false}});
  Change c = Row(Op::Insert, r.oid, {Value::Text("1"), Value::Text("x\ty\\z\n"), Value::Null()});
  auto plan = PlanChange(c, {r});
  REQUIRE(plan.ok());
  std::string planned, direct;
  REQUIRE(AppendCopyRow(*plan, planned).ok());
  REQUIRE(AppendCopyRowOf(c, r, direct).ok());
  CHECK(direct == planned);
  for (const Value& refused : {Value::UnchangedToast(), Value::Binary("\x01"), Value::Text(std::string("a\0b", 3))}) {
    Change bad = Row(Op::Insert, r.oid, {Value::Text("2"), refused, Value::Null()});
    std::string out = "kept";
    CHECK_FALSE(AppendCopyRowOf(bad, r, out).ok());
    CHECK(out == "kept");
    CHECK_FALSE(PlanChange(bad, {r}).ok());
  }
  Change narrow = Row(Op::Insert, r.oid, {Value::Text("3")});
  std::string out;
  CHECK_FALSE(AppendCopyRowOf(narrow, r, out).ok());
}

TEST_CASE("update_batch_takes_key_preserving_updates_only", "[plan][update_batch]") {
  RelationInfo r = Rel("public", "t", {{"id", 20, "bigint", -1, true}, {"a", 25, "text", -1, false}});
  // Matched by its key, which it leaves unchanged (no old image: the key did not change).
  auto same_key = PlanChange(Row(Op::Update, r.oid, {T("1"), T("x")}), {r});
  REQUIRE(same_key.ok());
  CHECK(UpdateBatchable(*same_key));
  CHECK(same_key->match_params == 1);
  // A key-changing UPDATE (old key image differs) must match the old key and set the new one.
  auto new_key = PlanChange(Row(Op::Update, r.oid, {T("2"), T("x")}, OldImage::Key, {T("1")}), {r});
  REQUIRE(new_key.ok());
  CHECK_FALSE(UpdateBatchable(*new_key));
  // No key: matched on the full old row, maybe one of several duplicates.
  RelationInfo nokey = Rel("public", "n", {{"a", 25, "text", -1, false}}, ReplicaIdentity::Full);
  auto full = PlanChange(Row(Op::Update, nokey.oid, {T("y")}, OldImage::Full, {T("x")}), {nokey});
  REQUIRE(full.ok());
  CHECK_FALSE(UpdateBatchable(*full));
  auto del = PlanChange(Row(Op::Delete, r.oid, {}, OldImage::Key, {T("1")}), {r});
  REQUIRE(del.ok());
  CHECK_FALSE(UpdateBatchable(*del));
  auto ins = PlanChange(Row(Op::Insert, r.oid, {T("1"), T("x")}), {r});
  REQUIRE(ins.ok());
  CHECK_FALSE(UpdateBatchable(*ins));
}

TEST_CASE("update_batch_sql_sets_the_planned_columns_from_one_array_each_and_checks_every_row", "[plan][update_batch]") {
  RelationInfo r = Rel("Sales", "line \"items\"", {{"order_id", 20, "bigint", -1, true}, {"Note", 25, "text", -1, false},
                                                   {"qty", 23, "integer", -1, false}, {"line", 23, "integer", -1, true}});
  auto plan = PlanChange(Row(Op::Update, r.oid, {T("7"), T("n"), Value::UnchangedToast(), T("2")}), {r});
  REQUIRE(plan.ok());
  REQUIRE(UpdateBatchable(*plan));
  // SET "Note" (qty is unchanged-TOAST, the keys are unchanged), matched on (order_id, line).
  REQUIRE(plan->param_columns == std::vector<std::string>{"Note", "order_id", "line"});
  auto sql = UpdateBatchSql(*plan, {"text", "bigint", "integer"});
  REQUIRE(sql.ok());
  CHECK(*sql ==
        "WITH trellara_rows AS (UPDATE ONLY \"Sales\".\"line \"\"items\"\"\" AS trellara_row SET \"Note\" = "
        "trellara_batch.v1::text FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS "
        "trellara_batch(v1, v2, v3, ord) WHERE trellara_row.\"order_id\" = trellara_batch.v2::bigint AND "
        "trellara_row.\"line\" = trellara_batch.v3::integer "
        "RETURNING trellara_batch.ord) SELECT CASE WHEN count(*) = $4 AND count(DISTINCT ord) = $4 THEN NULL "
        "ELSE trellara.require_each_row_once(array_agg(ord), $4) END FROM trellara_rows");
  CHECK_FALSE(UpdateBatchSql(*plan, {"text", "bigint"}).ok());  // a type per parameter column
  auto del = PlanChange(Row(Op::Delete, r.oid, {}, OldImage::Key, {T("7"), T("2")}), {r});
  REQUIRE(del.ok());
  CHECK_FALSE(UpdateBatchSql(*del, {"bigint", "integer"}).ok());
}

TEST_CASE("update_batch_array_elements_are_quoted_and_escaped", "[plan][update_batch]") {
  std::string literal = "{";
  for (const std::optional<std::string>& v :
       std::vector<std::optional<std::string>>{std::string("plain"), std::nullopt, std::string("NULL"), std::string(""),
                                               std::string("q\"uo\\te"), std::string("{a,b} c\n")})
    AppendArrayElement(v, literal);
  literal += '}';
  // NULL unquoted is SQL NULL; the text "NULL" is quoted; an empty string is "".
  CHECK(literal == "{\"plain\",NULL,\"NULL\",\"\",\"q\\\"uo\\\\te\",\"{a,b} c\n\"}");
}

// ---- paired defects (docs/correctness.md): each makes the clean test named in it fail ----------

namespace {

// Plans `c` with one test-only defect switched on, and reports whether its point was reached.
Result<ChangePlan> PlanWithDefect(const char* defect, const Change& c, const std::vector<RelationInfo>& rels,
                                  bool& fired) {
  fault::AllowDefects(true, "unit test");  // defects need the explicit test-only switch (fault.h)
  REQUIRE(fault::Configure(std::string(defect) + ":1:defect").ok());
  auto plan = PlanChange(c, rels);
  fired = fault::FiredCount(defect) >= 1;
  fault::Clear();
  fault::AllowDefects(false, "");
  return plan;
}

}  // namespace

// default_replica_identity_key_change_apply: matching a key-changing UPDATE by its new key finds no
// row on the target (the old key is what is there); key_changing_update_sets_new_key_and_matches_old_key
// must fail on it.
TEST_CASE("key_changing_update_matched_by_new_key_negative_control", "[plan][seed000]") {
  bool fired = false;
  auto p = PlanWithDefect("defect.apply_match_new_key",
                          Row(Op::Update, 16384, {T("44"), T(""), T("1.50"), Value::Null()}, OldImage::Key, {T("43")}),
                          {Orders()}, fired);
  REQUIRE(fired);
  REQUIRE(p.ok());
  CHECK(p->match_description == "(id)=(44)");  // the clean test requires (id)=(43): caught
  CHECK(p->params.back() == std::optional<std::string>("44"));
}

// default_replica_identity_primary_key_apply: an UPDATE addressed by every column of its new row
// instead of the primary key matches nothing once a non-key column changed; plans_update_with_key_predicate
// must fail on it.
TEST_CASE("update_matched_by_whole_new_row_negative_control", "[plan][seed000]") {
  bool fired = false;
  auto p = PlanWithDefect("defect.apply_match_whole_new_row",
                          Row(Op::Update, 16384, {T("42"), T("changed"), T("1.50"), T("doc")}), {Orders()}, fired);
  REQUIRE(fired);
  REQUIRE(p.ok());
  CHECK(p->match != MatchMode::Key);  // the clean test requires MatchMode::Key: caught
  CHECK(p->sql.find("\"note\" IS NOT DISTINCT FROM") != std::string::npos);
}

// pgoutput_dml_truncate_envelope_mapping: replaying the source's CASCADE truncates target tables the
// record does not list; plans_truncate_in_source_order (RESTRICT) must fail on it.
TEST_CASE("truncate_replaying_cascade_negative_control", "[plan]") {
  Change t;
  t.op = Op::Truncate;
  t.truncate = TruncateInfo{{16384}, /*cascade=*/true, /*restart_identity=*/false};
  bool fired = false;
  auto p = PlanWithDefect("defect.apply_truncate_cascade", t, {Orders()}, fired);
  REQUIRE(fired);
  REQUIRE(p.ok());
  CHECK(p->sql == "TRUNCATE TABLE ONLY \"public\".\"orders\" CONTINUE IDENTITY CASCADE");  // not RESTRICT: caught
}

// pgoutput_row_without_relation_metadata: a change on a relation the record does not describe,
// passed over instead of failing; change_on_an_undescribed_relation_is_an_error must fail on it.
TEST_CASE("change_on_an_undescribed_relation_skipped_negative_control", "[plan]") {
  bool fired = false;
  auto p = PlanWithDefect("defect.apply_skip_undescribed_relation", Row(Op::Insert, 777, {T("1")}), {Orders()}, fired);
  REQUIRE(fired);
  REQUIRE(p.ok());  // the clean test's MustFail fails: caught
  CHECK(p->kind == PlanKind::NotApplied);
}

TEST_CASE("plan_cache_serves_only_a_relation_equal_to_the_one_it_quoted", "[plan]") {
  PlanCache cache;
  const RelationInfo orders = Orders();
  const Change insert = Row(Op::Insert, 16384, {T("1"), T("a"), T("1.00"), T("d")});
  auto first = PlanChange(insert, {orders}, cache);
  REQUIRE(first.ok());
  // The same fingerprint on a relation renamed after it was computed (as a tampered record would
  // carry): the cache must not hand back the old quoted names.
  RelationInfo renamed = orders;
  renamed.name = "invoices";
  renamed.columns[1].name = "memo";
  auto second = PlanChange(insert, {renamed}, cache);
  REQUIRE(second.ok());
  CHECK(second->target_relation == "\"public\".\"invoices\"");
  CHECK(second->sql.find("\"memo\"") != std::string::npos);
  CHECK(second->sql == PlanChange(insert, {renamed})->sql);
  // A name that cannot be quoted is refused with the uncached message every time, and never kept.
  RelationInfo bad = orders;
  bad.columns[1].name = std::string(64, 'x');
  bad.fingerprint = ComputeFingerprint(bad);
  for (int pass = 0; pass < 2; pass++) {
    auto refused = PlanChange(insert, {bad}, cache);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message == PlanChange(insert, {bad}).error().message);
  }
  // The original relation still plans as before.
  CHECK(PlanChange(insert, {orders}, cache)->sql == first->sql);
}

}  // namespace unit_apply_plan_test
