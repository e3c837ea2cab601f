// preflight.cpp — severities, the trigger rule, the status, the exit code and the output forms of
// `trellara check` (preflight.h). It never talks to a server and never drops or reorders a
// finding it is given.
#include "trellara/report/preflight.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "trellara/apply/apply_plan.h"
#include "trellara/report/contract.h"

namespace trellara {
namespace {

// QuoteIdentifier refuses only names longer than any catalog name; a catalog name always quotes.
std::string Quoted(const std::string& name) {
  auto quoted = QuoteIdentifier(name);
  return quoted ? *quoted : name;
}

PreflightSeverity SideWorst(const PreflightSide& side) {
  PreflightSeverity worst = PreflightSeverity::Ok;
  for (const auto& f : side.findings) worst = std::max(worst, f.severity);
  return worst;
}

nlohmann::ordered_json SideJson(const PreflightSide& side) {
  nlohmann::ordered_json j;
  j["reachable"] = side.reachable;
  j["findings"] = nlohmann::ordered_json::array();
  for (const auto& f : side.findings)
    j["findings"].push_back({{"severity", PreflightSeverityName(f.severity)},
                             {"check", f.check},
                             {"subject", f.subject},
                             {"detail", f.detail},
                             {"remedy", f.remedy.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(f.remedy)}});
  return j;
}

// One finding per line: a line break inside a server message (libpq's "\n\tIs the server
// running ...") becomes a space. JSON keeps the text unchanged.
std::string OneLine(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); i++) {
    if (text[i] != '\n' && text[i] != '\r') {
      out.push_back(text[i]);
      continue;
    }
    while (i + 1 < text.size() && (text[i + 1] == '\t' || text[i + 1] == ' ' || text[i + 1] == '\n')) i++;
    out.push_back(' ');
  }
  return out;
}

}  // namespace

const char* PreflightSeverityName(PreflightSeverity severity) {
  switch (severity) {
    case PreflightSeverity::Ok: return "ok";
    case PreflightSeverity::Info: return "info";
    case PreflightSeverity::Warning: return "warning";
    case PreflightSeverity::Critical: return "critical";
  }
  return "critical";
}

std::optional<PreflightSeverity> ParsePreflightSeverity(std::string_view text) {
  if (text == "ok") return PreflightSeverity::Ok;
  if (text == "info") return PreflightSeverity::Info;
  if (text == "warning") return PreflightSeverity::Warning;
  if (text == "critical") return PreflightSeverity::Critical;
  return std::nullopt;
}

PreflightSeverity WorstSeverity(const PreflightReport& report) {
  return std::max(SideWorst(report.source), SideWorst(report.target));
}

const char* PreflightStatus(const PreflightReport& report) {
  switch (WorstSeverity(report)) {
    case PreflightSeverity::Ok:
    case PreflightSeverity::Info: return "ok";
    case PreflightSeverity::Warning: return "warning";
    case PreflightSeverity::Critical: return "critical";
  }
  return "critical";
}

int PreflightExitCode(const PreflightReport& report) {
  return WorstSeverity(report) == PreflightSeverity::Critical ? kExitCheckCritical : kExitOk;
}

std::optional<PreflightFinding> ReplicatedTriggerFinding(const TargetTriggerFact& trigger,
                                                         const std::string& session_replication_role) {
  if (!FiresForReplicatedRows(trigger.enabled, session_replication_role)) return std::nullopt;
  const std::string kind = trigger.is_rule ? "rule" : "trigger";
  const std::string how = trigger.enabled == 'A'   ? "ENABLE ALWAYS"
                          : trigger.enabled == 'R' ? "ENABLE REPLICA"
                                                   : "enabled (ENABLE, origin)";
  PreflightFinding f;
  f.severity = PreflightSeverity::Warning;
  f.check = trigger.is_rule ? "target_rule_fires" : "target_trigger_fires";
  f.subject = trigger.table + " " + kind + " " + trigger.name;
  f.detail = kind + " " + trigger.name + " (" + trigger.events + ", " + how + ") on " + trigger.table +
             " fires for every replicated row the applier writes with session_replication_role = " +
             session_replication_role + ": its side effects happen on the target for each source change";
  const std::string disable = "ALTER TABLE " + trigger.qualified + " DISABLE " + (trigger.is_rule ? "RULE " : "TRIGGER ") +
                              Quoted(trigger.name);
  if (session_replication_role == "replica")
    f.remedy = "if it must not see replicated rows: " + disable + "; (or ENABLE " + (trigger.is_rule ? "RULE " : "TRIGGER ") +
               Quoted(trigger.name) + " so it fires only for local writes) on the target; keep it if the target "
               "needs its effect for replicated rows";
  else
    f.remedy = "if it must not see replicated rows: set apply.session_replication_role = \"replica\" (then only "
               "ENABLE ALWAYS/REPLICA " + kind + "s fire), or " + disable + "; on the target";
  return f;
}

std::string RenderPreflightText(const PreflightReport& report) {
  std::string out;
  std::array<size_t, 4> counts{};
  const std::pair<const char*, const PreflightSide*> sides[] = {{"source", &report.source}, {"target", &report.target}};
  for (const auto& [name, side] : sides) {
    for (const auto& f : side->findings) {
      counts[static_cast<size_t>(f.severity)]++;
      std::string severity = PreflightSeverityName(f.severity);
      severity.resize(8, ' ');
      out += std::string(name) + "  " + severity + "  " + OneLine(f.check) + "  " + OneLine(f.subject) + ": " +
             OneLine(f.detail);
      if (!f.remedy.empty()) out += "; next: " + OneLine(f.remedy);
      out += "\n";
    }
  }
  const std::string status = PreflightStatus(report);
  out += "check flow " + report.flow + ": source " + (report.source.reachable ? "checked" : "not checked") +
         ", target " + (report.target.reachable ? "checked" : "not checked") + "; " + std::to_string(counts[0]) +
         " ok, " + std::to_string(counts[1]) + " info, " + std::to_string(counts[2]) + " warning, " +
         std::to_string(counts[3]) + " critical: " + status;
  if (status == std::string("critical"))
    out += " (the flow cannot run safely: fix the critical findings above, then run trellara check again)";
  else if (status == std::string("warning"))
    out += " (the flow can run; read the warnings above)";
  out += "\n";
  return out;
}

std::string RenderPreflightJson(const PreflightReport& report) {
  nlohmann::ordered_json j;
  j["flow"] = report.flow;
  j["source"] = SideJson(report.source);
  j["target"] = SideJson(report.target);
  j["status"] = PreflightStatus(report);
  return j.dump(2) + "\n";
}

}  // namespace trellara
