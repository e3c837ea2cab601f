// fault.h — named fault points for the chaos suite: `TRELLARA_FAULTS=point:nth:action[,...]`.
//
// A fault point is a place in production code where a test may inject a failure (DESIGN §8).
// `Hit(point)` counts the calls at that point; on the nth call it performs the configured action:
// `crash` kills the process with SIGKILL (no cleanup, like kill -9), `stall` sleeps for
// TRELLARA_FAULT_STALL_MS (default 10000) and `error` is returned to the caller, which must fail
// the operation exactly as if the real failure had happened. `defect` is for negative controls
// (seed 002): from the nth pass on, every pass returns Defect and the caller takes a deliberately
// wrong path that the test suite must catch; such points are named `defect.<what>`. This file must never change what the
// code does when no fault is configured, and never allocates anything at static-init time (it is
// linked into the Postgres extension, where static constructors are not allowed).
#pragma once

#include <string_view>

#include "trellara/result.h"

namespace trellara::fault {

enum class Action { None, Crash, Stall, Error, Defect };

// Counts one pass through `point` and performs the configured action for this pass. Crash does
// not return; Stall returns None after sleeping; Error is returned for the caller to act on.
Action Hit(std::string_view point);

// Replaces the configuration with `spec` ("point:nth:action,..."; nth counts from 1) and resets
// all counters. The environment variable TRELLARA_FAULTS is read once, on the first Hit, unless
// Configure was called before. An invalid spec names the offending entry and is not applied.
Status Configure(std::string_view spec);

// Removes every configured fault and resets counters (tests).
void Clear();

// How many times `point` has fired its action (tests: "a scenario whose fault never fired fails").
int FiredCount(std::string_view point);

}  // namespace trellara::fault
