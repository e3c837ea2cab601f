// broker_state.h — what a process that talks to the broker says about it, for `trellara status
// --view alerts` (alert broker_quorum_unavailable, docs/status.md): `trellara forward` writes
// consumers/.forwarder.state in the source's log directory, a remote `trellara apply` writes
// consumers/.receiver.state in its replica. Replaced atomically on each change of state; read
// only while the process that wrote it is alive. Best effort: no process depends on it.
#pragma once

#include <optional>
#include <string>

namespace trellara::cli::broker {

inline constexpr const char* kForwarderStateFile = "consumers/.forwarder.state";
inline constexpr const char* kReceiverStateFile = "consumers/.receiver.state";

struct BrokerState {
  std::string process;     // "trellara forward" | "trellara apply"
  std::string state;       // "running" | "broker_quorum_unavailable" | "stopped"
  std::string last_error;  // the broker's last answer while unavailable
  std::string since;       // UTC time the state began
  long pid = 0;
};

// Writes `state` (pid: this process; since: now when the state changed, else kept).
void WriteBrokerState(const std::string& log_directory, const char* file, const std::string& process,
                      const std::string& state, const std::string& last_error);
// The state file of the first of both that exists with a live writer; nullopt otherwise.
std::optional<BrokerState> ReadBrokerState(const std::string& log_directory);

}  // namespace trellara::cli::broker
