// broker_state.cpp — the broker state files (broker_state.h).
#include "broker/broker_state.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "kit/state_file.h"

namespace trellara::cli::broker {
namespace {

// The state each file last had in this process, and since when.
std::map<std::string, std::pair<std::string, std::string>>& Last() {
  static std::map<std::string, std::pair<std::string, std::string>> last;
  return last;
}

}  // namespace

void WriteBrokerState(const std::string& log_directory, const char* file, const std::string& process,
                      const std::string& state, const std::string& last_error) {
  const std::string path = log_directory + "/" + file;
  auto& [last_state, since] = Last()[path];
  if (last_state != state) {
    last_state = state;
    since = UtcNowText();
  }
  nlohmann::ordered_json j{{"process", process},   {"state", state}, {"last_error", last_error},
                           {"since", since},       {"pid", static_cast<long>(getpid())},
                           {"updated_at", UtcNowText()}};
  ReplaceStateFile(path, j.dump() + "\n");
}

std::optional<BrokerState> ReadBrokerState(const std::string& log_directory) {
  for (const char* file : {kForwarderStateFile, kReceiverStateFile}) {
    std::ifstream in(log_directory + "/" + file);
    if (!in) continue;
    auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object()) continue;
    BrokerState s;
    s.pid = j.value("pid", 0L);
    if (s.pid <= 0 || (kill(static_cast<pid_t>(s.pid), 0) != 0 && errno != EPERM)) continue;  // not running
    s.process = j.value("process", "");
    s.state = j.value("state", "");
    s.last_error = j.value("last_error", "");
    s.since = j.value("since", "");
    return s;
  }
  return std::nullopt;
}

}  // namespace trellara::cli::broker
