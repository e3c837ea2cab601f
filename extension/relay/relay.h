// relay/relay.h — the relay: a launcher background worker that starts one worker per enabled flow,
// and the worker that decodes the flow's slot into its local log (see worker.cpp NOTES).
//
// Registration happens in _PG_init and only when the library is preloaded: without
// shared_preload_libraries there is no launcher and create_flow refuses with a hint.
#pragma once

#include <cstdint>

namespace trellara::relay {

// GUCs: trellara.database (where the flow catalog lives), trellara.max_flows, restart backoff.
void DefineRelayGucs();
// Shared memory hooks and the launcher worker; call only while preloading.
void RegisterRelay();

int MaxFlows();
// trellara.log_segment_size (read when a relay opens its log) and trellara.log_retention_max_size
// (0: no ceiling), in bytes. trellara.log_retention_warn_size is read by trellara.check().
uint64_t LogSegmentBytes();
uint64_t LogRetentionMaxBytes();
const char* FlowDatabase();
// trellara.relay_decoding_work_mem (kB; 0 = the server's logical_decoding_work_mem).
int RelayDecodingWorkMemKb();
// trellara.stream_spill_changes and trellara.stream_spill_directory ("" = <log_directory>/spill).
uint32_t StreamSpillChanges();
// trellara.progress_interval, in microseconds (read at every pass of a relay).
uint64_t ProgressIntervalUs();
const char* StreamSpillDirectory();

}  // namespace trellara::relay
