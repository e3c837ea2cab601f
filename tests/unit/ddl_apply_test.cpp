// ddl_apply_test.cpp — the applier's DDL decisions (PlanDdl step by step on a simulated target,
// the final acceptance guard, halt policy, quoting) and the DDL/snapshot interplay (ddl_apply.h).
#include <catch2/catch.hpp>

#include "trellara/record/checksum.h"
#include "trellara/apply/ddl_apply.h"

// Its own namespace: the unit tests compile as unity batches (CMakeLists.txt).
namespace unit_ddl_apply_test {

using namespace trellara;

namespace {

struct Col {
  std::string name;
  std::string type;
  bool key = false;
};

RelationInfo Captured(const std::string& schema, const std::string& name, const std::vector<Col>& cols) {
  RelationInfo r;
  r.oid = 16384;
  r.schema = schema;
  r.name = name;
  for (const auto& c : cols) r.columns.push_back(Column{c.name, 0, c.type, -1, c.key});
  r.fingerprint = ComputeFingerprint(r);
  return r;
}

DdlColumn DefCol(const std::string& name, const std::string& type, bool not_null = false) {
  DdlColumn c;
  c.name = name;
  c.type_name = type;
  c.not_null = not_null;
  return c;
}

TargetColumn TCol(const std::string& name, const std::string& type, bool not_null = false, bool has_default = false) {
  return TargetColumn{name, type, not_null, has_default, false, false};
}

// public.orders: id bigint primary key (orders_pkey), note text.
RelationDefinition OrdersDef() {
  RelationDefinition d;
  d.oid = 16384;
  d.schema = "public";
  d.name = "orders";
  d.columns = {DefCol("id", "bigint", true), DefCol("note", "text")};
  d.primary_key = {"id"};
  d.primary_key_name = "orders_pkey";
  return d;
}

TargetRelation OrdersTarget() {
  TargetRelation t;
  t.exists = true;
  t.columns = {TCol("id", "bigint", true), TCol("note", "text")};
  t.primary_key = {"id"};
  t.primary_key_name = "orders_pkey";
  return t;
}

// The RelationInfo the plugin would capture for `def` (generated columns excluded).
RelationInfo CapturedOf(const RelationDefinition& def) {
  std::vector<Col> cols;
  for (const auto& c : def.columns) {
    if (!c.generated.empty()) continue;
    bool key = std::find(def.primary_key.begin(), def.primary_key.end(), c.name) != def.primary_key.end();
    cols.push_back({c.name, c.type_name, key});
  }
  return Captured(def.schema, def.name, cols);
}

Ddl AlterOrders(std::vector<DdlStep> steps, RelationDefinition def, const std::string& sql) {
  Ddl d;
  d.command_tag = "ALTER TABLE";
  d.object_type = "table";
  d.schema = def.schema;
  d.object_identity = def.schema + "." + def.name;
  d.sql = sql;
  d.relation_oid = def.oid;
  d.relation_schema = "public";
  d.relation_name = "orders";
  d.steps = std::move(steps);
  d.definition = std::move(def);
  return d;
}

DdlStep Step(DdlStepKind kind, const std::string& column = "", const std::string& new_name = "",
             const std::string& detail = "") {
  return DdlStep{kind, column, new_name, detail, false};
}

DdlPlan Plan(const Ddl& ddl, const TargetRelation& target, DdlPolicy policy = DdlPolicy::Apply,
             DropTablePolicy drop = DropTablePolicy::Keep) {
  RelationInfo captured = CapturedOf(*ddl.definition);
  return PlanDdl(ddl, &captured, target, policy, drop);
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

bool NotesContain(const DdlPlan& plan, const std::string& needle) {
  for (const auto& n : plan.notes)
    if (Contains(n, needle)) return true;
  return false;
}

void RequireUnsupported(const DdlPlan& plan, const std::string& fragment) {
  INFO(plan.cause.detail);
  REQUIRE(plan.action == DdlAction::Quarantine);
  CHECK(plan.cause.reason == QuarantineReason::DdlUnsupported);
  CHECK(plan.statements.empty());
  CHECK(Contains(plan.cause.detail, fragment));
  CHECK(Contains(plan.cause.detail, "re-snapshot the table"));
  CHECK(Contains(plan.cause.detail, "replay-ready"));
}

Ddl AddNoteColumnDdl(DdlColumn column) {
  RelationDefinition def = OrdersDef();
  def.columns.push_back(column);
  return AlterOrders({Step(DdlStepKind::AddColumn, column.name)}, def, "ALTER TABLE orders ADD COLUMN ...");
}

}  // namespace

// ---- policy and unsupported steps --------------------------------------------------------------

TEST_CASE("halt_policy_quarantines_every_ddl_with_its_statement", "[ddl]") {
  Ddl ddl = AlterOrders({Step(DdlStepKind::NoShapeChange, "", "", "CREATE INDEX")}, OrdersDef(),
                        "CREATE INDEX ON orders (note)");
  DdlPlan plan = Plan(ddl, OrdersTarget(), DdlPolicy::Halt);
  REQUIRE(plan.action == DdlAction::Quarantine);
  CHECK(plan.cause.reason == QuarantineReason::DdlPolicyHalt);
  CHECK(plan.cause.relation == "public.orders");
  CHECK(plan.cause.detail == DescribeDdl(ddl) + " — statement: CREATE INDEX ON orders (note)");
  CHECK(plan.statements.empty());
  CHECK_FALSE(plan.forget_relation);
  // The same record under apply is a no-op, so the halt is the policy's doing.
  CHECK(Plan(ddl, OrdersTarget()).action == DdlAction::NoTargetChange);
}

TEST_CASE("unsupported_step_is_quarantined_naming_the_subcommand_and_the_remedy", "[ddl]") {
  Ddl ddl = AlterOrders({Step(DdlStepKind::AddColumn, "extra"), Step(DdlStepKind::Unsupported, "", "", "SET SCHEMA archive")},
                        OrdersDef(), "ALTER TABLE orders SET SCHEMA archive");
  ddl.definition->columns.push_back(DefCol("extra", "integer"));
  DdlPlan plan = Plan(ddl, OrdersTarget());
  RequireUnsupported(plan, "SET SCHEMA archive");
  CHECK(plan.cause.relation == "public.orders");
  CHECK(Contains(plan.cause.detail, "statement: ALTER TABLE orders SET SCHEMA archive"));
}

TEST_CASE("missing_capture_or_definition_for_a_non_drop_ddl_is_a_malformed_record", "[ddl]") {
  Ddl ddl = AlterOrders({Step(DdlStepKind::DropColumn, "note")}, OrdersDef(), "ALTER TABLE orders DROP COLUMN note");
  ddl.definition->columns.pop_back();
  RequireUnsupported(PlanDdl(ddl, nullptr, OrdersTarget(), DdlPolicy::Apply, DropTablePolicy::Keep), "malformed");
  RelationInfo captured = CapturedOf(*ddl.definition);
  ddl.definition.reset();
  RequireUnsupported(PlanDdl(ddl, &captured, OrdersTarget(), DdlPolicy::Apply, DropTablePolicy::Keep), "malformed");
}

// ---- CREATE TABLE ------------------------------------------------------------------------------

namespace {

Ddl CreateEvents() {
  RelationDefinition def;
  def.oid = 20000;
  def.schema = "public";
  def.name = "events";
  DdlColumn id = DefCol("id", "bigint", true);
  id.default_kind = DefaultKind::Mutable;
  id.default_expr = "nextval('events_id_seq'::regclass)";
  DdlColumn seq = DefCol("seq", "integer", true);
  seq.identity = "d";
  DdlColumn name = DefCol("name", "text", true);
  name.collation = "C";
  name.default_kind = DefaultKind::Immutable;
  name.default_expr = "'none'::text";
  DdlColumn upper = DefCol("upper_name", "text");
  upper.generated = "s";
  upper.generation_expr = "upper(name)";
  def.columns = {id, seq, name, upper};
  def.primary_key = {"id"};
  def.primary_key_name = "events_pkey";
  Ddl d;
  d.command_tag = "CREATE TABLE";
  d.object_type = "table";
  d.schema = "public";
  d.object_identity = "public.events";
  d.sql = "CREATE TABLE events (...)";
  d.relation_oid = def.oid;
  d.relation_schema = "public";
  d.relation_name = "events";
  d.steps = {Step(DdlStepKind::CreateTable)};
  d.definition = def;
  return d;
}

}  // namespace

TEST_CASE("create_table_creates_columns_key_and_only_immutable_defaults", "[ddl]") {
  DdlPlan plan = Plan(CreateEvents(), TargetRelation{});
  INFO(plan.cause.detail);
  REQUIRE(plan.action == DdlAction::Execute);
  REQUIRE(plan.statements.size() == 1);
  CHECK(plan.statements[0] ==
        "CREATE TABLE \"public\".\"events\" (\"id\" bigint NOT NULL, "
        "\"seq\" integer GENERATED BY DEFAULT AS IDENTITY NOT NULL, "
        "\"name\" text COLLATE \"C\" NOT NULL DEFAULT 'none'::text, "
        "\"upper_name\" text GENERATED ALWAYS AS (upper(name)) STORED, "
        "CONSTRAINT \"events_pkey\" PRIMARY KEY (\"id\"))");
  CHECK(NotesContain(plan, "default nextval('events_id_seq'::regclass) of id is evaluated on the source; replicated "
                           "rows carry its values"));
  CHECK_FALSE(plan.forget_relation);
  // Deterministic text: the same record plans the same statements.
  CHECK(Plan(CreateEvents(), TargetRelation{}).statements == plan.statements);
}

TEST_CASE("partitioned_tables_and_partitions_are_created_attached_and_detached", "[ddl]") {
  // CREATE TABLE ... PARTITION BY: the columns and key, then the source's partition key.
  Ddl partitioned = CreateEvents();
  partitioned.definition->relkind = "p";
  partitioned.definition->partition_key = "RANGE (id)";
  DdlPlan plan = Plan(partitioned, TargetRelation{});
  REQUIRE(plan.action == DdlAction::Execute);
  REQUIRE(plan.statements.size() == 1);
  CHECK(plan.statements[0].rfind("CREATE TABLE \"public\".\"events\" (", 0) == 0);
  CHECK(plan.statements[0].ends_with(") PARTITION BY RANGE (id)"));
  // A record without the key (an earlier release) is refused, never created unpartitioned.
  partitioned.definition->partition_key.clear();
  RequireUnsupported(Plan(partitioned, TargetRelation{}), "no partition key");

  // CREATE TABLE ... PARTITION OF: the parent's columns, the source's bound.
  Ddl partition = CreateEvents();
  partition.definition->name = "events_2026";
  partition.definition->is_partition = true;
  partition.definition->partition_parent_schema = "public";
  partition.definition->partition_parent_name = "events";
  partition.definition->partition_bound = "FOR VALUES FROM ('1') TO ('100')";
  plan = Plan(partition, TargetRelation{});
  REQUIRE(plan.action == DdlAction::Execute);
  REQUIRE(plan.statements.size() == 1);
  CHECK(plan.statements[0] ==
        "CREATE TABLE \"public\".\"events_2026\" PARTITION OF \"public\".\"events\" FOR VALUES FROM ('1') TO ('100')");
  partition.definition->partition_bound.clear();
  RequireUnsupported(Plan(partition, TargetRelation{}), "no parent or bound");

  // ATTACH / DETACH: the partition's record; attach takes parent and bound from its definition.
  TargetRelation existing;
  existing.exists = true;
  existing.columns = {TCol("id", "bigint", true), TCol("seq", "bigint", true), TCol("name", "text", true),
                      TCol("upper_name", "text")};
  existing.primary_key = {"id"};
  Ddl attach = CreateEvents();
  attach.command_tag = "ALTER TABLE";
  attach.relation_schema = "public";
  attach.relation_name = "events_2026";
  attach.definition->name = "events_2026";
  attach.definition->is_partition = true;
  attach.definition->partition_parent_schema = "public";
  attach.definition->partition_parent_name = "events";
  attach.definition->partition_bound = "FOR VALUES FROM ('1') TO ('100')";
  attach.steps = {Step(DdlStepKind::AttachPartition)};
  plan = Plan(attach, existing);
  REQUIRE(plan.action == DdlAction::Execute);
  CHECK(plan.statements == std::vector<std::string>{"ALTER TABLE \"public\".\"events\" ATTACH PARTITION "
                                                    "\"public\".\"events_2026\" FOR VALUES FROM ('1') TO ('100')"});
  Ddl detach = attach;
  detach.definition->is_partition = false;
  detach.steps = {Step(DdlStepKind::DetachPartition, "public", "events")};
  plan = Plan(detach, existing);
  REQUIRE(plan.action == DdlAction::Execute);
  CHECK(plan.statements ==
        std::vector<std::string>{"ALTER TABLE \"public\".\"events\" DETACH PARTITION \"public\".\"events_2026\""});
  detach.steps = {Step(DdlStepKind::DetachPartition)};
  RequireUnsupported(Plan(detach, existing), "does not name the parent");
}

TEST_CASE("create_table_that_the_target_already_has_is_a_no_op_or_refused_naming_why", "[ddl]") {
  TargetRelation existing;
  existing.exists = true;
  existing.columns = {TCol("id", "bigint", true), TCol("seq", "bigint", true), TCol("name", "text", true),
                      TCol("upper_name", "text")};
  DdlPlan plan = Plan(CreateEvents(), existing);
  REQUIRE(plan.action == DdlAction::NoTargetChange);
  CHECK(plan.statements.empty());
  CHECK(NotesContain(plan, "already exists on the target and accepts"));

  // The source has just created the table empty: a target table of that name holding rows (a copy
  // kept after an earlier DROP TABLE) would keep rows the source does not have.
  TargetRelation kept = existing;
  kept.has_rows = true;
  RequireUnsupported(Plan(CreateEvents(), kept), "already exists on the target and holds rows");

  existing.columns[2].type_name = "integer";  // cannot take text
  DdlPlan refused = Plan(CreateEvents(), existing);
  RequireUnsupported(refused, "already exists on the target but cannot take the captured definition");
  CHECK(Contains(refused.cause.detail, "column name of public.events is text on the source but integer"));
}

// ---- columns -------------------------------------------------------------------------------

TEST_CASE("add_column_adds_type_collation_not_null_and_constant_default", "[ddl]") {
  DdlColumn c = DefCol("status", "character varying(20)", true);
  c.collation = "C";
  c.default_kind = DefaultKind::Immutable;
  c.default_expr = "'new'::character varying";
  DdlPlan plan = Plan(AddNoteColumnDdl(c), OrdersTarget());
  INFO(plan.cause.detail);
  REQUIRE(plan.action == DdlAction::Execute);
  CHECK(plan.statements == std::vector<std::string>{
                               "ALTER TABLE \"public\".\"orders\" ADD COLUMN \"status\" character varying(20) COLLATE "
                               "\"C\" NOT NULL DEFAULT 'new'::character varying"});
}

TEST_CASE("add_column_with_identity_or_volatile_default_is_unsupported", "[ddl]") {
  DdlColumn identity = DefCol("n", "bigint", true);
  identity.identity = "a";
  RequireUnsupported(Plan(AddNoteColumnDdl(identity), OrdersTarget()), "identity");
  DdlColumn stamped = DefCol("at", "timestamp with time zone");
  stamped.default_kind = DefaultKind::Mutable;
  stamped.default_expr = "now()";
  RequireUnsupported(Plan(AddNoteColumnDdl(stamped), OrdersTarget()), "default now()");
}

TEST_CASE("add_column_whose_default_a_later_subcommand_changes_is_unsupported", "[ddl]") {
  // ALTER TABLE orders ADD COLUMN status text DEFAULT 'legacy', ALTER COLUMN status SET DEFAULT 'new':
  // the record's definition shows 'new', the source's existing rows hold 'legacy'.
  RelationDefinition def = OrdersDef();
  DdlColumn c = DefCol("status", "text");
  c.default_kind = DefaultKind::Immutable;
  c.default_expr = "'new'::text";
  def.columns.push_back(c);
  Ddl ddl = AlterOrders({Step(DdlStepKind::AddColumn, "status"), Step(DdlStepKind::SetDefault, "status")}, def,
                        "ALTER TABLE orders ADD COLUMN status text DEFAULT 'legacy', ALTER COLUMN status SET DEFAULT 'new'");
  RequireUnsupported(Plan(ddl, OrdersTarget()), "followed in the same statement by a change of its default");
  ddl.steps[1] = Step(DdlStepKind::DropDefault, "status");
  RequireUnsupported(Plan(ddl, OrdersTarget()), "not the one the source's existing rows got");
  // The ADD COLUMN alone (a later statement's SET DEFAULT is a record of its own): executed.
  ddl.steps.pop_back();
  CHECK(Plan(ddl, OrdersTarget()).action == DdlAction::Execute);
}

TEST_CASE("add_column_already_on_the_target_is_a_no_op_when_its_type_is_accepted", "[ddl]") {
  TargetRelation target = OrdersTarget();
  target.columns.push_back(TCol("qty", "bigint"));
  DdlPlan plan = Plan(AddNoteColumnDdl(DefCol("qty", "integer")), target);
  REQUIRE(plan.action == DdlAction::NoTargetChange);
  CHECK(NotesContain(plan, "already exists"));

  target.columns.back().type_name = "smallint";  // narrower than integer
  RequireUnsupported(Plan(AddNoteColumnDdl(DefCol("qty", "integer")), target), "cannot take the source's integer");
}

TEST_CASE("drop_column_drops_or_notes_a_column_the_target_lacks", "[ddl]") {
  RelationDefinition def = OrdersDef();
  def.columns.pop_back();
  Ddl ddl = AlterOrders({Step(DdlStepKind::DropColumn, "note")}, def, "ALTER TABLE orders DROP COLUMN note");
  DdlPlan plan = Plan(ddl, OrdersTarget());
  CHECK(plan.action == DdlAction::Execute);
  CHECK(plan.statements == std::vector<std::string>{"ALTER TABLE \"public\".\"orders\" DROP COLUMN \"note\""});

  TargetRelation without = OrdersTarget();
  without.columns.pop_back();
  DdlPlan noop = Plan(ddl, without);
  CHECK(noop.action == DdlAction::NoTargetChange);
  CHECK(NotesContain(noop, "does not exist on the target"));
}

TEST_CASE("rename_column_renames_skips_or_refuses_by_what_the_target_has", "[ddl]") {
  RelationDefinition def = OrdersDef();
  def.columns[1].name = "memo";
  Ddl ddl = AlterOrders({Step(DdlStepKind::RenameColumn, "note", "memo")}, def,
                        "ALTER TABLE orders RENAME note TO memo");
  DdlPlan plan = Plan(ddl, OrdersTarget());
  CHECK(plan.statements ==
        std::vector<std::string>{"ALTER TABLE \"public\".\"orders\" RENAME COLUMN \"note\" TO \"memo\""});

  TargetRelation renamed = OrdersTarget();
  renamed.columns[1].name = "memo";
  CHECK(Plan(ddl, renamed).action == DdlAction::NoTargetChange);

  TargetRelation neither = OrdersTarget();
  neither.columns[1].name = "other";
  RequireUnsupported(Plan(ddl, neither), "has neither column");
}

TEST_CASE("rename_table_addresses_the_old_name_and_needs_the_target_table", "[ddl]") {
  RelationDefinition def = OrdersDef();
  def.name = "purchases";
  Ddl ddl = AlterOrders({Step(DdlStepKind::RenameTable, "orders", "purchases")}, def,
                        "ALTER TABLE orders RENAME TO purchases");
  DdlPlan plan = Plan(ddl, OrdersTarget());
  CHECK(plan.statements == std::vector<std::string>{"ALTER TABLE \"public\".\"orders\" RENAME TO \"purchases\""});
  CHECK(plan.action == DdlAction::Execute);
  RequireUnsupported(Plan(ddl, TargetRelation{}), "the target has no table public.orders");
}

TEST_CASE("alter_column_type_widens_skips_or_refuses_what_cannot_be_exact", "[ddl]") {
  auto alter = [](const std::string& new_type, bool using_expression) {
    RelationDefinition def = OrdersDef();
    def.columns.push_back(DefCol("qty", new_type));
    DdlStep step = Step(DdlStepKind::AlterColumnType, "qty");
    step.using_expression = using_expression;
    return AlterOrders({step}, def, "ALTER TABLE orders ALTER qty TYPE " + new_type);
  };
  auto target_with = [](const std::string& type) {
    TargetRelation t = OrdersTarget();
    t.columns.push_back(TCol("qty", type));
    return t;
  };
  SECTION("widening integer to bigint is altered") {
    DdlPlan plan = Plan(alter("bigint", false), target_with("integer"));
    CHECK(plan.statements ==
          std::vector<std::string>{"ALTER TABLE \"public\".\"orders\" ALTER COLUMN \"qty\" TYPE bigint"});
  }
  SECTION("a target that already takes the new type is left alone") {
    DdlPlan plan = Plan(alter("bigint", false), target_with("numeric"));
    CHECK(plan.action == DdlAction::NoTargetChange);
  }
  SECTION("USING rewrites values: never no change, even to the same type or a target already of it") {
    RequireUnsupported(Plan(alter("bigint", true), target_with("bigint")), "USING");
    RequireUnsupported(Plan(alter("text", true), target_with("text")), "its values are the old ones");
    // Replayed after the operator rewrote the column by hand: the target's column is the new type.
    RelationInfo captured = CapturedOf(*alter("bigint", true).definition);
    DdlPlan replayed = PlanDdl(alter("bigint", true), &captured, target_with("bigint"), DdlPolicy::Apply,
                               DropTablePolicy::Keep, /*replay_ready=*/true);
    CHECK(replayed.action == DdlAction::NoTargetChange);
    RequireUnsupported(PlanDdl(alter("bigint", true), &captured, target_with("integer"), DdlPolicy::Apply,
                               DropTablePolicy::Keep, true),
                       "USING");
  }
  SECTION("another typmod of the same type is altered to the source's, never left to round") {
    DdlPlan plan = Plan(alter("numeric(12,4)", false), target_with("numeric(10,2)"));
    CHECK(plan.statements ==
          std::vector<std::string>{"ALTER TABLE \"public\".\"orders\" ALTER COLUMN \"qty\" TYPE numeric(12,4)"});
  }
  SECTION("USING is unsupported") {
    RequireUnsupported(Plan(alter("bigint", true), target_with("integer")), "USING");
  }
  SECTION("a narrower new type is taken by the wider target as it is") {
    DdlPlan plan = Plan(alter("integer", false), target_with("bigint"));
    CHECK(plan.action == DdlAction::NoTargetChange);
    CHECK(NotesContain(plan, "already takes every value of integer"));
  }
  SECTION("converting is unsupported") {
    RequireUnsupported(Plan(alter("text", false), target_with("integer")), "narrows or converts integer");
    RequireUnsupported(Plan(alter("jsonb", false), target_with("json")), "narrows or converts json");
  }
}

TEST_CASE("not_null_and_defaults_follow_the_definition_and_skip_what_the_target_has", "[ddl]") {
  auto one = [](DdlStepKind kind, DdlColumn note) {
    RelationDefinition def = OrdersDef();
    def.columns[1] = note;
    return AlterOrders({Step(kind, "note")}, def, "ALTER TABLE orders ALTER note ...");
  };
  TargetRelation target = OrdersTarget();
  CHECK(Plan(one(DdlStepKind::SetNotNull, DefCol("note", "text", true)), target).statements ==
        std::vector<std::string>{"ALTER TABLE \"public\".\"orders\" ALTER COLUMN \"note\" SET NOT NULL"});
  CHECK(Plan(one(DdlStepKind::DropNotNull, DefCol("note", "text")), target).action == DdlAction::NoTargetChange);
  TargetRelation strict = OrdersTarget();
  strict.columns[1].not_null = true;
  CHECK(Plan(one(DdlStepKind::SetNotNull, DefCol("note", "text", true)), strict).action == DdlAction::NoTargetChange);
  CHECK(Plan(one(DdlStepKind::DropNotNull, DefCol("note", "text")), strict).statements ==
        std::vector<std::string>{"ALTER TABLE \"public\".\"orders\" ALTER COLUMN \"note\" DROP NOT NULL"});

  DdlColumn constant = DefCol("note", "text");
  constant.default_kind = DefaultKind::Immutable;
  constant.default_expr = "''::text";
  CHECK(Plan(one(DdlStepKind::SetDefault, constant), target).statements ==
        std::vector<std::string>{"ALTER TABLE \"public\".\"orders\" ALTER COLUMN \"note\" SET DEFAULT ''::text"});
  DdlColumn clock = DefCol("note", "text");
  clock.default_kind = DefaultKind::Mutable;
  clock.default_expr = "(now())::text";
  DdlPlan mutable_default = Plan(one(DdlStepKind::SetDefault, clock), target);
  CHECK(mutable_default.action == DdlAction::NoTargetChange);
  CHECK(NotesContain(mutable_default, "default (now())::text of note is evaluated on the source"));

  CHECK(Plan(one(DdlStepKind::DropDefault, DefCol("note", "text")), target).action == DdlAction::NoTargetChange);
  TargetRelation defaulted = OrdersTarget();
  defaulted.columns[1].has_default = true;
  CHECK(Plan(one(DdlStepKind::DropDefault, DefCol("note", "text")), defaulted).statements ==
        std::vector<std::string>{"ALTER TABLE \"public\".\"orders\" ALTER COLUMN \"note\" DROP DEFAULT"});
}

// ---- keys, identity, drop -----------------------------------------------------------------

TEST_CASE("add_primary_key_replaces_another_key_and_skips_an_equal_one", "[ddl]") {
  RelationDefinition def = OrdersDef();
  def.primary_key = {"id", "note"};
  def.primary_key_name = "orders_id_note_pkey";
  def.columns[1].not_null = true;
  Ddl ddl = AlterOrders({Step(DdlStepKind::AddPrimaryKey)}, def, "ALTER TABLE orders ADD PRIMARY KEY (id, note)");
  DdlPlan replaced = Plan(ddl, OrdersTarget());
  CHECK(replaced.statements ==
        std::vector<std::string>{"ALTER TABLE \"public\".\"orders\" DROP CONSTRAINT \"orders_pkey\"",
                                 "ALTER TABLE \"public\".\"orders\" ADD CONSTRAINT \"orders_id_note_pkey\" PRIMARY KEY "
                                 "(\"id\", \"note\")"});
  TargetRelation keyless = OrdersTarget();
  keyless.primary_key.clear();
  keyless.primary_key_name.clear();
  CHECK(Plan(ddl, keyless).statements ==
        std::vector<std::string>{"ALTER TABLE \"public\".\"orders\" ADD CONSTRAINT \"orders_id_note_pkey\" PRIMARY KEY "
                                 "(\"id\", \"note\")"});
  TargetRelation same = OrdersTarget();
  same.primary_key = {"id", "note"};
  CHECK(Plan(ddl, same).action == DdlAction::NoTargetChange);
}

TEST_CASE("drop_primary_key_drops_the_named_constraint_or_notes_its_absence", "[ddl]") {
  RelationDefinition def = OrdersDef();
  def.primary_key.clear();
  def.primary_key_name.clear();
  Ddl ddl = AlterOrders({Step(DdlStepKind::DropPrimaryKey, "orders_pkey")}, def,
                        "ALTER TABLE orders DROP CONSTRAINT orders_pkey");
  CHECK(Plan(ddl, OrdersTarget()).statements ==
        std::vector<std::string>{"ALTER TABLE \"public\".\"orders\" DROP CONSTRAINT \"orders_pkey\""});
  TargetRelation other = OrdersTarget();
  other.primary_key_name = "orders_pk";
  DdlPlan noop = Plan(ddl, other);
  CHECK(noop.action == DdlAction::NoTargetChange);
  CHECK(NotesContain(noop, "no primary key constraint orders_pkey"));
}

TEST_CASE("replica_identity_is_a_no_op_with_a_note", "[ddl]") {
  RelationDefinition def = OrdersDef();
  def.replica_identity = ReplicaIdentity::Full;
  DdlPlan plan = Plan(AlterOrders({Step(DdlStepKind::ReplicaIdentity)}, def, "ALTER TABLE orders REPLICA IDENTITY FULL"),
                      OrdersTarget());
  CHECK(plan.action == DdlAction::NoTargetChange);
  CHECK(plan.statements.empty());
  CHECK(NotesContain(plan, "matches rows by the captured key"));
}

TEST_CASE("drop_table_is_kept_or_applied_by_policy_and_always_forgotten", "[ddl]") {
  Ddl ddl;
  ddl.command_tag = "DROP TABLE";
  ddl.object_type = "table";
  ddl.object_identity = "public.orders";
  ddl.sql = "DROP TABLE orders";
  ddl.relation_oid = 16384;
  ddl.relation_schema = "public";
  ddl.relation_name = "orders";
  ddl.steps = {Step(DdlStepKind::DropTable)};
  DdlPlan keep = PlanDdl(ddl, nullptr, OrdersTarget(), DdlPolicy::Apply, DropTablePolicy::Keep);
  CHECK(keep.action == DdlAction::NoTargetChange);
  CHECK(keep.forget_relation);
  CHECK(NotesContain(keep, "ddl_drop_table = \"keep\""));
  DdlPlan apply = PlanDdl(ddl, nullptr, OrdersTarget(), DdlPolicy::Apply, DropTablePolicy::Apply);
  CHECK(apply.action == DdlAction::Execute);
  CHECK(apply.forget_relation);
  CHECK(apply.statements == std::vector<std::string>{"DROP TABLE \"public\".\"orders\""});
}

TEST_CASE("no_shape_change_runs_nothing", "[ddl]") {
  DdlPlan plan = Plan(AlterOrders({Step(DdlStepKind::NoShapeChange, "", "", "CREATE INDEX orders_note_idx")},
                                  OrdersDef(), "CREATE INDEX orders_note_idx ON orders (note)"),
                      OrdersTarget());
  CHECK(plan.action == DdlAction::NoTargetChange);
  CHECK(plan.statements.empty());
  CHECK_FALSE(plan.forget_relation);
}

// ---- quoting, sequences, the final guard ------------------------------------------------

TEST_CASE("odd_names_are_quoted_and_an_unquotable_name_is_unsupported", "[ddl]") {
  RelationDefinition def;
  def.oid = 30000;
  def.schema = "My Schema";
  def.name = "we\"ird";
  def.columns = {DefCol("Upper Case", "integer"), DefCol("has\"quote", "text")};
  Ddl ddl;
  ddl.command_tag = "ALTER TABLE";
  ddl.relation_oid = def.oid;
  ddl.relation_schema = def.schema;
  ddl.relation_name = def.name;
  ddl.sql = "ALTER TABLE ...";
  ddl.steps = {Step(DdlStepKind::RenameColumn, "lower", "Upper Case"), Step(DdlStepKind::AddColumn, "has\"quote")};
  ddl.definition = def;
  TargetRelation target;
  target.exists = true;
  target.columns = {TCol("lower", "integer")};
  DdlPlan plan = Plan(ddl, target);
  INFO(plan.cause.detail);
  REQUIRE(plan.action == DdlAction::Execute);
  CHECK(plan.statements ==
        std::vector<std::string>{
            "ALTER TABLE \"My Schema\".\"we\"\"ird\" RENAME COLUMN \"lower\" TO \"Upper Case\"",
            "ALTER TABLE \"My Schema\".\"we\"\"ird\" ADD COLUMN \"has\"\"quote\" text"});

  Ddl too_long = ddl;
  const std::string long_name(64, 'x');
  too_long.steps = {Step(DdlStepKind::RenameColumn, "lower", long_name)};
  too_long.definition->columns = {DefCol(long_name, "integer")};
  RequireUnsupported(Plan(too_long, target), "63 bytes");
}

TEST_CASE("steps_play_in_order_on_the_simulated_target", "[ddl]") {
  // Rename then add, then SET NOT NULL on the renamed column: each step sees the previous ones.
  RelationDefinition def = OrdersDef();
  def.columns[1] = DefCol("memo", "text", true);
  def.columns.push_back(DefCol("qty", "integer"));
  Ddl ddl = AlterOrders({Step(DdlStepKind::RenameColumn, "note", "memo"), Step(DdlStepKind::AddColumn, "qty"),
                         Step(DdlStepKind::SetNotNull, "memo"), Step(DdlStepKind::RenameTable, "orders", "purchases")},
                        def, "...");
  ddl.definition->name = "purchases";
  DdlPlan plan = Plan(ddl, OrdersTarget());
  INFO(plan.cause.detail);
  REQUIRE(plan.action == DdlAction::Execute);
  CHECK(plan.statements == std::vector<std::string>{
                               "ALTER TABLE \"public\".\"orders\" RENAME COLUMN \"note\" TO \"memo\"",
                               "ALTER TABLE \"public\".\"orders\" ADD COLUMN \"qty\" integer",
                               "ALTER TABLE \"public\".\"orders\" ALTER COLUMN \"memo\" SET NOT NULL",
                               "ALTER TABLE \"public\".\"orders\" RENAME TO \"purchases\""});
  // A step after the rename addresses the new table name.
  ddl.steps.push_back(Step(DdlStepKind::DropDefault, "memo"));
  TargetRelation defaulted = OrdersTarget();
  defaulted.columns[1].has_default = true;
  DdlPlan renamed = Plan(ddl, defaulted);
  REQUIRE(renamed.statements.size() == 5);
  CHECK(renamed.statements[4] == "ALTER TABLE \"public\".\"purchases\" ALTER COLUMN \"memo\" DROP DEFAULT");
}

TEST_CASE("a_definition_the_steps_do_not_explain_is_never_applied_half_way", "[ddl]") {
  // The definition (and the captured relation) carry a column `extra` no step adds.
  RelationDefinition def = OrdersDef();
  def.columns.push_back(DefCol("qty", "integer"));
  def.columns.push_back(DefCol("extra", "integer"));
  Ddl ddl = AlterOrders({Step(DdlStepKind::AddColumn, "qty")}, def, "ALTER TABLE orders ADD COLUMN qty integer");
  DdlPlan plan = Plan(ddl, OrdersTarget());
  RequireUnsupported(plan, "would still not accept the captured definition");
  CHECK(Contains(plan.cause.detail, "after add_column qty the target's public.orders"));
  CHECK(Contains(plan.cause.detail, "column extra"));
  // With `extra` already on the target the same record is applied.
  TargetRelation ahead = OrdersTarget();
  ahead.columns.push_back(TCol("extra", "integer"));
  CHECK(Plan(ddl, ahead).action == DdlAction::Execute);
}

TEST_CASE("describe_ddl_names_the_command_relation_and_steps", "[ddl]") {
  Ddl ddl = AlterOrders({Step(DdlStepKind::AddColumn, "note"), Step(DdlStepKind::RenameColumn, "a", "b")}, OrdersDef(),
                        "...");
  CHECK(DescribeDdl(ddl) == "ALTER TABLE public.orders: add_column note, rename_column a -> b");
  CHECK(std::string(DdlPolicyName(DdlPolicy::Halt)) == "halt");
  CHECK(std::string(DdlPolicyName(DdlPolicy::Apply)) == "apply");
  CHECK(std::string(DropTablePolicyName(DropTablePolicy::Keep)) == "keep");
  CHECK(std::string(DropTablePolicyName(DropTablePolicy::Apply)) == "apply");
}

TEST_CASE("create_table_as_is_found_after_the_rows_it_wrote", "[ddl]") {
  // CREATE TABLE AS / SELECT INTO: the rows of relation 77 come before its DDL record.
  Change row;
  row.op = Op::Insert;
  row.relation_oid = 77;
  Change create;
  create.op = Op::Ddl;
  create.relation_oid = 77;
  create.ddl.command_tag = "CREATE TABLE AS";
  create.ddl.steps = {Step(DdlStepKind::CreateTable)};
  Change alter = create;
  alter.ddl.steps = {Step(DdlStepKind::AddColumn, "extra")};
  Change plain = create;
  plain.ddl.command_tag = "CREATE TABLE";  // its rows follow its record: rows before it are out of order
  Change select_into = create;
  select_into.ddl.command_tag = "SELECT INTO";
  CHECK(CreatesRelation(create, 77));
  CHECK(CreatesRelation(select_into, 77));
  CHECK_FALSE(CreatesRelation(plain, 77));
  CHECK_FALSE(CreatesRelation(create, 78));
  CHECK_FALSE(CreatesRelation(alter, 77));
  CHECK_FALSE(CreatesRelation(row, 77));
  const std::vector<Change> changes{row, row, alter, create};
  CHECK(CreatedLaterAt(changes, 0, 77) == std::optional<size_t>(3));
  CHECK_FALSE(CreatedLaterAt(changes, 3, 77));
  CHECK_FALSE(CreatedLaterAt(changes, 0, 78));
}

TEST_CASE("a_renamed_type_is_renamed_once_on_the_target", "[ddl]") {
  Ddl rename = CreateEvents();
  rename.command_tag = "ALTER TYPE";
  rename.relation_schema = "public";
  rename.relation_name = "events";
  for (DdlColumn& c : rename.definition->columns)
    if (c.name == "name") c.type_name = "app.label";
  DdlColumn tags = DefCol("tags", "app.label[]");
  rename.definition->columns.push_back(tags);
  rename.steps = {Step(DdlStepKind::RenameType, "app.tag", "app.label", "ALTER TYPE app.tag RENAME TO app.label")};
  TargetRelation before;
  before.exists = true;
  before.columns = {TCol("id", "bigint", true), TCol("seq", "bigint", true), TCol("name", "app.tag", true),
                    TCol("upper_name", "text"), TCol("tags", "app.tag[]")};
  before.primary_key = {"id"};
  DdlPlan plan = Plan(rename, before);
  REQUIRE(plan.action == DdlAction::Execute);
  CHECK(plan.statements == std::vector<std::string>{"ALTER TYPE app.tag RENAME TO label"});
  // The next table's record finds the type renamed already.
  TargetRelation after = before;
  after.columns[2].type_name = "app.label";
  after.columns[4].type_name = "app.label[]";
  plan = Plan(rename, after);
  CHECK(plan.action == DdlAction::NoTargetChange);
  // A domain is renamed with ALTER DOMAIN.
  rename.steps = {Step(DdlStepKind::RenameType, "app.tag", "app.label", "ALTER DOMAIN app.tag RENAME TO app.label")};
  plan = Plan(rename, before);
  CHECK(plan.statements == std::vector<std::string>{"ALTER DOMAIN app.tag RENAME TO label"});
  // RENAME TO never changes the schema: a record saying so is malformed.
  rename.steps = {Step(DdlStepKind::RenameType, "app.tag", "other.label")};
  RequireUnsupported(Plan(rename, before), "changes its schema");
}

TEST_CASE("enum_labels_added_and_renamed_are_carried_to_the_target", "[ddl]") {
  Ddl alter = CreateEvents();
  alter.command_tag = "ALTER TYPE";
  alter.relation_schema = "public";
  alter.relation_name = "events";
  TargetRelation target;
  target.exists = true;
  target.columns = {TCol("id", "bigint", true), TCol("seq", "bigint", true), TCol("name", "text", true),
                    TCol("upper_name", "text")};
  target.primary_key = {"id"};
  DdlStep add = Step(DdlStepKind::EnumAddValue, "app.mood", "it's \\ odd");
  add.label = "glad";
  add.before = true;
  alter.steps = {add};
  DdlPlan plan = Plan(alter, target);
  REQUIRE(plan.action == DdlAction::Execute);
  CHECK(plan.statements ==
        std::vector<std::string>{"ALTER TYPE app.mood ADD VALUE IF NOT EXISTS E'it''s \\\\ odd' BEFORE E'glad'"});
  add.before = false;
  add.label = "sad";
  alter.steps = {add};
  CHECK(Plan(alter, target).statements ==
        std::vector<std::string>{"ALTER TYPE app.mood ADD VALUE IF NOT EXISTS E'it''s \\\\ odd' AFTER E'sad'"});
  add.label.clear();  // the enum's only label
  alter.steps = {add};
  CHECK(Plan(alter, target).statements == std::vector<std::string>{"ALTER TYPE app.mood ADD VALUE IF NOT EXISTS E'it''s \\\\ odd'"});
  DdlStep rename = Step(DdlStepKind::EnumRenameValue, "app.mood", "happy");
  rename.label = "glad";
  alter.steps = {rename};
  CHECK(Plan(alter, target).statements ==
        std::vector<std::string>{"SELECT trellara.rename_enum_value(E'app.mood'::pg_catalog.regtype, E'glad', E'happy')"});
  rename.label.clear();
  alter.steps = {rename};
  RequireUnsupported(Plan(alter, target), "malformed");
}

// ---- a DDL change and the relation's snapshot (the handoff rules, moved out of the applier) ----

TEST_CASE("a_ddl_replayed_after_review_is_planned_under_apply", "[ddl][snapshot]") {
  CHECK(PolicyOnReplay(DdlPolicy::Halt, false) == DdlPolicy::Halt);
  CHECK(PolicyOnReplay(DdlPolicy::Halt, true) == DdlPolicy::Apply);
  CHECK(PolicyOnReplay(DdlPolicy::Apply, false) == DdlPolicy::Apply);
}

TEST_CASE("only_a_ddl_that_moves_the_known_definition_meets_the_snapshot", "[ddl][snapshot]") {
  RelationInfo captured;
  captured.oid = 10;
  captured.fingerprint[0] = 1;
  KnownRelation same{10, "public", "t", captured.fingerprint};
  KnownRelation other = same;
  other.fingerprint[0] = 2;
  DdlPlan no_change;  // NoTargetChange, nothing forgotten
  CHECK_FALSE(DdlChangesShape(no_change, &captured, same));
  CHECK(DdlChangesShape(no_change, &captured, other));         // known fingerprint differs
  CHECK(DdlChangesShape(no_change, &captured, std::nullopt));  // the flow does not know it
  CHECK(DdlChangesShape(no_change, nullptr, same));            // no captured definition (DROP)
  DdlPlan execute;
  execute.action = DdlAction::Execute;
  CHECK(DdlChangesShape(execute, &captured, same));
  DdlPlan forget;
  forget.forget_relation = true;
  CHECK(DdlChangesShape(forget, &captured, same));
}

TEST_CASE("a_shape_change_withholds_an_unfinished_copy_and_checks_a_finished_one", "[ddl][snapshot]") {
  CHECK(DecideDdlBesideSnapshot({false, true, false}) == DdlSnapshotStep::None);  // shape unchanged
  CHECK(DecideDdlBesideSnapshot({true, false, false}) == DdlSnapshotStep::None);  // no snapshot
  CHECK(DecideDdlBesideSnapshot({true, true, true}) == DdlSnapshotStep::None);    // retired before this commit
  CHECK(DecideDdlBesideSnapshot({true, true, false}) == DdlSnapshotStep::WithholdOrCheck);
  CHECK_FALSE(CheckFinishedChunksAfterWithhold(/*withheld=*/true, false));   // copied again anyway
  CHECK(CheckFinishedChunksAfterWithhold(/*withheld=*/false, false));        // finished: check chunks
  CHECK_FALSE(CheckFinishedChunksAfterWithhold(/*withheld=*/false, true));   // the operator reviewed it
}

TEST_CASE("a_finished_copy_read_in_a_snapshot_that_saw_the_ddl_fails_closed", "[ddl][snapshot]") {
  // The DDL transaction: xid 99, committed at 4000. Chunk 2 was read in a snapshot that sees it
  // (xmin 100 > 99, snapshot_lsn 5000 past the commit): copied with the definition before the DDL.
  SourceSnapshot saw{100, 110, {}};
  SourceSnapshot before{90, 95, {}};  // xid 99 not yet visible
  std::vector<std::pair<int32_t, ChunkView>> chunks{
      {1, ChunkView{ChunkView::Kind::Copied, before, 3000}},
      {2, ChunkView{ChunkView::Kind::Copied, saw, 5000}},
      {3, ChunkView{ChunkView::Kind::Pending, {}, std::nullopt}},
  };
  auto cause = FinishedCopySawDdl(chunks, 99, 4000, "public.t", "ALTER TABLE public.t: add_column c", "/etc/f.toml");
  REQUIRE(cause);
  CHECK(cause->reason == QuarantineReason::DdlUnsupported);
  CHECK(cause->relation == "public.t");
  CHECK(cause->detail.find("chunk 2 of the finished snapshot of public.t") != std::string::npos);
  CHECK(cause->detail.find("trellara snapshot --config /etc/f.toml --table public.t --force") != std::string::npos);
  // No chunk saw it: nothing to fail.
  chunks.erase(chunks.begin() + 1);
  CHECK_FALSE(FinishedCopySawDdl(chunks, 99, 4000, "public.t", "d", "f"));
}

}  // namespace unit_ddl_apply_test
