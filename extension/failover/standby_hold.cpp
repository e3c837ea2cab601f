// failover/standby_hold.cpp — trellara.standby_slot_names on a primary: the relays capture only WAL
// that every named physical standby has flushed (issue 41, "the primary can be told to hold
// decoding back until named standbys have caught up", as PostgreSQL 17's standby_slot_names does
// for logical walsenders). A transaction the relay has not decoded cannot reach a target, so a
// target can never be ahead of a promoted standby named here (docs/operations.md section 12).
//
// NOTES
// - The hold is the least restart_lsn of the named physical slots: for a physical slot that is the
//   position the standby reported flushed (PhysicalConfirmReceivedLocation).
// - A named slot that is missing, logical, or invalidated (its restart_lsn cleared) holds capture
//   where it is: nothing is captured past what every named standby has, and the relay says which
//   slot holds it. Removing the name from the setting (and a reload) releases it.
// - Plain C frames: SplitIdentifierString and the slot array are Postgres's; nothing here throws.
extern "C" {
#include "postgres.h"

#include "access/xlogdefs.h"
#include "replication/slot.h"
#include "storage/lwlock.h"
#include "storage/spin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/varlena.h"
#include "utils/memutils.h"
#include "nodes/pg_list.h"
}

#include <cstdio>
#include <cstring>

#include "failover/failover.h"

namespace trellara::failover {

namespace {
char* standby_slot_names = nullptr;  // trellara.standby_slot_names
}  // namespace

void DefineStandbyHoldGuc() {
  DefineCustomStringVariable(
      "trellara.standby_slot_names",
      "Physical slots of standbys whose flushed WAL bounds what the relays capture (issue 41).",
      "A comma-separated list of physical replication slot names on this primary. The relays decode only WAL "
      "every named standby has flushed, so no target gets ahead of a promoted standby. A missing or invalidated "
      "slot holds capture until it is fixed or removed from the list. Empty: no hold.",
      &standby_slot_names, "", PGC_SIGHUP, GUC_LIST_INPUT, nullptr, nullptr, nullptr);
}

bool StandbyHoldConfigured() { return standby_slot_names != nullptr && standby_slot_names[0] != '\0'; }

uint64_t StandbyHoldLsn(char* why, size_t why_bytes) {
  why[0] = '\0';
  if (!StandbyHoldConfigured()) return UINT64_MAX;
  char* copy = pstrdup(standby_slot_names);
  List* names = NIL;
  if (!SplitIdentifierString(copy, ',', &names)) {
    snprintf(why, why_bytes, "trellara.standby_slot_names (\"%s\") is not a list of slot names", standby_slot_names);
    list_free(names);
    pfree(copy);
    return 0;
  }
  uint64_t hold = UINT64_MAX;
  ListCell* cell;
  foreach (cell, names) {
    const char* name = static_cast<const char*>(lfirst(cell));
    bool found = false;
    bool physical = false;
    XLogRecPtr restart = InvalidXLogRecPtr;
    LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
    for (int i = 0; i < max_replication_slots; i++) {
      ReplicationSlot* slot = &ReplicationSlotCtl->replication_slots[i];
      if (!slot->in_use || strcmp(NameStr(slot->data.name), name) != 0) continue;
      SpinLockAcquire(&slot->mutex);
      found = true;
      physical = slot->data.database == InvalidOid;
      restart = slot->data.restart_lsn;
      SpinLockRelease(&slot->mutex);
      break;
    }
    LWLockRelease(ReplicationSlotControlLock);
    const char* problem = !found ? "does not exist" : !physical ? "is not a physical slot"
                          : XLogRecPtrIsInvalid(restart) ? "has no position (never used, or invalidated)"
                                                         : nullptr;
    if (problem != nullptr) {
      snprintf(why, why_bytes, "standby slot \"%s\" named in trellara.standby_slot_names %s", name, problem);
      hold = 0;
      break;
    }
    if (restart < hold) {
      hold = restart;
      snprintf(why, why_bytes, "standby slot \"%s\" has flushed WAL to %X/%X", name,
               static_cast<uint32>(restart >> 32), static_cast<uint32>(restart));
    }
  }
  list_free(names);
  pfree(copy);
  return hold;
}

}  // namespace trellara::failover
