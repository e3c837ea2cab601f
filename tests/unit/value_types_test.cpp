// value_types_test.cpp — the type spellings of the statements the applier builds
// (core value_types.h), against every column type spelling PostgreSQL 15 prints
// (tests/fixtures/pg15-column-types.tsv). End to end on a server, every path:
// tests/integration/test_apply_type_modifiers.py every_capturable_type_survives_every_apply_path.
//
// The fixture was made on a fresh PostgreSQL 15 cluster with search_path '' from pg_type (every
// pg_catalog type of type kind b, r, m, e, d that is defined, not a pseudo-type and not an array,
// then each of their arrays) and from the columns of a table holding the modifier forms, an enum,
// a composite and two domains: format_type(atttypid, atttypmod), format_type(atttypid, -1), the
// category (a domain's base type's).
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "trellara/apply/value_types.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_value_types_test {

using namespace trellara;

namespace {

struct Spelling {
  std::string with_modifier;
  std::string unmodified;
  char category = 0;
};

std::vector<Spelling> Fixture() {
  std::ifstream file(std::string(TRELLARA_SOURCE_DIR) + "/tests/fixtures/pg15-column-types.tsv");
  REQUIRE(file.good());
  std::vector<Spelling> out;
  std::string line;
  while (std::getline(file, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Spelling s;
    std::string category;
    REQUIRE(std::getline(fields, s.with_modifier, '\t'));
    REQUIRE(std::getline(fields, s.unmodified, '\t'));
    REQUIRE(std::getline(fields, category, '\t'));
    REQUIRE(category.size() == 1);
    s.category = category[0];
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

TEST_CASE("every_postgres_type_spelling_loses_only_its_modifier", "[value_types]") {
  const auto spellings = Fixture();
  REQUIRE(spellings.size() > 150);  // 82 types, their arrays and the modifier forms
  for (const auto& s : spellings) {
    INFO(s.with_modifier);
    const std::string stripped = WithoutModifier(s.with_modifier);
    CHECK(stripped == s.unmodified);
    CHECK(WithoutModifier(s.unmodified) == s.unmodified);
  }
}

TEST_CASE("a_batched_update_casts_each_value_to_the_unmodified_type", "[value_types]") {
  for (const auto& s : Fixture()) {
    INFO(s.with_modifier);
    auto cast = BatchCastType(s.unmodified, "c");
    REQUIRE(cast.ok());
    CHECK(*cast == s.unmodified);  // never "character" (char(1)) or "bit" (bit(1))
    CHECK(*cast == WithoutModifier(s.with_modifier));
  }
  CHECK_FALSE(BatchCastType("", "c").ok());
}

TEST_CASE("a_full_row_match_compares_by_equality_only_where_it_is_identity", "[value_types]") {
  for (const auto& s : Fixture()) {
    INFO(s.with_modifier);
    const std::string p = FullRowMatchPredicate("\"c\"", 7, s.with_modifier);
    if (EqualityOf(s.with_modifier) == TypeEquality::Identity) {
      CHECK(p.rfind("\"c\" IS NOT DISTINCT FROM $7::" + s.with_modifier, 0) == 0);
    } else {
      CHECK(p == "\"c\"::text IS NOT DISTINCT FROM ($7::" + s.with_modifier + ")::text COLLATE \"C\"");
    }
  }
  // Equality looser than identity, or none: by text.
  for (const char* t : {"numeric", "numeric(10,2)", "interval hour to minute", "real", "double precision", "jsonb",
                        "json", "xml", "point", "box", "circle", "line", "lseg", "path", "polygon", "bpchar",
                        "public.mood", "public.code", "public.pair", "numrange", "tsvector", "pg_snapshot",
                        "numeric[]", "json[]"})
    CHECK(EqualityOf(t) == TypeEquality::Other);
  CHECK(EqualityOf("integer") == TypeEquality::Identity);
  CHECK(EqualityOf("bigint[]") == TypeEquality::Identity);
  CHECK(EqualityOf("character(3)") == TypeEquality::Identity);
  CHECK(EqualityOf("character varying(5)[]") == TypeEquality::Identity);
  CHECK(EqualityOf("\"bit\"") == TypeEquality::Identity);
  CHECK(EqualityOf("bit(4)") == TypeEquality::Identity);
  CHECK(EqualityOf("timestamp(0) with time zone") == TypeEquality::Identity);
  CHECK(EqualityOf("\"char\"") == TypeEquality::Identity);
  // Collatable types compare under "C" (a nondeterministic column collation takes 'a' for 'A').
  CHECK(FullRowMatchPredicate("\"c\"", 1, "text") == "\"c\" IS NOT DISTINCT FROM $1::text COLLATE \"C\"");
  CHECK(FullRowMatchPredicate("\"c\"", 2, "integer") == "\"c\" IS NOT DISTINCT FROM $2::integer");
  // A quoted name with parentheses is a name, not a modifier.
  CHECK(WithoutModifier("public.\"odd(name)\"[]") == "public.\"odd(name)\"[]");
  CHECK(WithoutModifier("interval day to second(3)[]") == "interval[]");
}

}  // namespace unit_value_types_test
