// fault.h — named fault points for the chaos suite: `TRELLARA_FAULTS=point:nth:action[,...]`.
//
// A fault point is a place in production code where a test may inject a failure (DESIGN §8).
// `Hit(point)` counts the calls at that point; on the nth call it performs the configured action:
// `crash` kills the process with SIGKILL (no cleanup, like kill -9), `stall` sleeps for
// TRELLARA_FAULT_STALL_MS (default 10000) and `error` is returned to the caller, which must fail
// the operation exactly as if the real failure had happened. `defect` is for negative controls
// (seed 002): from the nth pass on, every pass returns Defect and the caller takes a deliberately
// wrong path that the test suite must catch; such points are named `defect.<what>`.
//
// Defects are never switchable by an environment variable alone (DESIGN §8, docs/decisions.md):
// the registry refuses a `defect` action, or any rule on a `defect.*` point, unless the adapter
// called AllowDefects() behind its own explicit test-only switch (the command's hidden
// `--enable-test-defects`, the extension's superuser-only postmaster GUC
// `trellara.enable_test_defects`). A refused spec is an error naming TRELLARA_FAULTS, the entry
// and the switch; it is never silently ignored.
//
// This file must never change what the code does when no fault is configured, and never allocates
// anything at static-init time (it is linked into the Postgres extension, where static
// constructors are not allowed).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "trellara/base/result.h"

namespace trellara::fault {

enum class Action { None, Crash, Stall, Error, Defect };

// Counts one pass through `point` and performs the configured action for this pass. Crash does
// not return; Stall returns None after sleeping; Error is returned for the caller to act on.
Action Hit(std::string_view point);

// Replaces the configuration with `spec` ("point:nth:action,..."; nth counts from 1) and resets
// all counters. The environment variable TRELLARA_FAULTS is read once, on the first Hit, unless
// Configure or LoadFromEnvironment was called before. An invalid spec, or one naming a defect
// while defects are not allowed, names the offending entry and is not applied.
Status Configure(std::string_view spec);

// Permits `defect` actions and `defect.*` points in this process. Adapters call it only when
// their explicit test-only switch is on; `switch_name` is what the refusal message tells an
// operator to set (it is recorded even when `allowed` is false).
void AllowDefects(bool allowed, std::string_view switch_name);

// Reads TRELLARA_FAULTS now (adapters call it at start, after AllowDefects, so a refused or
// invalid spec stops the process before it does anything). Unset = no faults. Idempotent: a
// second call re-reads the variable and resets counters.
Status LoadFromEnvironment();

// Removes every configured fault and resets counters (tests).
void Clear();

// How many times `point` has fired its action (tests: "a scenario whose fault never fired fails").
int FiredCount(std::string_view point);

// Every configured point that has fired at least once, with how many times, in configuration
// order (a point named twice is summed). Adapters report these at exit so a test can see its fault
// fired from the process's own output.
std::vector<std::pair<std::string, int>> FiredCounts();

}  // namespace trellara::fault
