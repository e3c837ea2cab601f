// apply_schema.cpp — see apply_schema.h.
#include "trellara/apply/apply_schema.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "trellara/apply/apply_plan.h"

namespace trellara {
namespace {

// "character varying(20)" -> "character varying"; "numeric(10,2)[]" -> "numeric[]";
// "timestamp(3) with time zone" -> "timestamp with time zone".
std::string BaseType(const std::string& type) {
  std::string out;
  int depth = 0;
  for (char c : type) {
    if (c == '(') {
      depth++;
      continue;
    }
    if (c == ')') {
      depth--;
      continue;
    }
    if (depth == 0) out += c;
  }
  // "timestamp(3) with time zone" leaves "timestamp with time zone" (single spaces kept).
  return out;
}

// The integer arguments of every parenthesised group: "numeric(10,2)" -> {10, 2};
// "timestamp(3) with time zone" -> {3}; "text" -> {}; a non-numeric argument -> nullopt.
std::optional<std::vector<long>> TypmodArgs(const std::string& type) {
  std::vector<long> out;
  size_t i = 0;
  while ((i = type.find('(', i)) != std::string::npos) {
    size_t end = type.find(')', i);
    if (end == std::string::npos) return std::nullopt;
    std::string inner = type.substr(i + 1, end - i - 1);
    size_t start = 0;
    while (start <= inner.size()) {
      size_t comma = inner.find(',', start);
      std::string part = inner.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      while (!part.empty() && part.front() == ' ') part.erase(part.begin());
      while (!part.empty() && part.back() == ' ') part.pop_back();
      if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
      out.push_back(std::stol(part));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    i = end + 1;
  }
  return out;
}

// Same base type, different modifiers: the target takes every source value unchanged only when
// its modifier is at least as wide. An unconstrained target takes everything; a constrained target
// never takes an unconstrained source. numeric(p,s): scale and integer digits both at least the
// source's (a smaller scale would round silently); every other modifier (varchar/char/bit length,
// timestamp/time/interval precision — a smaller precision rounds silently) must not shrink.
bool ModifierWidens(const std::string& base, const std::string& source_type, const std::string& target_type) {
  auto src = TypmodArgs(source_type);
  auto dst = TypmodArgs(target_type);
  if (!src || !dst) return false;
  if (dst->empty()) return true;
  // timestamp/time/interval without a precision keep microseconds: the same as precision 6.
  if (src->empty() && (base.starts_with("timestamp") || base.starts_with("time") || base.starts_with("interval")))
    src->push_back(6);
  if (src->empty()) return false;
  if (base == "numeric" || base == "numeric[]") {
    long sp = (*src)[0], ss = src->size() > 1 ? (*src)[1] : 0;
    long tp = (*dst)[0], ts = dst->size() > 1 ? (*dst)[1] : 0;
    return ts >= ss && tp - ts >= sp - ss;
  }
  if (src->size() != dst->size()) return false;
  for (size_t i = 0; i < src->size(); i++)
    if ((*dst)[i] < (*src)[i]) return false;
  return true;
}

bool Widens(const std::string& from, const std::string& to) {
  static const std::map<std::string, std::set<std::string>> kWidenings{
      {"smallint", {"integer", "bigint", "numeric"}},
      {"integer", {"bigint", "numeric"}},
      {"bigint", {"numeric"}},
      {"real", {"double precision"}},
      {"character varying", {"text"}},
      {"character", {"text"}},
  };
  auto it = kWidenings.find(from);
  return it != kWidenings.end() && it->second.contains(to);
}

}  // namespace

bool TargetTypeAccepts(const std::string& source_type, const std::string& target_type) {
  if (source_type == target_type) return true;
  const std::string from = BaseType(source_type);
  const std::string to = BaseType(target_type);
  if (from == to) return ModifierWidens(from, source_type, target_type);
  const bool from_array = from.ends_with("[]");
  const bool to_array = to.ends_with("[]");
  if (from_array != to_array) return false;
  if (from_array) return Widens(from.substr(0, from.size() - 2), to.substr(0, to.size() - 2));
  return Widens(from, to);
}

std::optional<QuarantineCause> CheckTargetRelation(const RelationInfo& source, const TargetRelation& target) {
  const std::string relation = DisplayName(source);
  QuarantineCause cause;
  cause.relation = relation;
  if (!target.exists) {
    cause.reason = QuarantineReason::MissingTable;
    cause.detail = "relation " + relation + " does not exist on the target; create it with the source's definition";
    return cause;
  }
  std::map<std::string, const TargetColumn*> by_name;
  for (const auto& column : target.columns) by_name.emplace(column.name, &column);
  std::set<std::string> source_names;
  for (const auto& column : source.columns) {
    source_names.insert(column.name);
    auto found = by_name.find(column.name);
    if (found == by_name.end()) {
      cause.reason = QuarantineReason::MissingColumn;
      cause.column = column.name;
      cause.detail = "column " + column.name + " (" + column.type_name + ") of " + relation +
                     " does not exist on the target; add it with the source's type";
      return cause;
    }
    const TargetColumn& t = *found->second;
    if (!TargetTypeAccepts(column.type_name, t.type_name)) {
      cause.reason = QuarantineReason::SchemaMismatch;
      cause.column = column.name;
      cause.detail = "column " + column.name + " of " + relation + " is " + column.type_name + " on the source but " +
                     t.type_name + " on the target, which cannot take its values exactly; change the target column to " +
                     column.type_name;
      return cause;
    }
    if (t.generated) {
      cause.reason = QuarantineReason::SchemaMismatch;
      cause.column = column.name;
      cause.detail = "column " + column.name + " of " + relation +
                     " is a generated column on the target, so the replicated value cannot be written to it; make it "
                     "an ordinary column on the target";
      return cause;
    }
  }
  for (const auto& t : target.columns) {
    if (source_names.contains(t.name) || !t.not_null || t.has_default || t.identity || t.generated) continue;
    cause.reason = QuarantineReason::SchemaMismatch;
    cause.column = t.name;
    cause.detail = "column " + t.name + " of " + relation + " is NOT NULL without a default on the target, and the "
                   "source does not have it, so no replicated INSERT can succeed; give it a default or drop NOT NULL";
    return cause;
  }
  return std::nullopt;
}

}  // namespace trellara
