// exit_codes.h — every exit code of the `trellara` command, in one place (core, because the
// report decisions of `check` and `pilot-package` return them). Scripts, the chaos
// suite and `trellara pilot-package` match on these numbers; changing one is an interface change.
//
// The scheme: 0 the command did what was asked and the answer is "yes"; 1 it ran and the answer
// is "no" (source and target differ, a contract fails) or it failed; 2 it could not run or could
// not establish the fact it was asked for (usage, configuration, cannot connect, cannot hold the
// flow); 3 the flow is halted at a quarantined transaction, or the log is corrupt.
#pragma once

namespace trellara {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;       // CommandFailed's default
inline constexpr int kExitCouldNotRun = 2;  // usage, configuration, setup, cannot read or connect

inline constexpr int kExitMismatch = kExitFailed;         // verify: source and target differ
inline constexpr int kExitContractFails = kExitFailed;    // contract-test: a table fails its contract
inline constexpr int kExitCouldNotCheck = kExitCouldNotRun;  // contract-test could not read the facts
inline constexpr int kExitCouldNotHold = kExitCouldNotRun;   // verify / reseed --where: no exact point
inline constexpr int kExitCouldNotRead = kExitCouldNotRun;   // repair-plan: the log or target unreadable
inline constexpr int kExitSetup = kExitCouldNotRun;          // soak: the run could not be set up
inline constexpr int kExitConfig = kExitCouldNotRun;         // the configuration file is unusable
// `check` exits 1 (not 2) when its configuration cannot be loaded: its 2 means "critical findings",
// which `pilot-package` classifies (report/pilot_package.h).
inline constexpr int kExitCheckCouldNotRun = kExitFailed;
inline constexpr int kExitCheckCritical = kExitCouldNotRun;
inline constexpr int kExitBundleOk = kExitOk;         // pilot-package: every artefact ok
inline constexpr int kExitBundleFailed = kExitFailed; // pilot-package: an artefact failed or is missing
inline constexpr int kExitUsage = kExitCouldNotRun;   // pilot-package: usage or configuration, no bundle
inline constexpr int kExitFlowBlocked = 3;   // apply / status: halted at a quarantined transaction
inline constexpr int kExitLogCorrupt = 3;    // log inspect / log records: the log is corrupt

}  // namespace trellara
