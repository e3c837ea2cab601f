// apply_plan.cpp — change -> SQL text with $n placeholders and bound parameters (apply_plan.h).
//
// Must never splice a value into SQL text, never emit an unquoted identifier, never let an
// unchanged-TOAST marker overwrite a column, and never plan a statement that could touch more
// than the one row a captured row change describes.
#include "trellara/apply/apply_plan.h"
#include "trellara/base/fault.h"
#include "trellara/apply/value_types.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace trellara {

namespace {

constexpr size_t kDisplayValueBytes = 64;

const RelationInfo* Find(const std::vector<RelationInfo>& relations, uint32_t oid) {
  for (const auto& r : relations)
    if (r.oid == oid) return &r;
  return nullptr;
}

std::string DisplayValue(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Null: return "NULL";
    case Value::Kind::UnchangedToast: return "<unchanged toast>";
    case Value::Kind::Binary: return "<binary>";
    case Value::Kind::Text: break;
  }
  if (v.data.size() <= kDisplayValueBytes) return v.data;
  size_t cut = kDisplayValueBytes;
  while (cut > 0 && (static_cast<unsigned char>(v.data[cut]) & 0xC0) == 0x80) cut--;  // keep UTF-8 whole
  return v.data.substr(0, cut) + "...";
}

// The remedy for a relation the target cannot match rows of.
std::string IdentityRemedy(const RelationInfo& r) {
  return "add a primary key (or ALTER TABLE " + DisplayName(r) +
         " REPLICA IDENTITY USING INDEX / REPLICA IDENTITY FULL) on the source, then reseed the table";
}

struct Planner {
  const Change& change;
  const RelationInfo& rel;
  const RelationText& text;
  const char* kind;  // "UPDATE": messages say "UPDATE on public.orders: ..."
  std::string rows_target;  // RowsTarget(text.qualified, partitioned on the target)

  Error Err(const std::string& message) const { return MakeError(kind + (" on " + text.display) + ": " + message); }

  // A parameter value: text or NULL. Unchanged-TOAST, binary and NUL-holding text are refused.
  Result<std::optional<std::string>> Param(const Value& v, size_t column, const char* image) const {
    const std::string& col = rel.columns[column].name;
    switch (v.kind) {
      case Value::Kind::Null: return std::optional<std::string>{};
      case Value::Kind::Text:
        if (v.data.find('\0') != std::string::npos)
          return Err("the " + std::string(image) + " value of column " + col +
                     " holds a NUL byte, which no Postgres text value (and no text parameter) can carry");
        return std::optional<std::string>(v.data);
      case Value::Kind::Binary:
        return Err("the " + std::string(image) + " value of column " + col +
                   " is in binary form; the applier binds text values only (the plugin emits text)");
      case Value::Kind::UnchangedToast:
        return Err("the " + std::string(image) + " value of column " + col +
                   " is an unchanged-TOAST marker where a value is required");
    }
    return Err("internal: unknown value kind");
  }

  std::vector<size_t> KeyColumns() const {
    std::vector<size_t> keys;
    for (size_t i = 0; i < rel.columns.size(); i++)
      if (rel.columns[i].is_key) keys.push_back(i);
    return keys;
  }
};

std::string Mask(size_t width, const std::vector<size_t>& columns) {
  std::string m(width, '0');
  for (size_t c : columns) m[c] = '1';
  return m;
}

}  // namespace

Result<std::string> QuoteIdentifier(const std::string& name) {
  if (name.empty()) return MakeError("an empty identifier cannot be quoted");
  if (name.find('\0') != std::string::npos) return MakeError("identifier holds a NUL byte");
  if (name.size() > kMaxIdentifierBytes)
    return MakeError("identifier \"" + name.substr(0, 16) + "...\" is " + std::to_string(name.size()) +
                     " bytes; Postgres truncates names to " + std::to_string(kMaxIdentifierBytes) +
                     " bytes, so it could address another object");
  std::string out;
  out.reserve(name.size() + 2);
  out.push_back('"');
  for (char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

Result<std::string> QualifiedName(const RelationInfo& relation) {
  auto schema = QuoteIdentifier(relation.schema);
  if (!schema.ok()) return MakeError("schema of relation oid " + std::to_string(relation.oid) + ": " + schema.error().message);
  auto name = QuoteIdentifier(relation.name);
  if (!name.ok()) return MakeError("name of relation oid " + std::to_string(relation.oid) + ": " + name.error().message);
  return *schema + "." + *name;
}

std::string DisplayName(const RelationInfo& relation) { return relation.schema + "." + relation.name; }

const char* PlanKindName(PlanKind kind) {
  switch (kind) {
    case PlanKind::Insert: return "INSERT";
    case PlanKind::Update: return "UPDATE";
    case PlanKind::Delete: return "DELETE";
    case PlanKind::Truncate: return "TRUNCATE";
    case PlanKind::NotApplied: return "not applied";
  }
  return "?";
}

namespace {

Result<ChangePlan> PlanTruncate(const Change& change, const std::vector<RelationInfo>& relations,
                                const PartitionedOnTarget& partitioned) {
  ChangePlan plan;
  plan.kind = PlanKind::Truncate;
  plan.expect = RowExpectation::Any;
  if (change.truncate.relation_oids.empty()) return MakeError("TRUNCATE names no relation");
  std::string list;
  std::string key = "T|";
  for (uint32_t oid : change.truncate.relation_oids) {
    const RelationInfo* r = Find(relations, oid);
    if (r == nullptr)
      return MakeError("TRUNCATE names relation oid " + std::to_string(oid) + " which the record does not describe");
    auto q = QualifiedName(*r);
    if (!q.ok()) return MakeError("TRUNCATE of " + DisplayName(*r) + ": " + q.error().message);
    if (!list.empty()) {
      list += ", ";
      plan.relation_display += ", ";
    }
    const bool whole_tree = partitioned && partitioned(*r);
    list += RowsTarget(*q, whole_tree);
    plan.relation_display += DisplayName(*r);
    key += HexEncode(r->fingerprint) + (whole_tree ? "p," : ",");
  }
  key += change.truncate.restart_identity ? "|R" : "|C";
  // Negative control (seed pgoutput_dml_truncate_envelope_mapping; tests only,
  // TRELLARA_FAULTS=defect.apply_truncate_cascade:1:defect): the source's CASCADE is replayed, so the
  // target truncates tables the source did not list (the record already names every table the
  // source's cascade reached).
  const bool cascade = change.truncate.cascade && fault::Hit("defect.apply_truncate_cascade") == fault::Action::Defect;
  plan.sql = "TRUNCATE TABLE " + list + (change.truncate.restart_identity ? " RESTART IDENTITY" : " CONTINUE IDENTITY") +
             (cascade ? " CASCADE" : " RESTRICT");
  plan.statement_key = std::move(key);
  return plan;
}

// Fills the row match of an UPDATE/DELETE: predicate SQL (appended to `where`), parameters and
// description. `next_param` is the number of the first placeholder.
Status PlanMatch(const Planner& p, ChangePlan& plan, std::string& where, std::string& key_part) {
  const Change& c = p.change;
  const RelationInfo& rel = p.rel;
  const std::vector<size_t> keys = p.KeyColumns();
  std::vector<size_t> match_columns;
  std::vector<const Value*> match_values;
  const char* image = "old key";
  // Negative control (seed default_replica_identity_primary_key_apply; tests only,
  // TRELLARA_FAULTS=defect.apply_match_whole_new_row:1:defect): an UPDATE of a table with a primary
  // key and no old image matched on every column of its new row instead of the key, so any update
  // that changes a non-key column matches nothing.
  if (!keys.empty() && c.op == Op::Update && c.old_image == OldImage::None &&
      fault::Hit("defect.apply_match_whole_new_row") == fault::Action::Defect) {
    plan.match = MatchMode::FullRow;
    image = "new row";
    for (size_t i = 0; i < rel.columns.size(); i++) {
      if (c.new_tuple[i].kind == Value::Kind::UnchangedToast) continue;
      match_columns.push_back(i);
      match_values.push_back(&c.new_tuple[i]);
    }
  } else if (!keys.empty()) {
    plan.match = MatchMode::Key;
    match_columns = keys;
    for (size_t k = 0; k < keys.size(); k++) {
      // Negative control (seed default_replica_identity_key_change_apply; tests only,
      // TRELLARA_FAULTS=defect.apply_match_new_key:1:defect): a key-changing UPDATE matched by its
      // new key instead of the old key image, so the target row is never found.
      if (c.old_image == OldImage::Key && fault::Hit("defect.apply_match_new_key") == fault::Action::Defect) {
        match_values.push_back(&c.new_tuple[keys[k]]);
      } else if (c.old_image == OldImage::Key) {
        match_values.push_back(&c.old_tuple[k]);
      } else if (c.old_image == OldImage::Full) {
        image = "old row";
        match_values.push_back(&c.old_tuple[keys[k]]);
      } else {
        image = "new key";  // UPDATE without an old image: the key did not change
        match_values.push_back(&c.new_tuple[keys[k]]);
      }
    }
  } else if (c.old_image == OldImage::Full) {
    plan.match = MatchMode::FullRow;
    image = "old row";
    for (size_t i = 0; i < rel.columns.size(); i++) {
      if (rel.columns[i].type_name.empty())
        return p.Err("the relation has no key, so the row is matched on every column of its old image (REPLICA "
                     "IDENTITY FULL), but the record does not name the type of column " + rel.columns[i].name);
      match_columns.push_back(i);
      match_values.push_back(&c.old_tuple[i]);
    }
    if (match_columns.empty()) return p.Err("the relation has no columns to match a row on");
  } else if (c.old_image == OldImage::Key) {
    return p.Err("the change carries an old key image but the relation has no key columns; the record is inconsistent");
  } else {
    return p.Err("cannot identify the target row: the relation has no replica identity key and the change carries "
                 "no old row image (REPLICA IDENTITY NOTHING, or DEFAULT without a primary key); " +
                 IdentityRemedy(rel));
  }

  std::string cols, vals, predicate;
  for (size_t i = 0; i < match_columns.size(); i++) {
    const size_t col = match_columns[i];
    const Value& v = *match_values[i];
    if (plan.match == MatchMode::Key && v.kind == Value::Kind::Null)
      return p.Err("key column " + rel.columns[col].name + " is NULL in the " + image +
                   " image; a replica identity key cannot be NULL, so no row can be matched");
    auto param = p.Param(v, col, image);
    if (!param.ok()) return param.error();
    plan.params.push_back(std::move(*param));
    plan.param_columns.push_back(rel.columns[col].name);
    if (!predicate.empty()) predicate += " AND ";
    // every column's name was quoted before planning; a full-row match compares each column as
    // value_types.h decides (exactly, whatever the type's `=` says)
    if (plan.match == MatchMode::Key)
      predicate += p.text.quoted[col] + " = $" + std::to_string(plan.params.size());
    else
      predicate += FullRowMatchPredicate(p.text.quoted[col], plan.params.size(), rel.columns[col].type_name);
    if (!cols.empty()) {
      cols += ", ";
      vals += ", ";
    }
    cols += rel.columns[col].name;
    vals += DisplayValue(v);
  }
  plan.match_description = "(" + cols + ")=(" + vals + ")";
  plan.match_params = match_columns.size();
  if (plan.match == MatchMode::Key) {
    where = " WHERE " + predicate;
  } else {
    // No key: duplicates may exist; touch exactly one matching row, as the source did.
    where = " WHERE (tableoid, ctid) = (SELECT tableoid, ctid FROM " + p.rows_target + " WHERE " + predicate +
            " LIMIT 1)";
  }
  key_part = std::string(plan.match == MatchMode::Key ? "K" : "F") + Mask(rel.columns.size(), match_columns);
  return Status::Ok();
}

}  // namespace

namespace {

// The text of `rel` (RelationText), every name quoted or the first failure recorded.
void MakeRelationText(const RelationInfo& rel, RelationText& text) {
  text = RelationText{};
  text.display = DisplayName(rel);
  text.fingerprint_hex = HexEncode(rel.fingerprint);
  auto qualified = QualifiedName(rel);
  if (qualified.ok()) {
    text.qualified = std::move(*qualified);
  } else {
    text.qualified_error = qualified.error().message;
  }
  text.quoted.resize(rel.columns.size());
  for (size_t i = 0; i < rel.columns.size(); i++) {
    auto q = QuoteIdentifier(rel.columns[i].name);
    if (!q.ok()) {
      text.column_error = "column " + std::to_string(i + 1) + ": " + q.error().message;
      break;
    }
    text.quoted[i] = std::move(*q);
  }
}

Result<ChangePlan> PlanWith(const Change& change, const std::vector<RelationInfo>& relations, PlanCache* cache,
                            const PartitionedOnTarget& partitioned, const AlwaysIdentityOnTarget& always_identity);

}  // namespace

std::string RowsTarget(const std::string& qualified, bool partitioned) {
  return partitioned ? qualified : "ONLY " + qualified;
}

const RelationText& PlanCache::Text(const RelationInfo& relation) {
  auto found = relations_.find(relation.fingerprint);
  if (found != relations_.end() && found->second.first == relation) return found->second.second;
  MakeRelationText(relation, scratch_);
  if (scratch_.qualified_error || scratch_.column_error) return scratch_;
  if (relations_.size() >= kMaxRelations) relations_.clear();
  auto& slot = relations_[relation.fingerprint];
  slot.first = relation;
  slot.second = std::move(scratch_);
  return slot.second;
}

Result<ChangePlan> PlanChange(const Change& change, const std::vector<RelationInfo>& relations,
                              const PartitionedOnTarget& partitioned, const AlwaysIdentityOnTarget& always_identity) {
  return PlanWith(change, relations, nullptr, partitioned, always_identity);
}

Result<ChangePlan> PlanChange(const Change& change, const std::vector<RelationInfo>& relations, PlanCache& cache,
                              const PartitionedOnTarget& partitioned, const AlwaysIdentityOnTarget& always_identity) {
  return PlanWith(change, relations, &cache, partitioned, always_identity);
}

namespace {

Result<ChangePlan> PlanWith(const Change& change, const std::vector<RelationInfo>& relations, PlanCache* cache,
                            const PartitionedOnTarget& partitioned, const AlwaysIdentityOnTarget& always_identity) {
  switch (change.op) {
    case Op::Message: {
      ChangePlan plan;
      plan.kind = PlanKind::NotApplied;
      plan.not_applied_reason = "logical message with prefix \"" + change.message.prefix +
                                "\" is recorded in the log but not applied to the target";
      return plan;
    }
    case Op::Ddl: {
      ChangePlan plan;
      plan.kind = PlanKind::NotApplied;
      plan.not_applied_reason = "DDL (" + change.ddl.command_tag + " " + change.ddl.object_identity +
                                ") is not applied by the applier; apply it to the target yourself";
      return plan;
    }
    case Op::Truncate: return PlanTruncate(change, relations, partitioned);
    case Op::Insert:
    case Op::Update:
    case Op::Delete: break;
  }

  const RelationInfo* rel = Find(relations, change.relation_oid);
  // Negative control (seed pgoutput_row_without_relation_metadata; tests only,
  // TRELLARA_FAULTS=defect.apply_skip_undescribed_relation:1:defect): a change on a relation the
  // record does not describe is passed over as not applied instead of failing closed.
  if (rel == nullptr && fault::Hit("defect.apply_skip_undescribed_relation") == fault::Action::Defect) {
    ChangePlan plan;
    plan.kind = PlanKind::NotApplied;
    plan.not_applied_reason = "relation oid " + std::to_string(change.relation_oid) + " is not described";
    return plan;
  }
  if (rel == nullptr)
    return MakeError(std::string(OpName(change.op)) + " on relation oid " + std::to_string(change.relation_oid) +
                     ": the record does not describe this relation");
  ChangePlan plan;
  plan.kind = change.op == Op::Insert ? PlanKind::Insert : change.op == Op::Update ? PlanKind::Update : PlanKind::Delete;
  plan.expect = RowExpectation::ExactlyOne;
  RelationText uncached;
  if (cache == nullptr) MakeRelationText(*rel, uncached);
  const RelationText& text = cache != nullptr ? cache->Text(*rel) : uncached;
  plan.relation_display = text.display;
  const bool whole_tree = change.op != Op::Insert && partitioned && partitioned(*rel);
  Planner p{change, *rel, text, PlanKindName(plan.kind), {}};
  const size_t width = rel->columns.size();
  if (text.qualified_error) return p.Err(*text.qualified_error);
  const std::string* qualified = &text.qualified;
  p.rows_target = RowsTarget(text.qualified, whole_tree);
  plan.target_relation = text.qualified;
  plan.rows_target = p.rows_target;

  // Shapes the codec guarantees, re-checked: the planner must not index out of range.
  if (change.op != Op::Delete && change.new_tuple.size() != width)
    return p.Err("the new tuple has " + std::to_string(change.new_tuple.size()) + " values for " +
                 std::to_string(width) + " columns");
  const size_t key_count = rel->KeyColumnCount();
  if (change.old_image == OldImage::Key && change.old_tuple.size() != key_count)
    return p.Err("the old key image has " + std::to_string(change.old_tuple.size()) + " values for " +
                 std::to_string(key_count) + " key columns");
  if (change.old_image == OldImage::Full && change.old_tuple.size() != width)
    return p.Err("the old row image has " + std::to_string(change.old_tuple.size()) + " values for " +
                 std::to_string(width) + " columns");

  if (text.column_error) return p.Err(*text.column_error);
  const std::vector<std::string>& quoted = text.quoted;

  if (change.op == Op::Insert) {
    std::string cols, vals;
    for (size_t i = 0; i < width; i++) {
      auto param = p.Param(change.new_tuple[i], i, "new");
      if (!param.ok()) return param.error();
      plan.params.push_back(std::move(*param));
      plan.param_columns.push_back(rel->columns[i].name);
      if (i > 0) {
        cols += ", ";
        vals += ", ";
      }
      cols += quoted[i];
      vals += "$" + std::to_string(i + 1);
    }
    plan.sql = width == 0 ? "INSERT INTO " + *qualified + " DEFAULT VALUES"
                          : "INSERT INTO " + *qualified + " (" + cols + ") OVERRIDING SYSTEM VALUE VALUES (" + vals + ")";
    plan.statement_key = "I|" + text.fingerprint_hex + "|" + std::to_string(width);
    // What the row is, for a duplicate-key message: its key columns when it has some.
    std::string kc, kv;
    for (size_t i = 0; i < width; i++) {
      if (!rel->columns[i].is_key) continue;
      if (!kc.empty()) {
        kc += ", ";
        kv += ", ";
      }
      kc += rel->columns[i].name;
      kv += DisplayValue(change.new_tuple[i]);
    }
    if (!kc.empty()) plan.match_description = "(" + kc + ")=(" + kv + ")";
    return plan;
  }

  if (change.op == Op::Delete) {
    if (change.old_image == OldImage::None)
      return p.Err("the change carries no old row image, so the row to delete cannot be identified; " +
                   IdentityRemedy(*rel));
    std::string where, key_part;
    TRELLARA_TRY(PlanMatch(p, plan, where, key_part));
    plan.sql = "DELETE FROM " + p.rows_target + where;
    plan.statement_key = "D|" + text.fingerprint_hex + (whole_tree ? "|p|" : "|") + key_part;
    return plan;
  }

  // UPDATE. A key column can never be unchanged-TOAST: the row could not be addressed.
  const std::vector<size_t> keys = p.KeyColumns();
  for (size_t k : keys)
    if (change.new_tuple[k].kind == Value::Kind::UnchangedToast)
      return p.Err("key column " + rel->columns[k].name +
                   " is an unchanged-TOAST marker in the new tuple; the row cannot be addressed by its key");
  if (keys.empty() && change.old_image != OldImage::Full) {
    ChangePlan scratch;
    std::string where, key_part;
    TRELLARA_TRY(PlanMatch(p, scratch, where, key_part));  // fails with the identity remedy
  }
  bool key_changed = false;
  if (!keys.empty() && change.old_image != OldImage::None) {
    for (size_t k = 0; k < keys.size(); k++) {
      const Value& old_value = change.old_image == OldImage::Key ? change.old_tuple[k] : change.old_tuple[keys[k]];
      if (!(old_value == change.new_tuple[keys[k]])) key_changed = true;
    }
  }
  std::vector<size_t> set_columns;
  std::vector<size_t> identity_columns;  // GENERATED ALWAYS on the target: checked, not written
  for (size_t i = 0; i < width; i++) {
    if (!rel->columns[i].is_key && always_identity && always_identity(*rel, rel->columns[i].name)) {
      identity_columns.push_back(i);
      continue;
    }
    if (change.new_tuple[i].kind == Value::Kind::UnchangedToast) {
      // Negative control (tests only, TRELLARA_FAULTS=defect.unchanged_toast_as_null:1:defect): the
      // absent value is written as NULL, which the TOAST-preservation test must catch.
      if (fault::Hit("defect.unchanged_toast_as_null") == fault::Action::Defect) set_columns.push_back(i);
      continue;  // never overwrite with "absent"
    }
    if (rel->columns[i].is_key && !key_changed) continue;                    // already equal to the matched key
    set_columns.push_back(i);
  }
  if (set_columns.empty()) {
    // Nothing to change but the row must still exist: assign the first key column its own value
    // (or, without a key, the first column its old-image value) so 0 matched rows is still seen.
    if (!keys.empty()) {
      set_columns.push_back(keys.front());
    } else if (change.old_image == OldImage::Full && width > 0) {
      // handled below: the SET value comes from the old image
    } else {
      return p.Err("the relation has no columns to update");
    }
  }
  std::string set;
  std::vector<size_t> set_mask_columns = set_columns;
  if (set_columns.empty()) {
    auto param = p.Param(change.old_tuple[0], 0, "old row");
    if (!param.ok()) return param.error();
    plan.params.push_back(std::move(*param));
    plan.param_columns.push_back(rel->columns[0].name);
    set = quoted[0] + " = $1";
    set_mask_columns = {0};
  }
  for (size_t i : set_columns) {
    auto param = change.new_tuple[i].kind == Value::Kind::UnchangedToast
                     ? Result<std::optional<std::string>>(std::optional<std::string>{})  // only under the defect
                     : p.Param(change.new_tuple[i], i, "new");
    if (!param.ok()) return param.error();
    plan.params.push_back(std::move(*param));
    plan.param_columns.push_back(rel->columns[i].name);
    if (!set.empty()) set += ", ";
    set += quoted[i] + " = $" + std::to_string(plan.params.size());
  }
  // The target row must already hold each identity column's new value (before the match's
  // parameters, which stay the last ones).
  std::string identity_check, identity_description;
  // Negative control (tests only, TRELLARA_FAULTS=defect.apply_identity_unchecked:1:defect): the
  // identity column is left out of SET and not checked, so a source UPDATE that set it to DEFAULT is
  // applied without its new value, which the identity scenario must catch.
  if (!identity_columns.empty() && fault::Hit("defect.apply_identity_unchecked") == fault::Action::Defect)
    identity_columns.clear();
  for (size_t i : identity_columns) {
    if (change.new_tuple[i].kind != Value::Kind::Text && change.new_tuple[i].kind != Value::Kind::Binary)
      return p.Err("identity column " + rel->columns[i].name + " (GENERATED ALWAYS on the target) has no value in "
                   "the new row");
    auto param = p.Param(change.new_tuple[i], i, "new");
    if (!param.ok()) return param.error();
    plan.params.push_back(std::move(*param));
    plan.param_columns.push_back(rel->columns[i].name);
    identity_check += " AND " + quoted[i] + " = $" + std::to_string(plan.params.size());
    identity_description += (identity_description.empty() ? "" : ", ") + rel->columns[i].name + " = " +
                            DisplayValue(change.new_tuple[i]);
  }
  std::string where, key_part;
  TRELLARA_TRY(PlanMatch(p, plan, where, key_part));
  plan.sql = "UPDATE " + p.rows_target + " SET " + set + where + identity_check;
  plan.statement_key = "U|" + text.fingerprint_hex + (whole_tree ? "|p" : "") + "|S" + Mask(width, set_mask_columns) +
                       (set_columns.empty() ? "o" : "n") + "|" + key_part;
  if (!identity_columns.empty()) {
    plan.statement_key += "|A" + Mask(width, identity_columns);
    plan.match_description += " holding " + identity_description +
                              " (GENERATED ALWAYS AS IDENTITY on the target, so an UPDATE cannot write it: a "
                              "source UPDATE that set it to DEFAULT cannot be applied; make the target column "
                              "GENERATED BY DEFAULT to let the applier write it)";
  }
  if (plan.match == MatchMode::Key && !key_changed && identity_columns.empty()) {
    // The match parameters are the last ones; a key value is never NULL (PlanMatch refuses it).
    plan.row_key = *qualified;
    for (size_t i = plan.params.size() - keys.size(); i < plan.params.size(); i++)
      plan.row_key += "|" + std::to_string(plan.params[i]->size()) + ":" + *plan.params[i];
  }
  return plan;
}

}  // namespace

}  // namespace trellara
