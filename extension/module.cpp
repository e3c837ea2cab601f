// module.cpp — the library's identity (PG_MODULE_MAGIC) and _PG_init.
//
// _PG_init only registers: GUCs, the background worker and hooks are added here by later issues,
// one Init call per area. It must never open files, start threads, create io_uring rings or
// allocate caches (those are made lazily in the process that uses them), never run in binary
// upgrade mode, and never let an exception escape (GuardEntry). It does read TRELLARA_FAULTS once
// (SetUpFaults): a defect named there without trellara.enable_test_defects stops the server.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

PGDLLEXPORT void _PG_init(void);
}

#include "failover/failover.h"
#include "module.h"
#include "pg/guard.h"
#include "plugin/plugin.h"
#include "relay/relay.h"
#include "trellara/base/fault.h"

namespace trellara::extension {
namespace {
// Plain data only: set by _PG_init, never constructed or destroyed by the C++ runtime.
bool loaded_by_preload = false;
bool enable_test_defects = false;  // trellara.enable_test_defects
char* log_directory_root = nullptr;  // trellara.log_directory_root

constexpr char kDefectSwitch[] =
    "trellara.enable_test_defects = on in postgresql.conf (superuser-only, takes effect at server start; "
    "test clusters only)";

// The fault registry of every process of this server is set up once, in the postmaster (children
// inherit it by fork): defects only behind the postmaster-level, superuser-only GUC, and a
// TRELLARA_FAULTS that names one without it stops the server from starting, naming the variable,
// the point and the switch (docs/decisions.md).
void SetUpFaults() {
  trellara::fault::AllowDefects(enable_test_defects, kDefectSwitch);
  trellara::Status status = trellara::fault::LoadFromEnvironment();
  if (!status.ok())
    throw trellara::pg::SqlError(ERRCODE_CONFIG_FILE_ERROR, "trellara: " + status.error().message, {},
                                 "Remove the defect from TRELLARA_FAULTS in the server's environment, or set "
                                 "trellara.enable_test_defects = on on a test cluster.");
}

void DefineModuleGucs() {
  DefineCustomStringVariable(
      "trellara.log_directory_root",
      "Directory under which trellara.create_flow() accepts a log_directory from a non-superuser.",
      "Empty (default): a non-superuser may only use the default $PGDATA/pg_trellara/<flow>. "
      "Superusers may use any absolute path.",
      &log_directory_root, "", PGC_SIGHUP, GUC_SUPERUSER_ONLY, nullptr, nullptr, nullptr);
  if (!process_shared_preload_libraries_in_progress) return;
  DefineCustomBoolVariable("trellara.enable_test_defects",
                           "Permits defect.* fault points (negative-control tests only; never in production).",
                           "Without it a TRELLARA_FAULTS naming a defect stops the server at start.",
                           &enable_test_defects, false, PGC_POSTMASTER, GUC_SUPERUSER_ONLY | GUC_NOT_IN_SAMPLE,
                           nullptr, nullptr, nullptr);
}
}  // namespace

bool LoadedByPreload() { return loaded_by_preload; }

}  // namespace trellara::extension

extern "C" void _PG_init(void) {
  trellara::pg::GuardEntry("trellara _PG_init", [] {
    // pg_upgrade loads every library to check it; nothing may be registered then.
    if (IsBinaryUpgrade) return;
    // Both ways of loading are supported: via shared_preload_libraries (required later by the
    // relay worker) and by CREATE EXTENSION in a single backend (enough for the SQL functions).
    trellara::extension::loaded_by_preload = process_shared_preload_libraries_in_progress;
    trellara::plugin::DefineGucs();
    trellara::extension::DefineModuleGucs();
    trellara::extension::SetUpFaults();
    if (process_shared_preload_libraries_in_progress) {
      // The relay (launcher, workers, status board) exists only when preloaded.
      trellara::relay::DefineRelayGucs();
      trellara::relay::RegisterRelay();
      // The standby's slot sync worker, only with trellara.standby_slot_sync = on (issue 41).
      trellara::failover::DefineFailoverGucs();
      trellara::failover::RegisterSlotSync();
    }
  });
}
