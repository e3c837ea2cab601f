// cadence_test.cpp — the named waits of base/cadence.h: the idle backoff's doubling and bounds.
#include <catch2/catch.hpp>

#include "trellara/base/cadence.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_cadence_test {

using namespace trellara::cadence;
using std::chrono::milliseconds;

TEST_CASE("an_idle_backoff_doubles_to_its_bound_and_drops_back_on_work", "[cadence]") {
  milliseconds wait = kApplierTail.min;
  std::vector<long> seen;
  for (int i = 0; i < 10; i++) {
    seen.push_back(static_cast<long>(wait.count()));
    wait = kApplierTail.After(wait, false);
  }
  CHECK(seen == std::vector<long>{2, 4, 8, 16, 32, 64, 128, 200, 200, 200});
  CHECK(kApplierTail.After(wait, true) == kApplierTail.min);
  // The relay starts idle (its bound) and drops to 5 ms after a pass that read a transaction.
  CHECK(kRelayPass.After(kRelayPass.max, false) == milliseconds(100));
  CHECK(kRelayPass.After(kRelayPass.max, true) == milliseconds(5));
  CHECK(kRelayPass.After(milliseconds(0), false) == kRelayPass.min);  // never below the minimum
}

}  // namespace unit_cadence_test
