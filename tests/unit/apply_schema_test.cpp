// apply_schema_test.cpp — the target-schema check before a relation's first use: which target
// definitions can take a captured relation's changes exactly, and what the refusal says.
#include <catch2/catch.hpp>

#include "samples.h"
#include "trellara/apply/apply_schema.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_apply_schema_test {

using namespace trellara;

namespace {

// The target as the source defines it: public.orders (id bigint key, note text, amount
// numeric(12,2), doc text).
TargetRelation SameAsSource() {
  TargetRelation t;
  t.exists = true;
  t.columns = {{"id", "bigint", true, false, false, false},
               {"note", "text", false, false, false, false},
               {"amount", "numeric(12,2)", false, false, false, false},
               {"doc", "text", false, false, false, false}};
  return t;
}

}  // namespace

TEST_CASE("target_with_the_source_definition_is_accepted", "[schema]") {
  CHECK_FALSE(CheckTargetRelation(testing::SampleOrders(), SameAsSource()));
  // Extra nullable or defaulted target columns, and another column order, are fine.
  TargetRelation t = SameAsSource();
  std::swap(t.columns[0], t.columns[3]);
  t.columns.push_back({"loaded_at", "timestamp with time zone", true, true, false, false});
  t.columns.push_back({"comment", "text", false, false, false, false});
  t.columns.push_back({"seq", "bigint", true, false, true, false});  // identity
  CHECK_FALSE(CheckTargetRelation(testing::SampleOrders(), t));
}

TEST_CASE("missing_target_table_or_column_is_named", "[schema]") {
  TargetRelation none;
  auto table = CheckTargetRelation(testing::SampleOrders(), none);
  REQUIRE(table);
  CHECK(table->reason == QuarantineReason::MissingTable);
  CHECK(table->relation == "public.orders");

  TargetRelation t = SameAsSource();
  t.columns.erase(t.columns.begin() + 2);
  auto column = CheckTargetRelation(testing::SampleOrders(), t);
  REQUIRE(column);
  CHECK(column->reason == QuarantineReason::MissingColumn);
  CHECK(column->column == "amount");
  CHECK_THAT(column->detail, Catch::Contains("column amount (numeric(12,2)) of public.orders does not exist"));
}

TEST_CASE("target_column_type_that_cannot_take_the_values_exactly_is_a_schema_mismatch", "[schema]") {
  TargetRelation t = SameAsSource();
  t.columns[2].type_name = "integer";  // numeric(12,2) -> integer would round 1.50 to 2
  auto cause = CheckTargetRelation(testing::SampleOrders(), t);
  REQUIRE(cause);
  CHECK(cause->reason == QuarantineReason::SchemaMismatch);
  CHECK(cause->column == "amount");
  CHECK_THAT(cause->detail, Catch::Contains("is numeric(12,2) on the source but integer on the target") &&
                                Catch::Contains("change the target column to numeric(12,2)"));
  const auto message = BuildQuarantine(TxIdentity{"app", 1, 7, 0x100}, Sha256{}, *cause, 0).message;
  CHECK_THAT(message, Catch::Contains("cannot accept the source schema") && Catch::Contains("alter the target table"));
}

TEST_CASE("type_acceptance_rules", "[schema]") {
  CHECK(TargetTypeAccepts("integer", "integer"));
  CHECK(TargetTypeAccepts("character varying(20)", "character varying(50)"));
  CHECK(TargetTypeAccepts("numeric(10,2)", "numeric"));
  CHECK(TargetTypeAccepts("timestamp(3) with time zone", "timestamp with time zone"));
  CHECK(TargetTypeAccepts("smallint", "bigint"));
  CHECK(TargetTypeAccepts("integer", "numeric(20,0)"));
  CHECK(TargetTypeAccepts("real", "double precision"));
  CHECK(TargetTypeAccepts("character varying(20)", "text"));
  CHECK(TargetTypeAccepts("integer[]", "bigint[]"));
  CHECK(TargetTypeAccepts("public.mood", "public.mood"));

  CHECK_FALSE(TargetTypeAccepts("bigint", "integer"));
  CHECK_FALSE(TargetTypeAccepts("json", "jsonb"));
  CHECK_FALSE(TargetTypeAccepts("text", "integer"));
  CHECK_FALSE(TargetTypeAccepts("timestamp without time zone", "timestamp with time zone"));
  CHECK_FALSE(TargetTypeAccepts("double precision", "real"));
  CHECK_FALSE(TargetTypeAccepts("integer", "integer[]"));
  CHECK_FALSE(TargetTypeAccepts("public.mood", "other.mood"));
  // A narrower modifier would round or refuse values: never accepted.
  CHECK(TargetTypeAccepts("numeric(10,2)", "numeric(12,4)"));
  CHECK(TargetTypeAccepts("numeric(10)", "numeric(12,2)"));
  CHECK(TargetTypeAccepts("timestamp(3) without time zone", "timestamp(6) without time zone"));
  CHECK(TargetTypeAccepts("numeric(10,2)[]", "numeric(12,2)[]"));
  CHECK_FALSE(TargetTypeAccepts("numeric(12,4)", "numeric(10,2)"));
  CHECK_FALSE(TargetTypeAccepts("numeric(10,2)", "numeric(10,4)"));
  CHECK_FALSE(TargetTypeAccepts("numeric", "numeric(10,2)"));
  CHECK_FALSE(TargetTypeAccepts("timestamp(6) with time zone", "timestamp(0) with time zone"));
  CHECK_FALSE(TargetTypeAccepts("timestamp with time zone", "timestamp(3) with time zone"));
  CHECK_FALSE(TargetTypeAccepts("character varying(50)", "character varying(20)"));
  CHECK(TargetTypeAccepts("timestamp with time zone", "timestamp(6) with time zone"));
  CHECK_FALSE(TargetTypeAccepts("character varying", "character varying(20)"));
}

TEST_CASE("generated_or_unfillable_target_columns_are_a_schema_mismatch", "[schema]") {
  TargetRelation generated = SameAsSource();
  generated.columns[3].generated = true;
  auto g = CheckTargetRelation(testing::SampleOrders(), generated);
  REQUIRE(g);
  CHECK(g->reason == QuarantineReason::SchemaMismatch);
  CHECK_THAT(g->detail, Catch::Contains("column doc of public.orders is a generated column on the target"));

  TargetRelation strict = SameAsSource();
  strict.columns.push_back({"region", "text", true, false, false, false});
  auto s = CheckTargetRelation(testing::SampleOrders(), strict);
  REQUIRE(s);
  CHECK(s->reason == QuarantineReason::SchemaMismatch);
  CHECK(s->column == "region");
  CHECK_THAT(s->detail, Catch::Contains("NOT NULL without a default on the target, and the source does not have it"));
}

}  // namespace unit_apply_schema_test
