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
#include "trellara/capture/stream_spill.h"

namespace trellara::relay {

namespace {
char* flow_database = nullptr;
int max_flows = 8;
int log_segment_size_mb = 64;
int log_retention_max_size_mb = -1;
int log_retention_warn_size_mb = 1024;
int decoding_work_mem_kb = 8192;
int stream_spill_changes = 1024;
char* stream_spill_directory = nullptr;
int progress_interval_ms = 10'000;
}  // namespace

int RelayDecodingWorkMemKb() { return decoding_work_mem_kb; }
uint32_t StreamSpillChanges() { return static_cast<uint32_t>(stream_spill_changes); }
uint64_t ProgressIntervalUs() { return static_cast<uint64_t>(progress_interval_ms) * 1000; }
const char* StreamSpillDirectory() { return stream_spill_directory != nullptr ? stream_spill_directory : ""; }

uint64_t LogSegmentBytes() { return static_cast<uint64_t>(log_segment_size_mb) << 20; }
uint64_t LogRetentionMaxBytes() {
  return log_retention_max_size_mb < 0 ? 0 : static_cast<uint64_t>(log_retention_max_size_mb) << 20;
}

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
  // Log retention (docs/log.md "Consumers and retention").
  DefineCustomIntVariable("trellara.log_segment_size", "Size of each segment file of a flow's local log.",
                          "Read when a relay opens its log (start_flow, restart). Retention deletes whole segments, "
                          "so smaller segments free space sooner; a record must fit in one segment.",
                          &log_segment_size_mb, 64, 1, 1024, PGC_SIGHUP, GUC_UNIT_MB, nullptr, nullptr, nullptr);
  DefineCustomIntVariable("trellara.log_retention_max_size",
                          "Ceiling on a flow's local log size; -1 (default) means none.",
                          "Like max_slot_wal_keep_size: above it, the relay deletes the oldest segments even if a "
                          "consumer still needs them, after marking that consumer lost (it must then be reseeded).",
                          &log_retention_max_size_mb, -1, -1, INT_MAX, PGC_SIGHUP, GUC_UNIT_MB, nullptr, nullptr,
                          nullptr);
  DefineCustomIntVariable("trellara.log_retention_warn_size",
                          "trellara.check() warns when a flow's local log retains more than this.", nullptr,
                          &log_retention_warn_size_mb, 1024, 1, INT_MAX, PGC_SIGHUP, GUC_UNIT_MB, nullptr, nullptr,
                          nullptr);
  DefineCustomIntVariable("trellara.progress_interval",
                          "How often at most a relay writes a progress marker while its flow has nothing to log.",
                          "A progress marker lets the slot advance past WAL that produced no records, and lets the "
                          "applier (and a verify or reseed --where waiting for it) know the log covers the source "
                          "that far. A verify asks the relay for a marker at once (trellara.request_progress), so "
                          "this only bounds how stale an idle flow's coverage may get.",
                          &progress_interval_ms, 10'000, 100, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr,
                          nullptr);
  // Large transactions (docs/relay.md "Large transactions").
  DefineCustomIntVariable("trellara.relay_decoding_work_mem",
                          "logical_decoding_work_mem of the relay workers' decoding; 0 uses the server's setting.",
                          "Above it the reorder buffer streams the largest in-progress transaction to the relay, "
                          "which spills it to disk until its commit. It bounds the relay's memory: the reorder "
                          "buffer is the largest part of it. Read when a relay starts.",
                          &decoding_work_mem_kb, 8192, 0, MAX_KILOBYTES, PGC_SIGHUP, GUC_UNIT_KB, nullptr, nullptr,
                          nullptr);
  DefineCustomIntVariable("trellara.stream_spill_changes",
                          "Changes of a streamed transaction the relay keeps in memory before writing them to its "
                          "spill file.",
                          "Also bounded by 4 MB of change data. Read when a relay starts.", &stream_spill_changes,
                          static_cast<int>(kDefaultSpillMemoryChanges), 1, 1 << 20, PGC_SIGHUP, 0, nullptr, nullptr,
                          nullptr);
  DefineCustomStringVariable("trellara.stream_spill_directory",
                             "Directory under which relays spill streamed transactions (<dir>/<flow>); empty (default) "
                             "spills into <log_directory>/spill.",
                             "Spill files are not made durable and are removed when a relay starts: the slot "
                             "decodes an unfinished transaction again.",
                             &stream_spill_directory, "", PGC_SIGHUP, GUC_SUPERUSER_ONLY, nullptr, nullptr, nullptr);
}

void RegisterRelay() {
  InstallSharedStateHooks();
  RegisterCommitWake();
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
