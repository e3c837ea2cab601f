// fault.cpp — the fault-point registry behind fault.h: parses TRELLARA_FAULTS, counts hits per
// point and performs crash/stall/error on the configured hit. Must never act when unconfigured,
// and never construct anything at static-init time (state is heap-allocated on first use and
// intentionally never freed, so no static destructor runs in a Postgres backend either).
#include "trellara/base/fault.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace trellara::fault {
namespace {

struct Rule {
  std::string point;
  int nth = 0;
  Action action = Action::None;
  int hits = 0;
  int fired = 0;
};

constexpr char kDefaultDefectSwitch[] = "the program's explicit test-only switch";

struct Registry {
  std::mutex mutex;
  bool loaded = false;
  bool defects_allowed = false;
  std::string defect_switch = kDefaultDefectSwitch;
  std::vector<Rule> rules;
};

Registry& GetRegistry() {
  static Registry* registry = new Registry();  // never freed: no static destructor
  return *registry;
}

bool IsDefectRule(const Rule& rule) {
  return rule.action == Action::Defect || rule.point.rfind("defect.", 0) == 0;
}

// Parses `spec` and applies the defect rule: a defect is refused unless this process allowed it.
Result<std::vector<Rule>> ParseSpec(std::string_view spec, bool defects_allowed, const std::string& defect_switch) {
  std::vector<Rule> rules;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t comma = spec.find(',', start);
    std::string_view entry = spec.substr(start, comma == std::string_view::npos ? std::string_view::npos
                                                                                 : comma - start);
    if (!entry.empty()) {
      size_t c1 = entry.find(':');
      size_t c2 = c1 == std::string_view::npos ? c1 : entry.find(':', c1 + 1);
      if (c1 == std::string_view::npos || c2 == std::string_view::npos) {
        return MakeError("TRELLARA_FAULTS entry '" + std::string(entry) +
                         "' is not point:nth:action (e.g. log.fsync_fails:1:error)");
      }
      Rule rule;
      rule.point = std::string(entry.substr(0, c1));
      std::string nth_text(entry.substr(c1 + 1, c2 - c1 - 1));
      std::string action_text(entry.substr(c2 + 1));
      char* end = nullptr;
      long nth = std::strtol(nth_text.c_str(), &end, 10);
      if (nth_text.empty() || *end != '\0' || nth < 1 || nth > 1000000000) {
        return MakeError("TRELLARA_FAULTS entry '" + std::string(entry) +
                         "': nth must be a positive integer (1 = first pass)");
      }
      rule.nth = static_cast<int>(nth);
      if (action_text == "crash") {
        rule.action = Action::Crash;
      } else if (action_text == "stall") {
        rule.action = Action::Stall;
      } else if (action_text == "error") {
        rule.action = Action::Error;
      } else if (action_text == "defect") {
        rule.action = Action::Defect;
      } else {
        return MakeError("TRELLARA_FAULTS entry '" + std::string(entry) +
                         "': action must be crash, stall, error or defect");
      }
      if (IsDefectRule(rule) && !defects_allowed) {
        return MakeError("TRELLARA_FAULTS entry '" + std::string(entry) + "' names the defect point '" +
                         rule.point +
                         "' (a deliberately wrong code path for negative-control tests), which this process "
                         "refuses: defects are enabled only with " + defect_switch +
                         ". Unset TRELLARA_FAULTS in a production deployment.");
      }
      rules.push_back(std::move(rule));
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return rules;
}

Status ReadEnvironmentLocked(Registry& registry) {
  registry.loaded = true;
  registry.rules.clear();
  const char* spec = std::getenv("TRELLARA_FAULTS");
  if (spec == nullptr) return Status::Ok();
  auto rules = ParseSpec(spec, registry.defects_allowed, registry.defect_switch);
  if (!rules.ok()) return rules.error();
  registry.rules = std::move(rules).value();
  return Status::Ok();
}

// The lazy path, for a process whose adapter did not call LoadFromEnvironment at start.
void LoadFromEnvironmentLocked(Registry& registry) {
  if (registry.loaded) return;
  Status status = ReadEnvironmentLocked(registry);
  if (!status.ok()) {
    // A misconfigured fault run must not silently run without its fault, and a refused defect
    // must not silently run without the refusal being seen.
    std::fprintf(stderr, "trellara: %s\n", status.error().message.c_str());
    std::_Exit(2);
  }
}

}  // namespace

Action Hit(std::string_view point) {
  Registry& registry = GetRegistry();
  Action action = Action::None;
  {
    std::lock_guard<std::mutex> lock(registry.mutex);
    LoadFromEnvironmentLocked(registry);
    for (Rule& rule : registry.rules) {
      if (rule.point != point) continue;
      rule.hits += 1;
      if (rule.hits == rule.nth || (rule.action == Action::Defect && rule.hits > rule.nth)) {
        rule.fired += 1;
        action = rule.action;
      }
    }
  }
  switch (action) {
    case Action::Crash:
      std::fprintf(stderr, "trellara: fault point %.*s: crash\n", static_cast<int>(point.size()),
                   point.data());
      std::fflush(nullptr);
      ::kill(::getpid(), SIGKILL);
      std::_Exit(137);
    case Action::Stall: {
      const char* ms_text = std::getenv("TRELLARA_FAULT_STALL_MS");
      long ms = ms_text != nullptr ? std::strtol(ms_text, nullptr, 10) : 10000;
      // Announced, so a test can act while the process is held here (e.g. kill it).
      std::fprintf(stderr, "trellara: fault point %.*s: stall %ld ms\n", static_cast<int>(point.size()), point.data(),
                   ms);
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return Action::None;
    }
    case Action::Error:
    case Action::Defect:
    case Action::None:
      return action;
  }
  return Action::None;
}

Status Configure(std::string_view spec) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  auto rules = ParseSpec(spec, registry.defects_allowed, registry.defect_switch);
  if (!rules.ok()) return rules.error();
  registry.loaded = true;
  registry.rules = std::move(rules).value();
  return Status::Ok();
}

void AllowDefects(bool allowed, std::string_view switch_name) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.defects_allowed = allowed;
  registry.defect_switch = switch_name.empty() ? std::string(kDefaultDefectSwitch) : std::string(switch_name);
}

Status LoadFromEnvironment() {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  return ReadEnvironmentLocked(registry);
}

void Clear() {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  registry.loaded = true;
  registry.rules.clear();
}

int FiredCount(std::string_view point) {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  int fired = 0;
  for (const Rule& rule : registry.rules) {
    if (rule.point == point) fired += rule.fired;
  }
  return fired;
}

std::vector<std::pair<std::string, int>> FiredCounts() {
  Registry& registry = GetRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  std::vector<std::pair<std::string, int>> fired;
  for (const Rule& rule : registry.rules) {
    if (rule.fired <= 0) continue;
    auto same = std::find_if(fired.begin(), fired.end(), [&](const auto& entry) { return entry.first == rule.point; });
    if (same != fired.end()) {
      same->second += rule.fired;
    } else {
      fired.emplace_back(rule.point, rule.fired);
    }
  }
  return fired;
}

}  // namespace trellara::fault
