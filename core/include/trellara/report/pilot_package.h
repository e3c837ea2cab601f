// pilot_package.h — the decisions of `trellara pilot-package`: the proof
// bundle a DBA hands to a reviewer. The command runs the sub-steps (check, inspect-transaction,
// the snapshot summary, verify, status, the correctness report) and fills the plain structs below;
// this file decides what each result means (pass / fail / missing), the overall verdict and exit
// code, and renders manifest.json, SHA256SUMS and proof-bundle.md. Nothing here runs a process or
// talks to a server; digests are SHA-256 over the exact bytes written (OpenSSL EVP, checksum.h).
#pragma once

#include <cstdint>
#include "trellara/base/exit_codes.h"
#include <ctime>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace trellara::pilot {

// pass: the artefact was produced and shows what it should; fail: it was produced (or its step
// ran) and shows a problem — the failure is evidence and stays in the bundle; missing: it could
// not be produced at all (e.g. no correctness report, no applied transaction to sample).
enum class ArtefactResult { Pass, Fail, Missing };
const char* ArtefactResultName(ArtefactResult result);  // "pass" | "fail" | "missing"

struct Artefact {
  std::string name;                 // stable id: check, sample_transaction_text, ...
  std::string file;                 // file name inside the bundle directory
  std::string proves;               // what this artefact proves, for a reviewer
  std::string command;              // the exact command (or query / copy) that produced it
  std::optional<int> exit_code;     // nullopt when the step was not run as a process
  ArtefactResult result = ArtefactResult::Missing;
  std::string detail;               // one line: why it passed/failed, or how to produce it
  bool present = false;             // the file exists in the bundle
  std::string sha256_hex;           // of the file's bytes (present only)
  uint64_t bytes = 0;               // size of the file (present only)
  std::string stderr_tail;          // the end of the step's stderr, "" if none
  bool ok() const { return result == ArtefactResult::Pass; }
};

struct Bundle {
  std::string tool_version;
  std::string flow;
  std::string created_at;   // UTC, ISO 8601 (FormatUtc)
  std::string config_path;  // as given, and absolute
  std::vector<Artefact> artefacts;
};

// Exit codes of the command (base/exit_codes.h): kExitBundleOk every artefact ok, kExitBundleFailed
// any failed or missing (the bundle is still written), kExitUsage usage or configuration error.

// ---- classification of each step's outcome ------------------------------------------------------

// `trellara check`: 0 pass (warnings allowed), 2 critical findings → fail, anything else → fail
// naming the exit code.
ArtefactResult ClassifyCheck(int exit_code, std::string& detail);
// `trellara verify`: 0 pass (source and target equal), 1 mismatch → fail, 2 could not verify → fail.
ArtefactResult ClassifyVerify(int exit_code, std::string& detail);
// `trellara status --format json`: pass when it exited 0 and the flow state is neither "blocked"
// nor "target_unreachable"; `state` is the JSON's "state" (nullopt if it did not parse).
ArtefactResult ClassifyStatus(int exit_code, const std::optional<std::string>& state, std::string& detail);
// `trellara inspect-transaction`: 0 pass, else fail.
ArtefactResult ClassifyInspect(int exit_code, std::string& detail);

// One table of trellara.snapshot_status() for the flow.
struct SnapshotTable {
  std::string table, run_id, state;
};
// Pass when every table is handoff_ready, or when no table was ever copied (a flow started on
// empty tables has nothing to snapshot: said in `detail`); fail naming the tables in another state.
ArtefactResult ClassifySnapshot(const std::vector<SnapshotTable>& tables, std::string& detail);

// ---- verdict and rendering ----------------------------------------------------------------------

bool AllOk(const Bundle& bundle);
int ExitCode(const Bundle& bundle);  // kExitBundleOk or kExitBundleFailed

// Lowercase hex SHA-256 of `bytes`.
std::string Sha256Hex(std::span<const uint8_t> bytes);
std::string Sha256Hex(const std::string& bytes);

// "2026-12-01T03:04:05Z".
std::string FormatUtc(std::time_t t);

// A command line for display and re-running: arguments without shell metacharacters as they are,
// the others in single quotes (a ' inside written '\''), joined by spaces.
std::string QuoteCommand(const std::vector<std::string>& argv);

// manifest.json: tool_version, flow, created_at, config_path, verdict ("pass" | "fail"), ok, and
// per artefact: name, file, present, sha256, bytes, command, exit_code, result, ok, detail, stderr.
std::string RenderManifestJson(const Bundle& bundle);

// SHA256SUMS in `sha256sum` format ("<hex>  <file>\n"), for every present artefact followed by
// `extra` (file name, bytes) pairs such as manifest.json and proof-bundle.md.
std::string RenderSha256Sums(const Bundle& bundle,
                             const std::vector<std::pair<std::string, std::string>>& extra);

// proof-bundle.md: per artefact what it proves, its result, digest and the command; how to
// re-check the digests; the overall verdict.
std::string RenderProofBundleMarkdown(const Bundle& bundle);

}  // namespace trellara::pilot
