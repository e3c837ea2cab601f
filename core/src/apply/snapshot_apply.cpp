// snapshot_apply.cpp — the applier's side of the handoff and of holds, pure (snapshot_apply.h).
// Must never pick a chunk from anything but the exact integer in the key column, never build an
// INSERT that would write an absent (unchanged-TOAST) value, and never splice a value into SQL.
#include "trellara/apply/snapshot_apply.h"

#include <cerrno>
#include <cstdlib>

namespace trellara {

namespace {

std::string Describe(const Change& change, const RelationInfo& relation) {
  return std::string(OpName(change.op)) + " on " + DisplayName(relation);
}

Result<int64_t> ParseKey(const Value& value, const std::string& what) {
  switch (value.kind) {
    case Value::Kind::Null: return MakeError(what + " is NULL");
    case Value::Kind::UnchangedToast: return MakeError(what + " is an unchanged-TOAST marker");
    case Value::Kind::Binary: return MakeError(what + " is in binary form (the applier reads text values only)");
    case Value::Kind::Text: break;
  }
  const std::string& text = value.data;
  if (text.empty()) return MakeError(what + " is empty");
  errno = 0;
  char* end = nullptr;
  const long long parsed = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size())
    return MakeError(what + " is \"" + text.substr(0, 40) + "\", not a 64-bit integer");
  return static_cast<int64_t>(parsed);
}

}  // namespace

Result<size_t> KeyColumnIndex(const RelationInfo& relation, const std::string& key_column) {
  for (size_t i = 0; i < relation.columns.size(); i++)
    if (relation.columns[i].name == key_column) return i;
  return MakeError("relation " + DisplayName(relation) + " has no column " + key_column +
                   ", the key column its snapshot chunks are split on (trellara.snapshot_tables.key_column); "
                   "the source's definition changed since the table was registered: reseed it (trellara reseed)");
}

Result<int64_t> ChunkKeyOf(const Change& change, const RelationInfo& relation, size_t column_index, RowSide side) {
  const std::string what = Describe(change, relation);
  if (column_index >= relation.columns.size())
    return MakeError(what + ": chunk key column index " + std::to_string(column_index) + " is out of range");
  const std::string& name = relation.columns[column_index].name;
  const std::string value_of = what + ": the " + std::string(side == RowSide::Old ? "old" : "new") +
                               " value of chunk key column " + name;
  const bool has_new = change.op == Op::Insert || change.op == Op::Update;
  const bool has_old = change.op == Op::Delete || change.op == Op::Update;
  if ((side == RowSide::New && !has_new) || (side == RowSide::Old && !has_old))
    return MakeError(what + ": a " + OpName(change.op) + " has no " + (side == RowSide::Old ? "old" : "new") + " row");
  if (side == RowSide::New || change.old_image == OldImage::None) {
    // An UPDATE without an old image did not change its key: the old key is the new one.
    if (side == RowSide::Old && change.op == Op::Delete)
      return MakeError(what + ": the change carries no old row image, so its chunk cannot be found");
    if (change.new_tuple.size() != relation.columns.size())
      return MakeError(what + ": the new tuple has " + std::to_string(change.new_tuple.size()) + " values for " +
                       std::to_string(relation.columns.size()) + " columns");
    return ParseKey(change.new_tuple[column_index], value_of);
  }
  if (change.old_image == OldImage::Full) {
    if (change.old_tuple.size() != relation.columns.size())
      return MakeError(what + ": the old row image has " + std::to_string(change.old_tuple.size()) + " values for " +
                       std::to_string(relation.columns.size()) + " columns");
    return ParseKey(change.old_tuple[column_index], value_of);
  }
  // OldImage::Key: the key columns, in column order.
  if (!relation.columns[column_index].is_key)
    return MakeError(what + ": chunk key column " + name +
                     " is not a replica identity column, so the old key image does not carry it; make the table's "
                     "replica identity include it (or use the primary key) and reseed the table");
  size_t position = 0;
  for (size_t i = 0; i < column_index; i++) position += relation.columns[i].is_key ? 1 : 0;
  if (position >= change.old_tuple.size())
    return MakeError(what + ": the old key image has " + std::to_string(change.old_tuple.size()) +
                     " values, too few for key column " + name);
  return ParseKey(change.old_tuple[position], value_of);
}

Result<Change> OldRowDelete(const Change& update, const RelationInfo& relation) {
  if (update.op != Op::Update) return MakeError(Describe(update, relation) + ": only an UPDATE has halves");
  Change del;
  del.op = Op::Delete;
  del.relation_oid = update.relation_oid;
  if (update.old_image != OldImage::None) {
    del.old_image = update.old_image;
    del.old_tuple = update.old_tuple;
    return del;
  }
  if (update.new_tuple.size() != relation.columns.size())
    return MakeError(Describe(update, relation) + ": the new tuple has " + std::to_string(update.new_tuple.size()) +
                     " values for " + std::to_string(relation.columns.size()) + " columns");
  del.old_image = OldImage::Key;
  for (size_t i = 0; i < relation.columns.size(); i++)
    if (relation.columns[i].is_key) del.old_tuple.push_back(update.new_tuple[i]);
  if (del.old_tuple.empty())
    return MakeError(Describe(update, relation) + ": the relation has no key and the change no old row image, so "
                     "the old row cannot be deleted alone");
  return del;
}

Result<Change> NewRowInsert(const Change& update, const RelationInfo& relation) {
  if (update.op != Op::Update) return MakeError(Describe(update, relation) + ": only an UPDATE has halves");
  for (size_t i = 0; i < update.new_tuple.size() && i < relation.columns.size(); i++)
    if (update.new_tuple[i].kind == Value::Kind::UnchangedToast)
      return MakeError(Describe(update, relation) + ": its new row must be inserted alone (its old row is in a "
                       "chunk whose copy already holds the update, its new row in one whose copy does not), but "
                       "column " + relation.columns[i].name + " is an unchanged TOASTed value the stream did not "
                       "carry");
  Change insert;
  insert.op = Op::Insert;
  insert.relation_oid = update.relation_oid;
  insert.new_tuple = update.new_tuple;
  return insert;
}

Result<ChangePlan> PlanRangeDelete(const RelationInfo& relation, const std::string& key_column, const ChunkRange& range,
                                   bool partitioned) {
  auto qualified = QualifiedName(relation);
  if (!qualified) return MakeError("TRUNCATE of " + DisplayName(relation) + ": " + qualified.error().message);
  ChangePlan plan;
  plan.kind = PlanKind::Delete;
  plan.expect = RowExpectation::Any;
  plan.match = MatchMode::None;
  plan.relation_display = DisplayName(relation);
  std::string where;
  std::string shape;
  if (range.lo || range.hi) {
    auto column = QuoteIdentifier(key_column);
    if (!column)
      return MakeError("TRUNCATE of " + DisplayName(relation) + ", key column " + key_column + ": " +
                       column.error().message);
    if (range.lo) {
      plan.params.push_back(std::to_string(*range.lo));
      plan.param_columns.push_back(key_column);
      where += *column + " >= $" + std::to_string(plan.params.size());
      shape += "L";
    }
    if (range.hi) {
      plan.params.push_back(std::to_string(*range.hi));
      plan.param_columns.push_back(key_column);
      where += (where.empty() ? "" : " AND ") + *column + " < $" + std::to_string(plan.params.size());
      shape += "H";
    }
  }
  plan.sql = "DELETE FROM " + RowsTarget(*qualified, partitioned) + (where.empty() ? std::string() : " WHERE " + where);
  plan.match_description = "chunk " + std::to_string(range.chunk_no) + " (" + key_column + " in [" +
                           (range.lo ? std::to_string(*range.lo) : std::string("-inf")) + ", " +
                           (range.hi ? std::to_string(*range.hi) : std::string("+inf")) + "))";
  plan.statement_key = "RD|" + HexEncode(relation.fingerprint) + (partitioned ? "|p|" : "|") + key_column + "|" + shape;
  return plan;
}

RootTruncate DecideRootTruncate(const std::vector<HalfDecision>& halves) {
  size_t apply = 0;
  for (HalfDecision h : halves) apply += h == HalfDecision::Apply ? 1 : 0;
  if (apply == halves.size()) return RootTruncate::TruncateWhole;
  return apply == 0 ? RootTruncate::DeleteOutsideCopied : RootTruncate::Mixed;
}

Result<ChangePlan> PlanDeleteOutsidePartitions(const RelationInfo& root, const std::vector<std::string>& partitions) {
  auto qualified = QualifiedName(root);
  if (!qualified) return MakeError("TRUNCATE of " + DisplayName(root) + ": " + qualified.error().message);
  if (partitions.empty()) return MakeError("internal: no partitions to keep in a TRUNCATE of " + DisplayName(root));
  std::string literal = "{";
  std::string keys;
  for (const std::string& name : partitions) {
    const size_t dot = name.find('.');
    if (dot == std::string::npos) return MakeError("internal: partition name " + name + " has no schema");
    auto schema = QuoteIdentifier(name.substr(0, dot));
    auto table = QuoteIdentifier(name.substr(dot + 1));
    if (!schema || !table) return MakeError("TRUNCATE of " + DisplayName(root) + ": partition " + name + " cannot be quoted");
    AppendArrayElement(*schema + "." + *table, literal);
    keys += name + ",";
  }
  literal += '}';
  ChangePlan plan;
  plan.kind = PlanKind::Delete;
  plan.expect = RowExpectation::Any;
  plan.match = MatchMode::None;
  plan.relation_display = DisplayName(root);
  plan.sql = "DELETE FROM " + *qualified + " WHERE tableoid <> ALL ($1::pg_catalog.regclass[])";
  plan.params.push_back(literal);
  plan.param_columns.push_back("tableoid");
  plan.match_description = "its partitions other than " + keys.substr(0, keys.size() - 1) +
                           " (their snapshot copies already hold the TRUNCATE)";
  plan.statement_key = "RT|" + HexEncode(root.fingerprint);
  return plan;
}

HoldStep DecideHold(const HoldFacts& f) {
  if (f.applied_lsn > f.hold_lsn) return HoldStep::Passed;
  if (!f.drained) return HoldStep::NotYet;
  if (f.next_commit_lsn) return *f.next_commit_lsn > f.hold_lsn ? HoldStep::Reach : HoldStep::NotYet;
  return f.covered_lsn >= f.hold_lsn ? HoldStep::Reach : HoldStep::NotYet;
}

}  // namespace trellara
