// repair_plan_test.cpp — `trellara repair-plan`'s decisions (core BuildRepairPlan): nothing to
// repair when nothing is open; otherwise numbered steps in order, with the real commands and the
// exact boundary, per quarantine reason; conninfo with a password is never printed.
#include <catch2/catch.hpp>

#include <algorithm>

#include "trellara/report/repair_plan.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_repair_plan_test {

using namespace trellara;

namespace {

RepairFacts Facts() {
  RepairFacts f;
  f.flow = "app";
  f.config_path = "/etc/trellara/app.toml";
  f.log_directory = "/var/lib/trellara/app";
  f.source_conninfo = "host=/run/src port=5433 dbname=postgres";
  f.target_conninfo = "host=db2 dbname=app user=trellara password=secret";
  return f;
}

RepairTransaction Quarantined(const std::string& reason) {
  RepairTransaction tx;
  tx.xid = 7421;
  tx.commit_lsn = 0x3A1F2B0;
  tx.reason = reason;
  tx.message = "quarantined transaction 7421 (commit 0/3A1F2B0) of flow app: ...";
  tx.log_offsets = {41};
  tx.relations = {"public.orders"};
  return tx;
}

std::string All(const RepairPlan& plan) {
  std::string out;
  for (const auto& s : plan.steps) {
    out += std::to_string(s.n) + ". " + s.title + "\n";
    for (const auto& c : s.commands) out += "   " + c + "\n";
  }
  return out;
}

bool Has(const RepairStep& step, const std::string& command) {
  return std::find(step.commands.begin(), step.commands.end(), command) != step.commands.end();
}

const RepairStep& Step(const RepairPlan& plan, const std::string& title) {
  for (const auto& s : plan.steps)
    if (s.title == title) return s;
  FAIL("no step " << title << " in\n" << All(plan));
  return plan.steps.front();
}

}  // namespace

TEST_CASE("repair_plan_is_empty_when_nothing_is_open", "[repair_plan]") {
  CHECK(BuildRepairPlan(Facts()).nothing_to_repair());
}

TEST_CASE("repair_plan_for_a_row_divergence_names_the_boundary_and_the_commands_in_order", "[repair_plan]") {
  RepairFacts f = Facts();
  f.open = {Quarantined("zero_rows_matched")};
  const RepairPlan plan = BuildRepairPlan(f);
  INFO(All(plan));
  REQUIRE(plan.steps.size() == 7);
  const char* titles[] = {"inspect", "discover the schema on both sides", "contract test", "repair",
                          "mark the exact boundary replay-ready", "resume", "verify"};
  for (size_t i = 0; i < 7; i++) {
    CHECK(plan.steps[i].n == static_cast<int>(i + 1));
    CHECK(plan.steps[i].title == titles[i]);
    CHECK_FALSE(plan.steps[i].why.empty());
  }
  CHECK(Has(plan.steps[0], "trellara inspect-transaction --dir '/var/lib/trellara/app' --offset 41"));
  CHECK(Has(plan.steps[0], "trellara status --config '/etc/trellara/app.toml'"));
  CHECK(Has(plan.steps[1], "psql 'host=/run/src port=5433 dbname=postgres' -c '\\d \"public\".\"orders\"'"));
  // The target conninfo holds a password: a placeholder, never the secret.
  CHECK(Has(plan.steps[1], "psql '<target conninfo>' -c '\\d \"public\".\"orders\"'"));
  CHECK(All(plan).find("secret") == std::string::npos);
  CHECK(Has(plan.steps[2], "trellara contract-test --config '/etc/trellara/app.toml'"));
  CHECK(Has(plan.steps[3], "trellara snapshot --config '/etc/trellara/app.toml' --table 'public.orders' --force"));
  CHECK(Has(plan.steps[4],
            "trellara quarantine replay-ready --config '/etc/trellara/app.toml' --xid 7421 --commit-lsn 0/3A1F2B0"));
  CHECK(Has(plan.steps[5], "trellara apply --config '/etc/trellara/app.toml'"));
  CHECK(Has(plan.steps[6], "trellara verify --config '/etc/trellara/app.toml' --table 'public.orders'"));
}

TEST_CASE("repair_plan_for_a_halted_ddl_prints_the_statement_and_what_the_applier_would_run", "[repair_plan]") {
  RepairFacts f = Facts();
  f.applier_running = true;
  RepairTransaction tx = Quarantined("ddl_policy_halt");
  RepairDdl d;
  d.ddl.sql = "ALTER TABLE orders ADD COLUMN note2 text";
  d.ddl.relation_schema = "public";
  d.ddl.relation_name = "orders";
  d.description = "ALTER TABLE public.orders: add_column note2";
  d.plan.action = DdlAction::Execute;
  d.plan.statements = {"ALTER TABLE \"public\".\"orders\" ADD COLUMN \"note2\" text"};
  tx.ddls = {d};
  f.open = {tx};
  const RepairPlan plan = BuildRepairPlan(f);
  INFO(All(plan));
  const RepairStep& repair = Step(plan, "repair");
  CHECK(Has(repair, "# the source ran: ALTER TABLE orders ADD COLUMN note2 text"));
  CHECK(Has(repair, "psql '<target conninfo>' -v ON_ERROR_STOP=1 -c 'ALTER TABLE \"public\".\"orders\" ADD COLUMN "
                    "\"note2\" text'"));
  // An applier is running: resume is watching it, not starting another.
  const RepairStep& resume = Step(plan, "resume");
  CHECK_FALSE(Has(resume, "trellara apply --config '/etc/trellara/app.toml'"));
  CHECK(Has(resume, "trellara status --config '/etc/trellara/app.toml'"));
}

TEST_CASE("repair_plan_for_an_unsupported_ddl_recopies_the_table_with_an_exact_handoff", "[repair_plan]") {
  RepairFacts f = Facts();
  RepairTransaction tx = Quarantined("ddl_unsupported");
  RepairDdl d;
  d.ddl.sql = "ALTER TABLE orders ALTER COLUMN amount TYPE integer USING round(amount)";
  d.ddl.relation_schema = "public";
  d.ddl.relation_name = "orders";
  d.ddl.definition = RelationDefinition{};
  d.ddl.definition->schema = "public";
  d.ddl.definition->name = "orders";
  d.plan.action = DdlAction::Quarantine;
  d.plan.cause.detail = "alter_column_type with USING";
  tx.ddls = {d};
  f.open = {tx};
  const RepairPlan plan = BuildRepairPlan(f);
  INFO(All(plan));
  const RepairStep& repair = Step(plan, "repair");
  CHECK(Has(repair, "psql '<target conninfo>' -v ON_ERROR_STOP=1 -c 'ALTER TABLE orders ALTER COLUMN amount TYPE "
                    "integer USING round(amount)'"));
  CHECK(Has(repair, "trellara snapshot --config '/etc/trellara/app.toml' --table 'public.orders' --force"));
}

TEST_CASE("repair_plan_for_schema_drift_runs_the_contract_fixes_and_recopies", "[repair_plan]") {
  RepairFacts f = Facts();
  f.target_conninfo = "host=db2 dbname=app";
  f.open = {Quarantined("schema_drift")};
  f.contract = {{"public.orders", "missing_column", ContractSeverity::Error, "column note2 ... does not exist", "...",
                 "ALTER TABLE \"public\".\"orders\" ADD COLUMN \"note2\" text; -- on the target"},
                {"public.other", "missing_column", ContractSeverity::Error, "not this transaction's", "...",
                 "ALTER TABLE \"public\".\"other\" ADD COLUMN \"x\" text; -- on the target"}};
  const RepairPlan plan = BuildRepairPlan(f);
  INFO(All(plan));
  const RepairStep& repair = Step(plan, "repair");
  CHECK(Has(repair, "psql 'host=db2 dbname=app' -v ON_ERROR_STOP=1 -c 'ALTER TABLE \"public\".\"orders\" ADD COLUMN "
                    "\"note2\" text'"));
  CHECK(All(plan).find("\"other\"") == std::string::npos);
  CHECK(Has(repair, "trellara snapshot --config '/etc/trellara/app.toml' --table 'public.orders' --force"));
  // A column the source added: its existing rows cannot be repaired in place, so the copy is a step.
  f.open = {Quarantined("missing_column")};
  CHECK(Has(Step(BuildRepairPlan(f), "repair"),
            "trellara snapshot --config '/etc/trellara/app.toml' --table 'public.orders' --force"));
  // A type the target cannot take: values are unchanged, the copy is only a commented alternative.
  f.open = {Quarantined("schema_mismatch")};
  const RepairPlan mismatch = BuildRepairPlan(f);
  INFO(All(mismatch));
  CHECK_FALSE(Has(Step(mismatch, "repair"),
                  "trellara snapshot --config '/etc/trellara/app.toml' --table 'public.orders' --force"));
  CHECK(Has(Step(mismatch, "repair"),
            "# trellara snapshot --config '/etc/trellara/app.toml' --table 'public.orders' --force"));
}

TEST_CASE("repair_plan_skips_replay_ready_for_boundaries_already_marked_and_reruns_failed_copies", "[repair_plan]") {
  RepairFacts f = Facts();
  RepairTransaction tx = Quarantined("zero_rows_matched");
  tx.state = QuarantineState::ReplayReady;
  f.open = {tx};
  f.failed_snapshots = {{"public.items", "snap-20261130-101010", "connection lost"}};
  const RepairPlan plan = BuildRepairPlan(f);
  INFO(All(plan));
  for (const auto& s : plan.steps) CHECK(s.title != "mark the exact boundary replay-ready");
  CHECK(Has(Step(plan, "repair"), "trellara snapshot --config '/etc/trellara/app.toml' --run-id 'snap-20261130-101010'"));
  CHECK(Has(Step(plan, "verify"),
            "trellara verify --config '/etc/trellara/app.toml' --table 'public.orders' --table 'public.items'"));
}

TEST_CASE("conninfo_passwords_are_detected_in_both_forms", "[repair_plan]") {
  CHECK(ConninfoHasPassword("host=a password=x"));
  CHECK(ConninfoHasPassword("host=a PASSWORD = x"));
  CHECK(ConninfoHasPassword("postgresql://u:pw@host/db"));
  CHECK(ConninfoHasPassword("postgres://u@host/db?password=pw"));
  CHECK_FALSE(ConninfoHasPassword("host=a user=password_owner"));
  CHECK_FALSE(ConninfoHasPassword("postgresql://u@host:5432/db"));
  CHECK_FALSE(ConninfoHasPassword("host=a passfile=/x"));
  CHECK(ConninfoForCommand("host=a", "source") == "'host=a'");
  CHECK(ConninfoForCommand("", "source") == "'<source conninfo>'");
}

TEST_CASE("repair_plan_for_a_halted_add_column_prints_what_core_plan_ddl_runs", "[repair_plan]") {
  // As the command builds it: the captured Ddl, PlanDdl under "apply" against the target now.
  RelationDefinition def;
  def.oid = 16384;
  def.schema = "public";
  def.name = "orders";
  DdlColumn id;
  id.name = "id";
  id.type_name = "bigint";
  id.not_null = true;
  DdlColumn note;
  note.name = "note2";
  note.type_name = "text";
  def.columns = {id, note};
  def.primary_key = {"id"};
  def.primary_key_name = "orders_pkey";
  RepairDdl d;
  d.ddl.command_tag = "ALTER TABLE";
  d.ddl.object_type = "table";
  d.ddl.schema = "public";
  d.ddl.object_identity = "public.orders";
  d.ddl.sql = "ALTER TABLE orders ADD COLUMN note2 text";
  d.ddl.relation_oid = 16384;
  d.ddl.relation_schema = "public";
  d.ddl.relation_name = "orders";
  d.ddl.steps = {DdlStep{DdlStepKind::AddColumn, "note2", "", "ADD COLUMN note2 text", false}};
  d.ddl.definition = def;
  RelationInfo captured;
  captured.oid = 16384;
  captured.schema = "public";
  captured.name = "orders";
  captured.columns = {Column{"id", 20, "bigint", -1, true}, Column{"note2", 25, "text", -1, false}};
  TargetRelation target;
  target.exists = true;
  target.columns = {TargetColumn{"id", "bigint", true, false, false, false}};
  target.primary_key = {"id"};
  target.primary_key_name = "orders_pkey";
  d.plan = PlanDdl(d.ddl, &captured, target, DdlPolicy::Apply, DropTablePolicy::Keep);
  d.description = DescribeDdl(d.ddl);
  INFO(d.plan.cause.detail);
  REQUIRE(d.plan.action == DdlAction::Execute);
  RepairFacts f = Facts();
  RepairTransaction tx = Quarantined("ddl_policy_halt");
  tx.ddls = {d};
  f.open = {tx};
  const RepairPlan plan = BuildRepairPlan(f);
  INFO(All(plan));
  CHECK(Has(Step(plan, "repair"), "psql '<target conninfo>' -v ON_ERROR_STOP=1 -c 'ALTER TABLE \"public\".\"orders\" "
                                  "ADD COLUMN \"note2\" text'"));
  CHECK(Has(Step(plan, "mark the exact boundary replay-ready"),
            "trellara quarantine replay-ready --config '/etc/trellara/app.toml' --xid 7421 --commit-lsn 0/3A1F2B0"));
}

TEST_CASE("repair_plan_for_a_target_ahead_of_a_promoted_source_forgets_and_reseeds", "[repair_plan]") {
  RepairFacts f = Facts();
  f.open.clear();
  f.timeline_refusal = "flow \"app\": the target holds 15 transaction(s) ...";
  f.timeline = 2;
  f.timeline_branch_lsn = 0x3014000;
  RepairPlan plan = BuildRepairPlan(f);
  REQUIRE(plan.steps.size() == 4);
  CHECK(plan.steps[0].n == 1);
  CHECK(Step(plan, "inspect what only the old primary had").commands[0].find("15 transaction(s)") != std::string::npos);
  const RepairStep& forget = Step(plan, "forget them on the target and follow the promoted source");
  CHECK(forget.commands[1].find("commit_lsn > '\\''0/3014000'\\''") != std::string::npos);
  CHECK(forget.commands[1].find("pg_replication_origin_advance(") != std::string::npos);
  CHECK(Has(Step(plan, "reseed every table from the promoted source"),
            "trellara snapshot --config '/etc/trellara/app.toml' --force"));
  CHECK(Has(Step(plan, "verify"), "trellara verify --config '/etc/trellara/app.toml'"));
}

}  // namespace unit_repair_plan_test
