// repair_plan.cpp — see repair_plan.h.
#include "trellara/report/repair_plan.h"

#include <cstdio>

#include <algorithm>
#include <cctype>

#include "trellara/base/fault.h"

namespace trellara {
namespace {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string QuotedName(const std::string& name) {
  std::string out = "\"";
  for (char c : name) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// "public.orders" -> "public"."orders" (the first dot separates: schema names with dots are
// not supported by this display form anyway).
std::string QualifiedFromDisplay(const std::string& display) {
  const size_t dot = display.find('.');
  if (dot == std::string::npos) return QuotedName(display);
  return QuotedName(display.substr(0, dot)) + "." + QuotedName(display.substr(dot + 1));
}

void AddUnique(std::vector<std::string>& list, const std::string& item) {
  if (!item.empty() && std::find(list.begin(), list.end(), item) == list.end()) list.push_back(item);
}

bool IsOneOf(const std::string& reason, std::initializer_list<QuarantineReason> reasons) {
  for (QuarantineReason r : reasons)
    if (reason == QuarantineReasonName(r)) return true;
  return false;
}

struct Context {
  const RepairFacts& facts;
  std::string config;  // shell-quoted config path
  std::string source;  // psql conninfo word
  std::string target;

  std::string Psql(const std::string& conninfo_word, const std::string& sql) const {
    return "psql " + conninfo_word + " -v ON_ERROR_STOP=1 -c " + ShellQuote(sql);
  }
  std::string Snapshot(const std::string& table) const {
    return "trellara snapshot --config " + config + " --table " + ShellQuote(table) + " --force";
  }
};

std::string Boundary(const RepairTransaction& tx) {
  return "transaction " + std::to_string(tx.xid) + " (commit " + FormatLsn(tx.commit_lsn) + ")";
}

// The target statement of a contract fix ("ALTER ...; -- on the target ..."), or nullopt when the
// fix is not a plain target statement (a placeholder, a source-side change).
std::optional<std::string> TargetStatement(const std::string& fix) {
  const std::string marker = "; -- on the target";
  const size_t at = fix.find(marker);
  if (at == std::string::npos) return std::nullopt;
  std::string statement = fix.substr(0, at);
  if (statement.find('<') != std::string::npos) return std::nullopt;
  return statement;
}

void RepairDdlCommands(const Context& ctx, const RepairTransaction& tx, std::vector<std::string>& out) {
  const bool halt = tx.reason == QuarantineReasonName(QuarantineReason::DdlPolicyHalt);
  for (const RepairDdl& d : tx.ddls) {
    const std::string relation = d.ddl.relation_schema + "." + d.ddl.relation_name;
    out.push_back("# " + d.description);
    out.push_back("# the source ran: " + d.ddl.sql);
    // What the applier itself would run under ddl = "apply", against the target as it is now.
    const DdlPlan& plan = d.plan;
    switch (plan.action) {
      case DdlAction::Execute: {
        std::string sql;
        for (const auto& s : plan.statements) sql += (sql.empty() ? "" : "; ") + s;
        out.push_back(std::string("# ") + (halt ? "the statements trellara would run on the target (ddl = \"apply\")"
                                                 : "the statements that reproduce it on the target") +
                      ", in one transaction:");
        out.push_back(ctx.Psql(ctx.target, sql));
        break;
      }
      case DdlAction::NoTargetChange:
        out.push_back("# nothing to change on the target for this command" +
                      (plan.notes.empty() ? std::string() : ": " + plan.notes.front()));
        break;
      case DdlAction::Quarantine:
        out.push_back("# trellara cannot reproduce it exactly (" + plan.cause.detail +
                      "); if the statement means the same on the target, run it there:");
        out.push_back(ctx.Psql(ctx.target, d.ddl.sql));
        if (!relation.empty() && d.ddl.definition) {
          const std::string after = d.ddl.definition->schema + "." + d.ddl.definition->name;
          out.push_back("# then copy the table again so its rows are exactly the source's (exact handoff):");
          out.push_back(ctx.Snapshot(after));
        }
        break;
    }
  }
  if (tx.ddls.empty())
    out.push_back("# the DDL record of " + Boundary(tx) + " could not be read from the log (" +
                  (tx.log_error.empty() ? std::string("no DDL change found") : tx.log_error) +
                  "); the quarantine message above names the statement: reproduce it on the target by hand");
}

void RepairSchemaCommands(const Context& ctx, const RepairTransaction& tx, std::vector<std::string>& out) {
  bool any = false;
  for (const ContractFinding& f : ctx.facts.contract) {
    if (f.severity != ContractSeverity::Error) continue;
    if (std::find(tx.relations.begin(), tx.relations.end(), f.relation) == tx.relations.end()) continue;
    any = true;
    out.push_back("# " + f.code + ": " + f.problem);
    if (auto statement = TargetStatement(f.fix))
      out.push_back(ctx.Psql(ctx.target, *statement));
    else
      out.push_back("# fix: " + f.fix);
  }
  if (!any)
    out.push_back("# contract-test " +
                  (ctx.facts.contract_error.empty() ? std::string("reports no error for these tables now")
                                                    : "could not be read (" + ctx.facts.contract_error + ")") +
                  ": change the target as the quarantine message says");
  // The target's existing rows cannot be repaired in place when the source's definition changed
  // without the target following it: drift (no DDL record says what happened), a column the
  // source added (its existing rows got the column's default or a rewrite the target never saw),
  // a table the target lacks (its rows were never copied). Copy them again under the new
  // definition with an exact handoff (seed source_schema_handoff_recovery). A type mismatch alone
  // leaves the values as they were: the copy is then only an alternative.
  const bool recopy = IsOneOf(tx.reason, {QuarantineReason::SchemaDrift, QuarantineReason::MissingColumn,
                                          QuarantineReason::MissingTable});
  // Negative control (tests only, TRELLARA_FAULTS=defect.repair_plan_omits_resnapshot:1:defect;
  // seed row source_schema_handoff_recovery, caught by
  // negative_control_repair_plan_omits_resnapshot_is_caught in tests/integration/test_contract_repair.py):
  // the plan repairs the definition only and leaves the re-snapshot out, as if the target's
  // existing rows needed nothing once it accepts the new definition.
  if (recopy && fault::Hit("defect.repair_plan_omits_resnapshot") == fault::Action::Defect) return;
  out.push_back(recopy ? "# then copy the tables again under the new definition, with an exact handoff (rows the "
                         "source changed with its definition cannot be repaired in place):"
                       : "# if the target lost data with its definition (a column dropped there), also copy the "
                         "tables again with an exact handoff:");
  for (const auto& r : tx.relations) out.push_back((recopy ? "" : "# ") + ctx.Snapshot(r));
}

void RepairRowCommands(const Context& ctx, const RepairTransaction& tx, std::vector<std::string>& out) {
  out.push_back("# the target's rows differ from the source's (the message names the relation and key): fix that row "
                "on the target, looking at the source's:");
  for (const auto& r : tx.relations)
    out.push_back(ctx.Psql(ctx.source, "SELECT * FROM " + QualifiedFromDisplay(r) + " WHERE <the key in the message>"));
  out.push_back("# or, when the data cannot be repaired in place, copy the tables again with an exact handoff (the "
                "copy's boundary decides which streamed changes it already holds):");
  for (const auto& r : tx.relations) out.push_back(ctx.Snapshot(r));
}

RepairStep RepairStepFor(const Context& ctx) {
  RepairStep step;
  step.title = "repair";
  for (const RepairTransaction& tx : ctx.facts.open) {
    std::vector<std::string>& out = step.commands;
    out.push_back("# " + Boundary(tx) + ", " + tx.reason + ": " + tx.message);
    if (tx.state == QuarantineState::ReplayReady) {
      out.push_back("# already marked replay-ready: the applier retries it; if it fails again it is quarantined "
                    "again with the new cause");
      continue;
    }
    if (IsOneOf(tx.reason, {QuarantineReason::DdlPolicyHalt, QuarantineReason::DdlUnsupported})) {
      RepairDdlCommands(ctx, tx, out);
    } else if (IsOneOf(tx.reason, {QuarantineReason::SchemaDrift, QuarantineReason::MissingColumn,
                                   QuarantineReason::SchemaMismatch, QuarantineReason::MissingTable})) {
      RepairSchemaCommands(ctx, tx, out);
    } else if (IsOneOf(tx.reason, {QuarantineReason::ZeroRowsMatched, QuarantineReason::ManyRowsMatched,
                                   QuarantineReason::DuplicateKey, QuarantineReason::SnapshotPartialUpdate})) {
      RepairRowCommands(ctx, tx, out);
    } else if (IsOneOf(tx.reason, {QuarantineReason::BarrierFailure})) {
      out.push_back("trellara log inspect --dir " + ShellQuote(ctx.facts.log_directory));
      out.push_back("# the log holds no complete verified copy of it: the log must be repaired or the tables reseeded");
    } else {
      out.push_back("# repair the target as the message says; nothing here can be derived from the log");
    }
  }
  for (const RepairSnapshotTable& t : ctx.facts.failed_snapshots) {
    step.commands.push_back("# snapshot of " + t.table + " (run " + t.run_id + ") failed: " + t.last_error);
    step.commands.push_back("trellara snapshot --config " + ctx.config + " --run-id " + ShellQuote(t.run_id));
  }
  step.why = "the applier retries a quarantined transaction exactly as the log holds it, so the target must first "
             "accept it: its definition must match the transaction's, and its rows the source's at that boundary";
  return step;
}

}  // namespace

bool ConninfoHasPassword(const std::string& conninfo) {
  std::string lower = conninfo;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower.starts_with("postgresql://") || lower.starts_with("postgres://")) {
    const size_t start = lower.find("://") + 3;
    const size_t end = lower.find_first_of("/?", start);
    const std::string authority = lower.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const size_t at = authority.rfind('@');
    if (at != std::string::npos && authority.substr(0, at).find(':') != std::string::npos) return true;
    return lower.find("password=", start) != std::string::npos;
  }
  // keyword = value: "password" as a keyword (spaces around '=' allowed).
  size_t pos = 0;
  while ((pos = lower.find("password", pos)) != std::string::npos) {
    const bool starts_word = pos == 0 || std::isspace(static_cast<unsigned char>(lower[pos - 1]));
    size_t after = pos + 8;
    while (after < lower.size() && std::isspace(static_cast<unsigned char>(lower[after]))) after++;
    if (starts_word && after < lower.size() && lower[after] == '=') return true;
    pos += 8;
  }
  return false;
}

std::string ConninfoForCommand(const std::string& conninfo, const std::string& side) {
  if (conninfo.empty() || ConninfoHasPassword(conninfo)) return ShellQuote("<" + side + " conninfo>");
  return ShellQuote(conninfo);
}

namespace {

// The target holds transactions the promoted source never had (issue 41): nothing in the log can
// take them back. The way out is to forget them on the target and copy every table again from the
// promoted source at exact boundaries, then compare.
RepairPlan TimelineReseedPlan(const RepairFacts& facts) {
  RepairPlan plan;
  const std::string config = ShellQuote(facts.config_path);
  const std::string target = ConninfoForCommand(facts.target_conninfo, "target");
  char branch[32];
  std::snprintf(branch, sizeof branch, "%X/%X", static_cast<unsigned>(facts.timeline_branch_lsn >> 32),
                static_cast<unsigned>(facts.timeline_branch_lsn));
  const std::string flow_literal = "'" + facts.flow + "'";
  RepairStep inspect;
  inspect.title = "inspect what only the old primary had";
  inspect.commands.push_back("# " + facts.timeline_refusal);
  inspect.commands.push_back("psql " + target + " -c " +
                             ShellQuote("SELECT commit_lsn, xid, applied_at FROM trellara.applied_transactions WHERE "
                                        "flow = " + flow_literal + " AND commit_lsn > '" + branch +
                                        "' ORDER BY commit_lsn"));
  inspect.why = "these transactions were applied from the old primary past where source timeline " +
                std::to_string(facts.timeline) + " branched (" + branch +
                "); the promoted source never had them, so their effects on the target are in no source";
  plan.steps.push_back(std::move(inspect));
  RepairStep forget;
  forget.title = "forget them on the target and follow the promoted source";
  forget.commands.push_back("# stop the applier of flow " + facts.flow + " first (systemctl stop trellara-apply@" +
                            facts.flow + ")");
  forget.commands.push_back(
      "psql " + target + " -c " +
      ShellQuote("BEGIN; DELETE FROM trellara.applied_transactions WHERE flow = " + flow_literal +
                 " AND commit_lsn > '" + branch + "'; SELECT pg_replication_origin_advance('trellara_" + facts.flow +
                 "', '" + branch + "'); INSERT INTO trellara.source_timelines (flow, timeline, branch_lsn) VALUES (" +
                 flow_literal + ", " + std::to_string(facts.timeline) + ", '" + branch +
                 "') ON CONFLICT DO NOTHING; COMMIT;"));
  forget.why = "the dedup rows past the branch point name transactions of the old timeline: left there, the promoted "
               "source's transactions at the same positions would be taken for them";
  plan.steps.push_back(std::move(forget));
  RepairStep reseed;
  reseed.title = "reseed every table from the promoted source";
  reseed.commands.push_back("# start the applier again (systemctl start trellara-apply@" + facts.flow + "), then:");
  reseed.commands.push_back("trellara snapshot --config " + config + " --force");
  reseed.why = "the copy replaces what the old primary's transactions changed, at exact boundaries the running applier "
               "agrees with (docs/snapshot.md)";
  plan.steps.push_back(std::move(reseed));
  RepairStep verify;
  verify.title = "verify";
  verify.commands.push_back("trellara verify --config " + config);
  verify.why = "exit 0 proves the target equals the promoted source at one exact point";
  plan.steps.push_back(std::move(verify));
  for (size_t i = 0; i < plan.steps.size(); i++) plan.steps[i].n = static_cast<int>(i + 1);
  return plan;
}

}  // namespace

RepairPlan BuildRepairPlan(const RepairFacts& facts) {
  if (!facts.timeline_refusal.empty()) return TimelineReseedPlan(facts);
  RepairPlan plan;
  if (facts.open.empty() && facts.failed_snapshots.empty()) return plan;
  Context ctx{facts, ShellQuote(facts.config_path), ConninfoForCommand(facts.source_conninfo, "source"),
              ConninfoForCommand(facts.target_conninfo, "target")};
  std::vector<std::string> relations;
  for (const auto& tx : facts.open)
    for (const auto& r : tx.relations) AddUnique(relations, r);
  for (const auto& t : facts.failed_snapshots) AddUnique(relations, t.table);

  RepairStep inspect;
  inspect.title = "inspect";
  inspect.commands.push_back("trellara status --config " + ctx.config);
  if (!facts.open.empty()) inspect.commands.push_back("trellara quarantine list --config " + ctx.config);
  for (const auto& tx : facts.open) {
    if (tx.log_offsets.empty())
      inspect.commands.push_back("# " + Boundary(tx) + ": its records were not found in the log at " +
                                 facts.log_directory + (tx.log_error.empty() ? "" : " (" + tx.log_error + ")"));
    for (uint64_t offset : tx.log_offsets)
      inspect.commands.push_back("trellara inspect-transaction --dir " + ShellQuote(facts.log_directory) + " --offset " +
                                 std::to_string(offset));
  }
  inspect.why = "where the flow stopped and what the stopped transaction holds: its changes, relations and DDL";
  plan.steps.push_back(std::move(inspect));

  RepairStep discover;
  discover.title = "discover the schema on both sides";
  for (const auto& r : relations) {
    discover.commands.push_back("psql " + ctx.source + " -c " + ShellQuote("\\d " + QualifiedFromDisplay(r)));
    discover.commands.push_back("psql " + ctx.target + " -c " + ShellQuote("\\d " + QualifiedFromDisplay(r)));
  }
  if (relations.empty()) discover.commands.push_back("# no relation is known: read the message in step 1");
  discover.why = "the source's definition is what the transaction carries; the target's is what must accept it";
  plan.steps.push_back(std::move(discover));

  RepairStep contract;
  contract.title = "contract test";
  contract.commands.push_back("trellara contract-test --config " + ctx.config);
  contract.why = "names every difference that would stop or diverge the flow, with its fix; run it again after the "
                 "repair: exit 0 means the target can take the flow";
  plan.steps.push_back(std::move(contract));

  plan.steps.push_back(RepairStepFor(ctx));

  bool any_quarantined = false;
  RepairStep ready;
  ready.title = "mark the exact boundary replay-ready";
  for (const auto& tx : facts.open) {
    if (tx.state != QuarantineState::Quarantined) continue;
    any_quarantined = true;
    ready.commands.push_back("trellara quarantine replay-ready --config " + ctx.config + " --xid " +
                             std::to_string(tx.xid) + " --commit-lsn " + FormatLsn(tx.commit_lsn));
  }
  ready.why = "the applier retries only the exact (xid, commit LSN) marked, and only after the repair";
  if (any_quarantined) plan.steps.push_back(std::move(ready));

  RepairStep resume;
  resume.title = "resume";
  if (facts.applier_running) {
    resume.commands.push_back("# the running applier retries a replay-ready transaction within a second; follow it:");
    resume.commands.push_back("trellara status --config " + ctx.config);
  } else {
    resume.commands.push_back("trellara apply --config " + ctx.config);
  }
  resume.why = facts.applier_running ? "an applier is running: it picks the replay-ready boundary up by itself"
                                     : "no applier is running: start it (it runs until stopped; verify needs it)";
  plan.steps.push_back(std::move(resume));

  RepairStep verify;
  verify.title = "verify";
  std::string command = "trellara verify --config " + ctx.config;
  for (const auto& r : relations) command += " --table " + ShellQuote(r);
  verify.commands.push_back(command);
  verify.why = "compares source and target at one exact point while the applier runs: exit 0 means the repaired "
               "tables match";
  plan.steps.push_back(std::move(verify));

  for (size_t i = 0; i < plan.steps.size(); i++) plan.steps[i].n = static_cast<int>(i + 1);
  return plan;
}

}  // namespace trellara
