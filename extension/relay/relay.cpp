// relay/relay.cpp — GUCs of the relay and registration of the launcher background worker.
// Only registers things; never starts work in the postmaster.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/guc.h"
}

#include <cstring>

#include "relay/relay.h"
#include "relay/shared_state.h"

namespace trellara::relay {

namespace {
char* flow_database = nullptr;
int max_flows = 8;
}  // namespace

int MaxFlows() { return max_flows; }
const char* FlowDatabase() { return flow_database != nullptr ? flow_database : "postgres"; }

void DefineRelayGucs() {
  DefineCustomStringVariable("trellara.database",
                             "Database holding the trellara extension and its flows; the launcher connects to it.",
                             "Flows are created with trellara.create_flow() in this database.", &flow_database,
                             "postgres", PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("trellara.max_flows", "Maximum number of flows with a relay worker.",
                          "Each running flow also needs a background worker slot (max_worker_processes).",
                          &max_flows, 8, 1, 1024, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
}

void RegisterRelay() {
  InstallSharedStateHooks();
  BackgroundWorker worker;
  std::memset(&worker, 0, sizeof worker);
  worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
  worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
  worker.bgw_restart_time = 5;
  strlcpy(worker.bgw_library_name, "trellara", BGW_MAXLEN);
  strlcpy(worker.bgw_function_name, "trellara_launcher_main", BGW_MAXLEN);
  strlcpy(worker.bgw_name, "trellara launcher", BGW_MAXLEN);
  strlcpy(worker.bgw_type, "trellara launcher", BGW_MAXLEN);
  RegisterBackgroundWorker(&worker);
}

}  // namespace trellara::relay
