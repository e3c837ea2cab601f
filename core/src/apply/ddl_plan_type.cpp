// ddl_plan_type.cpp — the DDL steps on a type the table's columns use (DdlPlanner,
// ddl_apply_internal.h): ALTER TYPE / ALTER DOMAIN ... RENAME TO, and an enum's ADD VALUE and
// RENAME VALUE. Each is recorded once per captured table using the type.
//
// Every step is idempotent on the target, so the second table's record (or a replay after the
// operator did it by hand) changes nothing. Never moves a type to another schema, and never puts a
// label into SQL text except as an escaped string constant. Talks to no database.
#include <string>
#include <utility>

#include "ddl_apply_internal.h"

namespace trellara::ddl_detail {
namespace {

// A string constant, whatever standard_conforming_strings says: E'...' with ' and \ doubled.
std::string SqlLiteral(const std::string& value) {
  std::string out = "E'";
  for (char c : value) {
    if (c == '\'' || c == '\\') out += c;
    out += c;
  }
  return out + "'";
}

}  // namespace

// ALTER TYPE / ALTER DOMAIN ... RENAME TO, recorded for each captured table with a column of the
// type (or an array of it). The target's type is renamed once: the first table's record renames
// it, the next ones find their columns already of the new name. The new name must be the old
// one's schema and a new last part (RENAME TO never moves a type).
Status DdlPlanner::RenameType(const DdlStep& step) {
  if (step.column.empty() || step.new_name.empty())
    return MakeError("rename of a type used by " + current_display() + " does not name the old and new type; the "
                     "record is malformed");
  const size_t old_dot = step.column.rfind('.');
  const size_t new_dot = step.new_name.rfind('.');
  const std::string old_schema = old_dot == std::string::npos ? "" : step.column.substr(0, old_dot);
  const std::string new_schema = new_dot == std::string::npos ? "" : step.new_name.substr(0, new_dot);
  if (old_schema != new_schema)
    return MakeError("rename of type " + step.column + " to " + step.new_name + " changes its schema; the record is "
                     "malformed");
  bool renamed_here = false;
  for (TargetColumn& c : sim_.columns) {
    if (c.type_name == step.column) {
      c.type_name = step.new_name;
      renamed_here = true;
    } else if (c.type_name == step.column + "[]") {
      c.type_name = step.new_name + "[]";
      renamed_here = true;
    }
  }
  if (!renamed_here) {
    plan_.notes.push_back("type " + step.column + " is already " + step.new_name + " on the target's " +
                          current_display());
    return Status::Ok();
  }
  const bool domain = step.detail.rfind("ALTER DOMAIN", 0) == 0;
  // The last part as format_type printed it: already quoted when it needs quotes.
  const std::string new_last = new_dot == std::string::npos ? step.new_name : step.new_name.substr(new_dot + 1);
  plan_.statements.push_back(std::string(domain ? "ALTER DOMAIN " : "ALTER TYPE ") + step.column + " RENAME TO " +
                             new_last);
  return Status::Ok();
}

// ALTER TYPE ... ADD VALUE, recorded on each captured table with a column of the enum (or an array
// of it): IF NOT EXISTS, so the first table's record adds the label and the next ones (or a replay
// after the operator added it) find it. Placed by its neighbour, as on the source.
Status DdlPlanner::EnumAddValue(const DdlStep& step) {
  if (step.column.empty() || step.new_name.empty())
    return MakeError("a label added to an enum used by " + current_display() +
                     " does not name the type and the label; the record is malformed");
  std::string sql = "ALTER TYPE " + step.column + " ADD VALUE IF NOT EXISTS " + SqlLiteral(step.new_name);
  if (!step.label.empty()) sql += std::string(step.before ? " BEFORE " : " AFTER ") + SqlLiteral(step.label);
  plan_.statements.push_back(std::move(sql));
  return Status::Ok();
}

// ALTER TYPE ... RENAME VALUE, on each table using the enum: trellara.rename_enum_value renames
// the label when the target's enum still has the old one, does nothing when it already has the
// new one (an earlier table's record, or the operator), and fails naming both otherwise.
Status DdlPlanner::EnumRenameValue(const DdlStep& step) {
  if (step.column.empty() || step.new_name.empty() || step.label.empty())
    return MakeError("a label renamed in an enum used by " + current_display() +
                     " does not name the type, the old and the new label; the record is malformed");
  plan_.statements.push_back("SELECT trellara.rename_enum_value(" + SqlLiteral(step.column) + "::pg_catalog.regtype, " +
                             SqlLiteral(step.label) + ", " + SqlLiteral(step.new_name) + ")");
  return Status::Ok();
}

}  // namespace trellara::ddl_detail
