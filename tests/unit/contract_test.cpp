// contract_test.cpp — `trellara contract-test`'s decisions (core CheckContract) on catalog facts:
// which source/target pairs pass, which findings each defect produces, with what severity, and
// that the fixes are concrete statements.
#include <catch2/catch.hpp>

#include <algorithm>

#include "trellara/report/contract.h"
#include "trellara/base/fault.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_contract_test {

using namespace trellara;

namespace {

// public.orders (id bigint primary key, note text, amount numeric(12,2)) on both sides.
ContractRelation CleanOrders() {
  ContractRelation r;
  r.source.schema = "public";
  r.source.name = "orders";
  r.source.columns = {{"id", "bigint", false, true}, {"note", "text", false, true}, {"amount", "numeric(12,2)", false, true}};
  r.source.has_primary_key = true;
  r.target.exists = true;
  r.target.columns = {{"id", "bigint", true, false, false, false},
                      {"note", "text", false, false, false, false},
                      {"amount", "numeric(12,2)", false, false, false, false}};
  r.target.primary_key = {"id"};
  return r;
}

ContractFacts FactsWith(std::vector<ContractRelation> relations) {
  ContractFacts f;
  f.flow = "app";
  f.config_path = "/etc/trellara/app.toml";
  f.publication.name = "pub";
  f.relations = std::move(relations);
  return f;
}

std::vector<const ContractFinding*> WithCode(const ContractReport& report, const std::string& code) {
  std::vector<const ContractFinding*> out;
  for (const auto& f : report.findings)
    if (f.code == code) out.push_back(&f);
  return out;
}

std::string Codes(const ContractReport& report) {
  std::string out;
  for (const auto& f : report.findings) out += (out.empty() ? "" : ",") + f.code;
  return out;
}

}  // namespace

TEST_CASE("contract_of_identical_tables_passes_without_findings", "[contract]") {
  const ContractReport report = CheckContract(FactsWith({CleanOrders()}));
  INFO(Codes(report));
  CHECK(report.findings.empty());
  CHECK_FALSE(report.has_error());
  CHECK(std::string(report.status()) == "ok");
  CHECK(report.relations == 1);
}

TEST_CASE("contract_reports_missing_table_and_missing_column_as_errors_with_fixes", "[contract]") {
  ContractRelation missing = CleanOrders();
  missing.source.name = "customers";
  missing.target = TargetRelation{};
  ContractRelation no_amount = CleanOrders();
  no_amount.target.columns.pop_back();
  const ContractReport report = CheckContract(FactsWith({missing, no_amount}));
  INFO(Codes(report));
  REQUIRE(WithCode(report, "missing_table").size() == 1);
  const ContractFinding& table = *WithCode(report, "missing_table")[0];
  CHECK(table.relation == "public.customers");
  CHECK(table.severity == ContractSeverity::Error);
  CHECK(table.fix.find("trellara snapshot --config /etc/trellara/app.toml --table public.customers") != std::string::npos);
  REQUIRE(WithCode(report, "missing_column").size() == 1);
  const ContractFinding& column = *WithCode(report, "missing_column")[0];
  CHECK(column.relation == "public.orders");
  CHECK(column.fix == "ALTER TABLE \"public\".\"orders\" ADD COLUMN \"amount\" numeric(12,2); -- on the target");
  CHECK(column.consequence.find("quarantined (missing_column)") != std::string::npos);
  CHECK(report.has_error());
  CHECK(std::string(report.status()) == "fail");
}

TEST_CASE("contract_accepts_widening_and_refuses_inexact_types", "[contract]") {
  ContractRelation widened = CleanOrders();
  widened.source.columns[0].type_name = "integer";  // integer into bigint: exact
  CHECK(CheckContract(FactsWith({widened})).findings.empty());
  ContractRelation narrowed = CleanOrders();
  narrowed.target.columns[0].type_name = "integer";  // bigint into integer: not exact
  narrowed.target.columns[1].type_name = "character varying(10)";
  const ContractReport report = CheckContract(FactsWith({narrowed}));
  INFO(Codes(report));
  REQUIRE(WithCode(report, "type_mismatch").size() == 2);
  CHECK(WithCode(report, "type_mismatch")[0]->fix ==
        "ALTER TABLE \"public\".\"orders\" ALTER COLUMN \"id\" TYPE bigint; -- on the target");
}

TEST_CASE("contract_reports_target_not_null_columns_the_source_lacks", "[contract]") {
  ContractRelation r = CleanOrders();
  r.target.columns.push_back({"tenant", "integer", true, false, false, false});     // fails every INSERT
  r.target.columns.push_back({"created", "timestamp", true, true, false, false});   // default: fine
  r.target.columns.push_back({"seq", "bigint", true, false, true, false});          // identity: fine
  r.target.columns.push_back({"extra", "text", false, false, false, false});        // nullable: fine
  const ContractReport report = CheckContract(FactsWith({r}));
  INFO(Codes(report));
  REQUIRE(report.findings.size() == 1);
  CHECK(report.findings[0].code == "not_null_without_default");
  CHECK(report.findings[0].problem.find("tenant") != std::string::npos);
}

TEST_CASE("contract_separates_generated_columns_on_each_side", "[contract]") {
  ContractRelation r = CleanOrders();
  r.target.columns[1].generated = true;  // the source sends note, the target computes it: error
  r.source.columns.push_back({"total", "numeric", true, true});  // generated on the source: not sent
  r.target.columns.push_back({"total", "numeric", false, false, false, false});
  const ContractReport report = CheckContract(FactsWith({r}));
  INFO(Codes(report));
  REQUIRE(WithCode(report, "generated_on_target").size() == 1);
  CHECK(WithCode(report, "generated_on_target")[0]->severity == ContractSeverity::Error);
  REQUIRE(WithCode(report, "generated_on_source").size() == 1);
  const ContractFinding& src = *WithCode(report, "generated_on_source")[0];
  CHECK(src.severity == ContractSeverity::Warning);
  CHECK(src.consequence.find("stays NULL") != std::string::npos);
  // A source generated column the target also generates is only a warning.
  ContractRelation both = CleanOrders();
  both.source.columns.push_back({"total", "numeric", true, true});
  both.target.columns.push_back({"total", "numeric", false, false, false, true});
  const ContractReport ok = CheckContract(FactsWith({both}));
  CHECK_FALSE(ok.has_error());
  CHECK(WithCode(ok, "generated_on_source").size() == 1);
}

TEST_CASE("contract_requires_replica_identity_only_when_updates_or_deletes_are_published", "[contract]") {
  ContractRelation no_key = CleanOrders();
  no_key.source.has_primary_key = false;  // DEFAULT without a primary key
  ContractRelation nothing = CleanOrders();
  nothing.source.name = "events";
  nothing.source.replica_identity = ReplicaIdentity::Nothing;
  ContractRelation dropped_index = CleanOrders();
  dropped_index.source.name = "items";
  dropped_index.source.replica_identity = ReplicaIdentity::Index;
  dropped_index.source.has_identity_index = false;
  ContractRelation index_ok = CleanOrders();
  index_ok.source.name = "lines";
  index_ok.source.replica_identity = ReplicaIdentity::Index;
  index_ok.source.has_identity_index = true;
  index_ok.source.has_primary_key = false;
  ContractFacts facts = FactsWith({no_key, nothing, dropped_index, index_ok});
  const ContractReport report = CheckContract(facts);
  INFO(Codes(report));
  auto found = WithCode(report, "missing_replica_identity");
  REQUIRE(found.size() == 3);
  CHECK(found[0]->relation == "public.orders");
  CHECK(found[1]->relation == "public.events");
  CHECK(found[2]->relation == "public.items");
  CHECK(found[0]->severity == ContractSeverity::Error);
  CHECK(found[0]->problem.find("publishes UPDATE and DELETE") != std::string::npos);
  CHECK(found[0]->fix.find("ADD PRIMARY KEY") != std::string::npos);
  // An insert-only publication needs no identity (but skips actions: warnings only).
  facts.publication.updates = facts.publication.deletes = false;
  const ContractReport insert_only = CheckContract(facts);
  INFO(Codes(insert_only));
  CHECK(WithCode(insert_only, "missing_replica_identity").empty());
  CHECK_FALSE(insert_only.has_error());
}

// Seed row missing_replica_identity, paired defect: with defect.contract_default_identity_without_key
// (REPLICA IDENTITY DEFAULT taken to mean "has a key") the keyless public.orders of the test above
// passes the contract: its REQUIRE(found.size() == 3) fails.
TEST_CASE("contract_passes_a_keyless_default_identity_table_negative_control", "[contract]") {
  ContractRelation no_key = CleanOrders();
  no_key.source.has_primary_key = false;  // DEFAULT without a primary key
  ContractRelation nothing = CleanOrders();
  nothing.source.name = "events";
  nothing.source.replica_identity = ReplicaIdentity::Nothing;
  fault::AllowDefects(true, "unit test");  // defects need the explicit test-only switch (fault.h)
  REQUIRE(fault::Configure("defect.contract_default_identity_without_key:1:defect").ok());
  const ContractReport report = CheckContract(FactsWith({no_key, nothing}));
  const int fired = fault::FiredCount("defect.contract_default_identity_without_key");
  fault::Clear();
  fault::AllowDefects(false, "");
  INFO(Codes(report));
  REQUIRE(fired >= 1);  // else the seam was not exercised: a harness failure, not a caught defect
  auto found = WithCode(report, "missing_replica_identity");
  REQUIRE(found.size() == 1);  // only REPLICA IDENTITY NOTHING is still refused
  CHECK(found[0]->relation == "public.events");
}

TEST_CASE("contract_accepts_full_identity_on_a_type_without_exact_equality", "[contract]") {
  // The applier matches such a row by the column's text (value_types.h FullRowMatchPredicate).
  ContractRelation r = CleanOrders();
  r.source.has_primary_key = false;
  r.source.replica_identity = ReplicaIdentity::Full;
  r.source.columns.push_back({"doc", "json", false, true});
  r.target.columns.push_back({"doc", "json", false, false, false, false});
  const ContractReport report = CheckContract(FactsWith({r}));
  INFO(Codes(report));
  CHECK(report.findings.empty());
}

TEST_CASE("contract_reports_triggers_and_rules_that_fire_for_replicated_rows", "[contract]") {
  ContractRelation r = CleanOrders();
  r.triggers = {{"stamp", 'A', true, "INSERT OR UPDATE"},   // BEFORE ROW, ALWAYS: error
                {"audit", 'R', false, "INSERT"},            // AFTER, REPLICA: warning
                {"local_only", 'O', true, "INSERT"},        // origin only: silent under replica
                {"off", 'D', true, "INSERT"}};
  r.rules = {{"redirect", 'A', true, "UPDATE"}, {"log_it", 'O', false, "INSERT"}};
  ContractFacts facts = FactsWith({r});
  const ContractReport report = CheckContract(facts);
  INFO(Codes(report));
  auto triggers = WithCode(report, "replicated_trigger");
  REQUIRE(triggers.size() == 2);
  CHECK(triggers[0]->problem.find("stamp") != std::string::npos);
  CHECK(triggers[0]->severity == ContractSeverity::Error);
  CHECK(triggers[0]->fix == "ALTER TABLE \"public\".\"orders\" DISABLE TRIGGER \"stamp\"; -- on the target, or ENABLE "
                            "TRIGGER (origin only) if it must not see replicated rows");
  CHECK(triggers[1]->problem.find("audit") != std::string::npos);
  CHECK(triggers[1]->severity == ContractSeverity::Warning);
  auto rules = WithCode(report, "replicated_rule");
  REQUIRE(rules.size() == 1);
  CHECK(rules[0]->severity == ContractSeverity::Error);
  // With session_replication_role = origin, ordinary (O) triggers and rules fire, R ones do not.
  facts.session_replication_role = "origin";
  const ContractReport origin = CheckContract(facts);
  INFO(Codes(origin));
  CHECK(WithCode(origin, "replicated_trigger").size() == 2);  // stamp (A), local_only (O)
  CHECK(WithCode(origin, "replicated_rule").size() == 2);
  CHECK(FiresForReplicatedRows('R', "replica"));
  CHECK_FALSE(FiresForReplicatedRows('O', "replica"));
  CHECK_FALSE(FiresForReplicatedRows('D', "origin"));
}

TEST_CASE("contract_warns_on_skipped_actions_and_refuses_filtered_publications", "[contract]") {
  ContractRelation filtered = CleanOrders();
  filtered.source.row_filter = "(id > 10)";
  ContractRelation listed = CleanOrders();
  listed.source.name = "lines";
  listed.source.column_list = true;
  listed.source.columns[2].published = false;
  ContractFacts facts = FactsWith({filtered, listed});
  facts.publication.deletes = false;
  facts.publication.truncates = false;
  const ContractReport report = CheckContract(facts);
  INFO(Codes(report));
  auto skips = WithCode(report, "publication_skips_action");
  REQUIRE(skips.size() == 1);
  CHECK(skips[0]->severity == ContractSeverity::Warning);
  CHECK(skips[0]->relation.empty());
  CHECK(skips[0]->problem.find("delete, truncate") != std::string::npos);
  auto filters = WithCode(report, "filtered_publication");
  REQUIRE(filters.size() == 2);
  CHECK(filters[0]->relation == "public.orders");
  CHECK(filters[0]->problem.find("WHERE (id > 10)") != std::string::npos);
  CHECK(filters[1]->relation == "public.lines");
  CHECK(filters[1]->severity == ContractSeverity::Error);
  // A column left out by the list is not reported missing on the target as well.
  CHECK(WithCode(report, "missing_column").empty());
}

}  // namespace unit_contract_test
