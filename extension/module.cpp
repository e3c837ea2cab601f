// module.cpp — the library's identity (PG_MODULE_MAGIC) and _PG_init.
//
// _PG_init only registers: GUCs, the background worker and hooks are added here by later issues,
// one Init call per area. It must never open files, start threads, create io_uring rings or
// allocate caches (those are made lazily in the process that uses them), never run in binary
// upgrade mode, and never let an exception escape (GuardEntry).
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

PG_MODULE_MAGIC;

PGDLLEXPORT void _PG_init(void);
}

#include "module.h"
#include "pg/guard.h"
#include "plugin/plugin.h"
#include "relay/relay.h"

namespace trellara::extension {
namespace {
// Plain data only: set by _PG_init, never constructed or destroyed by the C++ runtime.
bool loaded_by_preload = false;
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
    if (process_shared_preload_libraries_in_progress) {
      // The relay (launcher, workers, status board) exists only when preloaded.
      trellara::relay::DefineRelayGucs();
      trellara::relay::RegisterRelay();
    }
  });
}
