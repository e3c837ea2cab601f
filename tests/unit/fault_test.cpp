// fault_test.cpp — the fault-point registry: `error` fires once on the nth pass, `defect` (negative
// controls) on every pass from the nth on, a bad spec names the entry, and a defect is refused
// unless the adapter allowed it behind its test-only switch.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "trellara/base/fault.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_fault_test {

using namespace trellara;

TEST_CASE("error_fires_once_and_defect_fires_from_the_nth_pass_on", "[fault]") {
  fault::AllowDefects(true, "--enable-test-defects");
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
  fault::AllowDefects(false, "");
}

TEST_CASE("a_defect_is_refused_unless_the_adapter_allowed_it", "[fault]") {
  fault::AllowDefects(false, "--enable-test-defects");
  auto refused = fault::Configure("t.ok:1:error,defect.t_x:1:defect");
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("TRELLARA_FAULTS") && Catch::Contains("defect.t_x") &&
                                          Catch::Contains("--enable-test-defects"));
  // Nothing of a refused spec is applied, not even its ordinary entries.
  CHECK(fault::Hit("t.ok") == fault::Action::None);
  CHECK(fault::Hit("defect.t_x") == fault::Action::None);
  // Any rule on a defect point is a defect, whatever its action; so is a defect action anywhere.
  CHECK_FALSE(fault::Configure("defect.t_x:1:error").ok());
  CHECK_FALSE(fault::Configure("t.y:1:defect").ok());
  // Ordinary faults stay available without the switch.
  CHECK(fault::Configure("t.ok:1:error").ok());
  CHECK(fault::Hit("t.ok") == fault::Action::Error);
  // With the switch the same spec is accepted and the defect fires.
  fault::AllowDefects(true, "--enable-test-defects");
  REQUIRE(fault::Configure("defect.t_x:1:defect").ok());
  CHECK(fault::Hit("defect.t_x") == fault::Action::Defect);
  fault::Clear();
  fault::AllowDefects(false, "");
}

TEST_CASE("a_defect_in_the_environment_is_refused_at_load_without_the_switch", "[fault]") {
  ::setenv("TRELLARA_FAULTS", "defect.t_env:1:defect", 1);
  fault::AllowDefects(false, "trellara.enable_test_defects = on");
  auto refused = fault::LoadFromEnvironment();
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(refused.error().message, Catch::Contains("TRELLARA_FAULTS") && Catch::Contains("defect.t_env") &&
                                          Catch::Contains("trellara.enable_test_defects = on"));
  CHECK(fault::Hit("defect.t_env") == fault::Action::None);
  fault::AllowDefects(true, "trellara.enable_test_defects = on");
  REQUIRE(fault::LoadFromEnvironment().ok());
  CHECK(fault::Hit("defect.t_env") == fault::Action::Defect);
  ::unsetenv("TRELLARA_FAULTS");
  fault::Clear();
  fault::AllowDefects(false, "");
}

TEST_CASE("a_bad_fault_spec_names_the_entry", "[fault]") {
  auto bad = fault::Configure("t.x:1:explode");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.error().message, Catch::Contains("t.x:1:explode") && Catch::Contains("crash, stall, error or defect"));
  CHECK_FALSE(fault::Configure("t.x:0:error").ok());
  fault::Clear();
}

TEST_CASE("fired_counts_list_only_points_that_fired_summed_per_point", "[fault]") {
  fault::AllowDefects(false, "--enable-test-defects");
  REQUIRE(fault::Configure("t.a:1:error,t.b:5:error,t.a:2:error").ok());
  CHECK(fault::FiredCounts().empty());
  fault::Hit("t.a");
  fault::Hit("t.a");
  fault::Hit("t.b");
  const auto fired = fault::FiredCounts();
  REQUIRE(fired.size() == 1);  // t.b was hit but never fired
  CHECK(fired[0].first == "t.a");
  CHECK(fired[0].second == 2);
  fault::Clear();
}

}  // namespace unit_fault_test
