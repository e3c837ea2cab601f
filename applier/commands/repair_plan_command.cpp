// repair_plan_command.cpp — `trellara repair-plan --config F [--format text|json]`: the numbered,
// copy-pasteable way out of a halted flow (seed source_schema_handoff_recovery,
// docs/schema-changes.md "Operator commands in detail").
//
// This file reads facts and prints core's plan (repair_plan.h BuildRepairPlan): the flow's open
// quarantine rows, failed snapshot tables and apply status on the target; each quarantined
// transaction's records in the flow's log, found by commit LSN from the applier's consumer offset
// on (their relations, and for each DDL change what core PlanDdl would run against the target's
// definition as it is now); the contract-test findings of the affected relations (when the source
// is reachable). It never writes to the target, the source or the log.
//
// Exit 0 with "nothing to repair" when nothing is open; 0 with the plan otherwise; 2 when the
// flow's state on the target could not be read. A log or source that cannot be read does not stop
// the plan: the plan says what could not be read.
#include <CLI/CLI.hpp>

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "commands/commands.h"
#include "commands/log_record_view.h"
#include "pg/source_timelines.h"
#include "trellara/apply/apply_plan.h"
#include "trellara/record/codec.h"
#include "trellara/apply/ddl_apply.h"
#include "trellara/capture/slot_sync.h"
#include "trellara/log/consumer_offsets.h"
#include "trellara/report/repair_plan.h"

namespace trellara::cli {

// contract_test_command.cpp: the contract facts of the flow, only `tables` (schema.table) when not
// empty. Throws CommandFailed.
ContractFacts ReadContractFacts(const FlowConfig& config, const std::vector<std::string>& tables);

// Named, not anonymous: the command files compile as unity batches (CMakeLists.txt).
namespace repair_plan_command {
namespace {

constexpr const char* kConsumerName = log::kApplierConsumer;

std::optional<QuarantineState> StateFromName(const std::string& name) {
  for (auto s : {QuarantineState::Quarantined, QuarantineState::ReplayReady, QuarantineState::Resolved})
    if (name == QuarantineStateName(s)) return s;
  return std::nullopt;
}

// A target ahead of a promoted source (core DecideTimelineContinuity, as the applier decides it at
// start): the reason and the branch point go into the facts; unreadable facts are left out (the
// applier names them when it starts).
void ReadTimeline(PgConnection& target, const FlowConfig& config, RepairFacts& facts) {
  auto timeline = ReadLogTimelineFile(config.log_directory);
  if (!timeline || !timeline->has_value()) return;
  auto target_facts = ReadTargetTimelineFacts(target, config.flow_name, (*timeline)->branch_lsn);
  if (!target_facts) return;
  const TimelineContinuity d = DecideTimelineContinuity(**timeline, *target_facts, config.flow_name);
  if (d.kind != TimelineContinuity::Kind::kFailClosed) return;
  facts.timeline_refusal = d.reason;
  facts.timeline = (*timeline)->timeline;
  facts.timeline_branch_lsn = (*timeline)->branch_lsn;
}

void ReadTargetState(PgConnection& target, const FlowConfig& config, RepairFacts& facts) {
  RequireTargetState(target, config);
  auto q = MustSucceed(target,
                       target.ExecParams("SELECT xid::text, commit_lsn::text, state, reason, message "
                                         "FROM trellara.quarantine_list() WHERE flow = $1 "
                                         "AND state IN ('quarantined', 'replay_ready') ORDER BY commit_lsn",
                                         {config.flow_name}),
                       "reading trellara.quarantine_list() of flow " + config.flow_name);
  for (int i = 0; i < q.rows(); i++) {
    RepairTransaction tx;
    const std::string xid = q.Value(i, 0).value_or("");
    const auto lsn = ParseLsn(q.Value(i, 1).value_or(""));
    const auto state = StateFromName(q.Value(i, 2).value_or(""));
    if (xid.empty() || !lsn || !state)
      throw CommandFailed("a trellara.quarantine row of flow " + config.flow_name + " (xid " + xid + ", commit " +
                          q.Value(i, 1).value_or("") + ") is not readable; inspect trellara.quarantine on the target");
    tx.xid = static_cast<uint32_t>(std::stoull(xid));
    tx.commit_lsn = *lsn;
    tx.state = *state;
    tx.reason = q.Value(i, 3).value_or("");
    tx.message = q.Value(i, 4).value_or("");
    facts.open.push_back(std::move(tx));
  }
  auto running = MustSucceed(target,
                             target.ExecParams("SELECT applier_running FROM trellara.apply_status() WHERE flow = $1",
                                               {config.flow_name}),
                             "reading trellara.apply_status() of flow " + config.flow_name);
  facts.applier_running = running.rows() == 1 && running.Value(0, 0) == std::optional<std::string>("t");
  auto snap = target.Exec("SELECT to_regprocedure('trellara.snapshot_status()') IS NOT NULL");
  if (snap.ok() && snap.Value(0, 0) == std::optional<std::string>("t")) {
    auto t = MustSucceed(target,
                         target.ExecParams("SELECT table_name, run_id, coalesce(last_error, '') FROM "
                                           "trellara.snapshot_status() WHERE flow = $1 AND state = 'failed_recoverable' "
                                           "ORDER BY table_name",
                                           {config.flow_name}),
                         "reading trellara.snapshot_status() of flow " + config.flow_name);
    for (int i = 0; i < t.rows(); i++)
      facts.failed_snapshots.push_back({t.Value(i, 0).value_or(""), t.Value(i, 1).value_or(""), t.Value(i, 2).value_or("")});
  }
}

// The target's definition of `schema.name` now, as the applier reads it before a DDL.
TargetRelation ReadTargetDefinition(PgConnection& target, const std::string& schema, const std::string& name) {
  TargetRelation t;
  auto qualified = QualifiedName(RelationInfo{0, schema, name, {}, ReplicaIdentity::Default, {}});
  if (!qualified) return t;
  auto r = MustSucceed(target,
                       target.ExecParams("SELECT c.oid IS NOT NULL, a.attname, format_type(a.atttypid, a.atttypmod), "
                                         "a.attnotnull, a.atthasdef, a.attidentity <> '', a.attgenerated <> '', "
                                         "(SELECT array_to_string(ARRAY(SELECT k.attname FROM pg_catalog.pg_index i "
                                         "  CROSS JOIN unnest(i.indkey) WITH ORDINALITY AS u(attnum, n) "
                                         "  JOIN pg_catalog.pg_attribute k ON k.attrelid = i.indrelid AND k.attnum = u.attnum "
                                         "  WHERE i.indrelid = c.oid AND i.indisprimary ORDER BY u.n), ',')), "
                                         "(SELECT conname FROM pg_catalog.pg_constraint WHERE conrelid = c.oid AND contype = 'p') "
                                         "FROM (SELECT pg_catalog.to_regclass($1) AS oid) AS c "
                                         "LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
                                         "AND NOT a.attisdropped ORDER BY a.attnum",
                                         {*qualified}),
                       "reading the target's definition of " + schema + "." + name);
  t.exists = r.Value(0, 0) == std::optional<std::string>("t");
  for (int i = 0; t.exists && i < r.rows(); i++) {
    if (i == 0) {
      // Column names with commas would split wrongly; the key is informative for PlanDdl's key steps.
      const std::string key = r.Value(i, 7).value_or("");
      size_t start = 0;
      while (!key.empty() && start <= key.size()) {
        const size_t comma = key.find(',', start);
        t.primary_key.push_back(key.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      t.primary_key_name = r.Value(i, 8).value_or("");
    }
    if (!r.Value(i, 1)) continue;
    TargetColumn c;
    c.name = *r.Value(i, 1);
    c.type_name = r.Value(i, 2).value_or("");
    c.not_null = r.Value(i, 3) == std::optional<std::string>("t");
    c.has_default = r.Value(i, 4) == std::optional<std::string>("t");
    c.identity = r.Value(i, 5) == std::optional<std::string>("t");
    c.generated = r.Value(i, 6) == std::optional<std::string>("t");
    t.columns.push_back(std::move(c));
  }
  return t;
}

void AddRelation(std::vector<std::string>& list, const std::string& name) {
  if (name != "." && std::find(list.begin(), list.end(), name) == list.end()) list.push_back(name);
}

// What one decoded record of a quarantined transaction says: its relations and DDL changes.
void CollectFromRecord(PgConnection& target, const Record& record, RepairTransaction& tx) {
  const std::vector<RelationInfo>* relations = nullptr;
  const std::vector<Change>* changes = nullptr;
  if (const auto* e = std::get_if<Envelope>(&record)) {
    relations = &e->relations;
    changes = &e->changes;
  } else if (const auto* c = std::get_if<Chunk>(&record)) {
    relations = &c->relations;
    changes = &c->changes;
  } else if (const auto* m = std::get_if<Manifest>(&record)) {
    relations = &m->relations;
  }
  if (!relations) return;
  auto find = [&](uint32_t oid) -> const RelationInfo* {
    for (const auto& r : *relations)
      if (r.oid == oid) return &r;
    return nullptr;
  };
  if (!changes) {
    for (const auto& r : *relations) AddRelation(tx.relations, DisplayName(r));
    return;
  }
  for (const Change& change : *changes) {
    switch (change.op) {
      case Op::Insert:
      case Op::Update:
      case Op::Delete:
        if (const RelationInfo* r = find(change.relation_oid)) AddRelation(tx.relations, DisplayName(*r));
        break;
      case Op::Truncate:
        for (uint32_t oid : change.truncate.relation_oids)
          if (const RelationInfo* r = find(oid)) AddRelation(tx.relations, DisplayName(*r));
        break;
      case Op::Ddl: {
        const Ddl& ddl = change.ddl;
        const RelationInfo* captured = change.relation_oid ? find(change.relation_oid) : nullptr;
        if (ddl.definition) AddRelation(tx.relations, ddl.definition->schema + "." + ddl.definition->name);
        else AddRelation(tx.relations, ddl.relation_schema + "." + ddl.relation_name);
        RepairDdl d;
        d.ddl = ddl;
        d.description = DescribeDdl(ddl);
        d.plan = PlanDdl(ddl, captured, ReadTargetDefinition(target, ddl.relation_schema, ddl.relation_name),
                         DdlPolicy::Apply, DropTablePolicy::Keep);
        tx.ddls.push_back(std::move(d));
        break;
      }
      case Op::Message:
        break;
    }
  }
}

// Finds each open transaction's records in the log (from the applier's consumer offset on: a
// quarantined transaction is never below it) and reads them. Never fails the command.
void ReadFromLog(PgConnection& target, const FlowConfig& config, RepairFacts& facts) {
  std::map<uint64_t, RepairTransaction*> wanted;
  for (auto& tx : facts.open) wanted[tx.commit_lsn] = &tx;
  auto note = [&](const std::string& error) {
    for (auto& tx : facts.open)
      if (tx.log_offsets.empty() && tx.log_error.empty()) tx.log_error = error;
  };
  try {
    auto device = OpenLogDeviceForReading();
    auto reader = OpenLogForReading(*device, config.log_directory);
    auto offsets = log::ReadConsumerOffsets(*device, config.log_directory);
    if (offsets) {
      if (auto it = offsets->find(kConsumerName); it != offsets->end()) {
        Status seek = reader->Seek(it->second);
        if (!seek.ok()) return note("cannot seek the log to the applier's consumer offset: " + seek.error().message);
      }
    }
    size_t found = 0;
    for (;;) {
      auto next = reader->Next();
      if (!next.ok()) return note("reading offset " + std::to_string(reader->next_offset()) + " of " +
                                  config.log_directory + " failed: " + next.error().message);
      if (!next->has_value()) break;
      const log::LogRecord& frame = **next;
      auto it = wanted.find(frame.commit_lsn);
      if (it == wanted.end() || !IsTransactionRecordType(frame.type)) continue;
      auto record = DecodeRecord(std::span<const uint8_t>(frame.payload.data(), frame.payload.size()));
      if (!record.ok()) {
        it->second->log_error = "the record at offset " + std::to_string(frame.offset) + " does not decode: " +
                                record.error().message;
        continue;
      }
      if (TxOf(*record).xid != it->second->xid) continue;  // another transaction at that LSN is not this one
      it->second->log_offsets.push_back(frame.offset);
      CollectFromRecord(target, *record, *it->second);
      if (std::holds_alternative<Envelope>(*record) || std::holds_alternative<CommitMarker>(*record))
        if (++found == wanted.size()) break;
    }
    note("no record with its commit LSN from the applier's consumer offset on");
  } catch (const CommandFailed& failed) {
    note(failed.what());
  }
}

void ReadContract(const FlowConfig& config, RepairFacts& facts) {
  std::vector<std::string> relations;
  for (const auto& tx : facts.open)
    for (const auto& r : tx.relations) AddRelation(relations, r);
  if (relations.empty()) return;
  if (config.source_conninfo.empty()) {
    facts.contract_error = "source.conninfo is not set in " + config.path;
    return;
  }
  try {
    facts.contract = CheckContract(ReadContractFacts(config, relations)).findings;
  } catch (const CommandFailed& failed) {
    facts.contract_error = failed.what();
  }
}

void Print(const RepairFacts& facts, const RepairPlan& plan, OutputFormat format) {
  if (format == OutputFormat::Json) {
    nlohmann::ordered_json j;
    j["flow"] = facts.flow;
    j["steps"] = nlohmann::ordered_json::array();
    for (const RepairStep& s : plan.steps)
      j["steps"].push_back({{"n", s.n}, {"title", s.title}, {"commands", s.commands}, {"why", s.why}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  if (plan.nothing_to_repair()) {
    std::cout << "flow " << facts.flow << ": nothing to repair (no quarantined transaction, no failed snapshot "
              << "table)\n";
    return;
  }
  std::cout << "repair plan for flow " << facts.flow << ":";
  for (const auto& tx : facts.open)
    std::cout << " transaction " << tx.xid << " (commit " << FormatLsn(tx.commit_lsn) << ") " << tx.reason << ", "
              << QuarantineStateName(tx.state) << ";";
  if (!facts.failed_snapshots.empty()) std::cout << " " << facts.failed_snapshots.size() << " failed snapshot table(s);";
  std::cout << "\n";
  for (const RepairStep& s : plan.steps) {
    std::cout << "\n" << s.n << ". " << s.title << "\n   why: " << s.why << "\n";
    for (const auto& c : s.commands) std::cout << "   " << c << "\n";
  }
}

}  // namespace
}  // namespace repair_plan_command

void RegisterRepairPlan(CLI::App& app) {
  using namespace repair_plan_command;
  auto* cmd = app.add_subcommand("repair-plan",
                                 "the numbered commands that repair a halted flow and resume it (--config F)");
  auto config_path = std::make_shared<std::string>();
  auto format = std::make_shared<OutputFormat>(OutputFormat::Text);
  AddConfigOption(cmd, *config_path);
  AddFormatOption(cmd, *format);
  cmd->callback([config_path, format] {
    const FlowConfig config = LoadConfigOrFail(*config_path);
    RepairFacts facts;
    facts.flow = config.flow_name;
    facts.config_path = config.path;
    facts.log_directory = config.log_directory;
    facts.source_conninfo = config.source_conninfo;
    facts.target_conninfo = config.target_conninfo;
    std::unique_ptr<PgConnection> target;
    try {
      target = ConnectPinned(config, config.target_conninfo, "target", "trellara-repair-plan/" + config.flow_name);
      ReadTargetState(*target, config, facts);
      ReadTimeline(*target, config, facts);
    } catch (const CommandFailed& failed) {
      throw CommandFailed(std::string("repair-plan could not read the state of flow ") + config.flow_name + ": " +
                              failed.what(),
                          kExitCouldNotRead);
    }
    if (!facts.open.empty()) {
      ReadFromLog(*target, config, facts);
      ReadContract(config, facts);
    }
    Print(facts, BuildRepairPlan(facts), *format);
  });
}

}  // namespace trellara::cli
