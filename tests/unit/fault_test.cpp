// fault_test.cpp — the fault-point registry: `error` fires once on the nth pass, `defect` (negative
// controls) on every pass from the nth on, and a bad spec names the entry.
#include <catch2/catch.hpp>

#include "trellara/fault.h"

using namespace trellara;

TEST_CASE("error_fires_once_and_defect_fires_from_the_nth_pass_on", "[fault]") {
  REQUIRE(fault::Configure("t.once:2:error,defect.t_always:2:defect").ok());
  CHECK(fault::Hit("t.once") == fault::Action::None);
  CHECK(fault::Hit("t.once") == fault::Action::Error);
  CHECK(fault::Hit("t.once") == fault::Action::None);
  CHECK(fault::Hit("defect.t_always") == fault::Action::None);
  for (int i = 0; i < 5; i++) CHECK(fault::Hit("defect.t_always") == fault::Action::Defect);
  CHECK(fault::FiredCount("t.once") == 1);
  CHECK(fault::FiredCount("defect.t_always") == 5);
  CHECK(fault::Hit("t.unconfigured") == fault::Action::None);
  fault::Clear();
  CHECK(fault::Hit("defect.t_always") == fault::Action::None);
}

TEST_CASE("a_bad_fault_spec_names_the_entry", "[fault]") {
  auto bad = fault::Configure("t.x:1:explode");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("t.x:1:explode") && Catch::Contains("crash, stall, error or defect"));
  CHECK_FALSE(fault::Configure("t.x:0:error").ok());
  fault::Clear();
}
