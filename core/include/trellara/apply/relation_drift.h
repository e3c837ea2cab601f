// relation_drift.h — whether a relation's definition changed behind the flow's back (DESIGN §6
// "Schema changes"; the drift paragraph of ddl_apply.h).
//
// The target keeps, per source relation oid, the last definition fingerprint the applier accepted
// (trellara.relation_schemas, read as KnownRelation). Every change that names a relation is
// checked against it, in the order of the source transaction, with the known fingerprints moved
// by the transaction's earlier DDL changes. Three answers: Known (same fingerprint), FirstSight
// (the flow has no row: the adapter checks the target catalog and records it) and Drift (another
// fingerprint that no DDL record explains: the transaction is quarantined as schema_drift).
//
// The adapter supplies what the flow knows (`KnownLookup`, a read of the state table); the rules
// are here. Talks to no database.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trellara/apply/apply_decision.h"
#include "trellara/record/envelope.h"

namespace trellara {

struct KnownRelation {  // one row of trellara.relation_schemas
  uint32_t oid = 0;
  std::string schema;
  std::string name;
  Sha256 fingerprint{};
};

// What the flow knows of a relation oid now (nullopt: never seen, or forgotten by DROP TABLE).
using KnownLookup = std::function<std::optional<KnownRelation>(uint32_t oid)>;

enum class RelationVerdict : uint8_t {
  Known,       // same fingerprint as known
  FirstSight,  // the flow has no row for this oid: check the target catalog, then record it
  Drift,       // different fingerprint, nothing explains it
};

// `known`: the flow's row for relation.oid, already moved by earlier DDL changes of the same
// transaction. `replay_ready`: the transaction is being replayed after an operator's repair; then
// a difference is treated as FirstSight (the target catalog check decides), never Drift.
RelationVerdict CheckKnownRelation(const std::optional<KnownRelation>& known, const RelationInfo& relation,
                                   bool replay_ready);

// The quarantine cause of Drift: names the relation, both fingerprints (short hex), the name the
// flow knew it by when that differs, the likely causes (DDL while trellara's event trigger was
// disabled, a source restored from another schema) and trellara repair-plan.
QuarantineCause DriftCause(const KnownRelation& known, const RelationInfo& relation);

// The relations a change names: Insert/Update/Delete its relation, Truncate every truncated one,
// nothing for DDL and logical messages.
std::vector<uint32_t> NamedRelations(const Change& change);
// The record's description of `oid`, or nullptr when the record does not carry it.
const RelationInfo* RelationOf(const std::vector<RelationInfo>& relations, uint32_t oid);

// One change, in order inside its transaction: the Drift cause (operation named) of the first
// relation that drifted, else the relations seen for the first time, which the adapter checks
// against the target catalog and records before the change runs. A relation the record does not
// describe is left to the planner (plan_error naming the oid).
struct ChangeDrift {
  std::optional<QuarantineCause> cause;
  std::vector<const RelationInfo*> first_sights;
};
ChangeDrift DriftOfChange(const Change& change, const std::vector<RelationInfo>& relations, const KnownLookup& known,
                          bool replay_ready);

// The same check over a whole transaction before anything of it reaches the target (its changes
// are at hand), with the known fingerprints moved by its DDL changes as they will be: a DDL change
// records its captured definition, or forgets the relation when the record has none (DROP TABLE).
// Returns the first Drift cause. First sights pass here; DriftOfChange, in order, stays the
// authority.
std::optional<QuarantineCause> DriftInTransaction(const std::vector<const Change*>& changes,
                                                  const std::vector<RelationInfo>& relations, const KnownLookup& known,
                                                  bool replay_ready);

// Whether every relation a row change names is described by the record and Known (false for DDL):
// such a change may take the applier's fast path without talking to the target first.
bool ShapesKnown(const Change& change, const std::vector<RelationInfo>& relations, const KnownLookup& known);

}  // namespace trellara
