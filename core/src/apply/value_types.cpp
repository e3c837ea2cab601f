// value_types.cpp — see value_types.h.
#include "trellara/apply/value_types.h"

#include "trellara/base/fault.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace trellara {

namespace {

constexpr std::string_view kArraySuffix = "[]";
constexpr std::string_view kCatalogPrefix = "pg_catalog.";

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The element type of an array spelling ("integer[]" -> "integer"), without a pg_catalog prefix.
std::string ElementName(std::string t) {
  while (t.size() > kArraySuffix.size() && EndsWith(t, kArraySuffix)) t.resize(t.size() - kArraySuffix.size());
  if (t.compare(0, kCatalogPrefix.size(), kCatalogPrefix) == 0) t.erase(0, kCatalogPrefix.size());
  return t;
}

// Types whose `=` holds exactly when their text output is equal and that have no collation.
constexpr std::array<std::string_view, 20> kIdentityTypes = {
    "smallint", "integer", "bigint", "boolean", "bytea", "uuid", "date", "time without time zone",
    "timestamp without time zone", "timestamp with time zone", "\"bit\"", "bit varying", "oid", "macaddr", "macaddr8",
    "inet", "cidr", "pg_lsn", "money", "\"char\""};
// Collatable types whose `=` is identity under the C collation (and character(n), EqualityOf).
constexpr std::array<std::string_view, 3> kCollatableIdentityTypes = {"text", "character varying", "name"};

bool Listed(std::string_view name, const auto& list) { return std::find(list.begin(), list.end(), name) != list.end(); }

}  // namespace

std::string WithoutModifier(const std::string& type_name) {
  size_t arrays = 0;
  std::string t = type_name;
  while (t.size() > kArraySuffix.size() && EndsWith(t, kArraySuffix)) {
    t.resize(t.size() - kArraySuffix.size());
    arrays++;
  }
  // The modifier is the parenthesised group outside double quotes ("my(type)" is a name).
  bool quoted = false;
  size_t open = std::string::npos, close = std::string::npos;
  for (size_t i = 0; i < t.size(); i++) {
    if (t[i] == '"') quoted = !quoted;
    if (quoted) continue;
    if (t[i] == '(' && open == std::string::npos) open = i;
    if (t[i] == ')' && open != std::string::npos) {
      close = i;
      break;
    }
  }
  if (open != std::string::npos && close != std::string::npos) {
    t.erase(open, close - open + 1);
    // SQL reads these two keywords without a length as length 1; format_type(t, -1) spells them so.
    const std::string element = ElementName(t);
    const std::string prefix = t.substr(0, t.size() - element.size());
    if (element == "character") t = prefix + "bpchar";
    if (element == "bit") t = prefix + "\"bit\"";
  }
  // interval's fields ("interval hour to minute", "interval day to second") are its modifier too.
  const std::string element = ElementName(t);
  if (element.compare(0, 9, "interval ") == 0) t = t.substr(0, t.size() - element.size()) + "interval";
  for (size_t i = 0; i < arrays; i++) t += kArraySuffix;
  return t;
}

TypeEquality EqualityOf(const std::string& type_name) {
  // character(n) pads every value to n; bpchar without a length keeps trailing blanks `=` ignores.
  if (ElementName(type_name).rfind("character(", 0) == 0) return TypeEquality::Identity;
  const std::string element = ElementName(WithoutModifier(type_name));
  if (Listed(element, kIdentityTypes) || Listed(element, kCollatableIdentityTypes)) return TypeEquality::Identity;
  return TypeEquality::Other;
}

std::string FullRowMatchPredicate(const std::string& quoted_column, size_t param, const std::string& source_type) {
  const std::string value = "$" + std::to_string(param) + "::" + source_type;
  // Negative control (tests only, TRELLARA_FAULTS=defect.apply_full_row_match_by_equality:1:defect;
  // caught by test_apply_type_modifiers.py negative_control_full_row_match_by_equality_is_caught):
  // the column compared with the type's `=` whatever it is, so of two rows that differ only in
  // numeric scale (7.5, 7.50) the first one found is changed.
  if (fault::Hit("defect.apply_full_row_match_by_equality") == fault::Action::Defect)
    return quoted_column + " IS NOT DISTINCT FROM " + value;
  if (EqualityOf(source_type) == TypeEquality::Identity) {
    // A text column may carry a nondeterministic collation (case-insensitive ICU), under which 'a'
    // = 'A': compared under "C", equal means the same characters.
    const std::string element = ElementName(WithoutModifier(source_type));
    const bool collatable = element == "bpchar" || Listed(element, kCollatableIdentityTypes);
    return quoted_column + " IS NOT DISTINCT FROM " + value + (collatable ? " COLLATE \"C\"" : "");
  }
  return quoted_column + "::text IS NOT DISTINCT FROM (" + value + ")::text COLLATE \"C\"";
}

Result<std::string> BatchCastType(const std::string& unmodified, const std::string& column) {
  if (unmodified.empty()) return MakeError("the target did not name the type of column " + column);
  return unmodified;
}

}  // namespace trellara
