// relay/relay.h — the relay: a launcher background worker that starts one worker per enabled flow,
// and the worker that decodes the flow's slot into its local log (see worker.cpp NOTES).
//
// Registration happens in _PG_init and only when the library is preloaded: without
// shared_preload_libraries there is no launcher and create_flow refuses with a hint.
#pragma once

namespace trellara::relay {

// GUCs: trellara.database (where the flow catalog lives), trellara.max_flows, restart backoff.
void DefineRelayGucs();
// Shared memory hooks and the launcher worker; call only while preloading.
void RegisterRelay();

int MaxFlows();
const char* FlowDatabase();

}  // namespace trellara::relay
