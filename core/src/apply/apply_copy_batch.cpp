// apply_copy_batch.cpp — the bulk forms of planned changes (apply_plan.h): a run of INSERTs as
// COPY rows (from the INSERT plan, or straight from the change on the hot path, both producing the
// same text), the row a COPY error names, and the batched UPDATE of several rows in one statement.
//
// Must produce exactly what the one-row plans would apply: the same values, the same NULLs, the
// same row matched by the same key; never a value that COPY's text format would read differently.
#include "trellara/apply/apply_plan.h"
#include "trellara/apply/value_types.h"

#include <algorithm>
#include <string_view>

namespace trellara {

Result<std::string> CopyInsertSql(const RelationInfo& relation) {
  const std::string what = "COPY into " + DisplayName(relation);
  if (relation.columns.empty()) return MakeError(what + ": the relation has no columns to copy");
  auto qualified = QualifiedName(relation);
  if (!qualified.ok()) return MakeError(what + ": " + qualified.error().message);
  std::string cols;
  for (const auto& column : relation.columns) {
    auto q = QuoteIdentifier(column.name);
    if (!q.ok()) return MakeError(what + ": column " + column.name + ": " + q.error().message);
    if (!cols.empty()) cols += ", ";
    cols += *q;
  }
  return "COPY " + *qualified + " (" + cols + ") FROM STDIN";
}

Status AppendCopyRow(const ChangePlan& insert, std::string& out) {
  if (insert.kind != PlanKind::Insert || insert.params.empty())
    return MakeError("internal: a COPY row is made only from the INSERT plan of a relation with columns");
  for (size_t i = 0; i < insert.params.size(); i++) {
    if (i > 0) out.push_back('\t');
    const std::optional<std::string>& value = insert.params[i];
    if (!value) {
      out += "\\N";
      continue;
    }
    for (char c : *value) {
      switch (c) {
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default: out.push_back(c);
      }
    }
  }
  out.push_back('\n');
  return Status::Ok();
}

namespace {
void AppendCopyText(const std::string& value, std::string& out) {
  for (char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default: out.push_back(c);
    }
  }
}
}  // namespace

Status AppendCopyRowOf(const Change& change, const RelationInfo& relation, std::string& out) {
  const size_t width = relation.columns.size();
  if (change.op != Op::Insert || change.relation_oid != relation.oid || width == 0 || change.new_tuple.size() != width)
    return MakeError("not an INSERT of " + DisplayName(relation) + " with a value per column");
  for (const Value& v : change.new_tuple) {
    if (v.kind == Value::Kind::Null) continue;
    if (v.kind != Value::Kind::Text || v.data.find('\0') != std::string::npos)
      return MakeError("a value of the INSERT on " + DisplayName(relation) + " needs the planner");
  }
  for (size_t i = 0; i < width; i++) {
    if (i > 0) out.push_back('\t');
    const Value& v = change.new_tuple[i];
    if (v.kind == Value::Kind::Null)
      out += "\\N";
    else
      AppendCopyText(v.data, out);
  }
  out.push_back('\n');
  return Status::Ok();
}

std::optional<uint64_t> CopyLineOf(const std::string& context) {
  // The COPY's own line of the context (a trigger's lines may come first).
  size_t start = 0;
  while (start < context.size() && context.compare(start, 5, "COPY ") != 0) {
    const size_t next = context.find('\n', start);
    if (next == std::string::npos) return std::nullopt;
    start = next + 1;
  }
  const size_t end = context.find('\n', start);
  const size_t at = context.find(", line ", start);
  if (at == std::string::npos || (end != std::string::npos && at > end)) return std::nullopt;
  size_t i = at + 7;
  uint64_t line = 0;
  size_t digits = 0;
  while (i < context.size() && context[i] >= '0' && context[i] <= '9' && digits < 19) {
    line = line * 10 + static_cast<uint64_t>(context[i] - '0');
    i++;
    digits++;
  }
  if (digits == 0 || line == 0) return std::nullopt;
  return line;
}

size_t PlanParamBytes(const ChangePlan& plan) {
  size_t bytes = 0;
  for (const auto& p : plan.params) bytes += p ? p->size() : 0;
  return bytes;
}

bool UpdateBatchable(const ChangePlan& plan) {
  return plan.kind == PlanKind::Update && plan.match == MatchMode::Key && plan.expect == RowExpectation::ExactlyOne &&
         !plan.row_key.empty() && plan.match_params > 0 && plan.match_params < plan.params.size() &&
         plan.param_columns.size() == plan.params.size() && !plan.target_relation.empty();
}

Result<std::string> UpdateBatchSql(const ChangePlan& first, const std::vector<std::string>& cast_types) {
  if (!UpdateBatchable(first))
    return MakeError("internal: an UPDATE batch was asked for a change that is not a key-preserving UPDATE of " +
                     first.relation_display);
  const size_t m = first.params.size();
  if (cast_types.size() != m)
    return MakeError("internal: " + std::to_string(cast_types.size()) + " column types for the " + std::to_string(m) +
                     " parameters of an UPDATE batch of " + first.relation_display);
  std::string set, where, arrays, aliases;
  for (size_t i = 0; i < m; i++) {
    auto quoted = QuoteIdentifier(first.param_columns[i]);
    if (!quoted) return MakeError("column " + first.param_columns[i] + " of " + first.relation_display + ": " +
                                  quoted.error().message);
    // Each column travels as text and is cast per value (value_types.h BatchCastType).
    const std::string v = "trellara_batch.v" + std::to_string(i + 1) + "::" + cast_types[i];
    if (i < m - first.match_params) {
      if (!set.empty()) set += ", ";
      set += *quoted + " = " + v;
    } else {
      if (!where.empty()) where += " AND ";
      where += "trellara_row." + *quoted + " = " + v;
    }
    if (i > 0) arrays += ", ";
    arrays += "$" + std::to_string(i + 1) + "::text[]";
    aliases += "v" + std::to_string(i + 1) + ", ";
  }
  const std::string count = "$" + std::to_string(m + 1);
  return "WITH trellara_rows AS (UPDATE " + first.rows_target + " AS trellara_row SET " + set + " FROM unnest(" +
         arrays + ") WITH ORDINALITY AS trellara_batch(" + aliases + "ord) WHERE " + where +
         " RETURNING trellara_batch.ord) SELECT CASE WHEN count(*) = " + count + " AND count(DISTINCT ord) = " + count +
         " THEN NULL ELSE trellara.require_each_row_once(array_agg(ord), " + count + ") END FROM trellara_rows";
}

void AppendArrayElement(const std::optional<std::string>& value, std::string& literal) {
  if (literal.size() > 1) literal += ',';
  if (!value) {
    literal += "NULL";
    return;
  }
  literal += '"';
  for (char c : *value) {
    if (c == '"' || c == '\\') literal += '\\';
    literal += c;
  }
  literal += '"';
}

std::string RowCheckedSql(const ChangePlan& plan) {
  if (plan.expect != RowExpectation::ExactlyOne) return plan.sql;
  // The function is called only when the count is wrong (CASE evaluates lazily): a call per
  // change would cost a PL/pgSQL invocation on the target's hot path.
  return "WITH trellara_rows AS (" + plan.sql +
         " RETURNING 1) SELECT CASE WHEN count(*) = 1 THEN NULL ELSE trellara.require_one_row(count(*)) END "
         "FROM trellara_rows";
}

}  // namespace trellara
