// preflight.h — the decisions of `trellara check`: a DBA's preflight of one flow,
// on its source (the rows of trellara.check(flow), reported unchanged) and on its target (what
// `trellara apply` needs there). The command reads catalogs into the plain structs below; this
// file decides severities, whether a trigger or rule fires for replicated rows, the overall status,
// the exit code and the text and JSON forms. Nothing here talks to a server.
//
// Severity: ok (checked, fine), info (a fact worth knowing, nothing to do), warning (the flow runs,
// but something may differ or needs a decision), critical (the flow cannot run, or a check could
// not be made where it had to be). The status of a report is its worst severity, with info counted
// as ok. Exit code: 0 when nothing is critical, 2 when any finding is critical (1 is left to usage
// and configuration errors, which never reach a report).
#pragma once

#include <optional>
#include "trellara/base/exit_codes.h"
#include <string>
#include <string_view>
#include <vector>

namespace trellara {

enum class PreflightSeverity { Ok = 0, Info = 1, Warning = 2, Critical = 3 };

const char* PreflightSeverityName(PreflightSeverity severity);
// "ok" | "info" | "warning" | "critical" (exactly as trellara.check() writes them); nullopt else.
std::optional<PreflightSeverity> ParsePreflightSeverity(std::string_view text);

struct PreflightFinding {
  PreflightSeverity severity = PreflightSeverity::Ok;
  std::string check;    // stable snake_case name
  std::string subject;  // what it is about: a setting, a table, a trigger, a server
  std::string detail;   // what was found
  std::string remedy;   // what to do next; "" when there is nothing to do
};

struct PreflightSide {
  bool reachable = false;  // a session was opened and the checks ran
  std::vector<PreflightFinding> findings;
};

struct PreflightReport {
  std::string flow;
  PreflightSide source, target;
};

// The worst severity of the report (Ok when it holds no finding).
PreflightSeverity WorstSeverity(const PreflightReport& report);
// "ok" | "warning" | "critical": the worst severity, info counted as ok.
const char* PreflightStatus(const PreflightReport& report);
int PreflightExitCode(const PreflightReport& report);

// ---- target trigger and rule rule ---------------------------------------------------------------

// A user trigger or rule on a target table (internal triggers, e.g. of foreign keys, excluded).
struct TargetTriggerFact {
  std::string table;    // schema.table as the operator reads it
  std::string qualified;  // the same quoted for SQL
  std::string name;     // trigger or rule name (unquoted)
  char enabled = 'O';   // pg_trigger.tgenabled / pg_rewrite.ev_enabled: O origin, A always, R replica, D disabled
  std::string events;   // "INSERT OR UPDATE", for messages
  bool is_rule = false;
};

// A warning naming table, trigger (or rule) and what to do when it fires for the rows the applier
// writes with `session_replication_role` (contract.h FiresForReplicatedRows: "replica": A and R
// fire; "origin": O and A fire; D never); nullopt when it does not fire.
std::optional<PreflightFinding> ReplicatedTriggerFinding(const TargetTriggerFact& trigger,
                                                         const std::string& session_replication_role);

// ---- forms --------------------------------------------------------------------------------------

// One line per finding, source first then target ("source  ok        wal_level  wal_level: detail;
// next: remedy"), then a summary line with the counts and the status.
std::string RenderPreflightText(const PreflightReport& report);
// {"flow", "source": {"reachable", "findings": [{severity, check, subject, detail, remedy}]},
//  "target": {...}, "status"}; remedy is null when there is nothing to do.
std::string RenderPreflightJson(const PreflightReport& report);

}  // namespace trellara
