// relation_drift.cpp — the drift verdict of a change and of a whole transaction (relation_drift.h).
//
// Never calls a relation Known unless its fingerprint is equal, and never lets a DDL change of the
// transaction move what the flow knows except as that DDL record says. Talks to no database.
#include "trellara/apply/relation_drift.h"

#include <unordered_map>

#include "trellara/apply/apply_plan.h"
#include "trellara/base/fault.h"

namespace trellara {
namespace {
// Fingerprints in messages: enough hex to tell two apart at a glance.
constexpr size_t kShortFingerprintHexChars = 12;
}  // namespace

RelationVerdict CheckKnownRelation(const std::optional<KnownRelation>& known, const RelationInfo& relation,
                                   bool replay_ready) {
  if (!known) return RelationVerdict::FirstSight;
  if (known->fingerprint == relation.fingerprint) return RelationVerdict::Known;
  if (replay_ready) return RelationVerdict::FirstSight;
  // Negative control (tests only, TRELLARA_FAULTS=defect.drift_accepted_as_known:1:defect; seed row
  // pgoutput_schema_change_during_stream, caught by negative_control_drift_accepted_as_known_is_caught
  // in tests/integration/test_schema_apply.py): an unexplained fingerprint of a relation the flow
  // knows under the same name is accepted as known, as a check of the relation's identity alone
  // would; the changes then run under a definition the target never got.
  if (known->schema == relation.schema && known->name == relation.name &&
      fault::Hit("defect.drift_accepted_as_known") == fault::Action::Defect)
    return RelationVerdict::Known;
  return RelationVerdict::Drift;
}

QuarantineCause DriftCause(const KnownRelation& known, const RelationInfo& relation) {
  QuarantineCause cause;
  cause.reason = QuarantineReason::SchemaDrift;
  cause.relation = DisplayName(relation);
  std::string detail = "relation " + cause.relation + " (oid " + std::to_string(relation.oid) +
                       ") arrives with definition fingerprint " +
                       HexEncode(relation.fingerprint).substr(0, kShortFingerprintHexChars) +
                       " but the flow last accepted " + HexEncode(known.fingerprint).substr(0, kShortFingerprintHexChars);
  if (known.schema != relation.schema || known.name != relation.name)
    detail += " as " + known.schema + "." + known.name;
  detail += ", and no DDL record explains the change; DDL ran while trellara's event trigger was disabled, or the "
            "source was restored from another schema; run trellara repair-plan --config <flow.toml>";
  cause.detail = std::move(detail);
  return cause;
}

std::vector<uint32_t> NamedRelations(const Change& change) {
  if (change.op == Op::Truncate) return change.truncate.relation_oids;
  if (change.op == Op::Insert || change.op == Op::Update || change.op == Op::Delete) return {change.relation_oid};
  return {};
}

const RelationInfo* RelationOf(const std::vector<RelationInfo>& relations, uint32_t oid) {
  for (const auto& relation : relations)
    if (relation.oid == oid) return &relation;
  return nullptr;
}

ChangeDrift DriftOfChange(const Change& change, const std::vector<RelationInfo>& relations, const KnownLookup& known,
                          bool replay_ready) {
  ChangeDrift drift;
  for (uint32_t oid : NamedRelations(change)) {
    const RelationInfo* relation = RelationOf(relations, oid);
    if (relation == nullptr) continue;  // the planner quarantines it as plan_error, naming the oid
    const std::optional<KnownRelation> flow_knows = known(oid);
    switch (CheckKnownRelation(flow_knows, *relation, replay_ready)) {
      case RelationVerdict::Known:
        break;
      case RelationVerdict::Drift:
        drift.cause = DriftCause(*flow_knows, *relation);
        drift.cause->operation = OpName(change.op);
        drift.first_sights.clear();
        return drift;
      case RelationVerdict::FirstSight:
        drift.first_sights.push_back(relation);
        break;
    }
  }
  return drift;
}

std::optional<QuarantineCause> DriftInTransaction(const std::vector<const Change*>& changes,
                                                  const std::vector<RelationInfo>& relations, const KnownLookup& known,
                                                  bool replay_ready) {
  std::unordered_map<uint32_t, std::optional<KnownRelation>> moved;  // by the transaction's DDL so far
  const KnownLookup known_now = [&](uint32_t oid) {
    auto found = moved.find(oid);
    return found != moved.end() ? found->second : known(oid);
  };
  for (const Change* change : changes) {
    if (change->op == Op::Ddl) {
      const RelationInfo* after = change->relation_oid != 0 ? RelationOf(relations, change->relation_oid) : nullptr;
      if (after != nullptr)
        moved[after->oid] = KnownRelation{after->oid, after->schema, after->name, after->fingerprint};
      else
        moved[change->ddl.relation_oid] = std::nullopt;
      continue;
    }
    ChangeDrift drift = DriftOfChange(*change, relations, known_now, replay_ready);
    if (drift.cause) return drift.cause;
  }
  return std::nullopt;
}

bool ShapesKnown(const Change& change, const std::vector<RelationInfo>& relations, const KnownLookup& known) {
  if (change.op == Op::Ddl) return false;
  for (uint32_t oid : NamedRelations(change)) {
    const RelationInfo* relation = RelationOf(relations, oid);
    if (relation == nullptr) return false;
    if (CheckKnownRelation(known(oid), *relation, /*replay_ready=*/false) != RelationVerdict::Known) return false;
  }
  return true;
}

}  // namespace trellara
